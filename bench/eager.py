"""Eager baseline: what one stream operation costs the host, on asyncio and uvloop in one run.

* ``launch_host_us`` — host time of one ``await stream.launch_kernel(...)`` of a no-op kernel
  (median over ``--launches`` calls, each followed by nothing but the next);
* ``end_to_end_per_op_us`` — ``--ops`` eager launches and a ``synchronize()``, per operation
  (median over ``--rounds`` rounds).

This is the figure graph replay must beat (``bench/launch.py`` measures the replay itself). A
table goes to stdout and JSON to ``--json`` (default ``bench/results/eager.json``). Timing
targets live here, never in tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ahipgraph as ahg

sys.path.insert(0, str(Path(__file__).parent))
from results_file import write_results  # bench/results_file.py, next to this file

DEFAULT_JSON = Path(__file__).parent / "results" / "eager.json"


@ahg.kernel
def noop(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    """Does nothing with its arguments: the cost measured is the runtime's, not the kernel's."""


async def measure(ops: int, launches: int, rounds: int) -> dict[str, float]:
    device = ahg.get_device()
    stream = device.create_stream()
    x = device.malloc(4)
    try:
        host = []
        for i in range(launches):
            start = time.perf_counter()
            await stream.launch_kernel(noop, 1, 1, (x, i))
            host.append(time.perf_counter() - start)
            if i % 256 == 255:  # keep the ring shallow: the figure is the enqueue, not a wait
                await stream.synchronize()
        await stream.synchronize()
        per_op = []
        for _ in range(rounds):
            start = time.perf_counter()
            for i in range(ops):
                await stream.launch_kernel(noop, 1, 1, (x, i))
            await stream.synchronize()
            per_op.append((time.perf_counter() - start) / ops)
        return {
            "launch_host_us": statistics.median(host) * 1e6,
            "end_to_end_per_op_us": statistics.median(per_op) * 1e6,
        }
    finally:
        stream.destroy()
        device.free(x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="write results here")
    parser.add_argument("--loops", default="asyncio,uvloop", help="comma-separated: asyncio,uvloop")
    parser.add_argument("--ops", type=int, default=1000, help="operations per end-to-end round")
    parser.add_argument("--launches", type=int, default=5000, help="launches timed one by one")
    parser.add_argument("--rounds", type=int, default=5, help="end-to-end rounds (median)")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    for name in args.loops.split(","):
        results[name] = ahg.run(
            lambda: measure(args.ops, args.launches, args.rounds), use_uvloop=name == "uvloop"
        )
    print(f"{'loop':8} {'launch host us':>15} {f'per op us ({args.ops} ops)':>22}")
    for name, r in results.items():
        print(f"{name:8} {r['launch_host_us']:>15.2f} {r['end_to_end_per_op_us']:>22.2f}")
    write_results(args.json, {"loops": results, "ops": args.ops})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
