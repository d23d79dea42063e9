"""A hostile sweep of the stream / event / capture / stream-memory surface: what it found.

Each test pins one bug the sweep found (named after what the hostile user did); the attacks
that found nothing are covered by the sweep files before this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from cleanup import destroy
from rings import CAPACITY, fill_ring, ring_of


@ahg.kernel
def _store(t: ahg.Threads, p: ahg.Ptr[ahg.int32]) -> None:
    pass


def _old_pointer_calls(
    stream: ahg.Stream, ptr: ahg.DevicePtr, host: np.ndarray[Any, Any], *, nowait: bool
) -> list[Callable[[], object]]:
    """Every eager enqueue of ``stream`` that names ``ptr``, as the coroutine or its twin."""
    if nowait:
        return [
            lambda: stream.memset_nowait(ptr, 0, 16),
            lambda: stream.memcpy_nowait(host, ptr, 16),
            lambda: stream.memcpy_nowait(ptr, host, 16),
            lambda: stream.memcpy_2d_nowait(host, 8, ptr, 8, 8, 2),
            lambda: stream.launch_kernel_nowait(_store, 1, 1, (ptr,)),
            lambda: stream.write_value_32_nowait(ptr, 1),
            lambda: stream.wait_value_32_nowait(ptr, 0),
        ]
    return [
        lambda: stream.memset(ptr, 0, 16),
        lambda: stream.memcpy(host, ptr, 16),
        lambda: stream.memcpy(ptr, host, 16),
        lambda: stream.memcpy_2d(host, 8, ptr, 8, 8, 2),
        lambda: stream.launch_kernel(_store, 1, 1, (ptr,)),
        lambda: stream.write_value_32(ptr, 1),
        lambda: stream.wait_value_32(ptr, 0),
    ]


async def _outcome(call: Callable[[], object]) -> object:
    result = call()
    if isinstance(result, Awaitable):
        result = await result
    return result


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["coroutine", "nowait"])
async def test_a_kept_stream_of_a_replaced_device_is_refused_before_its_old_pointer_is_looked_up(
    nowait: bool,
) -> None:
    # The successor has nothing at the old pointer's address: the old pointer, resolved by
    # ordinal against the successor's memory, was "not inside a live allocation"
    # (InvalidDevicePointer), while the same call on the same stream with a pointer the
    # successor happens to hold was InvalidDevice. The stream's device is what is wrong.
    old = ahg.get_device(0)
    old_ptr = old.malloc(16)
    old_stream = old.create_stream()
    ahg.configure_devices(1)
    new = ahg.get_device(0)
    host = np.zeros(16, np.uint8)
    before = (old_stream.statistics(), new.statistics().memory, new.memory_info())
    for call in _old_pointer_calls(old_stream, old_ptr, host, nowait=nowait):
        with pytest.raises(ahg.InvalidDevice, match="replaced"):
            await _outcome(call)
    assert (old_stream.statistics(), new.statistics().memory, new.memory_info()) == before
    assert host.tolist() == [0] * 16
    destroy(old_stream)
    old.free(old_ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["coroutine", "nowait"])
async def test_a_kept_stream_of_a_replaced_device_is_refused_before_its_host_function(
    nowait: bool,
) -> None:
    # The stream first, as every other eager enqueue on it: not InvalidValue for a null
    # function the stream would never have run.
    old_stream = ahg.get_device(0).create_stream()
    ahg.configure_devices(1)
    launch = old_stream.launch_host_func_nowait if nowait else old_stream.launch_host_func
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await _outcome(lambda: launch(None))  # type: ignore[arg-type]
    destroy(old_stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["coroutine", "nowait"])
async def test_a_kept_stream_of_a_replaced_device_recording_a_new_event_is_invalid_device(
    nowait: bool,
) -> None:
    # The event is the successor's, the stream the old device's: the record was refused as
    # "an event of device 0 recorded on a stream of device 0" (InvalidHandle), naming the
    # event for what is wrong with the stream.
    old_stream = ahg.get_device(0).create_stream()
    ahg.configure_devices(1)
    event = ahg.get_device(0).create_event()
    before = old_stream.statistics()
    record = old_stream.record_event_nowait if nowait else old_stream.record_event
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await _outcome(lambda: record(event))
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await event.record(old_stream)
    assert old_stream.statistics() == before
    assert event.query()  # still unrecorded
    destroy(old_stream, event)


async def _capturing_on_a_full_ring(
    device: ahg.Device,
) -> tuple[ahg.Stream, ahg.Stream, HeldKernel, ahg.Event, HeldKernel]:
    """A stream whose ring is full (``held``), capturing, and an event recorded outside any
    capture on ``other``, pending behind ``gate``: a wait on it is a real one."""
    stream, other = device.create_stream(), device.create_stream()
    gate = HeldKernel("gate")
    await gate.launch(other)
    pending = device.create_event()
    await other.record_event(pending)  # recorded outside any capture, pending while gated
    held = await fill_ring(device, stream)
    stream.begin_capture()
    return stream, other, gate, pending, held


@pytest.mark.asyncio
async def test_a_capturing_streams_real_wait_on_an_outside_record_needs_room_in_its_full_ring(
    small_ring: ahg.Device,
) -> None:
    # A wait on an event recorded outside any capture is a real wait on a capturing stream too
    # (HIP enqueues its marker): a barrier packet on the stream's hardware queue. The stream's
    # ring had no say while it captured, so the packet went into a full ring (5 of 4, then 6)
    # and neither the coroutine waited for room nor its twin reported NotReady.
    device = small_ring
    stream, other, gate, pending, held = await _capturing_on_a_full_ring(device)
    before = ring_of(device, stream)
    assert before.pending == CAPACITY
    with pytest.raises(ahg.NotReady):
        stream.wait_event_nowait(pending)
    assert ring_of(device, stream) == before
    waiting = asyncio.ensure_future(stream.wait_event(pending))
    await loop_turns()
    assert not waiting.done()  # parked for room, as any eager enqueue on a full ring
    assert ring_of(device, stream).waiting_for_room == 1
    assert ring_of(device, stream).pending == CAPACITY
    held.release()  # the ring drains: the wait gets its room
    await asyncio.wait_for(waiting, 10)
    assert ring_of(device, stream).pending <= CAPACITY
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    graph = stream.end_capture()
    assert graph.nodes() == []  # a real wait, not a node
    assert not stream.query()  # ... that holds the stream until the record completes
    gate.release()
    await stream.synchronize()
    destroy(graph, stream, other, pending)


@pytest.mark.asyncio
async def test_a_capturing_streams_join_through_a_captured_record_needs_no_room(
    small_ring: ahg.Device,
) -> None:
    # The other waits a capturing stream makes add no packet (a join, an EventWait node): on
    # a full ring they neither wait nor report NotReady.
    device = small_ring
    stream, forked = device.create_stream(), device.create_stream()
    joined = device.create_event()
    held = await fill_ring(device, stream)
    stream.begin_capture()
    await stream.launch_host_func(int)
    await stream.record_event(joined)
    stream.wait_event_nowait(joined)  # a join into its own capture: no packet
    await stream.wait_event(joined, 1)  # an EventWait node: no packet
    assert ring_of(device, stream).waiting_for_room == 0
    graph = stream.end_capture()
    assert [node.type for node in graph.nodes()] == [ahg.NodeType.Host, ahg.NodeType.WaitEvent]
    held.release()
    await stream.synchronize()
    destroy(graph, stream, forked, joined)


@pytest.mark.asyncio
async def test_a_capturing_streams_real_wait_parked_for_room_is_woken_by_the_streams_destroy(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream, other, gate, pending, held = await _capturing_on_a_full_ring(device)
    waiting = asyncio.ensure_future(stream.wait_event(pending))
    await loop_turns()
    assert ring_of(device, stream).waiting_for_room == 1
    stream.destroy()  # ends its capture and wakes the wait, which takes no room
    with pytest.raises(ahg.ContextIsDestroyed):
        await asyncio.wait_for(waiting, 10)
    assert ring_of(device, stream).waiting_for_room == 0
    assert ring_of(device, stream).pending == CAPACITY
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    held.release()
    gate.release()
    await device.synchronize()
    destroy(other, pending)


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["coroutine", "nowait"])
async def test_a_fork_through_an_event_with_an_older_pending_record_needs_no_room(
    nowait: bool,
) -> None:
    # The event's latest record is a captured one, but an older eager record of it is still
    # pending: the wait forks the full-ringed stream into the capture (no packet, as HIP's),
    # yet it was judged by the older record: NotReady from the twin, and the coroutine
    # waited for room it would not use (for good, behind a kernel that never ends).
    properties = ahg.DeviceProperties(hardware_queues=3, hardware_queue_capacity=CAPACITY)
    device = ahg.configure_devices(1, properties)[0]
    gated, origin, forked = (device.create_stream() for _ in range(3))
    gate = HeldKernel("gate")
    await gate.launch(gated)
    event = device.create_event()
    await gated.record_event(event)  # an eager record, pending while gated
    held = await fill_ring(device, forked)
    origin.begin_capture()
    await origin.launch_host_func(int)
    await origin.record_event(event)  # the latest record: a captured one
    before = ring_of(device, forked)
    wait = forked.wait_event_nowait if nowait else forked.wait_event
    await asyncio.wait_for(_outcome(lambda: wait(event)), 10)  # neither refused nor parked
    assert forked.is_capturing() is ahg.CaptureStatus.ACTIVE  # forked into the capture
    assert ring_of(device, forked) == before
    await forked.launch_host_func(int)
    joined = device.create_event()
    await forked.record_event(joined)
    await origin.wait_event(joined)
    graph = origin.end_capture()
    assert len(graph.nodes()) == 2
    held.release()
    gate.release()
    await device.synchronize()
    destroy(graph, gated, origin, forked, event, joined)
