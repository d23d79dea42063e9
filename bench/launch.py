"""Launch benchmark: graph replay vs eager streams vs the floor, on asyncio and uvloop.

For chains of no-op kernel nodes (10 to 10,000 nodes) it measures, in one run:

* ``launch_host_us``   — host time of ``await exec.launch(stream)`` (median of launches issued
  back to back); ``launch_first_us`` — the same for the first launch after a burst of replays;
* ``graph_per_node_us`` — end-to-end replay time (launch + completion) per node;
* ``eager_per_node_us`` — the same work as eager ``stream.launch_kernel`` calls, per node;
* ``floor_per_node_us`` — a plain Python loop that decodes each node's arguments from its bytes
  and calls the kernel body: the least any faithful replay must do;
* ``instantiate_us_per_node`` — ``graph.instantiate()`` per node (1,000 and 10,000 nodes);
* ``capture_us_per_op`` — capturing the same chain from eager ``stream.launch_kernel`` calls,
  per operation (begin to end capture); ``capture_instantiate_us_per_node`` — capture plus
  ``instantiate()``, per node (1,000 and 10,000 operations);
* ``steady_state`` — signal sets, arena chunks and device bytes added over 10,000 replays after
  warm-up (all must be zero);
* ``scale`` — build, instantiate, replay, update, clone, queries and destroy per node, and bytes
  per node, for a chain and a 1,000-branch fork-join of 10,000, 100,000 and 1,000,000 nodes
  (``bench/scale.py``; one run, after the loops above; ``--scale-sizes`` limits the sizes for a
  quick run, ``--scale-sizes ''`` skips it).

Each figure is the median over ``--repeat`` whole runs (default 5), the loops alternating, so a
passing change in the machine's load moves no figure much. Prints a table of ratios and writes
JSON (``--json PATH``). Timing targets live here, never in tests.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import ahipgraph as ahg

sys.path.insert(0, str(Path(__file__).parent))
import scale  # bench/scale.py, next to this file
from results_file import write_results  # bench/results_file.py, next to this file

SIZES = (10, 100, 1000, 10000)
INSTANTIATE_SIZES = (1000, 10000)
STEADY_LAUNCHES = 10_000
BURST = 16  # launches issued back to back: the whole prepopulated signal-set pool


@ahg.kernel
def noop(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    """Does nothing with its arguments: the cost measured is the runtime's, not the kernel's."""


def build_chain(size: int, x: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    previous: tuple[Any, ...] = ()
    for i in range(size):
        previous = (graph.add_kernel_node(noop, 1, 1, (x, i), deps=previous),)
    return graph


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def time_launch_host(exec_: Any, stream: ahg.Stream, reps: int) -> tuple[float, float]:
    """Median host time of one ``await exec.launch(stream)``, and of the first of each burst.

    Launches are timed back to back in bursts of ``BURST`` (within the signal-set pool), then the
    burst is awaited, as launch-overhead benchmarks do on real GPUs. The first launch of a burst
    follows the replays of the previous burst, which ran on this same CPU (unlike a GPU) and
    evicted the host's caches: it is not back to back with another launch, so it is reported
    separately as ``launch_first_us`` and left out of ``launch_host_us``.
    """
    samples, first = [], []
    for _ in range(max(1, reps // BURST)):
        handles = []
        for i in range(BURST):
            start = time.perf_counter()
            handles.append(await exec_.launch(stream))
            (samples if i else first).append(time.perf_counter() - start)
        await handles[-1]
    return median_us(samples), median_us(first)


async def time_graph(exec_: Any, stream: ahg.Stream) -> float:
    """One replay, end to end: launch and wait for completion."""
    start = time.perf_counter()
    await (await exec_.launch(stream))
    return time.perf_counter() - start


async def time_eager(stream: ahg.Stream, x: ahg.DevicePtr, size: int) -> float:
    """The same chain as eager stream launches, then a synchronize."""
    start = time.perf_counter()
    for i in range(size):
        await stream.launch_kernel(noop, 1, 1, (x, i))
    await stream.synchronize()
    return time.perf_counter() - start


class Floor:
    """The least a faithful replay must do: decode each node's bytes and call the body."""

    def __init__(self, device: ahg.Device, x: ahg.DevicePtr, size: int) -> None:
        self.items = [noop.pack((x, i)) for i in range(size)]
        self.threads = ahg.Threads(ahg.Dim3(1), ahg.Dim3(1))
        self.memory = device.memory

    def __call__(self) -> float:
        body, decode, memory, threads = noop.body, noop.layout.decode, self.memory, self.threads
        start = time.perf_counter()
        for data in self.items:
            body(threads, *decode(data, 0, memory))
        return time.perf_counter() - start


async def time_per_node(
    exec_: Any, stream: ahg.Stream, device: ahg.Device, x: ahg.DevicePtr, size: int
) -> tuple[float, float, float]:
    """Graph, eager and floor per node, interleaved round by round so that a change in the
    machine's load affects all three alike; medians over the rounds."""
    floor = Floor(device, x, size)
    graph, eager, bare = [], [], []
    for _ in range(rounds_for(size)):
        graph.append(await time_graph(exec_, stream))
        eager.append(await time_eager(stream, x, size))
        bare.append(floor())
    return median_us(graph) / size, median_us(eager) / size, median_us(bare) / size


def rounds_for(size: int) -> int:
    return max(7, min(101, 4_000 // size))


def reps_for(size: int) -> int:
    return max(5, min(200, 20_000 // size))


async def measure(loop_name: str) -> dict[str, Any]:
    ahg.configure_devices(1)
    device = ahg.get_device(0)
    x = device.malloc(4096)
    stream = device.create_stream()
    result: dict[str, Any] = {
        "launch_host_us": {},
        "launch_first_us": {},
        "graph_per_node_us": {},
        "eager_per_node_us": {},
        "floor_per_node_us": {},
        "instantiate_us_per_node": {},
        "capture_us_per_op": {},
        "capture_instantiate_us_per_node": {},
    }
    gc.disable()
    try:
        for size in SIZES:
            graph = build_chain(size, x)
            exec_ = graph.instantiate()
            for _ in range(3):  # warm-up
                await (await exec_.launch(stream))
            key = str(size)
            launch_reps = max(reps_for(size), 8 * BURST)
            launch_us, first_us = await time_launch_host(exec_, stream, launch_reps)
            result["launch_host_us"][key] = launch_us
            result["launch_first_us"][key] = first_us
            graph_us, eager_us, floor_us = await time_per_node(exec_, stream, device, x, size)
            result["graph_per_node_us"][key] = graph_us
            result["eager_per_node_us"][key] = eager_us
            result["floor_per_node_us"][key] = floor_us
            exec_.destroy()
            graph.destroy()
        for size in INSTANTIATE_SIZES:
            graph = build_chain(size, x)
            samples = []
            for _ in range(3):
                start = time.perf_counter()
                exec_ = graph.instantiate()
                samples.append(time.perf_counter() - start)
                exec_.destroy()
            result["instantiate_us_per_node"][str(size)] = median_us(samples) / size
            graph.destroy()
        for size in INSTANTIATE_SIZES:
            capture_us, with_instantiate_us = await time_capture(stream, x, size)
            result["capture_us_per_op"][str(size)] = capture_us
            result["capture_instantiate_us_per_node"][str(size)] = with_instantiate_us
        result["steady_state"] = await steady_state(device, stream, x)
    finally:
        gc.enable()
    stream.destroy()
    device.free(x)
    return result


async def time_capture(stream: ahg.Stream, x: ahg.DevicePtr, size: int) -> tuple[float, float]:
    """Median per-op time of capturing a chain of ``size`` eager launches, and of capture
    followed by ``instantiate()`` (what a PyTorch-style capture costs before the first replay)."""
    captures, totals = [], []
    for _ in range(3):
        start = time.perf_counter()
        stream.begin_capture()
        for i in range(size):
            await stream.launch_kernel(noop, 1, 1, (x, i))
        graph = stream.end_capture()
        captured = time.perf_counter()
        exec_ = graph.instantiate()
        done = time.perf_counter()
        captures.append(captured - start)
        totals.append(done - start)
        exec_.destroy()
        graph.destroy()
    return median_us(captures) / size, median_us(totals) / size


async def steady_state(device: ahg.Device, stream: ahg.Stream, x: ahg.DevicePtr) -> dict[str, int]:
    """Replays after warm-up must add no signal set, no arena chunk and no device bytes."""
    graph = ahg.Graph()
    root = graph.add_kernel_node(noop, 1, 1, (x, 0))
    left = graph.add_kernel_node(noop, 1, 1, (x, 1), deps=[root])
    right = graph.add_kernel_node(noop, 1, 1, (x, 2), deps=[root])
    graph.add_kernel_node(noop, 1, 1, (x, 3), deps=[left, right])
    exec_ = graph.instantiate()
    for _ in range(10):
        await (await exec_.launch(stream))
    before = exec_.statistics()
    bytes_before = device.memory.bytes_in_use
    handles = []
    for i in range(STEADY_LAUNCHES):
        handles.append(await exec_.launch(stream))
        if i % 8 == 7:  # keep a few launches in flight, well within the pool
            await handles[-1]
            handles.clear()
    await stream.synchronize()
    after = exec_.statistics()
    delta = {
        "launches": STEADY_LAUNCHES,
        "new_signal_sets": after.signal_pool.sets - before.signal_pool.sets,
        "new_arena_chunks": after.arena.chunks - before.arena.chunks,
        "bytes_delta": device.memory.bytes_in_use - bytes_before,
    }
    exec_.destroy()
    graph.destroy()
    return delta


def run_on(loop_name: str) -> dict[str, Any]:
    main: Callable[[], Coroutine[Any, Any, dict[str, Any]]] = lambda: measure(loop_name)  # noqa: E731
    return ahg.run(main, use_uvloop=loop_name == "uvloop")


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure, the median over repeated runs (steady-state counts: the worst run)."""
    first = runs[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if key == "steady_state":
            out[key] = {k: max(r[key][k] for r in runs) for k in value}
        else:
            out[key] = {k: statistics.median(r[key][k] for r in runs) for k in value}
    # Ratios are taken within each run (same machine state), then the median over runs.
    out["ratios"] = {
        "eager_over_graph": {
            str(n): statistics.median(
                ratio(r, "eager_per_node_us", "graph_per_node_us", n) for r in runs
            )
            for n in SIZES
        },
        "graph_over_floor": {
            str(n): statistics.median(
                ratio(r, "graph_per_node_us", "floor_per_node_us", n) for r in runs
            )
            for n in SIZES
        },
        "launch_10000_over_10": statistics.median(
            r["launch_host_us"]["10000"] / r["launch_host_us"]["10"] for r in runs
        ),
    }
    return out


def ratio(run: dict[str, Any], top: str, bottom: str, size: int) -> float:
    return float(run[top][str(size)] / run[bottom][str(size)])


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = []
    header = (
        f"{'loop':8} {'nodes':>6} {'launch us':>10} {'1st launch':>10} {'graph us/n':>11} "
        f"{'eager us/n':>11} "
        f"{'floor us/n':>11} {'eager/graph':>12} {'graph/floor':>12}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    for loop_name, r in results.items():
        for size in SIZES:
            key = str(size)
            graph_us = r["graph_per_node_us"][key]
            eager_us = r["eager_per_node_us"][key]
            floor_us = r["floor_per_node_us"][key]
            eager_x = r["ratios"]["eager_over_graph"][key]
            floor_x = r["ratios"]["graph_over_floor"][key]
            lines.append(
                f"{loop_name:8} {size:>6} {r['launch_host_us'][key]:>10.2f} "
                f"{r['launch_first_us'][key]:>10.2f} {graph_us:>11.3f} "
                f"{eager_us:>11.3f} {floor_us:>11.3f} {eager_x:>11.1f}x "
                f"{floor_x:>11.2f}x"
            )
        launch_ratio = r["ratios"]["launch_10000_over_10"]
        inst = r["instantiate_us_per_node"]
        cap = r["capture_us_per_op"]
        cap_inst = r["capture_instantiate_us_per_node"]
        steady = r["steady_state"]
        lines.append(
            f"{loop_name:8} launch 10000/10 = {launch_ratio:.2f}; instantiate us/node: "
            f"1000 -> {inst['1000']:.2f}, 10000 -> {inst['10000']:.2f}; steady state over "
            f"{steady['launches']} replays: +{steady['new_signal_sets']} signal sets, "
            f"+{steady['new_arena_chunks']} arena chunks, {steady['bytes_delta']:+d} bytes"
        )
        lines.append(
            f"{loop_name:8} capture us/op: 1000 -> {cap['1000']:.2f}, 10000 -> {cap['10000']:.2f}; "
            f"capture+instantiate us/node: 1000 -> {cap_inst['1000']:.2f}, "
            f"10000 -> {cap_inst['10000']:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write results to this JSON file")
    parser.add_argument("--loops", default="asyncio,uvloop", help="comma-separated: asyncio,uvloop")
    parser.add_argument(
        "--repeat", type=int, default=5, help="whole runs per loop; each figure is their median"
    )
    parser.add_argument(
        "--scale-sizes",
        type=scale.parse_sizes,
        default=scale.SIZES,
        help="node counts of the scale section, comma-separated ('' skips it)",
    )
    parser.add_argument(
        "--scale-only", action="store_true", help="run only the scale section (a quick check)"
    )
    args = parser.parse_args(argv)
    if args.scale_only:
        args.repeat = 0
    names = args.loops.split(",")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for _ in range(args.repeat):  # alternate the loops so a change in machine load hits both
        for name in names:
            runs[name].append(run_on(name))
    results = {name: combine(runs[name]) for name in names} if args.repeat else {}
    if results:
        print(table(results))
    scale_results = scale.run(args.scale_sizes) if args.scale_sizes else None
    if scale_results is not None:
        print(scale.table(scale_results))
    if args.json:
        payload = {"loops": results, "scale": scale_results, "repeat": args.repeat}
        write_results(args.json, payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
