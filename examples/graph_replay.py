"""Build a graph once, instantiate it once, replay it 1,000 times.

The graph forks and joins, embeds a child graph, copies to and from the device and calls back
into the host::

    H2D copy ─┬─ scale (y1 = a*x) ──────────────────┬─ combine (out = y1 + y2) ─ D2H copy ─ host
              └─ child graph: shift (y2 = x + b) ─ square (y2 = y2*y2) ┘

Every replay's result is checked against the same work run eagerly on a stream, then the
executable's pool statistics (no signal-set misses) and the measured speed-up are printed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

import ahipgraph as ahg

N = 4096
REPLAYS = 1000


@ahg.kernel
def scale(t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32],
          y: ahg.Ptr[ahg.float32]) -> None:  # fmt: skip
    m = min(n, t.count)  # one thread per element; the whole grid at once
    y[:m] = a * x[:m]


@ahg.kernel
def shift(t: ahg.Threads, n: ahg.int32, b: ahg.float32, x: ahg.Ptr[ahg.float32],
          y: ahg.Ptr[ahg.float32]) -> None:  # fmt: skip
    m = min(n, t.count)
    y[:m] = x[:m] + b


@ahg.kernel
def square(t: ahg.Threads, n: ahg.int32, y: ahg.Ptr[ahg.float32]) -> None:
    m = min(n, t.count)
    y[:m] *= y[:m]


@ahg.kernel
def combine(t: ahg.Threads, n: ahg.int32, y1: ahg.Ptr[ahg.float32], y2: ahg.Ptr[ahg.float32],
            out: ahg.Ptr[ahg.float32]) -> None:  # fmt: skip
    m = min(n, t.count)
    out[:m] = y1[:m] + y2[:m]


GRID, BLOCK = (N + 255) // 256, 256


def build(host_in: np.ndarray, host_out: np.ndarray, buffers: dict[str, ahg.DevicePtr],
          on_done: Callable[[], None]) -> ahg.Graph:  # fmt: skip
    x, y1, y2, out = buffers["x"], buffers["y1"], buffers["y2"], buffers["out"]
    child = ahg.Graph()
    shifted = child.add_kernel_node(shift, GRID, BLOCK, (N, 1.0, x, y2))
    child.add_kernel_node(square, GRID, BLOCK, (N, y2), deps=[shifted])

    graph = ahg.Graph()
    upload = graph.add_memcpy_node(x, host_in)
    scaled = graph.add_kernel_node(scale, GRID, BLOCK, (N, 2.0, x, y1), deps=[upload])
    squared = graph.add_child_graph_node(child, deps=[upload])
    joined = graph.add_kernel_node(combine, GRID, BLOCK, (N, y1, y2, out), deps=[scaled, squared])
    download = graph.add_memcpy_node(host_out, out, deps=[joined])
    graph.add_host_node(on_done, deps=[download])
    child.destroy()  # the child-graph node holds its own copy
    return graph


async def run_eager(
    stream: ahg.Stream,
    host_in: np.ndarray,
    host_out: np.ndarray,
    buffers: dict[str, ahg.DevicePtr],
    on_done: Callable[[], None],
) -> None:
    x, y1, y2, out = buffers["x"], buffers["y1"], buffers["y2"], buffers["out"]
    await stream.memcpy(x, host_in)
    await stream.launch_kernel(scale, GRID, BLOCK, (N, 2.0, x, y1))
    await stream.launch_kernel(shift, GRID, BLOCK, (N, 1.0, x, y2))
    await stream.launch_kernel(square, GRID, BLOCK, (N, y2))
    await stream.launch_kernel(combine, GRID, BLOCK, (N, y1, y2, out))
    await stream.memcpy(host_out, out)
    await stream.launch_host_func(on_done)
    await stream.synchronize()


async def main() -> None:
    device = ahg.get_device(0)
    stream = device.create_stream()
    buffers = {name: device.malloc(N * 4) for name in ("x", "y1", "y2", "out")}
    host_in = np.zeros(N, dtype=np.float32)
    graph_out = np.zeros(N, dtype=np.float32)
    eager_out = np.zeros(N, dtype=np.float32)
    callbacks = {"graph": 0, "eager": 0}

    def graph_done() -> None:
        callbacks["graph"] += 1

    def eager_done() -> None:
        callbacks["eager"] += 1

    graph = build(host_in, graph_out, buffers, graph_done)
    exec_ = graph.instantiate()
    print(f"instantiated {graph!r} -> {exec_!r}")

    rng = np.random.default_rng(7)
    for i in range(REPLAYS):
        host_in[:] = rng.standard_normal(N, dtype=np.float32)
        await (await exec_.launch(stream))
        await run_eager(stream, host_in, eager_out, buffers, eager_done)
        if i % 100 == 0 or i == REPLAYS - 1:
            np.testing.assert_allclose(graph_out, eager_out, rtol=1e-6)
            expected = 2.0 * host_in + (host_in + 1.0) ** 2
            np.testing.assert_allclose(graph_out, expected, rtol=1e-5)
    assert callbacks == {"graph": REPLAYS, "eager": REPLAYS}
    print(f"{REPLAYS} replays match eager execution and numpy")

    # Speed: the same work, graph replay vs eager stream calls.
    start = time.perf_counter()
    for _ in range(REPLAYS):
        await (await exec_.launch(stream))
    graph_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(REPLAYS):
        await run_eager(stream, host_in, eager_out, buffers, eager_done)
    eager_s = time.perf_counter() - start
    stats = exec_.statistics()
    pool = stats.signal_pool
    print(
        f"signal-set pool: {pool.sets} sets ({pool.prepopulated} prepopulated), "
        f"{pool.misses} misses, {pool.acquires} acquires"
    )
    print(f"arena: {stats.arena.chunks} chunk(s), {stats.arena.live_slots} live argument slots")
    print(
        f"replay {graph_s / REPLAYS * 1e6:.1f} us vs eager {eager_s / REPLAYS * 1e6:.1f} us "
        f"per iteration: {eager_s / graph_s:.1f}x faster"
    )
    assert pool.misses == 0

    exec_.destroy()
    graph.destroy()
    for ptr in buffers.values():
        device.free(ptr)
    stream.destroy()
    free, total = device.memory_info()
    assert free == total, "device memory back to baseline"


if __name__ == "__main__":
    ahg.run(main)
