"""Acceptance checks written from the user's side, one promise each, public API only.

Grouped by topic:

* stream capture: the API's names and records, operations becoming nodes, fork and join through
  events, ending a capture, the illegal-operations table, task-aware modes, destroying what a
  capture uses, and a captured graph being an ordinary graph;
* one handle lifecycle and one public surface: ``with``, forgotten handles, ``ahg.Destroyed``,
  exports and honest coroutines;
* every failure path honest: failed calls change nothing, user exceptions are contained, bad
  input gets a clear error.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import typing

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import (
    exhaust_signal_sets,
    fresh_devices,
    hang_kernels,
    loop_turns,
    registry_statistics,
)

N = 8
NBYTES = N * 8


@ahg.kernel
def add_one(t: ahg.Threads, n: ahg.int32, buf: ahg.Ptr[ahg.int64]) -> None:
    """buf += 1 over the first n elements."""
    i = t.ids[t.ids < n]
    buf[i] = buf[i] + 1


def live(device: ahg.Device | None = None) -> dict[str, int]:
    """How many handles of each kind are registered, from the public statistics.

    Given a device, its null stream is made first: it is the device's own stream, made on first
    use (a capture's null-stream rule uses it), not something a call leaked.
    """
    if device is not None:
        assert device.null_stream.alive
    return {kind: stats.live for kind, stats in registry_statistics().items()}


async def read(device: ahg.Device, ptr: ahg.DevicePtr) -> list[int]:
    out = np.zeros(N, dtype=np.int64)
    await device.memcpy(out, ptr, NBYTES)
    return out.tolist()


# -- stream capture: the API ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_capture_queries_answer_none_then_active_with_a_record(device: ahg.Device) -> None:
    stream = device.create_stream()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    stream.begin_capture()
    info = stream.capture_info()
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert info.status is ahg.CaptureStatus.ACTIVE
    assert isinstance(info.graph, ahg.Graph)
    assert list(info.dependencies) == []
    with pytest.raises(AttributeError):
        info.status = ahg.CaptureStatus.NONE  # type: ignore[misc]
    graph = stream.end_capture()
    assert graph is info.graph
    assert stream.capture_info().status is ahg.CaptureStatus.NONE
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_exchange_capture_mode_is_per_task() -> None:
    async def other() -> ahg.CaptureMode:
        return ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)

    ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
    try:
        # A new task starts from a copy of its creator's context, and its swap stays its own.
        assert await asyncio.create_task(other()) is ahg.CaptureMode.THREAD_LOCAL
        assert ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL) is ahg.CaptureMode.THREAD_LOCAL
    finally:
        ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL)


@pytest.mark.asyncio
async def test_capture_block_gives_its_graph_afterwards(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    async with stream.capture() as capture:
        await stream.memset(buf, 0, NBYTES)
        await stream.launch_kernel(add_one, 1, N, (N, buf))
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert [n.type for n in capture.graph.nodes()] == [ahg.NodeType.Memset, ahg.NodeType.Kernel]
    capture.graph.destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_capture_block_left_by_an_exception_discards_its_graph(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    before = live(device)

    async def body() -> None:
        async with stream.capture():
            await stream.launch_kernel(add_one, 1, N, (N, buf))
            raise KeyError("boom")

    with pytest.raises(KeyError):
        await body()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert live() == before
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_capture_block_left_by_a_cancellation_discards_its_graph(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    before = live(device)
    started = asyncio.Event()

    async def body() -> None:
        async with stream.capture():
            await stream.launch_kernel(add_one, 1, N, (N, buf))
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(body())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert live() == before
    device.free(buf)
    stream.destroy()


# -- stream capture: stream-ordered memory --------------------------------------------------------


@pytest.mark.asyncio
async def test_malloc_async_and_free_async_work_eagerly(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = await stream.malloc_async(NBYTES)
    await stream.memset(ptr, 0, NBYTES)
    await stream.launch_kernel(add_one, 1, N, (N, ptr))
    out = np.zeros(N, dtype=np.int64)
    await stream.memcpy(out, ptr, NBYTES)
    await stream.free_async(ptr)
    await stream.synchronize()
    assert out.tolist() == [1] * N
    assert device.statistics().memory.allocations == 0
    stream.destroy()


@pytest.mark.asyncio
async def test_captured_malloc_and_free_async_are_memory_nodes_usable_at_once(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    host = np.zeros(N, dtype=np.int64)
    stream.begin_capture()
    ptr = await stream.malloc_async(NBYTES)
    await stream.memset(ptr, 0, NBYTES)
    await stream.launch_kernel(add_one, 1, N, (N, ptr))
    await stream.memcpy(host, ptr, NBYTES)
    await stream.free_async(ptr)
    graph = stream.end_capture()
    types = [n.type for n in graph.nodes()]
    assert types[0] is ahg.NodeType.MemAlloc
    assert types[-1] is ahg.NodeType.MemFree
    exec_ = graph.instantiate()
    await (await exec_.launch(stream))
    assert host.tolist() == [1] * N
    exec_.destroy()
    graph.destroy()
    stream.destroy()


# -- stream capture: operations become nodes ------------------------------------------------------


@pytest.mark.asyncio
async def test_every_kind_of_captured_operation_adds_a_chained_node_and_runs_nothing(
    device: ahg.Device,
) -> None:
    stream, other = device.create_stream(), device.create_stream()
    buf = device.malloc(NBYTES)
    await device.memset(buf, 0, NBYTES)
    event = device.create_event()
    ran: list[int] = []
    stream.begin_capture()
    await stream.memset(buf, 5, NBYTES)
    await stream.memcpy(buf, np.ones(N, dtype=np.int64), NBYTES)
    await stream.launch_kernel(add_one, 1, N, (N, buf))
    await stream.launch_host_func(ran.append, 1)
    await stream.record_event(event, 1)  # hipEventRecordExternal: an EventRecord node
    await stream.wait_event(event, 1)  # hipEventWaitExternal: an EventWait node
    graph = stream.end_capture()
    nodes = graph.nodes()
    assert [n.type for n in nodes] == [
        ahg.NodeType.Memset,
        ahg.NodeType.Memcpy,
        ahg.NodeType.Kernel,
        ahg.NodeType.Host,
        ahg.NodeType.EventRecord,
        ahg.NodeType.WaitEvent,
    ]
    assert all(nodes[k].dependencies() == [nodes[k - 1]] for k in range(1, len(nodes)))
    assert ran == []
    assert await read(device, buf) == [0] * N
    graph.destroy()
    event.destroy()
    device.free(buf)
    stream.destroy()
    other.destroy()


@pytest.mark.asyncio
async def test_awaiting_captured_work_is_refused_and_invalidates_like_a_synchronise(
    device: ahg.Device,
) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    before = live(device)
    stream.begin_capture()
    done = await stream.launch_kernel(add_one, 1, N, (N, buf))
    assert done.node is not None
    assert done.node.type is ahg.NodeType.Kernel
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await done
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert live() == before
    device.free(buf)
    stream.destroy()


# -- stream capture: fork and join ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_fork_and_join_share_the_capture_and_add_no_event_nodes(device: ahg.Device) -> None:
    origin, side = device.create_stream(), device.create_stream()
    fork, join = device.create_event(), device.create_event()
    a, b = device.malloc(NBYTES), device.malloc(NBYTES)
    origin.begin_capture(ahg.CaptureMode.THREAD_LOCAL)
    first = await origin.memset(a, 0, NBYTES)
    await origin.record_event(fork)
    await side.wait_event(fork)
    assert side.capture_info()[:3] == origin.capture_info()[:3]  # status, id, graph
    branch = await side.memset(b, 0, NBYTES)
    await side.record_event(join)
    await origin.wait_event(join)
    last = await origin.launch_kernel(add_one, 1, N, (N, a))
    assert side.is_capturing() is ahg.CaptureStatus.ACTIVE
    with pytest.raises(ahg.StreamCaptureUnmatched):
        side.end_capture()
    graph = origin.end_capture()
    assert side.is_capturing() is ahg.CaptureStatus.NONE  # forked streams end with their origin
    assert len(graph.nodes()) == 3
    assert branch.node.dependencies() == [first.node]
    assert set(last.node.dependencies()) == {first.node, branch.node}
    graph.destroy()
    for handle in (fork, join, origin, side):
        handle.destroy()
    device.free(a)
    device.free(b)


@pytest.mark.asyncio
async def test_an_empty_fork_and_join_over_three_streams_adds_no_node(device: ahg.Device) -> None:
    s0, s1, s2 = (device.create_stream() for _ in range(3))
    e0, e1, e2 = (device.create_event() for _ in range(3))
    s0.begin_capture()
    await s0.record_event(e0)
    await s1.wait_event(e0)
    await s2.wait_event(e0)
    await s1.record_event(e1)
    await s2.record_event(e2)
    await s0.wait_event(e1)
    await s0.wait_event(e2)
    graph = s0.end_capture()
    assert graph.nodes() == []
    graph.destroy()
    for handle in (e0, e1, e2, s0, s1, s2):
        handle.destroy()


@pytest.mark.asyncio
async def test_ending_with_an_unjoined_fork_is_unjoined_and_leaks_nothing(
    device: ahg.Device,
) -> None:
    origin, side = device.create_stream(), device.create_stream()
    fork = device.create_event()
    a = device.malloc(NBYTES)
    before = live(device)
    origin.begin_capture()
    await origin.memset(a, 0, NBYTES)
    await origin.record_event(fork)
    await side.wait_event(fork)
    await side.memset(a, 1, NBYTES)
    await origin.memset(a, 2, NBYTES)
    with pytest.raises(ahg.StreamCaptureUnjoined):
        origin.end_capture()
    # HIP leaves the status as is after an unjoined end; whatever is left must be endable or
    # already gone, and the capture graph is deleted.
    if origin.is_capturing() is not ahg.CaptureStatus.NONE:
        with pytest.raises(ahg.HipError):
            origin.end_capture()
    assert live()["graph"] == before["graph"]
    fork.destroy()
    origin.destroy()
    side.destroy()
    device.free(a)


# -- stream capture: dependencies, capture into a graph, the null stream --------------------------


@pytest.mark.asyncio
async def test_update_capture_dependencies_add_and_set(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture()
    first = (await stream.memset(buf, 0, NBYTES)).node
    graph = stream.capture_info().graph
    manual = graph.add_empty_node()
    stream.update_capture_dependencies([manual], ahg.CaptureDependencies.ADD)
    assert set(stream.capture_info().dependencies) == {first, manual}
    stream.update_capture_dependencies([manual], ahg.CaptureDependencies.SET)
    assert list(stream.capture_info().dependencies) == [manual]
    stream.end_capture().destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_capture_to_graph_set_joined_manual_node_runs_after_captured_work(
    device: ahg.Device,
) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    order: list[str] = []
    graph = ahg.Graph()
    existing = graph.add_host_node(lambda: order.append("existing"))
    stream.begin_capture_to_graph(graph, [existing])
    await stream.launch_host_func(lambda: order.append("captured"))
    manual = graph.add_host_node(
        lambda: order.append("manual"), deps=list(stream.capture_info().dependencies)
    )
    stream.update_capture_dependencies([manual], ahg.CaptureDependencies.SET)
    assert stream.end_capture() is graph
    exec_ = graph.instantiate()
    await (await exec_.launch(stream))
    assert order == ["existing", "captured", "manual"]
    exec_.destroy()
    graph.destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_beginning_and_ending_a_capture_checks_in_hips_order(device: ahg.Device) -> None:
    stream = device.create_stream()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.null_stream.begin_capture()
    with pytest.raises(ahg.IllegalState):
        device.null_stream.end_capture()
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture(7)
    with pytest.raises(ahg.IllegalState):
        stream.end_capture()  # not capturing
    stream.begin_capture()
    with pytest.raises(ahg.IllegalState):
        stream.begin_capture()  # already active
    stream.end_capture().destroy()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.begin_capture()
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.end_capture()
    with pytest.raises(ahg.InvalidValue):
        ahg.exchange_capture_mode(3)


@pytest.mark.asyncio
async def test_capture_info_gives_id_graph_and_dependencies_only_while_active(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    first = stream.capture_info().id
    with pytest.raises(ahg.StreamCaptureUnsupported):
        stream.query()
    assert stream.capture_info() == (ahg.CaptureStatus.INVALIDATED, None, None, ())
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.begin_capture()
    assert stream.capture_info().id != first  # a new id for every begin
    stream.end_capture().destroy()
    stream.destroy()


# -- stream capture: the illegal-operations table -------------------------------------------------


@pytest.mark.asyncio
async def test_every_async_operation_on_an_invalidated_stream_is_invalidated(
    device: ahg.Device,
) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    event = device.create_event()
    host = np.zeros(N, dtype=np.int64)
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.synchronize()
    calls = [
        lambda: stream.memset(buf, 0, NBYTES),
        lambda: stream.memcpy(buf, host, NBYTES),
        lambda: stream.launch_kernel(add_one, 1, N, (N, buf)),
        lambda: stream.launch_host_func(int),
        lambda: stream.malloc_async(NBYTES),
        lambda: stream.free_async(buf),
        lambda: stream.record_event(event),
        lambda: stream.wait_event(event),
    ]
    for call in calls:
        with pytest.raises(ahg.StreamCaptureInvalidated):
            await call()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.memset_nowait(buf, 0, NBYTES)
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert device.statistics().memory.allocations == 1  # nothing allocated or freed
    event.destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_synchronous_copies_and_fills_are_implicit_and_invalidate_every_capture(
    device: ahg.Device,
) -> None:
    first, second = device.create_stream(), device.create_stream()
    buf = device.malloc(NBYTES)
    host = np.zeros(N, dtype=np.int64)
    for sync_call in (
        lambda: device.memcpy(host, buf, NBYTES),
        lambda: device.memset(buf, 0, NBYTES),
        lambda: device.memcpy_peer(buf, device, buf, device, NBYTES),
    ):
        first.begin_capture(ahg.CaptureMode.RELAXED)
        second.begin_capture(ahg.CaptureMode.RELAXED)
        with pytest.raises(ahg.StreamCaptureImplicit):
            await sync_call()
        for stream in (first, second):
            assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
            with pytest.raises(ahg.StreamCaptureInvalidated):
                stream.end_capture()
    device.free(buf)
    first.destroy()
    second.destroy()


# -- stream capture: modes are task-aware ---------------------------------------------------------


def _malloc_and_free(device: ahg.Device, mode: ahg.CaptureMode) -> str:
    """Allocate and free under ``mode`` (the caller's own): "ok", or the error's name."""
    previous = ahg.exchange_capture_mode(mode)
    try:
        device.free(device.malloc(8))
        return "ok"
    except ahg.HipError as error:
        return type(error).__name__
    finally:
        ahg.exchange_capture_mode(previous)


def _on_a_thread(call: typing.Callable[[], str]) -> str:
    out: list[str] = []
    thread = threading.Thread(target=lambda: out.append(call()))
    thread.start()
    thread.join()
    return out[0]


# (capture mode, caller's mode, from the task that began it?) -> what malloc answers
_MALLOC_RULE = [
    (ahg.CaptureMode.GLOBAL, ahg.CaptureMode.GLOBAL, False, "StreamCaptureUnsupported"),
    (ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL, False, "ok"),
    (ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL, True, "StreamCaptureUnsupported"),
    (ahg.CaptureMode.GLOBAL, ahg.CaptureMode.RELAXED, True, "ok"),
    (ahg.CaptureMode.THREAD_LOCAL, ahg.CaptureMode.GLOBAL, False, "ok"),
    (ahg.CaptureMode.THREAD_LOCAL, ahg.CaptureMode.GLOBAL, True, "StreamCaptureUnsupported"),
    (ahg.CaptureMode.RELAXED, ahg.CaptureMode.GLOBAL, True, "ok"),
]


@pytest.mark.parametrize(("capture_mode", "caller_mode", "own", "answer"), _MALLOC_RULE)
@pytest.mark.asyncio
async def test_malloc_during_capture_follows_the_callers_mode_from_tasks_and_threads(
    device: ahg.Device,
    capture_mode: ahg.CaptureMode,
    caller_mode: ahg.CaptureMode,
    own: bool,
    answer: str,
) -> None:
    stream = device.create_stream()
    callers = ["own"] if own else ["task", "thread"]
    for caller in callers:
        stream.begin_capture(capture_mode)
        call = lambda: _malloc_and_free(device, caller_mode)  # noqa: E731
        if caller == "own":
            got = call()
        elif caller == "task":
            got = await asyncio.create_task(_as_task(call))
        else:
            got = _on_a_thread(call)
        assert got == answer, caller
        expected = ahg.CaptureStatus.INVALIDATED if answer != "ok" else ahg.CaptureStatus.ACTIVE
        assert stream.is_capturing() is expected
        if answer == "ok":
            stream.end_capture().destroy()
        else:
            with pytest.raises(ahg.StreamCaptureInvalidated):
                stream.end_capture()
    stream.destroy()


async def _as_task(call: typing.Callable[[], str]) -> str:
    return call()


@pytest.mark.parametrize("mode", list(ahg.CaptureMode))
@pytest.mark.asyncio
async def test_a_capture_ended_from_another_task_or_thread(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    stream = device.create_stream()

    def end() -> str:
        try:
            stream.end_capture().destroy()
            return "ended"
        except ahg.StreamCaptureWrongThread:
            return "wrong thread"

    async def end_in_task() -> str:
        return end()

    expected = "ended" if mode is ahg.CaptureMode.RELAXED else "wrong thread"
    for elsewhere in (lambda: _on_a_thread(end), None):
        stream.begin_capture(mode)
        got = elsewhere() if elsewhere is not None else await asyncio.create_task(end_in_task())
        assert got == expected
        if got == "wrong thread":
            assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
            stream.end_capture().destroy()  # the task that began it still can
    stream.destroy()


@pytest.mark.parametrize("mode", list(ahg.CaptureMode))
@pytest.mark.asyncio
async def test_a_synchronise_elsewhere_invalidates_only_a_global_capture(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    capturing, other = device.create_stream(), device.create_stream()

    async def sync_other() -> str:
        try:
            await other.synchronize()
            return "ok"
        except ahg.StreamCaptureUnsupported:
            return "refused"

    for elsewhere in ("task", "thread"):
        capturing.begin_capture(mode)
        if elsewhere == "task":
            got = await asyncio.create_task(sync_other())
        else:
            got = _on_a_thread(lambda: asyncio.run(sync_other()))
        if mode is ahg.CaptureMode.GLOBAL:
            assert got == "refused"
            with pytest.raises(ahg.StreamCaptureInvalidated):
                capturing.end_capture()
        else:
            assert got == "ok"
            capturing.end_capture().destroy()
    capturing.destroy()
    other.destroy()


# -- stream capture: destroying what a capture uses -----------------------------------------------


@pytest.mark.asyncio
async def test_destroying_a_capturing_stream_frees_its_capture(device: ahg.Device) -> None:
    stream, side = device.create_stream(), device.create_stream()
    fork, buf = device.create_event(), device.malloc(NBYTES)
    before = live(device)
    stream.begin_capture()
    await stream.memset(buf, 0, NBYTES)
    await stream.record_event(fork)
    await side.wait_event(fork)
    stream.destroy()
    assert side.is_capturing() is ahg.CaptureStatus.NONE
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    assert live()["graph"] == before["graph"]
    assert live()["graph node"] == before["graph node"]
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.end_capture()
    fork.destroy()
    side.destroy()
    device.free(buf)


@pytest.mark.asyncio
async def test_destroying_a_fork_event_or_an_unrelated_graph_mid_capture(
    device: ahg.Device,
) -> None:
    origin, side = device.create_stream(), device.create_stream()
    fork, join = device.create_event(), device.create_event()
    buf = device.malloc(NBYTES)
    unrelated = ahg.Graph()
    unrelated.add_empty_node()
    origin.begin_capture()
    await origin.memset(buf, 0, NBYTES)
    await origin.record_event(fork)
    await side.wait_event(fork)
    fork.destroy()
    unrelated.destroy()
    await side.memset(buf, 1, NBYTES)
    await side.record_event(join)
    await origin.wait_event(join)
    graph = origin.end_capture()
    assert len(graph.nodes()) == 2
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    graph.destroy()
    for handle in (join, origin, side):
        handle.destroy()
    device.free(buf)


# -- stream capture: a captured graph is an ordinary graph ----------------------------------------


@ahg.kernel
def scale_add(t: ahg.Threads, n: ahg.int32, mul: ahg.int64, add: ahg.int64,
              buf: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    """buf = buf * mul + add over the first n elements."""
    i = t.ids[t.ids < n]
    buf[i] = buf[i] * mul + add


async def _capture_program(
    origin: ahg.Stream, side: ahg.Stream, events: tuple[ahg.Event, ahg.Event],
    out: ahg.DevicePtr, mul: int, add: int,
) -> ahg.Graph:  # fmt: skip
    """Fork, a kernel on each branch, join: the PyTorch pattern's recaptured code."""
    origin.begin_capture()
    await origin.memset(out, 0, NBYTES)
    await origin.record_event(events[0])
    await side.wait_event(events[0])
    await side.launch_host_func(int)
    await side.record_event(events[1])
    await origin.launch_kernel(scale_add, 1, N, (N, 1, add, out))
    await origin.wait_event(events[1])
    await origin.launch_kernel(scale_add, 1, N, (N, mul, 0, out))
    return origin.end_capture()


@pytest.mark.asyncio
async def test_a_captured_graph_clones_prints_and_updates_after_a_recapture(
    device: ahg.Device,
) -> None:
    origin, side = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    out = device.malloc(NBYTES)
    graph = await _capture_program(origin, side, events, out, 3, 2)
    clone = graph.clone()
    assert len(clone.nodes()) == len(graph.nodes()) == 4
    assert "digraph" in graph.to_dot()
    exec_ = graph.instantiate()
    await (await exec_.launch(origin))
    assert await read(device, out) == [6] * N
    again = await _capture_program(origin, side, events, out, 5, 7)
    assert exec_.update(again).kind is ahg.UpdateResultKind.Success
    await (await exec_.launch(origin))
    assert await read(device, out) == [35] * N
    for handle in (exec_, graph, clone, again, *events, origin, side):
        handle.destroy()
    device.free(out)


# -- one handle lifecycle, one public surface -----------------------------------------------------


@pytest.mark.asyncio
async def test_a_thousand_forgotten_handles_of_each_kind_are_freed_with_a_resource_warning(
    device: ahg.Device,
) -> None:
    before = live(device)

    def forget_and_collect() -> None:
        for _ in range(1000):
            graph = ahg.Graph()
            graph.add_empty_node()
            graph.instantiate()
            device.create_stream()
        del graph
        gc.collect()

    with pytest.warns(ResourceWarning) as caught:
        forget_and_collect()
    assert live() == before
    kinds = {str(w.message).split(" #")[0] for w in caught}
    assert kinds == {"unclosed graph", "unclosed graph exec", "unclosed stream"}


@pytest.mark.asyncio
async def test_every_handle_kind_supports_with_and_then_counts_as_destroyed(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    node = graph.add_empty_node()
    handles = [
        device.create_stream(),
        device.create_event(),
        graph.instantiate(),
        node,
        graph,
        ahg.UserObject(lambda _: None),
    ]
    for handle in handles:
        with handle as entered:
            assert entered is handle
    assert [h.alive for h in handles if not isinstance(h, ahg.UserObject)] == [False] * 5
    assert live(device) == {**live(), "graph": 0, "graph node": 0, "graph exec": 0, "event": 0}


@pytest.mark.asyncio
async def test_one_exception_base_marks_every_use_after_destroy(device: ahg.Device) -> None:
    stream, event, graph = device.create_stream(), device.create_event(), ahg.Graph()
    node = graph.add_empty_node()
    exec_ = graph.instantiate()
    other = ahg.Graph()
    dead_node = other.add_empty_node()
    dead_node.destroy()
    for handle in (exec_, stream, event, graph, other):
        handle.destroy()
    uses = [
        stream.query,
        stream.destroy,
        event.query,
        event.destroy,
        graph.nodes,
        graph.add_empty_node,
        graph.destroy,
        lambda: node.type,
        dead_node.dependencies,
        exec_.destroy,
        lambda: exec_.update(other),
    ]
    for use in uses:
        with pytest.raises(ahg.Destroyed):
            use()
    with pytest.raises(ahg.Destroyed):
        await stream.synchronize()
    with pytest.raises(ahg.Destroyed):
        await exec_.launch()


def test_an_executables_reference_count_is_private() -> None:
    assert not hasattr(ahg.GraphExec, "retain")
    assert not hasattr(ahg.GraphExec, "release")


def test_named_callables_have_resolvable_hints_and_errors_belong_to_the_package() -> None:
    for callable_ in (ahg.Graph.add_kernel_node, ahg.Device.create_stream, ahg.Graph.instantiate):
        assert typing.get_type_hints(callable_)
    for name in ("InvalidValue", "KernelParams", "ExecStatistics", "DeviceStatistics"):
        assert getattr(ahg, name).__module__ == "ahipgraph"


# -- honest coroutines ----------------------------------------------------------------------------


class _Turns:
    """Counts the event loop turns a background task gets while the test enqueues."""

    def __init__(self) -> None:
        self.count = 0
        self.task = asyncio.create_task(self._spin())

    async def _spin(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def stop(self) -> None:
        self.task.cancel()


@pytest.mark.asyncio
async def test_an_enqueue_that_need_not_wait_does_not_yield(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, N, (N, buf))
    exec_ = graph.instantiate()
    turns = _Turns()
    await asyncio.sleep(0)
    start = turns.count
    await stream.memset(buf, 0, NBYTES)
    await stream.launch_kernel(add_one, 1, N, (N, buf))
    await exec_.launch(stream)
    assert turns.count == start  # nothing waited, so nothing yielded
    assert device.statistics().in_flight > 0  # and no device work ran inline
    turns.stop()
    await stream.synchronize()
    assert await read(device, buf) == [2] * N
    exec_.destroy()
    graph.destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_back_to_back_launches_give_other_tasks_a_turn_per_pools_worth(
    device: ahg.Device,
) -> None:
    stream, graph = device.create_stream(), ahg.Graph()
    graph.add_host_node(int)
    exec_ = graph.instantiate(signal_sets=4)
    turns = _Turns()
    await asyncio.sleep(0)
    start = turns.count
    for _ in range(4 * 10):
        await exec_.launch(stream)
    assert turns.count - start >= 10 - 1
    turns.stop()
    await stream.synchronize()
    exec_.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_nowait_twins_raise_not_ready_instead_of_waiting(device: ahg.Device) -> None:
    stream, graph = device.create_stream(), ahg.Graph()
    graph.add_host_node(int)
    exec_ = graph.instantiate()
    with exhaust_signal_sets(exec_):
        before = exec_.statistics()
        with pytest.raises(ahg.NotReady):
            exec_.launch_nowait(stream)
        assert exec_.statistics() == before
    grow = graph.instantiate(signal_set_policy="grow")
    with exhaust_signal_sets(grow):
        await (await grow.launch(stream))
        assert grow.statistics().signal_pool.misses == 1  # HIP's counted miss
    for handle in (exec_, grow, graph, stream):
        handle.destroy()


# -- every failure path honest --------------------------------------------------------------------


def test_launch_nowait_without_an_event_loop_changes_nothing(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, N, (N, buf))
    exec_ = graph.instantiate()
    before = (exec_.statistics(), device.statistics())
    with pytest.raises(RuntimeError):
        exec_.launch_nowait(stream)
    assert (exec_.statistics(), device.statistics()) == before

    async def launch_twice() -> None:
        await (await exec_.launch(stream))
        await (await exec_.launch(stream))

    asyncio.run(launch_twice())
    assert exec_.statistics().completed == 2
    exec_.destroy()
    graph.destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_relaunching_unfreed_graph_memory_is_refused_at_launch_whatever_the_timing(
    device: ahg.Device,
) -> None:
    stream, graph = device.create_stream(), ahg.Graph()
    graph.add_mem_alloc_node(NBYTES)
    exec_ = graph.instantiate()
    first = await exec_.launch(stream)
    before = exec_.statistics()
    with pytest.raises(ahg.InvalidValue):
        await exec_.launch(stream)  # back to back: the first has not run yet
    assert exec_.statistics() == before
    await first
    with pytest.raises(ahg.InvalidValue):
        await exec_.launch(stream)  # after it ran
    exec_.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_a_raising_destructor_at_the_last_completion_goes_to_the_loops_handler(
    device: ahg.Device,
) -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    ran: list[str] = []

    def raising(_: object) -> None:
        ran.append("raising")
        raise ValueError("destructor")

    graph = ahg.Graph()
    graph.add_host_node(int)
    graph.retain_user_object(ahg.UserObject(raising), move=True)
    graph.retain_user_object(ahg.UserObject(lambda _: ran.append("quiet")), move=True)
    stream, other = device.create_stream(), device.create_stream()
    exec_ = graph.instantiate()
    graph.destroy()
    done = await exec_.launch(stream)
    exec_.destroy()  # the last completion releases the user objects
    await done
    await (await other.launch_host_func(int))  # the device keeps running
    await stream.synchronize()
    loop.set_exception_handler(None)
    assert sorted(ran) == ["quiet", "raising"]
    assert [type(c.get("exception")) for c in reported] == [ValueError]
    assert live()["user object"] == 0
    stream.destroy()
    other.destroy()


def test_exec_destroy_runs_every_raising_destructor_then_raises_the_first() -> None:
    ran: list[int] = []

    def raising(k: int) -> typing.Callable[[object], None]:
        def destructor(_: object) -> None:
            ran.append(k)
            raise ValueError(k)

        return destructor

    graph = ahg.Graph()
    graph.add_empty_node()
    for k in range(3):
        graph.retain_user_object(ahg.UserObject(raising(k)), move=True)
    exec_ = graph.instantiate()
    graph.destroy()
    with pytest.raises(ValueError):
        exec_.destroy()
    assert sorted(ran) == [0, 1, 2]
    assert live()["user object"] == 0


@pytest.mark.parametrize("raised", [asyncio.CancelledError, GeneratorExit, KeyboardInterrupt])
def test_a_base_exception_from_a_host_function_fails_its_op_and_the_device_goes_on(
    device: ahg.Device, raised: type[BaseException]
) -> None:
    stream = device.create_stream()
    kept: list[ahg.Completion] = []

    def body() -> None:
        raise raised()

    async def main() -> None:
        kept.append(await stream.launch_host_func(body))
        await kept[0]

    if raised is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):  # propagates, as asyncio lets it
            asyncio.run(main())
    else:
        with pytest.raises(ahg.LaunchFailure):
            asyncio.run(main())

    async def after() -> None:
        with pytest.raises(ahg.LaunchFailure):
            await kept[0]  # the packet finished, as failed
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()  # the stream reports it once
        await (await stream.launch_host_func(int))

    asyncio.run(after())
    assert device.statistics().in_flight == 0
    stream.destroy()


@pytest.mark.asyncio
async def test_destroying_an_executable_fails_every_launch_parked_for_a_signal_set(
    device: ahg.Device,
) -> None:
    stream, graph = device.create_stream(), ahg.Graph()
    graph.add_host_node(int)
    exec_ = graph.instantiate()
    with exhaust_signal_sets(exec_):
        parked = [asyncio.create_task(exec_.launch(stream)) for _ in range(2)]
        await loop_turns()
        assert exec_.statistics().signal_pool.waiters == 2
        exec_.destroy()
        results = await asyncio.wait_for(asyncio.gather(*parked, return_exceptions=True), 1)
    assert [type(r) for r in results] == [ahg.InvalidValue, ahg.InvalidValue]
    graph.destroy()
    stream.destroy()


def test_work_abandoned_by_a_closed_loop_is_illegal_state_and_the_device_goes_on(
    device: ahg.Device,
) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, N, (N, buf))
    exec_ = graph.instantiate(signal_sets=1)
    kept: list[ahg.Completion] = []

    async def launch_and_park() -> None:
        kept.append(await exec_.launch(stream))
        await exec_.launch(stream)  # parks on the pool

    loop = asyncio.new_event_loop()
    with hang_kernels(1):
        parked = loop.create_task(launch_and_park())
        loop.run_until_complete(loop_turns())
        assert exec_.statistics().signal_pool.waiters == 1
        loop.close()
    del parked  # a task of a closed loop: it never runs again

    async def next_loop() -> None:
        with pytest.raises(ahg.IllegalState, match="loop"):
            await kept[0]
        await asyncio.wait_for(await exec_.launch(stream), 1)
        with pytest.raises(ahg.IllegalState):
            await device.synchronize()  # the abandoned work's failure, reported once
        await device.synchronize()

    asyncio.run(next_loop())
    assert exec_.statistics().signal_pool.free == 1
    exec_.destroy()
    graph.destroy()
    device.free(buf)
    stream.destroy()


@pytest.mark.asyncio
async def test_bad_input_gets_a_clear_error_and_changes_nothing(device: ahg.Device) -> None:
    stream, buf, event = device.create_stream(), device.malloc(NBYTES), device.create_event()
    graph = ahg.Graph()
    record = graph.add_event_record_node(event)
    exec_ = graph.instantiate()
    before = (live(device), device.statistics(), exec_.statistics())
    objects = np.array([object()] * N, dtype=object)
    calls: list[typing.Callable[[], object]] = [
        lambda: device.free("abc"),  # type: ignore[arg-type]
        lambda: device.free(12345),  # type: ignore[arg-type]
        lambda: stream.launch_kernel(add_one, 1, N, (N, ahg.DevicePtr(0, -8))),
        lambda: stream.launch_kernel(add_one, 1, N, (N, ahg.DevicePtr(0, 2**64))),
        lambda: stream.memcpy(buf, objects, NBYTES),
        lambda: stream.memset(buf, 0, 1, element_size=True),
        lambda: stream.record_event(None),  # type: ignore[arg-type]
        lambda: stream.wait_event("event"),  # type: ignore[arg-type]
        lambda: ahg.elapsed_time(None, event),  # type: ignore[arg-type]
        lambda: exec_.set_event_record_node_event(record, None),  # type: ignore[arg-type]
        lambda: graph.instantiate(device=0),  # type: ignore[arg-type]
        lambda: graph.instantiate(device="0"),  # type: ignore[arg-type]
        lambda: graph.instantiate(signal_set=3),  # type: ignore[call-arg]
        lambda: exec_.launch("stream"),  # type: ignore[arg-type]
        lambda: exec_.launch_nowait("stream"),  # type: ignore[arg-type]
        lambda: exec_.upload("stream"),  # type: ignore[arg-type]
        lambda: ahg.kernel(duration_ns=True)(lambda t: None),  # type: ignore[call-overload]
    ]
    for call in calls:
        with pytest.raises((ahg.HipError, TypeError, ValueError)):
            await _called(call)
    assert (live(device), device.statistics(), exec_.statistics()) == before
    for handle in (exec_, graph, event, stream):
        handle.destroy()
    device.free(buf)


async def _called(call: typing.Callable[[], object]) -> object:
    """What ``call`` returns, awaited when it is a coroutine."""
    result = call()
    return await result if asyncio.iscoroutine(result) else result


def test_address_space_is_bounded_per_device(device: ahg.Device) -> None:
    graph = ahg.Graph()
    before = device.statistics().memory
    with pytest.raises(ahg.OutOfMemory):
        graph.add_mem_alloc_node(2**64 - 1)
    with pytest.raises(ahg.OutOfMemory):
        device.malloc(2**64 - 1)
    assert graph.nodes() == []
    assert device.statistics().memory == before
    graph.destroy()


def _frames() -> int:
    """How deep the calling frame is: a recursion limit this much above it allows that many
    more nested calls."""
    frame, depth = sys._getframe(1), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1
    return depth


@pytest.mark.asyncio
async def test_deeply_nested_child_graphs_clone_instantiate_launch_and_destroy_iteratively(
    device: ahg.Device,
) -> None:
    depth = 140  # each level embeds a copy of the one below: building is quadratic
    graph = ahg.Graph()
    graph.add_empty_node()
    for _ in range(depth):
        outer = ahg.Graph()
        outer.add_child_graph_node(graph)
        graph.destroy()
        graph = outer
    stream = device.create_stream()
    limit = sys.getrecursionlimit()
    # Fewer frames than levels: any walk that recursed once per level would fail here.
    sys.setrecursionlimit(_frames() + depth // 2)
    try:
        graph.clone().destroy()
        exec_ = graph.instantiate()
        done = await exec_.launch(stream)
        await done
        exec_.destroy()
        graph.destroy()
    finally:
        sys.setrecursionlimit(limit)
    assert live()["graph"] == 0
    assert live()["graph node"] == 0
    stream.destroy()


def test_hips_codes_where_the_port_of_hips_tests_disagreed(device: ahg.Device) -> None:
    buf = device.malloc(NBYTES)
    calls: list[int] = []
    graph = ahg.Graph()
    obj = ahg.UserObject(calls.append)
    graph.retain_user_object(obj, 5, move=True)  # HIP never checks a moved count
    with pytest.raises(ahg.InvalidValue):
        graph.add_memset_node(buf, 0, 0)
    with pytest.raises(ahg.InvalidValue):
        graph.add_memset_node(buf, 0, 8, height=0)
    with pytest.raises(ahg.InvalidValue):
        graph.add_kernel_node(add_one, 1, N, None)  # type: ignore[arg-type]
    host = np.zeros(N, dtype=np.int64)
    copy = graph.add_memcpy_node(buf, host, NBYTES)
    exec_ = graph.instantiate()
    with pytest.raises(ahg.InvalidValue):
        exec_.set_memcpy_node_params(copy, buf, host, 0)
    with pytest.raises(ahg.InvalidValue):
        exec_.set_memcpy_node_params(copy, host, buf, NBYTES)  # the kind changed
    with pytest.raises(ahg.InvalidValue):
        exec_.set_memcpy_node_params(copy, buf, host, NBYTES, ahg.CopyKind.Default)
    exec_.destroy()
    graph.destroy()
    assert calls == [None]
    with ahg.Graph() as memory:
        alloc = memory.add_mem_alloc_node(NBYTES)
        after = memory.add_empty_node(deps=[alloc])
        with pytest.raises(ahg.NotSupported):
            memory.remove_dependencies(alloc, after)
    device.free(buf)


@pytest.mark.asyncio
async def test_memset_counts_elements_on_a_stream_and_in_a_node(device: ahg.Device) -> None:
    stream, buf = device.create_stream(), device.malloc(NBYTES)
    out = np.zeros(N, dtype=np.int64)
    await stream.memset(buf, 0, NBYTES)
    await stream.memset(buf, 1, 2, element_size=4)
    await stream.memcpy(out, buf, NBYTES)
    await stream.synchronize()
    eager = out.view(np.uint32)[:4].tolist()
    await stream.memset(buf, 0, NBYTES)
    graph = ahg.Graph()
    graph.add_memset_node(buf, 1, 2, element_size=4)
    exec_ = graph.instantiate()
    await (await exec_.launch(stream))
    await stream.memcpy(out, buf, NBYTES)
    await stream.synchronize()
    assert eager == out.view(np.uint32)[:4].tolist() == [1, 1, 0, 0]
    exec_.destroy()
    graph.destroy()
    device.free(buf)
    stream.destroy()


def test_instantiate_flags_upload_works_and_device_launch_is_not_supported() -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    graph.instantiate(ahg.InstantiateFlags.UPLOAD).destroy()
    with pytest.raises(ahg.NotSupported):
        graph.instantiate(ahg.InstantiateFlags.DEVICE_LAUNCH)
    assert live()["graph exec"] == 0
    graph.destroy()


@pytest.mark.asyncio
async def test_kernel_nodes_are_checked_against_their_own_devices_limits() -> None:
    small = ahg.DeviceProperties(max_threads_per_block=256)
    with fresh_devices(2, [ahg.DeviceProperties(), small]) as (_, second):
        stream, buf = second.create_stream(), second.malloc(NBYTES)
        with pytest.raises(ahg.InvalidConfiguration):
            await stream.launch_kernel(add_one, 1, 1024, (N, buf))
        graph = ahg.Graph()
        graph.add_kernel_node(add_one, 1, 1024, (N, buf))
        with pytest.raises(ahg.InvalidConfiguration):
            graph.instantiate(device=second)
        assert live()["graph exec"] == 0
        graph.destroy()
        stream.destroy()
        second.free(buf)


def test_the_package_has_a_version() -> None:
    assert isinstance(ahg.__version__, str)
    assert ahg.__version__.count(".") >= 1
