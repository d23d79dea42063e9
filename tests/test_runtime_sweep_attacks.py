"""Attacks on the runtime and device layers that once found a bug.

* Stream-ordered memory: a ``free_async`` still pending on a stream gives its memory back
  before any later ``malloc_async`` on that stream, in stream order. HIP's pool hands that
  memory out again at once (``hipFreeAsync``/``hipMallocAsync`` in a loop never run out of
  memory); here ``malloc_async`` refused it with ``OutOfMemory`` until the host had let the
  stream reach the free, so such a loop failed after ``total / size`` turns.
* A device ``configure_devices`` replaced takes no new work: ``malloc_async``, a capture's
  begin or join, and a synchronous copy each got past that rule or broke it half-way.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg
from fakes import GatedHost


@pytest.mark.asyncio
async def test_malloc_async_takes_memory_a_pending_free_async_on_its_stream_gives_back(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    total = device.memory_info().total
    for _ in range(3):  # allocate, use, free: every turn needs all of the device's memory
        ptr = await stream.malloc_async(total)
        await stream.memset(ptr, 1, 16)
        await stream.free_async(ptr)  # pending: the host never waited for the stream
    await stream.synchronize()
    assert device.memory_info() == (total, total)
    stream.destroy()


@pytest.mark.asyncio
async def test_malloc_async_short_of_memory_without_a_pending_free_still_fails_at_once(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    other = device.create_stream()
    total = device.memory_info().total
    held = await other.malloc_async(total)
    await other.free_async(held)  # another stream's free: not this stream's to wait for
    with pytest.raises(ahg.OutOfMemory):
        await stream.malloc_async(total)
    ptr = await other.malloc_async(total)  # stream order on ``other`` makes room
    with pytest.raises(ahg.OutOfMemory):
        other.malloc_async_nowait(1)  # the twin never waits
    await other.free_async(ptr)
    await other.synchronize()
    assert device.memory_info() == (total, total)
    stream.destroy()
    other.destroy()


@pytest.mark.asyncio
async def test_malloc_async_cancelled_while_it_waits_for_a_pending_free_takes_nothing(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    total = device.memory_info().total
    gate = GatedHost()
    ptr = await stream.malloc_async(total)
    await stream.launch_host_func(gate)  # holds the stream ahead of the free
    await stream.free_async(ptr)
    waiter = asyncio.ensure_future(stream.malloc_async(total))
    await gate.started()  # the waiter parked on the free behind the gate
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.open()
    await stream.synchronize()
    assert device.memory_info() == (total, total)  # the cancelled call allocated nothing
    assert device.statistics().memory.allocations == 0
    stream.destroy()


@pytest.mark.asyncio
async def test_malloc_async_waiting_for_a_free_refuses_a_capture_begun_meanwhile(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    total = device.memory_info().total
    gate = GatedHost()
    ptr = await stream.malloc_async(total)
    await stream.launch_host_func(gate)
    await stream.free_async(ptr)
    waiter = asyncio.ensure_future(stream.malloc_async(total))
    await gate.started()  # the waiter parked on the free behind the gate
    stream.begin_capture(ahg.CaptureMode.RELAXED)  # an eager call must not become a node
    gate.open()
    with pytest.raises(ahg.IllegalState, match="capture began"):
        await waiter
    graph = stream.end_capture()
    assert graph.nodes() == []
    graph.destroy()
    await stream.synchronize()
    assert device.memory_info() == (total, total)
    stream.destroy()


@pytest.mark.asyncio
async def test_malloc_async_waiting_for_a_free_on_a_stream_destroyed_meanwhile_fails(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    total = device.memory_info().total
    gate = GatedHost()
    ptr = await stream.malloc_async(total)
    await stream.launch_host_func(gate)
    await stream.free_async(ptr)
    waiter = asyncio.ensure_future(stream.malloc_async(total))
    await gate.started()
    stream.destroy()  # its work still runs, the free included
    gate.open()
    with pytest.raises(ahg.ContextIsDestroyed):
        await waiter
    await device.synchronize()
    assert device.memory_info() == (total, total)


@pytest.mark.asyncio
async def test_malloc_async_on_a_kept_stream_of_a_replaced_device_is_refused() -> None:
    """Every other enqueue on the old device is ``InvalidDevice``; ``malloc_async`` allocated
    there, and its pointer (same ordinal, same addresses) named the successor's memory."""
    old = ahg.get_device(0)
    old_stream = old.create_stream()
    ahg.configure_devices(1)
    new = ahg.get_device(0)
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        old_stream.malloc_async_nowait(64)
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await old_stream.malloc_async(64)
    assert old.statistics().memory.allocations == 0
    assert new.statistics().memory.allocations == 0
    old_stream.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("non_blocking", [False, True])
async def test_begin_capture_on_a_kept_stream_of_a_replaced_device_is_refused_and_changes_nothing(
    non_blocking: bool,
) -> None:
    """A blocking stream's capture began, then the null stream's guard raised InvalidDevice
    and left it capturing; a non-blocking stream's began without a word."""
    old = ahg.get_device(0)
    stream = old.create_stream(non_blocking=non_blocking)
    ahg.configure_devices(1)
    before = ahg.capture_statistics()
    with pytest.raises(ahg.InvalidDevice):
        stream.begin_capture()
    with pytest.raises(ahg.InvalidDevice):
        stream.begin_capture_to_graph(graph := ahg.Graph(), [])
    assert stream.is_capturing() == ahg.CaptureStatus.NONE
    assert ahg.capture_statistics() == before
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_a_stream_of_a_replaced_device_joins_its_capture_without_a_half_made_fork() -> None:
    """A capture begun before ``configure_devices`` goes on; a blocking stream joining it
    made the device's null stream for its guard, which a replaced device refuses: the join
    raised InvalidDevice after the stream had joined."""
    old = ahg.get_device(0)
    origin = old.create_stream(non_blocking=True)  # its capture makes no null-stream guard
    joiner = old.create_stream()
    event = old.create_event()
    before = ahg.capture_statistics()
    origin.begin_capture()
    ahg.configure_devices(1)
    await event.record(origin)
    await joiner.wait_event(event)  # the fork: no error, and the joiner captures
    assert joiner.is_capturing() == ahg.CaptureStatus.ACTIVE
    graph = origin.end_capture()
    assert joiner.is_capturing() == ahg.CaptureStatus.NONE
    assert ahg.capture_statistics() == before
    for handle in (graph, event, origin, joiner):
        handle.destroy()


@pytest.mark.asyncio
async def test_a_synchronous_copy_on_a_replaced_device_leaves_captures_alone() -> None:
    """``old.memset`` / ``old.memcpy`` first invalidated every capture in progress (the rule
    for synchronous copies), then failed with InvalidDevice: a call refused for a device that
    is gone broke the successor's captures. It is refused first, as ``old.malloc`` is."""
    old = ahg.get_device(0)
    ptr = old.malloc(16)
    ahg.configure_devices(1)
    stream = ahg.get_device(0).create_stream()
    stream.begin_capture()
    with pytest.raises(ahg.InvalidDevice):
        await old.memset(ptr, 0, 16)
    with pytest.raises(ahg.InvalidDevice):
        await old.memcpy(np.zeros(16, np.uint8), ptr, 16)
    assert stream.is_capturing() == ahg.CaptureStatus.ACTIVE
    stream.end_capture().destroy()
    stream.destroy()
    old.free(ptr)
