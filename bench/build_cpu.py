"""Building a graph, in CPU time: ``add_kernel_node`` and stream capture, per node.

``bench/scale.py`` and ``bench/launch.py`` report wall-clock figures, which a loaded machine
makes noisy. This bench times the same work with ``time.process_time`` and keeps the best of a
few runs, so two source trees can be compared back to back on one machine:

* ``build_<shape>_<n>`` — ``scale.build()`` of a chain or a fork-join of ``n`` kernel nodes,
  the collector on (as in a user's program, and as ``scale.py`` measures it), per node;
* ``capture_<n>`` — capturing ``n`` eager ``stream.launch_kernel`` calls (begin to end
  capture), per operation, and ``capture_instantiate_<n>`` — that plus ``instantiate()``, per
  node; the collector off, as ``launch.py`` measures them.

``--tree PATH`` imports ahipgraph from ``PATH/src`` instead (a checkout of another branch, e.g.
``git worktree add /tmp/ref main``), for an A/B run::

    python bench/build_cpu.py --tree /tmp/ref; python bench/build_cpu.py
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part)


def measure(
    build_sizes: tuple[int, ...], capture_sizes: tuple[int, ...], repeat: int
) -> dict[str, float]:
    import ahipgraph as ahg

    sys.path.insert(0, str(Path(__file__).parent))
    import scale  # bench/scale.py, next to this file: the same graphs as the scale section

    device = ahg.get_device(0)
    x = device.malloc(4096)
    out: dict[str, float] = {}
    scale.build("chain", 1000, x).destroy()  # warm-up: launch shapes, packers
    for shape in scale.SHAPES:
        for size in build_sizes:
            best = float("inf")
            for _ in range(repeat):
                gc.collect()
                start = time.process_time()
                graph = scale.build(shape, size, x)
                best = min(best, time.process_time() - start)
                graph.destroy()
                del graph
            out[f"build_{shape}_{size}"] = best / size * 1e6

    async def capture() -> None:
        stream = device.create_stream()
        gc.disable()
        try:
            for size in capture_sizes:
                captured = total = float("inf")
                for _ in range(repeat):
                    start = time.process_time()
                    stream.begin_capture()
                    for i in range(size):
                        await stream.launch_kernel(scale.noop, 1, 1, (x, i))
                    graph = stream.end_capture()
                    ended = time.process_time()
                    exec_ = graph.instantiate()
                    done = time.process_time()
                    exec_.destroy()
                    graph.destroy()
                    captured = min(captured, ended - start)
                    total = min(total, done - start)
                out[f"capture_{size}"] = captured / size * 1e6
                out[f"capture_instantiate_{size}"] = total / size * 1e6
        finally:
            gc.enable()
            stream.destroy()

    asyncio.run(capture())
    device.free(x)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="import ahipgraph from TREE/src")
    parser.add_argument("--sizes", type=_sizes, default=(10_000, 100_000), help="build sizes")
    parser.add_argument("--capture-sizes", type=_sizes, default=(1000, 10_000))
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best counts")
    args = parser.parse_args(argv)
    if args.tree is not None:
        sys.path.insert(0, str(args.tree.resolve() / "src"))
    figures: dict[str, Any] = measure(args.sizes, args.capture_sizes, args.repeat)
    import ahipgraph

    figures["tree"] = str(Path(ahipgraph.__file__).parents[2])
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
