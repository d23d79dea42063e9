"""The executable's per-node costs in CPU time: instantiate, the first replay, a steady replay.

``bench/scale.py`` times every phase of a graph's life with the wall clock; on a loaded machine
that moves with everything else running. This measures the executable's phases with
``time.process_time`` (the process's own CPU time) for the chain and the fork-join of
``bench/scale.py``, each graph built afresh after a full collection, as a user's program
would: instantiate, then the first replay (which decodes every kernel node's arguments and
meets the collector's pass over what instantiate made), then a second replay. It also reports
what the graph and what its executable hold per node (``tracemalloc``). Run it for two trees
back to back to compare them: ``python bench/exec_cpu.py --sizes 10000,100000``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc
from pathlib import Path

import ahipgraph as ahg

sys.path.insert(0, str(Path(__file__).parent))
import scale  # bench/scale.py, next to this file


async def timed(shape: str, size: int, x: ahg.DevicePtr, stream: ahg.Stream) -> list[float]:
    """Instantiate, first replay, second replay: microseconds of CPU time per node."""
    gc.collect()
    graph = scale.build(shape, size, x)
    start = time.process_time()
    graph_exec = graph.instantiate()
    made = time.process_time()
    await (await graph_exec.launch(stream))
    first = time.process_time()
    await (await graph_exec.launch(stream))
    second = time.process_time()
    graph_exec.destroy()
    graph.destroy()
    per = 1e6 / size
    return [(made - start) * per, (first - made) * per, (second - first) * per]


def held(shape: str, size: int, x: ahg.DevicePtr) -> tuple[float, float]:
    """Bytes per node the graph holds, and its executable."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        graph = scale.build(shape, size, x)
        built = tracemalloc.get_traced_memory()[0] - base
        graph_exec = graph.instantiate()
        total = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    graph_exec.destroy()
    graph.destroy()
    return built / size, (total - built) / size


async def measure(sizes: tuple[int, ...], rounds: int) -> None:
    device = ahg.get_device(0)
    x = device.malloc(4096)
    stream = device.create_stream()
    print(f"{'shape':10} {'nodes':>8} {'instantiate':>12} {'replay 1':>9} {'replay 2':>9}", end="")
    print(f" {'graph B':>8} {'exec B':>7}   (us per node, least of {rounds} rounds)")
    for shape in scale.SHAPES:
        for size in sizes:
            runs = [await timed(shape, size, x, stream) for _ in range(rounds)]
            best = [min(run[i] for run in runs) for i in range(3)]
            graph_bytes, exec_bytes = held(shape, size, x)
            print(
                f"{shape:10} {size:>8} {best[0]:>12.2f} {best[1]:>9.2f} {best[2]:>9.2f}"
                f" {graph_bytes:>8.0f} {exec_bytes:>7.0f}"
            )
    stream.destroy()
    device.free(x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=scale.parse_sizes, default=(10_000, 100_000))
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure; the least counts")
    args = parser.parse_args(argv)
    ahg.configure_devices(1)
    ahg.run(lambda: measure(args.sizes, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
