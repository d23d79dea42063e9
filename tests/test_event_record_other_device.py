"""Recording an event on a stream of another device.

An event belongs to the device it was made on: its timestamp is read from that device's clock
and ``event.synchronize()`` waits through that device's engine. HIP's ``hipEventRecord``
refuses an eager record on a stream of another device with ``hipErrorInvalidResourceHandle``
(HIP's alias of ``hipErrorInvalidHandle``); the event then keeps its previous record. Waiting
on another device's event stays legal, as in HIP.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel(duration_ns=10_000)
def ten_us(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_an_eager_record_on_another_devices_stream_is_invalid_handle() -> None:
    device0, device1 = ahg.configure_devices(2)
    stream0 = device0.create_stream()
    event1 = device1.create_event()
    for record in (
        lambda: stream0.record_event(event1),
        lambda: event1.record(stream0),
        lambda: event1.record(device0.null_stream),
    ):
        with pytest.raises(ahg.InvalidHandle, match="belongs to device 1"):
            await record()
    with pytest.raises(ahg.InvalidHandle, match="belongs to device 1"):
        stream0.record_event_nowait(event1)
    # Nothing was enqueued and the event is still unrecorded.
    assert stream0.statistics().submitted == 0
    assert event1.time_ns is None
    assert event1.query()
    with pytest.raises(ahg.InvalidHandle, match="has not been recorded"):
        ahg.elapsed_time(event1, event1)
    destroy(stream0, event1)


@pytest.mark.asyncio
async def test_a_refused_record_keeps_the_events_previous_record() -> None:
    device0, device1 = ahg.configure_devices(2)
    stream0, stream1 = device0.create_stream(), device1.create_stream()
    start, end = device1.create_event(), device1.create_event()
    await stream1.record_event(start)
    await stream1.launch_kernel(ten_us, 1, 1)
    await stream1.record_event(end)
    await stream1.synchronize()
    before = ahg.elapsed_time(start, end)
    await stream0.launch_kernel(ten_us, 1, 1)
    with pytest.raises(ahg.InvalidHandle):
        await stream0.record_event(end)
    await stream0.synchronize()
    assert ahg.elapsed_time(start, end) == before
    # A wait on another device's event is legal and orders the work.
    await stream0.wait_event(end)
    await stream0.synchronize()
    destroy(stream0, stream1, start, end)
