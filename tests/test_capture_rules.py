"""The illegal-operations table during capture (HIP_SEMANTICS.md §2.7), one test per row,
plus destroying streams, events and graphs mid-capture (§7). Every failure path ends with a
leak check against a baseline taken before the capture began."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, no_capture_left
from cleanup import destroy


@pytest.fixture
def stream(device: ahg.Device) -> Iterator[ahg.Stream]:
    stream = device.create_stream()
    yield stream
    if stream.alive:  # some tests destroy it themselves
        stream.destroy()


async def _capture_some(stream: ahg.Stream) -> ahg.DevicePtr:
    ptr = await stream.malloc_async(NBYTES)
    await stream.memset(ptr, 1, NBYTES)
    return ptr


async def _ends_invalidated(stream: ahg.Stream, before: Baseline) -> None:
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await stream.memset(ahg.NULL, 0, 0)  # any async work on an invalidated stream
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(stream.device) == before


@pytest.mark.asyncio
async def test_row_synchronize_capturing_stream(stream: ahg.Stream) -> None:
    before = Baseline.take(stream.device)
    stream.begin_capture()
    await _capture_some(stream)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.synchronize()
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.synchronize()  # an invalidated stream is still refused
    await _ends_invalidated(stream, before)


@pytest.mark.asyncio
async def test_row_query_capturing_stream(stream: ahg.Stream) -> None:
    before = Baseline.take(stream.device)
    stream.begin_capture(ahg.CaptureMode.RELAXED)  # refused whatever the mode
    await _capture_some(stream)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        stream.query()
    await _ends_invalidated(stream, before)


@pytest.mark.asyncio
async def test_row_synchronize_other_stream_in_global_mode(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    other = device.create_stream()
    before = Baseline.take(device)
    stream.begin_capture()
    await _capture_some(stream)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await other.synchronize()
    await _ends_invalidated(stream, before)
    destroy(other)


@pytest.mark.asyncio
async def test_row_synchronize_other_stream_allowed_in_relaxed_task_mode(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    other = device.create_stream()
    stream.begin_capture()
    previous = ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
    try:
        await other.synchronize()
        assert other.query()
    finally:
        ahg.exchange_capture_mode(previous)
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    stream.end_capture().destroy()
    destroy(other)


@pytest.mark.asyncio
async def test_row_device_synchronize_invalidates_every_capture(device: ahg.Device) -> None:
    first, second = device.create_stream(), device.create_stream()
    before = Baseline.take(device)
    first.begin_capture(ahg.CaptureMode.RELAXED)
    second.begin_capture(ahg.CaptureMode.THREAD_LOCAL)
    await _capture_some(first)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await device.synchronize()
    assert first.is_capturing() is ahg.CaptureStatus.INVALIDATED
    assert second.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        second.end_capture()
    await _ends_invalidated(first, before)
    await device.synchronize()  # fine once no capture is left
    destroy(first, second)


@pytest.mark.asyncio
@pytest.mark.parametrize("call", ["synchronize", "query"])
async def test_row_captured_event_sync_and_query(
    stream: ahg.Stream, device: ahg.Device, call: str
) -> None:
    event = device.create_event()
    before = Baseline.take(device)
    stream.begin_capture(ahg.CaptureMode.RELAXED)
    await _capture_some(stream)
    await stream.record_event(event)
    with pytest.raises(ahg.CapturedEvent):
        await (event.synchronize() if call == "synchronize" else _returning(event.query))
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    await _ends_invalidated(stream, before)
    assert event.query()  # the capture is over: an ordinary event again
    event.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("call", ["malloc", "free"])
async def test_row_malloc_and_free_under_global_mode(
    stream: ahg.Stream, device: ahg.Device, call: str
) -> None:
    spare = device.malloc(64)
    before = Baseline.take(device)
    stream.begin_capture()
    await _capture_some(stream)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(64) if call == "malloc" else device.free(spare)
    await _ends_invalidated(stream, before)
    device.free(spare)


@pytest.mark.asyncio
async def test_row_malloc_allowed_when_the_task_mode_is_relaxed(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    stream.begin_capture()
    assert ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED) is ahg.CaptureMode.GLOBAL
    try:
        device.free(device.malloc(64))
    finally:
        assert ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL) is ahg.CaptureMode.RELAXED
    stream.end_capture().destroy()


@pytest.mark.asyncio
async def test_row_malloc_in_thread_local_mode_only_trips_this_tasks_capture(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    stream.begin_capture(ahg.CaptureMode.GLOBAL)

    async def other_task() -> None:
        ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
        device.free(device.malloc(64))  # no capture of this task: allowed

    await asyncio_task(other_task())
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
    try:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            device.malloc(64)  # this task's own capture
    finally:
        ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()


async def asyncio_task(coro: object) -> None:
    import asyncio

    await asyncio.create_task(coro)  # type: ignore[arg-type]


@pytest.mark.asyncio
@pytest.mark.parametrize("call", ["memcpy", "memset"])
async def test_row_synchronous_copy_and_fill_are_implicit(
    stream: ahg.Stream, device: ahg.Device, call: str
) -> None:
    other = device.create_stream(non_blocking=True)
    ptr = device.malloc(NBYTES)
    before = Baseline.take(device)
    stream.begin_capture(ahg.CaptureMode.RELAXED)
    other.begin_capture(ahg.CaptureMode.RELAXED)
    await _capture_some(stream)
    sync_op = device.memcpy(ptr, ptr, NBYTES) if call == "memcpy" else device.memset(ptr, 0, NBYTES)
    with pytest.raises(ahg.StreamCaptureImplicit):
        await sync_op
    assert other.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        other.end_capture()
    await _ends_invalidated(stream, before)
    await device.memset(ptr, 3, NBYTES)  # no capture left: it runs
    assert device.view(ptr, "u1", NBYTES).tolist() == [3] * NBYTES
    destroy(other, ptr)


@pytest.mark.asyncio
async def test_row_null_stream_host_func_is_implicit(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureImplicit):
        await device.null_stream.launch_host_func(lambda: None)
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    stream.end_capture().destroy()


@pytest.mark.asyncio
async def test_async_work_on_another_stream_during_capture_runs(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    other = device.create_stream()
    ptr = device.malloc(NBYTES)
    stream.begin_capture()
    done = await other.memset(ptr, 9, NBYTES)  # allowed: only synchronising it would trip
    stream.end_capture().destroy()
    await done
    assert device.view(ptr, "u1", 1)[0] == 9
    destroy(other, ptr)


# -- destroy mid-capture ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_destroying_the_capturing_stream_ends_cleanly(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    side = device.create_stream()
    fork = device.create_event()
    before = Baseline.take(device)
    stream.begin_capture()
    await _capture_some(stream)
    await stream.record_event(fork)
    await side.wait_event(fork)
    await side.memset(await side.malloc_async(8), 0, 8)
    stream.destroy()
    assert side.is_capturing() is ahg.CaptureStatus.NONE  # forks end with their origin
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.end_capture()
    after = Baseline.take(device)
    assert after == before
    fork.destroy()
    destroy(side)


@pytest.mark.asyncio
async def test_destroying_a_forked_stream_leaves_the_origin_capturing(
    stream: ahg.Stream, device: ahg.Device
) -> None:
    side = device.create_stream()
    fork = device.create_event()
    stream.begin_capture()
    await stream.record_event(fork)
    await side.wait_event(fork)
    side.destroy()
    await stream.memset(await stream.malloc_async(8), 0, 8)
    graph = stream.end_capture()
    assert len(graph.nodes()) == 2
    graph.destroy()
    fork.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_destroying_a_fork_event_ends_cleanly(stream: ahg.Stream, device: ahg.Device) -> None:
    side = device.create_stream()
    fork = device.create_event()
    before = Baseline.take(device)
    stream.begin_capture()
    await stream.record_event(fork)
    await side.wait_event(fork)
    fork.destroy()
    with pytest.raises(ahg.InvalidHandle):
        await stream.wait_event(fork)
    stream.end_capture().destroy()
    assert side.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before
    destroy(side)


@pytest.mark.asyncio
async def test_destroying_an_unrelated_graph_changes_nothing(stream: ahg.Stream) -> None:
    unrelated = ahg.Graph()
    unrelated.add_empty_node()
    stream.begin_capture()
    await _capture_some(stream)
    unrelated.destroy()
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    graph = stream.end_capture()
    assert len(graph.nodes()) == 2
    graph.destroy()


@pytest.mark.asyncio
async def test_destroying_the_capture_graph_mid_capture_invalidates_the_end(
    stream: ahg.Stream,
) -> None:
    graph = ahg.Graph()
    stream.begin_capture_to_graph(graph)
    graph.destroy()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await stream.malloc_async(8)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    no_capture_left()


async def _returning(fn: object) -> object:
    return fn()  # type: ignore[operator]
