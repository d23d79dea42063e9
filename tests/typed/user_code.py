"""Code written the way users write it, kept valid under ``mypy --strict``.

``make lint`` type-checks this file and ``tests/test_typing.py`` runs it, so the public API's
static types (kernel parameters, the ``@ahg.kernel`` decorator, graphs, streams, events, host
functions) cannot drift from what the runtime does. It uses only the public ``ahipgraph`` names.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import ahipgraph as ahg


@ahg.kernel
def saxpy(t: ahg.Threads, n: ahg.int32, a: ahg.float32,
          x: ahg.Ptr[ahg.float32], y: ahg.Ptr[ahg.float32]) -> None:  # fmt: skip
    i = t.ids[t.ids < n]  # the README's kernel, as written there
    y[i] = a * x[i] + y[i]


@ahg.kernel(name="block_sums")
def block_sums(
    t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int64], partial: ahg.Ptr[ahg.int64]
) -> None:
    per_block = t.block.volume
    padded = np.zeros(t.grid.volume * per_block, dtype=np.int64)
    padded[:n] = x[:n]
    partial[: t.grid.volume] = padded.reshape(t.grid.volume, per_block).sum(axis=1)


@ahg.kernel
def final_sum(t: ahg.Threads, count: ahg.int32, partial: ahg.Ptr[ahg.int64]) -> None:
    partial[0] = partial[:count].sum()
    assert len(partial) >= count


@ahg.kernel(duration_ns=1_000)
async def scale(t: ahg.Threads, n: ahg.uint32, k: ahg.float64, y: ahg.Ptr[ahg.float32]) -> None:
    m = min(n, t.count)
    y[:m] *= k


def double_in_place(x: ahg.Ptr[ahg.float32], count: int) -> None:
    """A helper a kernel body calls: ``Ptr`` is usable as an ordinary parameter type."""
    x[:count] = x[:count] * 2


def checked_kernel() -> ahg.Kernel:
    """``ahg.Kernel(body, name=...)`` is the decorator's spelled-out form."""

    def body(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
        double_in_place(x, min(n, t.count))

    return ahg.Kernel(body, name="double")


async def reduce(device: ahg.Device, values: npt.NDArray[np.int64]) -> int:
    """Sum ``values`` with two kernels on a stream."""
    block = 256
    blocks = (len(values) + block - 1) // block
    x, partial = device.malloc(values.nbytes), device.malloc(blocks * 8)
    stream = device.create_stream()
    try:
        await stream.memcpy(x, values)
        await stream.launch_kernel(block_sums, blocks, block, (len(values), x, partial))
        await stream.launch_kernel(final_sum, 1, 1, (blocks, partial))
        total = np.zeros(1, dtype=np.int64)
        await stream.memcpy(total, partial, 8)
        await stream.synchronize()
    finally:
        stream.destroy()
        device.free(x)
        device.free(partial)
    return int(total[0])


async def captured_fill(device: ahg.Device) -> int:
    """Capture a stream-ordered allocation and a fill by bytes; the capture's node count."""
    stream = device.create_stream()
    try:
        async with stream.capture() as capture:
            status, capture_id, graph, deps = stream.capture_info()
            assert status is ahg.CaptureStatus.ACTIVE
            assert capture_id is not None
            assert graph is not None
            assert deps == ()
            ptr = stream.malloc_async_nowait(256)
            await stream.memset(ptr, 0, nbytes=256, element_size=4)
            await stream.free_async(ptr)
        assert capture.graph is not None
        with capture.graph as captured:
            return len(captured.nodes())
    finally:
        stream.destroy()


async def replay(device: ahg.Device, n: int, replays: int) -> tuple[list[str], float]:
    """Build a graph, instantiate it, launch it; return what the host node saw and the time."""
    x, y = device.malloc(4 * n), device.malloc(4 * n)
    stream = device.create_stream()
    start, stop = device.create_event(), device.create_event()
    seen: list[str] = []
    doubled = checked_kernel()

    def on_done(tag: str) -> None:
        seen.append(tag)

    graph = ahg.Graph()
    up = graph.add_memcpy_node(x, np.ones(n, np.float32))
    zero = graph.add_memset_node(y, 0, 4 * n)
    run = graph.add_kernel_node(saxpy, (n + 255) // 256, 256, (n, 2.0, x, y), deps=[up, zero])
    twice = graph.add_kernel_node(doubled, (n + 255) // 256, 256, (n, y), deps=[run])
    graph.add_host_node(on_done, ("done",), deps=[twice])
    shape: ahg.Dim3 = run.get_kernel_params().grid  # the typed getters' results are typed
    assert shape.x == (n + 255) // 256
    assert zero.get_memset_params().width == 4 * n
    graph_exec = graph.instantiate()
    try:
        await stream.record_event(start)
        handle: ahg.Completion | None = None
        for _ in range(replays):
            handle = await graph_exec.launch(stream)
        assert handle is not None
        await handle
        await stream.record_event(stop)
        await stream.launch_host_func(on_done, "stream")
        await stream.launch_kernel(scale, 1, n, (n, 0.5, y))
        out = np.empty(n, np.float32)
        await stream.memcpy(out, y)
        await stream.synchronize()
        assert stop.query()
        np.testing.assert_array_equal(out, np.full(n, 2.0, np.float32))
        elapsed_ms = ahg.elapsed_time(start, stop)
    finally:
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
        start.destroy()
        stop.destroy()
        device.free(x)
        device.free(y)
    return seen, elapsed_ms


@ahg.kernel(extents={"src": "n", "dst": "n", "hits": 1})
def copy_counted(
    t: ahg.Threads,
    n: ahg.int32,
    src: ahg.ConstPtr[ahg.float32],
    dst: ahg.Ptr[ahg.float32],
    hits: ahg.AtomicPtr[ahg.int32],
) -> None:
    dst[:] = src
    hits[0] += 1


async def checked(device: ahg.Device) -> list[ahg.RaceReport]:
    """Two streams share ``src`` read-only and count into one atomic: no race."""
    src, hits = device.malloc(64 * 4), device.malloc(4)
    dsts = [device.malloc(64 * 4) for _ in range(2)]
    streams = [device.create_stream(non_blocking=True) for _ in range(2)]
    with ahg.race_check(on_race="collect") as rc:
        await device.memset(src, 0, 64 * 4)
        for stream, dst in zip(streams, dsts, strict=True):
            await stream.launch_kernel(copy_counted, 1, 64, (64, src, dst, hits))
        await device.synchronize()
    graph = ahg.Graph()
    graph.add_kernel_node(copy_counted, 1, 64, (64, src, dsts[0], hits))
    graph.add_kernel_node(copy_counted, 1, 64, (64, src, dsts[0], hits))
    races: list[ahg.RaceReport] = graph.check_races()  # both write dsts[0]
    assert [r.kind for r in races] == ["write-after-write"]
    graph.destroy()
    for stream in streams:
        stream.destroy()
    for ptr in (src, hits, *dsts):
        device.free(ptr)
    return rc.reports


def update_or_say_why(graph_exec: ahg.GraphExec, graph: ahg.Graph) -> str:
    """``exec.update``'s failure names what differs and where, as a typed ``result``."""
    try:
        graph_exec.update(graph)
    except ahg.GraphExecUpdateFailure as error:
        kind: ahg.UpdateResultKind = error.result.kind
        node: ahg.GraphNode | None = error.result.node
        assert node is not None
        return f"{kind.name} at {node.type.name}"
    return "updated"


def update_failure(device: ahg.Device) -> str:
    ptr = device.malloc(64)
    with ahg.Graph() as graph, ahg.Graph() as changed:
        graph.add_memset_node(ptr, 0, 64)
        changed.add_empty_node()
        with graph.instantiate() as graph_exec:
            said = update_or_say_why(graph_exec, changed)
            assert update_or_say_why(graph_exec, graph) == "updated"
    device.free(ptr)
    return said


@ahg.race_check(on_race="collect")  # the README: a check also decorates a function
async def copied_under_a_check(device: ahg.Device) -> int:
    ptr = device.malloc(64)
    await device.memset(ptr, 7, 64)
    await device.synchronize()
    seen = int(device.view(ptr, np.uint8)[0])
    device.free(ptr)
    return seen


async def synchronous_copies(device: ahg.Device) -> bool:
    """The device's synchronous copies, called with the Stream methods' parameters; each
    returns once its copy is done."""
    table = ahg.device_symbol("user_code.table", 16)
    host = np.arange(16, dtype=np.uint8)
    out = np.zeros(16, dtype=np.uint8)
    a, b = device.malloc(64), device.malloc(64)
    await device.memcpy_to_symbol(table, host)
    await device.memcpy_from_symbol(out, table, nbytes=16, offset=0)
    await device.memcpy_2d(a, 32, host, 8, 8, 2, kind=ahg.CopyKind.HostToDevice)
    await device.memcpy_peer(b, device, a, 0, 64)
    out[:] = 0
    await device.memcpy_3d(
        ahg.PitchedPtr(out, 8), ahg.PitchedPtr(b, 32), (8, 2, 1), src_pos=(0, 0, 0)
    )
    refused = False
    try:  # a misspelt parameter: mypy --strict needs this ignore, and the call raises at once
        await device.memcpy_peer(b, device, a, device, count=64)  # type: ignore[call-arg]
    except TypeError as error:
        refused = "'count'" in str(error)
    device.free(a)
    device.free(b)
    return refused and bool((out == host).all())


async def main() -> None:
    device = ahg.get_device(0)
    assert await checked(device) == []
    values = np.arange(1_000, dtype=np.int64)
    assert await reduce(device, values) == int(values.sum())
    seen, elapsed_ms = await replay(device, 1 << 10, 3)
    assert seen == ["done"] * 3 + ["stream"]
    assert elapsed_ms > 0
    assert device.memory_info()[0] == device.memory_info()[1]
    assert await captured_fill(device) == 3
    assert device.memory_info().free == device.memory_info().total
    assert update_failure(device) == "NodeTypeChanged at Empty"
    assert await copied_under_a_check(device) == 7
    assert await synchronous_copies(device)


if __name__ == "__main__":
    ahg.run(main)
