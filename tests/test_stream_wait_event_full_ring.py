"""``wait_event`` on a full ring: a wait that adds no packet needs no room.

HIP's ``hipStreamWaitEvent`` enqueues nothing for an event that was never recorded or whose
record is complete. Such a call takes no slot of the stream's hardware queue, so it must not
wait for one (the coroutine returns without yielding) and its ``_nowait`` twin must not report
``NotReady``; only a wait on a pending record adds a packet and waits for room.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices

CAPACITY = 2


@pytest.fixture
def small_ring() -> Iterator[ahg.Device]:
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=CAPACITY)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


def run_without_yielding(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run ``coroutine`` to its end in one step; fail if it yields (it would have waited)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the call yielded: it waited for room it does not need")


async def full_stream(device: ahg.Device) -> tuple[ahg.Stream, GatedHost]:
    stream = device.create_stream(non_blocking=True)
    gate = GatedHost()
    await stream.launch_host_func(gate)
    while True:  # fill the ring behind the gate
        try:
            stream.launch_host_func_nowait(int)
        except ahg.NotReady:
            return stream, gate


def pending(device: ahg.Device, stream: ahg.Stream) -> int:
    return device.statistics().queues[stream.statistics().queue].pending


@pytest.mark.asyncio
async def test_a_wait_on_an_unrecorded_or_complete_event_needs_no_room(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    other = device.create_stream(non_blocking=True)
    done = device.create_event()
    await other.record_event(done)
    await other.synchronize()
    unrecorded = device.create_event()
    stream, gate = await full_stream(device)
    before = stream.statistics().submitted
    assert pending(device, stream) == CAPACITY
    for event in (unrecorded, done):
        stream.wait_event_nowait(event)  # no NotReady: nothing to enqueue
        run_without_yielding(stream.wait_event(event))
    assert stream.statistics().submitted == before  # no packet was added
    assert pending(device, stream) == CAPACITY
    gate.open()
    await stream.synchronize()
    for handle in (stream, other, done, unrecorded):
        handle.destroy()


@pytest.mark.asyncio
async def test_a_wait_on_a_pending_record_still_needs_room(small_ring: ahg.Device) -> None:
    device = small_ring
    other = device.create_stream(non_blocking=True)
    other_gate = GatedHost()
    await other.launch_host_func(other_gate)
    event = device.create_event()
    await other.record_event(event)  # pending behind the gate
    stream, gate = await full_stream(device)
    with pytest.raises(ahg.NotReady):
        stream.wait_event_nowait(event)
    waiting = stream.wait_event(event)
    with pytest.raises(AssertionError, match="yielded"):
        run_without_yielding(waiting)  # it parks for room (and is closed here)
    # A bad call is still refused as such when the ring is full, whatever the event.
    with pytest.raises(ahg.InvalidValue, match="wait flag"):
        stream.wait_event_nowait(event, 7)
    with pytest.raises(ahg.InvalidHandle, match="null"):
        stream.wait_event_nowait(None)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="wait flag"):
        await stream.wait_event(event, 7)
    gate.open()
    other_gate.open()
    await stream.synchronize()
    await other.synchronize()
    assert device.statistics().queues[stream.statistics().queue].waiting_for_room == 0
    for handle in (stream, other, event):
        handle.destroy()
