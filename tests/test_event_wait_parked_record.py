"""A ``wait_event`` that waits for ring space waits for the record current at the call.

HIP's ``hipStreamWaitEvent`` takes the event's latest record when it is called. When the
waiting stream's ring is full, ``await stream.wait_event(event)`` parks until there is room;
a record of the same event made meanwhile (by another task) is a later record, and the wait
must not take it instead of the one the caller saw. The ``_nowait`` twin and a wait that
finds room at once read the record as they are called, as before.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import HeldKernel, loop_turns

CAPACITY = 2


@pytest.fixture
def small_ring() -> ahg.Device:
    (device,) = ahg.configure_devices(
        1, ahg.DeviceProperties(hardware_queue_capacity=CAPACITY, hardware_queues=4)
    )
    return device


async def full_stream(device: ahg.Device, log: list[str]) -> tuple[ahg.Stream, HeldKernel]:
    """A stream whose ring is full behind a held kernel."""
    stream = device.create_stream()
    held = HeldKernel("waiter's work", log)
    await held.launch(stream)
    while stream.queue.statistics().pending < CAPACITY:
        await stream.launch_host_func(int)
    return stream, held


@pytest.mark.asyncio
async def test_a_parked_wait_waits_for_the_record_it_saw_not_a_later_one(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    log: list[str] = []
    producer, late = device.create_stream(), device.create_stream()
    event = device.create_event()
    seen = HeldKernel("seen record", log)
    await seen.launch(producer)
    await producer.record_event(event)  # the record the waiter sees
    waiter, blocker = await full_stream(device, log)
    assert len({producer.queue.index, late.queue.index, waiter.queue.index}) == 3
    parked = asyncio.create_task(waiter.wait_event(event))
    await loop_turns()
    assert not parked.done()
    later = HeldKernel("later record", log)
    await later.launch(late)
    await late.record_event(event)  # re-recorded while the wait is parked
    blocker.release()
    await parked
    after = await waiter.launch_host_func(log.append, "after the wait")
    seen.release()
    try:
        await producer.synchronize()  # the record it saw is complete; the later one is held
        await loop_turns()
        assert "later record end" not in log
        assert "after the wait" in log
        assert after.done()
        assert log.index("seen record end") < log.index("after the wait")
    finally:
        later.release()
    await device.synchronize()
    destroy(producer, late, waiter, event)


@pytest.mark.asyncio
async def test_a_parked_wait_on_an_event_destroyed_meanwhile_takes_nothing(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    log: list[str] = []
    producer = device.create_stream()
    event = device.create_event()
    record = HeldKernel("record", log)
    await record.launch(producer)
    await producer.record_event(event)  # pending: the wait needs a packet, so it parks
    waiter, blocker = await full_stream(device, log)
    parked = asyncio.create_task(waiter.wait_event(event))
    await loop_turns()
    assert not parked.done()
    event.destroy()
    submitted = waiter.statistics().submitted
    blocker.release()
    with pytest.raises(ahg.InvalidHandle, match="destroyed"):
        await parked
    assert waiter.statistics().submitted == submitted
    assert waiter.queue.statistics().waiting_for_room == 0
    await waiter.synchronize()
    record.release()
    await producer.synchronize()
    destroy(waiter, producer)


@pytest.mark.asyncio
async def test_a_parked_wait_with_a_wrong_call_names_the_operation(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    waiter, blocker = await full_stream(device, [])
    call = asyncio.create_task(waiter.wait_event())  # type: ignore[call-arg]
    await loop_turns()
    try:
        assert call.done()  # raised at once: it did not park for room it could never use
        assert waiter.queue.statistics().waiting_for_room == 0
    finally:
        call.cancel()
    with pytest.raises(TypeError, match=r"wait_event\(\)"):
        await call
    blocker.release()
    await waiter.synchronize()
    destroy(waiter)
