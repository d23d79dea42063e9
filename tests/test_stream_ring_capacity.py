"""A stream's legacy null-stream wait takes no ring slot of its own.

A blocking stream orders its work after the null stream's pending work, and the null stream
after every blocking stream's. That wait is part of the enqueue's one packet (its barrier,
like an AQL packet's barrier bit), not a packet of its own: a submission given one slot of
the ring appends one packet, so a ring never holds more than its capacity, and a ring of one
packet still takes such an enqueue (two packets could never fit in it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices, loop_turns

CAPACITY = 4


def _device(capacity: int) -> Iterator[ahg.Device]:
    # Two queues: the null stream runs on queue 0, the first stream made gets queue 1.
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=capacity)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


@pytest.fixture
def small_ring() -> Iterator[ahg.Device]:
    yield from _device(CAPACITY)


@pytest.fixture
def one_slot_ring() -> Iterator[ahg.Device]:
    yield from _device(1)


def own_queue_stream(device: ahg.Device) -> ahg.Stream:
    """A blocking stream on another hardware queue than the null stream's."""
    streams = [device.create_stream()]
    while streams[-1].statistics().queue == device.null_stream.statistics().queue:
        streams.append(device.create_stream())
    for other in streams[:-1]:
        other.destroy()
    return streams[-1]


def depth(device: ahg.Device, stream: ahg.Stream) -> int:
    """Packets in ``stream``'s ring, from the device's public statistics."""
    return device.statistics().queues[stream.statistics().queue].pending


def fill_nowait(device: ahg.Device, stream: ahg.Stream) -> list[int]:
    """Enqueue host functions without waiting until the ring refuses; the depth after each."""
    depths = []
    while True:
        try:
            stream.launch_host_func_nowait(int)
        except ahg.NotReady:
            return depths
        depths.append(depth(device, stream))


@pytest.mark.asyncio
async def test_a_blocking_stream_behind_null_work_never_overfills_its_ring(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = own_queue_stream(device)
    null = device.null_stream
    stream.launch_host_func_nowait(int)  # one packet before the null stream has work
    gate = GatedHost()
    null.launch_host_func_nowait(gate)  # pending null work: later blocking work waits for it
    depths = [1, *fill_nowait(device, stream)]
    assert depths == [1, 2, 3, 4]  # one packet per enqueue, the wait included
    assert max(depths) <= CAPACITY
    gate.open()
    await null.synchronize()
    await stream.synchronize()
    assert depth(device, stream) == 0
    stream.destroy()


@pytest.mark.asyncio
async def test_the_null_stream_behind_blocking_work_never_overfills_its_ring(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    null = device.null_stream
    blocking = own_queue_stream(device)
    null.launch_host_func_nowait(int)
    gate = GatedHost()
    blocking.launch_host_func_nowait(gate)  # pending blocking work: null work waits for it
    depths = [1, *fill_nowait(device, null)]
    assert depths == [1, 2, 3, 4]
    gate.open()
    await blocking.synchronize()
    await null.synchronize()
    blocking.destroy()


@pytest.mark.asyncio
async def test_the_wait_still_orders_the_work(small_ring: ahg.Device) -> None:
    device = small_ring
    stream = own_queue_stream(device)
    log: list[str] = []
    gate = GatedHost(log=log)
    null_done = await device.null_stream.launch_host_func(gate)
    done = await stream.launch_host_func(log.append, "blocking")
    await gate.started()
    await loop_turns()
    assert log == ["gate start 0"]  # the blocking stream's work waits behind the null's
    assert depth(device, stream) == 1
    gate.open()
    await done
    assert log == ["gate start 0", "gate end 0", "blocking"]
    assert null_done.end_ns is not None
    assert done.start_ns is not None
    assert done.start_ns >= null_done.end_ns  # it starts once the wait passed, as before
    stream.destroy()


@pytest.mark.asyncio
async def test_a_one_packet_ring_takes_an_enqueue_that_must_wait_for_the_null_stream(
    one_slot_ring: ahg.Device,
) -> None:
    device = one_slot_ring
    stream = own_queue_stream(device)
    gate = GatedHost()
    await device.null_stream.launch_host_func(gate)
    first = stream.launch_host_func_nowait(int)
    assert depth(device, stream) == 1
    with pytest.raises(ahg.NotReady):
        stream.launch_host_func_nowait(int)
    # A second enqueue parks for the one slot; it gets it once the first packet retires,
    # which needs the null stream's work to finish: no deadlock, one packet at a time.
    second = asyncio.ensure_future(stream.launch_host_func(int))
    await loop_turns()
    assert not second.done()
    assert device.statistics().queues[stream.statistics().queue].waiting_for_room == 1
    gate.open()
    await first
    await (await second)
    assert depth(device, stream) == 0
    stream.destroy()
