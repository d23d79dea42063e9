"""Cancellation at the awaits the ring tests do not reach: stream-ordered free, event record
and wait, and copies, each cancelled while parked for ring room. A cancelled enqueue takes
nothing: no packet, no freed memory, no recorded event, no room kept."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from rings import fill_ring, ring_of


async def _cancel_parked(
    device: ahg.Device, stream: ahg.Stream, enqueue: Callable[[], Awaitable[Any]]
) -> HeldKernel:
    held = await fill_ring(device, stream)
    submitted = stream.statistics().submitted
    task = asyncio.ensure_future(enqueue())
    await loop_turns()
    assert ring_of(device, stream).waiting_for_room == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ring_of(device, stream).waiting_for_room == 0
    assert stream.statistics().submitted == submitted
    return held


@pytest.mark.asyncio
async def test_a_free_async_cancelled_while_parked_frees_nothing(small_ring: ahg.Device) -> None:
    device = small_ring
    stream = device.create_stream()
    ptr = device.malloc(64)
    before = device.memory_info()
    held = await _cancel_parked(device, stream, lambda: stream.free_async(ptr))
    held.release()
    await stream.synchronize()
    assert device.memory_info() == before
    device.view(ptr, "uint8", 64)[:] = 1  # still the caller's memory
    await (await stream.free_async(ptr))  # and it can still be freed, once
    with pytest.raises(ahg.InvalidValue):
        device.free(ptr)
    stream.destroy()


@pytest.mark.asyncio
async def test_a_record_cancelled_while_parked_leaves_the_event_unrecorded(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    event = device.create_event()
    held = await _cancel_parked(device, stream, lambda: stream.record_event(event))
    assert repr(event).endswith("unrecorded>")
    held.release()
    await stream.synchronize()
    assert event.query()  # an unrecorded event is complete, as in HIP
    with pytest.raises(ahg.InvalidHandle):
        ahg.elapsed_time(event, event)
    event.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_a_wait_on_a_pending_event_cancelled_while_parked_adds_no_dependency(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream, other = device.create_stream(), device.create_stream()
    assert stream.statistics().queue != other.statistics().queue
    gate = HeldKernel("gate")
    event = device.create_event()
    await gate.launch(other)
    await other.record_event(event)  # pending behind the gate
    held = await _cancel_parked(device, stream, lambda: stream.wait_event(event))
    held.release()
    await stream.synchronize()  # completes although the event never happened: no wait was added
    assert not event.query()
    gate.release()
    await other.synchronize()
    assert event.query()
    event.destroy()
    stream.destroy()
    other.destroy()


@pytest.mark.asyncio
async def test_a_device_to_host_copy_cancelled_while_parked_never_writes_the_array(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    src = device.malloc(16)
    device.view(src, "uint8", 16)[:] = 7
    host = np.zeros(16, np.uint8)
    held = await _cancel_parked(device, stream, lambda: stream.memcpy(host, src, 16))
    held.release()
    await stream.synchronize()
    assert not host.any()
    device.free(src)
    stream.destroy()


@pytest.mark.asyncio
async def test_malloc_async_needs_no_ring_room(small_ring: ahg.Device) -> None:
    """A stream-ordered allocation is usable at once (its address is returned at once, as
    HIP's is): it never parks behind a full ring, so it is never cancelled half-way."""
    device = small_ring
    stream = device.create_stream()
    held = await fill_ring(device, stream)
    ptr = await asyncio.wait_for(stream.malloc_async(64), timeout=5)
    assert ring_of(device, stream).waiting_for_room == 0
    held.release()
    await stream.synchronize()
    await (await stream.free_async(ptr))
    stream.destroy()
