"""Stream capture: begin/end, operations become nodes, queries, update-dependencies, errors.

Each test names the HIP rule it pins down (HIP_SEMANTICS.md §2). Leak checks compare
``Baseline.take`` before and after every failure path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left
from cleanup import destroy


@pytest.fixture
def kit(device: ahg.Device) -> Iterator[tuple[ahg.Stream, ahg.DevicePtr, ahg.DevicePtr]]:
    stream, a, b = device.create_stream(), device.malloc(NBYTES), device.malloc(NBYTES)
    yield stream, a, b
    if stream.alive:  # some tests destroy it themselves
        stream.destroy()
    device.free(a)
    device.free(b)


# -- begin / end -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_captured_operations_become_a_chain_and_do_not_run(device: ahg.Device) -> None:
    stream = device.create_stream()
    a, b = device.malloc(NBYTES), device.malloc(NBYTES)
    src = np.arange(N, dtype=np.int64)
    stream.begin_capture()
    copy = await stream.memcpy(a, src)
    fill = await stream.memset(b, 0, NBYTES)
    kern = await stream.launch_kernel(affine, 1, N, (N, 2, 1, a, b))
    host = await stream.launch_host_func(lambda: None)
    graph = stream.end_capture()
    assert stream.submitted == 0  # nothing reached the queue
    assert host_view(device, a).tolist() == [0] * N
    nodes = graph.nodes()
    assert [n.type for n in nodes] == [
        ahg.NodeType.Memcpy,
        ahg.NodeType.Memset,
        ahg.NodeType.Kernel,
        ahg.NodeType.Host,
    ]
    assert [w.node for w in (copy, fill, kern, host)] == nodes
    assert [n.dependencies() for n in nodes] == [[], [nodes[0]], [nodes[1]], [nodes[2]]]
    exec_ = graph.instantiate()
    await (await exec_.launch(stream))
    assert host_view(device, b).tolist() == (2 * src + 1).tolist()
    exec_.destroy()
    graph.destroy()
    no_capture_left()
    destroy(stream, a, b)


@pytest.mark.asyncio
async def test_zero_sized_copy_and_fill_add_no_node(kit: tuple) -> None:
    stream, a, b = kit
    stream.begin_capture()
    copy = await stream.memcpy(a, b, 0)
    fill = await stream.memset(a, 7, 0)
    graph = stream.end_capture()
    assert copy.node is None
    assert fill.node is None
    assert graph.nodes() == []
    graph.destroy()


@pytest.mark.asyncio
async def test_kernel_captured_on_a_prioritised_stream_carries_its_priority(
    device: ahg.Device,
) -> None:
    stream = device.create_stream(priority=-1)
    a = device.malloc(NBYTES)
    stream.begin_capture()
    work = await stream.launch_kernel(affine, 1, N, (N, 1, 0, a, a))
    graph = stream.end_capture()
    assert work.node.params.priority == -1
    graph.destroy()
    destroy(stream, a)


@pytest.mark.asyncio
async def test_awaiting_captured_work_is_synchronising_a_capturing_stream(kit: tuple) -> None:
    stream, a, b = kit
    before = Baseline.take(stream.device)
    stream.begin_capture()
    work = await stream.memcpy(a, b, NBYTES)
    assert work.node is not None
    assert work.exception() is None
    assert work.end_ns is None
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await work
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureUnsupported):
        work.done()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await stream.memcpy(a, b, NBYTES)  # async work on an invalidated stream
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(stream.device) == before


def test_begin_capture_errors_in_hip_order(device: ahg.Device) -> None:
    stream = device.create_stream()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.null_stream.begin_capture()
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture(mode=3)
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture(mode=True)
    stream.begin_capture()
    with pytest.raises(ahg.IllegalState):
        stream.begin_capture()
    stream.end_capture().destroy()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.begin_capture()
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.end_capture()


def test_end_capture_errors_in_hip_order(device: ahg.Device) -> None:
    stream = device.create_stream()
    with pytest.raises(ahg.IllegalState):
        device.null_stream.end_capture()
    with pytest.raises(ahg.IllegalState):
        stream.end_capture()  # status None
    destroy(stream)


def test_end_capture_of_an_empty_capture_gives_an_empty_graph(device: ahg.Device) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    graph = stream.end_capture()
    assert graph.nodes() == []
    assert not graph.destroyed
    graph.destroy()
    no_capture_left()
    destroy(stream)


# -- queries ---------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_is_capturing_and_capture_info_follow_the_status(kit: tuple) -> None:
    stream, a, b = kit
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert stream.capture_info() == ahg.CaptureInfo(ahg.CaptureStatus.NONE)
    stream.begin_capture()
    first = stream.capture_info()
    assert first.status is ahg.CaptureStatus.ACTIVE
    assert first.dependencies == ()
    work = await stream.memcpy(a, b, NBYTES)
    info = stream.capture_info()
    assert info.id == first.id
    assert info.graph is first.graph
    assert info.dependencies == (work.node,)
    graph = stream.end_capture()
    assert graph is info.graph
    stream.begin_capture()
    assert stream.capture_info().id != first.id  # a new id per begin
    stream.end_capture().destroy()
    graph.destroy()


def test_capture_info_is_frozen() -> None:
    info = ahg.CaptureInfo(ahg.CaptureStatus.NONE)
    with pytest.raises(AttributeError):
        info.status = ahg.CaptureStatus.ACTIVE  # type: ignore[misc]


@pytest.mark.asyncio
async def test_capture_info_unpacks_as_status_id_graph_dependencies(kit: tuple) -> None:
    """HIP answers the four through out-parameters; API.md lists them in this order."""
    stream, a, b = kit
    status, capture_id, graph, deps = stream.capture_info()
    assert (status, capture_id, graph, deps) == (ahg.CaptureStatus.NONE, None, None, ())
    stream.begin_capture()
    work = await stream.memcpy(a, b, NBYTES)
    status, capture_id, graph, deps = stream.capture_info()
    assert status is ahg.CaptureStatus.ACTIVE
    assert capture_id == stream.capture_info().id
    assert deps == (work.node,)
    assert stream.end_capture() is graph
    graph.destroy()


@pytest.mark.asyncio
async def test_null_stream_is_implicit_while_a_blocking_stream_captures(
    device: ahg.Device,
) -> None:
    blocking, non_blocking = device.create_stream(), device.create_stream(non_blocking=True)
    a = device.malloc(NBYTES)
    null = device.null_stream
    non_blocking.begin_capture()
    assert null.is_capturing() is ahg.CaptureStatus.NONE  # only blocking streams count
    blocking.begin_capture()
    with pytest.raises(ahg.StreamCaptureImplicit):
        null.is_capturing()
    with pytest.raises(ahg.StreamCaptureImplicit):
        null.capture_info()
    with pytest.raises(ahg.StreamCaptureImplicit):
        await null.launch_host_func(lambda: None)
    with pytest.raises(ahg.StreamCaptureImplicit):
        await null.memset(a, 0, NBYTES)
    assert blocking.is_capturing() is ahg.CaptureStatus.ACTIVE  # no side effect
    blocking.end_capture().destroy()
    assert null.is_capturing() is ahg.CaptureStatus.NONE
    non_blocking.end_capture().destroy()
    await null.memset(a, 0, NBYTES)
    await null.synchronize()
    destroy(blocking, non_blocking, a)


# -- update_capture_dependencies -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_update_dependencies_add_and_set(kit: tuple) -> None:
    stream, a, b = kit
    stream.begin_capture()
    first = (await stream.memset(a, 1, NBYTES)).node
    graph = stream.capture_info().graph
    assert graph is not None
    manual = graph.add_empty_node()
    stream.update_capture_dependencies([manual, first], ahg.CaptureDependencies.ADD)
    assert stream.capture_info().dependencies == (first, manual)  # no duplicates
    second = (await stream.memset(b, 2, NBYTES)).node
    assert second.dependencies() == [first, manual]
    stream.update_capture_dependencies([first], ahg.CaptureDependencies.SET)
    third = (await stream.memset(b, 3, NBYTES)).node
    assert third.dependencies() == [first]
    graph_out = stream.end_capture()  # `second` was set aside: no Unjoined
    assert graph_out is graph
    graph.destroy()


@pytest.mark.asyncio
async def test_update_dependencies_errors(kit: tuple, device: ahg.Device) -> None:
    stream, a, _ = kit
    with pytest.raises(ahg.IllegalState):
        stream.update_capture_dependencies([])
    stream.begin_capture()
    node = (await stream.memset(a, 1, NBYTES)).node
    other = ahg.Graph()
    foreign = other.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        stream.update_capture_dependencies([node, node])  # more nodes than the graph has
    with pytest.raises(ahg.InvalidValue):
        stream.update_capture_dependencies([node], flags=2)
    with pytest.raises(ahg.InvalidValue):
        stream.update_capture_dependencies([foreign])
    with pytest.raises(ahg.InvalidValue):
        stream.update_capture_dependencies(None)  # type: ignore[arg-type]
    assert stream.capture_info().dependencies == (node,)  # failures changed nothing
    stream.end_capture().destroy()
    other.destroy()
    doomed = device.create_stream()
    doomed.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        doomed.update_capture_dependencies([])


# -- begin_capture_to_graph ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_capture_to_graph_existing_nodes_are_manual(kit: tuple) -> None:
    stream, a, b = kit
    graph = ahg.Graph()
    root = graph.add_memset_node(a, 5, NBYTES)
    loose = graph.add_empty_node()  # a manual leaf does not make the capture unjoined
    stream.begin_capture_to_graph(graph, deps=[root])
    work = await stream.launch_kernel(affine, 1, N, (N, 1, 0, a, b))
    assert work.node.dependencies() == [root]
    # a node added by hand during capture, then joined with SET: runs after the captured work
    late = graph.add_memset_node(b, 0, NBYTES, deps=[work.node])
    stream.update_capture_dependencies([late], ahg.CaptureDependencies.SET)
    tail = await stream.memcpy(a, b, NBYTES)
    assert stream.end_capture() is graph
    assert tail.node.dependencies() == [late]
    assert loose in graph.nodes()
    graph.destroy()


def test_capture_to_graph_errors(device: ahg.Device) -> None:
    stream = device.create_stream()
    graph, other = ahg.Graph(), ahg.Graph()
    foreign = other.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture_to_graph(None)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture_to_graph(graph, deps=[foreign])
    other.destroy()
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture_to_graph(other)
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    graph.destroy()
    destroy(stream)


@pytest.mark.asyncio
async def test_failed_capture_to_graph_never_destroys_the_users_graph(kit: tuple) -> None:
    stream, a, b = kit
    graph = ahg.Graph()
    stream.begin_capture_to_graph(graph)
    await stream.memcpy(a, b, NBYTES)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.synchronize()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert not graph.destroyed
    graph.destroy()
    no_capture_left()


# -- async with ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_with_capture_gives_the_graph(kit: tuple) -> None:
    stream, a, b = kit
    async with stream.capture() as scope:
        assert scope.graph is None
        await stream.memcpy(a, b, NBYTES)
    assert scope.graph is not None
    assert len(scope.graph.nodes()) == 1
    scope.graph.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_async_with_an_exception_ends_the_capture_and_frees_its_graph(kit: tuple) -> None:
    stream, a, b = kit
    before = Baseline.take(stream.device)
    scope = stream.capture()

    async def failing_block() -> None:
        async with scope:
            await stream.memcpy(a, b, NBYTES)
            await stream.malloc_async(64)
            raise KeyError("boom")

    with pytest.raises(KeyError):
        await failing_block()
    assert scope.graph is None
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(stream.device) == before


@pytest.mark.asyncio
async def test_async_with_cancellation_ends_the_capture(kit: tuple) -> None:
    stream, a, b = kit
    before = Baseline.take(stream.device)
    entered = asyncio.Event()

    async def capture_forever() -> None:
        async with stream.capture():
            await stream.memcpy(a, b, NBYTES)
            entered.set()
            await asyncio.Event().wait()  # parked until cancelled

    task = asyncio.create_task(capture_forever())
    await entered.wait()  # the task is inside the block, capturing
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(stream.device) == before


@pytest.mark.asyncio
async def test_async_with_failing_end_propagates_and_cleans_up(kit: tuple) -> None:
    stream, a, b = kit
    before = Baseline.take(stream.device)

    async def block() -> None:
        async with stream.capture():
            await stream.memcpy(a, b, NBYTES)
            with pytest.raises(ahg.StreamCaptureUnsupported):
                stream.query()

    with pytest.raises(ahg.StreamCaptureInvalidated):
        await block()
    assert Baseline.take(stream.device) == before


@pytest.mark.asyncio
async def test_async_with_ended_inside_the_block_is_illegal_state(kit: tuple) -> None:
    stream, _, _ = kit

    async def block() -> None:
        async with stream.capture():
            stream.end_capture().destroy()

    with pytest.raises(ahg.IllegalState):
        await block()
    no_capture_left()


# -- stream-ordered memory -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_eager_malloc_async_and_free_async_in_stream_order(device: ahg.Device) -> None:
    stream = device.create_stream()
    before = device.memory.bytes_in_use
    ptr = await stream.malloc_async(NBYTES)
    await stream.memset(ptr, 1, NBYTES)
    out = np.zeros(N, dtype=np.int64)
    await stream.memcpy(out, ptr)
    freed = await stream.free_async(ptr)
    assert device.memory.bytes_in_use == before + NBYTES  # the free waits for its turn
    await freed
    assert device.memory.bytes_in_use == before
    assert out.tolist() == [0x0101010101010101] * N
    with pytest.raises(ahg.InvalidValue):
        await stream.free_async(ptr)  # already freed
    assert await stream.malloc_async(0) == ahg.NULL
    await (await stream.free_async(ahg.NULL))  # frees nothing, as hipFreeAsync(nullptr)
    destroy(stream)


@pytest.mark.asyncio
async def test_captured_malloc_async_is_usable_at_once_and_replays(device: ahg.Device) -> None:
    stream = device.create_stream()
    dst = device.malloc(NBYTES)
    before = Baseline.take(device)
    stream.begin_capture()
    tmp = await stream.malloc_async(NBYTES)
    await stream.memset(tmp, 2, NBYTES)
    await stream.memcpy(dst, tmp, NBYTES)
    freed = await stream.free_async(tmp)
    assert await stream.malloc_async(0) == ahg.NULL
    graph = stream.end_capture()
    assert freed.node.type is ahg.NodeType.MemFree
    assert graph.nodes()[0].type is ahg.NodeType.MemAlloc
    exec_ = graph.instantiate()
    for _ in range(3):
        await (await exec_.launch(stream))
    assert host_view(device, dst).tolist() == [0x0202020202020202] * N
    exec_.destroy()
    graph.destroy()
    assert Baseline.take(device) == before
    destroy(stream, dst)


@pytest.mark.asyncio
async def test_captured_free_of_an_eager_allocation_is_invalid_value(kit: tuple) -> None:
    stream, a, _ = kit
    stream.begin_capture()
    with pytest.raises(ahg.InvalidValue):
        await stream.free_async(a)
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    stream.end_capture().destroy()


# -- a captured graph is an ordinary graph ---------------------------------------------------------


async def _capture_affine(
    stream: ahg.Stream, src: ahg.DevicePtr, dst: ahg.DevicePtr, mul: int, add: int
) -> ahg.Graph:
    async with stream.capture() as scope:
        await stream.memset(dst, 0, NBYTES)
        await stream.launch_kernel(affine, 1, N, (N, mul, add, src, dst))
        await stream.launch_host_func(lambda: None)
    assert scope.graph is not None
    return scope.graph


@pytest.mark.asyncio
async def test_recapture_with_new_arguments_updates_the_exec(device: ahg.Device) -> None:
    stream = device.create_stream()
    src, dst = device.malloc(NBYTES), device.malloc(NBYTES)
    await stream.memcpy(src, np.arange(N, dtype=np.int64))
    first = await _capture_affine(stream, src, dst, 2, 1)
    exec_ = first.instantiate()
    await (await exec_.launch(stream))
    assert host_view(device, dst).tolist() == (2 * np.arange(N) + 1).tolist()
    second = await _capture_affine(stream, src, dst, 5, 7)
    result = exec_.update(second)
    assert result.ok
    await (await exec_.launch(stream))
    assert host_view(device, dst).tolist() == (5 * np.arange(N) + 7).tolist()
    clone = second.clone()
    assert len(clone.nodes()) == 3
    assert second.to_dot().count("->") == 2
    for handle in (exec_, first, second, clone):
        handle.destroy()
    destroy(stream, src, dst)


@pytest.mark.asyncio
async def test_capturing_a_graph_launch_is_unsupported_and_invalidates(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_empty_node()
    exec_ = graph.instantiate()
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await exec_.launch(stream)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    exec_.destroy()
    graph.destroy()
    destroy(stream)


@pytest.mark.asyncio
async def test_recapture_with_stream_ordered_memory_updates_the_exec(device: ahg.Device) -> None:
    """A recaptured MemAlloc node reserves new addresses; update moves its users to the exec's."""
    stream = device.create_stream()
    dst = device.malloc(NBYTES)

    async def record(value: int) -> ahg.Graph:
        async with stream.capture() as scope:
            tmp = await stream.malloc_async(NBYTES)
            await stream.memset(tmp, value, NBYTES)
            await stream.memcpy(dst, tmp, NBYTES)
            await stream.free_async(tmp)
        assert scope.graph is not None
        return scope.graph

    first = await record(1)
    exec_ = first.instantiate()
    await (await exec_.launch(stream))
    assert host_view(device, dst).tolist() == [0x0101010101010101] * N
    second = await record(2)
    assert exec_.update(second).ok
    await (await exec_.launch(stream))
    assert host_view(device, dst).tolist() == [0x0202020202020202] * N
    for handle in (exec_, first, second):
        handle.destroy()
    assert device.memory.statistics().reservations == 0
    destroy(dst, stream)
