"""Events: cross-stream ordering, simulated timing from the cost model, stale handles."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime.event import EVENTS
from cleanup import destroy
from fakes import HeldKernel, loop_turns

# A cost model with round numbers, so expected times can be written down.
COST = ahg.CostModel(
    kernel_launch_ns=2_000,
    wave_ns=1_000,
    lanes_per_cu=64,
    copy_latency_ns=1_000,
    host_bytes_per_ns=25.0,
    device_bytes_per_ns=1_000.0,
    host_callback_ns=5_000,
)
COMPUTE_UNITS = 4  # one wave = 4 * 64 = 256 threads


def timed_device(hardware_queues: int = 4) -> ahg.Device:
    (device,) = ahg.configure_devices(
        1,
        ahg.DeviceProperties(
            compute_units=COMPUTE_UNITS, hardware_queues=hardware_queues, cost=COST
        ),
    )
    return device


@ahg.kernel(duration_ns=10_000)
def fixed_10us(t: ahg.Threads) -> None:
    pass


@ahg.kernel
def by_waves(t: ahg.Threads) -> None:
    pass


def ms(nanoseconds: int) -> float:
    return nanoseconds / 1_000_000


# -- never recorded ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_event_never_recorded_is_complete(device: ahg.Device) -> None:
    event = device.create_event()
    assert event.query()
    await event.synchronize()
    assert event.time_ns is None
    stream = device.create_stream()
    await stream.wait_event(event)  # waiting on it adds no work at all
    assert stream.submitted == 0
    assert stream.query()
    assert "unrecorded" in repr(event)
    destroy(event, stream)


# -- ordering ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_waiting_on_an_event_orders_work_across_streams(device: ahg.Device) -> None:
    log: list[str] = []
    held = HeldKernel("producer", log)
    producer, consumer = device.create_stream(), device.create_stream()
    assert producer.queue is not consumer.queue
    ready = device.create_event()
    await held.launch(producer)
    await producer.record_event(ready)
    await consumer.wait_event(ready)
    consumed = await consumer.launch_host_func(log.append, "consumer")
    await held.started.wait()
    await loop_turns()  # the consumer's host function would run now without the wait
    assert log == ["producer start"]
    assert not ready.query()
    assert not consumer.query()
    held.release()
    await consumed
    assert log == ["producer start", "producer end", "consumer"]
    assert ready.query()
    destroy(producer, consumer, ready)


@pytest.mark.asyncio
async def test_data_produced_on_one_stream_is_consumed_on_another(device: ahg.Device) -> None:
    n = 1000
    ptr = device.malloc(n * 4)
    producer, consumer = device.create_stream(), device.create_stream()
    gate = HeldKernel("gate")
    await gate.launch(producer)  # make the producer late on purpose
    await producer.memcpy(ptr, np.arange(n, dtype=np.int32))
    written = device.create_event()
    await producer.record_event(written)
    await consumer.wait_event(written)
    out = np.zeros(n, dtype=np.int32)
    await consumer.memcpy(out, ptr)
    gate.release()
    await consumer.synchronize()
    assert out.tolist() == list(range(n))
    destroy(ptr, producer, consumer, written)


@pytest.mark.asyncio
async def test_stream_synchronize_covers_a_pending_event_wait(device: ahg.Device) -> None:
    held = HeldKernel()
    producer, consumer = device.create_stream(), device.create_stream()
    event = device.create_event()
    await held.launch(producer)
    await producer.record_event(event)
    await consumer.wait_event(event)  # the consumer's only work is the wait itself
    sync = asyncio.ensure_future(consumer.synchronize())
    await loop_turns()  # the synchronize parks behind the wait
    assert not sync.done()
    assert not consumer.query()
    held.release()
    await sync
    assert event.query()
    destroy(producer, consumer, event)


@pytest.mark.asyncio
async def test_wait_uses_the_record_current_when_the_wait_is_enqueued(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    slow, fast, waiter = (device.create_stream() for _ in range(3))
    event = device.create_event()
    await held.launch(slow)
    await slow.record_event(event)  # record 1: pending behind the held kernel
    await waiter.wait_event(event)  # waits for record 1
    log: list[str] = []
    after_wait = await waiter.launch_host_func(log.append, "waiter")
    await fast.record_event(event)  # record 2 on an idle stream
    await event.synchronize()
    assert event.query()  # the event now stands for record 2...
    await loop_turns()
    assert log == []  # ...but the enqueued wait still waits for record 1
    held.release()
    await after_wait
    assert log == ["waiter"]
    destroy(event, slow, fast, waiter)


@pytest.mark.asyncio
async def test_query_and_time_while_pending(device: ahg.Device) -> None:
    held = HeldKernel()
    stream = device.create_stream()
    start, end = device.create_event(), device.create_event()
    await stream.record_event(start)
    await held.launch(stream)
    await stream.record_event(end)
    await start.synchronize()
    assert not end.query()
    assert end.time_ns is None
    assert "pending" in repr(end)
    with pytest.raises(ahg.NotReady, match=rf"record of {re.escape(repr(end))} has not completed"):
        ahg.elapsed_time(start, end)  # the message names the event still pending
    held.release()
    await end.synchronize()
    assert end.query()
    assert ahg.elapsed_time(start, end) == ms(device.properties.cost.kernel_launch_ns + 1_000)
    assert "done" in repr(end)
    destroy(stream, start, end)


# -- timing ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_elapsed_time_matches_the_cost_model_for_each_kind_of_work() -> None:
    device = timed_device()
    stream = device.create_stream()
    ptr = device.malloc(25_000)
    host = np.zeros(25_000, dtype=np.uint8)
    work = [
        ("kernel with a duration", 2_000 + 10_000, stream.launch_kernel(fixed_10us, 1, 1)),
        ("1 wave", 2_000 + 1_000, stream.launch_kernel(by_waves, 1, 256)),
        ("4 waves", 2_000 + 4_000, stream.launch_kernel(by_waves, 4, 250)),
        ("host to device", 1_000 + 1_000, stream.memcpy(ptr, host)),
        ("device to host", 1_000 + 1_000, stream.memcpy(host, ptr)),
        ("device to device", 1_000 + 12, stream.memcpy(ptr, ptr + 12_500, 12_000)),
        ("fill", 1_000 + 10, stream.memset(ptr, 1, 10_000)),
        ("fill of 32-bit elements", 1_000 + 20, stream.memset(ptr, 1, 5_000, element_size=4)),
        ("host function", 5_000, stream.launch_host_func(lambda: None)),
    ]
    measured = {}
    for name, _, operation in work:
        before, after = device.create_event(), device.create_event()
        await stream.record_event(before)
        await operation
        await stream.record_event(after)
        await stream.synchronize()
        measured[name] = ahg.elapsed_time(before, after)
        destroy(before, after)
    assert measured == {name: ms(ns) for name, ns, _ in work}
    destroy(stream, ptr)


@pytest.mark.asyncio
async def test_back_to_back_work_adds_up_on_the_timeline() -> None:
    device = timed_device()
    stream = device.create_stream()
    start, stop = device.create_event(), device.create_event()
    await stream.record_event(start)
    for _ in range(3):
        await stream.launch_kernel(fixed_10us, 1, 1)
    await stream.record_event(stop)
    await stream.synchronize()
    assert (start.time_ns, stop.time_ns) == (0, 3 * 12_000)
    assert ahg.elapsed_time(start, stop) == ms(36_000)
    assert ahg.elapsed_time(stop, start) == -ms(36_000)
    destroy(stream, start, stop)


@pytest.mark.asyncio
async def test_streams_on_different_queues_overlap_in_time() -> None:
    device = timed_device()
    a, b = device.create_stream(), device.create_stream()
    start, end_a, end_b = (device.create_event() for _ in range(3))
    await a.record_event(start)
    await a.launch_kernel(fixed_10us, 1, 1)
    await a.record_event(end_a)
    await b.launch_kernel(fixed_10us, 1, 1)
    await b.record_event(end_b)
    await device.synchronize()
    assert ahg.elapsed_time(start, end_a) == ms(12_000)
    assert ahg.elapsed_time(start, end_b) == ms(12_000)
    destroy(a, b, start, end_a, end_b)


@pytest.mark.asyncio
async def test_streams_sharing_one_queue_take_turns_in_time() -> None:
    device = timed_device(hardware_queues=1)
    a, b = device.create_stream(), device.create_stream()
    start, end_b = device.create_event(), device.create_event()
    await a.record_event(start)
    await a.launch_kernel(fixed_10us, 1, 1)
    await b.launch_kernel(fixed_10us, 1, 1)
    await b.record_event(end_b)
    await device.synchronize()
    assert ahg.elapsed_time(start, end_b) == ms(24_000)
    destroy(a, b, start, end_b)


@pytest.mark.asyncio
async def test_an_event_wait_carries_the_producers_time_to_the_consumer() -> None:
    device = timed_device()
    producer, consumer = device.create_stream(), device.create_stream()
    start, ready, done = (device.create_event() for _ in range(3))
    await producer.record_event(start)
    await producer.launch_kernel(fixed_10us, 1, 1)
    await producer.record_event(ready)
    await consumer.wait_event(ready)
    await consumer.launch_kernel(fixed_10us, 1, 1)
    await consumer.record_event(done)
    await consumer.synchronize()
    assert (ready.time_ns, done.time_ns) == (12_000, 24_000)
    destroy(producer, consumer, start, ready, done)


@pytest.mark.asyncio
async def test_work_submitted_after_a_synchronize_starts_no_earlier_than_it() -> None:
    device = timed_device()
    a, b = device.create_stream(), device.create_stream()
    await a.launch_kernel(fixed_10us, 1, 1)
    await a.synchronize()  # the host has now seen t = 12 us
    assert device.clock.now == 12_000
    late = device.create_event()
    await b.record_event(late)  # b's queue is idle, but the host is already at 12 us
    await b.synchronize()
    assert late.time_ns == 12_000
    destroy(a, b, late)


@pytest.mark.asyncio
async def test_holding_a_kernel_open_does_not_change_simulated_time() -> None:
    device = timed_device()
    held = HeldKernel()
    stream = device.create_stream()
    start, stop = device.create_event(), device.create_event()
    await stream.record_event(start)
    await held.launch(stream)
    await stream.record_event(stop)
    await held.started.wait()
    await loop_turns(20)  # many loop turns pass while the kernel is held
    held.release()
    await stream.synchronize()
    assert ahg.elapsed_time(start, stop) == ms(2_000 + 1_000)
    destroy(stream, start, stop)


async def _timeline_program(device: ahg.Device) -> list[int | None]:
    """A mixed program over three streams; returns the time of every event it records."""
    a, b, c = (device.create_stream() for _ in range(3))
    events = [device.create_event() for _ in range(8)]
    ptr = device.malloc(1 << 16)
    scratch = device.malloc(1 << 15)  # c's own buffer: nothing orders c's fill with a's copy
    host = np.ones(1 << 16, dtype=np.uint8)
    held = HeldKernel()
    await a.record_event(events[0])
    await a.memcpy(ptr, host)
    await held.launch(a)
    await a.record_event(events[1])
    await b.launch_kernel(by_waves, 64, 256)
    await b.wait_event(events[1])
    await b.record_event(events[2])
    await c.memset(scratch, 0, 1 << 15)
    await c.record_event(events[3])
    await c.launch_host_func(lambda: None)
    await c.record_event(events[4])
    held.release()
    await b.synchronize()
    await a.launch_kernel(fixed_10us, 2, 2)
    await a.record_event(events[5])
    await c.wait_event(events[5])
    await c.memcpy(host, ptr)
    await c.record_event(events[6])
    await device.null_stream.record_event(events[7])
    await device.synchronize()
    times = [event.time_ns for event in events]
    device.free(scratch)
    destroy(a, b, c, *events, ptr)
    return times


@pytest.mark.asyncio
async def test_same_program_twice_gives_the_same_timeline() -> None:
    first = await _timeline_program(timed_device())
    second = await _timeline_program(timed_device())
    assert first == second
    assert first == [
        0,  # a starts
        3_621 + 3_000,  # a: 64 KiB host-to-device copy, then the held kernel (one wave)
        66_000,  # b: 64 waves; the wait on a's event (6.6 us) is already satisfied
        1_033,  # c: 32 KiB fill, in parallel with a and b
        1_033 + 5_000,  # c: host function
        66_000 + 12_000,  # a, after the host synchronized b at 66 us: one fixed kernel
        78_000 + 3_621,  # c waited for a, then copied 64 KiB back to the host
        81_621,  # the null stream waited for every blocking stream
    ]


# -- timing errors -----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_elapsed_time_with_timing_disabled_is_invalid_handle(device: ahg.Device) -> None:
    stream = device.create_stream()
    timed, untimed = device.create_event(), device.create_event(disable_timing=True)
    await stream.record_event(timed)
    await stream.record_event(untimed)
    await stream.synchronize()
    assert untimed.query()  # still usable for ordering
    await untimed.synchronize()
    with pytest.raises(ahg.InvalidHandle, match="timing disabled"):
        ahg.elapsed_time(timed, untimed)
    with pytest.raises(ahg.InvalidHandle, match="timing disabled"):
        ahg.elapsed_time(untimed, timed)
    destroy(stream, timed, untimed)


@pytest.mark.asyncio
async def test_elapsed_time_with_an_unrecorded_event_is_invalid_handle(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    recorded, unrecorded = device.create_event(), device.create_event()
    await stream.record_event(recorded)
    await stream.synchronize()
    with pytest.raises(ahg.InvalidHandle, match="not been recorded"):
        ahg.elapsed_time(recorded, unrecorded)
    with pytest.raises(ahg.InvalidHandle, match="not been recorded"):
        ahg.elapsed_time(unrecorded, recorded)
    destroy(stream, recorded, unrecorded)


# -- lifecycle ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_destroyed_event_is_rejected_everywhere(device: ahg.Device) -> None:
    stream = device.create_stream()
    event, other = device.create_event(), device.create_event()
    await stream.record_event(event)
    await stream.record_event(other)
    await stream.synchronize()
    event.destroy()
    assert not EVENTS.is_valid(event.hid)
    with pytest.raises(ahg.InvalidHandle):
        event.query()
    with pytest.raises(ahg.InvalidHandle):
        await event.synchronize()
    with pytest.raises(ahg.InvalidHandle):
        await stream.record_event(event)
    with pytest.raises(ahg.InvalidHandle):
        await stream.wait_event(event)
    with pytest.raises(ahg.InvalidHandle):
        ahg.elapsed_time(event, other)
    with pytest.raises(ahg.InvalidHandle):
        ahg.elapsed_time(other, event)
    with pytest.raises(ahg.InvalidHandle, match="already destroyed"):
        event.destroy()
    assert stream.submitted == 2  # the rejected record added nothing
    destroy(stream, other)


def test_a_new_event_in_a_recycled_slot_does_not_revive_the_old_handle(
    device: ahg.Device,
) -> None:
    old = device.create_event()
    old.destroy()
    new = device.create_event()
    assert new.hid.slot == old.hid.slot
    assert new.hid != old.hid
    assert EVENTS.get(old.hid) is None
    assert EVENTS.get(new.hid) is new
    with pytest.raises(ahg.InvalidHandle):
        old.query()
    new.destroy()


def test_event_flags_are_kept(device: ahg.Device) -> None:
    event = device.create_event(disable_timing=True, blocking_sync=True)
    assert (event.disable_timing, event.blocking_sync) == (True, True)
    assert repr(event).startswith(f"<Event #{event.hid.slot}.{event.hid.generation} device=0")
    destroy(event)
