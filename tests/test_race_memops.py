"""The race checker sees stream memory operations: a ``write_value_*`` writes its word, and a
``wait_value_*`` takes the order of the write that released it (the handshake is not a race)."""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.tools import race
from cleanup import destroy

F = ahg.StreamWaitFlag


@ahg.kernel
def produce(t: ahg.Threads, x: ahg.Ptr[ahg.uint32]) -> None:
    x[0] = 7


@ahg.kernel
def consume(t: ahg.Threads, x: ahg.ConstPtr[ahg.uint32], out: ahg.Ptr[ahg.uint32]) -> None:
    out[0] = x[0]


@ahg.kernel
def store(t: ahg.Threads, value: ahg.uint32, word: ahg.Ptr[ahg.uint32]) -> None:
    word[0] = value


def _streams(device: ahg.Device) -> tuple[ahg.Stream, ahg.Stream]:
    return device.create_stream(non_blocking=True), device.create_stream(non_blocking=True)


# -- a write_value is a device write of its word ---------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("bits", [32, 64])
async def test_a_write_value_and_an_unordered_kernel_reading_its_word_race(
    device: ahg.Device, bits: int
) -> None:
    a, b = _streams(device)
    word, out = device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        write = a.write_value_32 if bits == 32 else a.write_value_64
        await write(word, 5)
        await b.launch_kernel(consume, 1, 1, (word, out))
        (report,) = rc.reports  # reported at the racing call
        await device.synchronize()
    assert report.kind == "read-after-write"
    assert f"write_value_{bits}" in report.first.op
    assert (report.first.start, report.first.end) == (word.address, word.address + bits // 8)
    assert "consume" in report.second.op
    destroy(word, out, a, b)


@pytest.mark.asyncio
async def test_a_kernel_writing_the_word_of_an_unordered_write_value_races(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    word = device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await b.launch_kernel(store, 1, 1, (3, word))
        await a.write_value_32(word, 5)
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "write-after-write"
    assert "store" in report.first.op
    assert "write_value_32" in report.second.op
    destroy(word, a, b)


@pytest.mark.asyncio
async def test_two_unordered_write_values_on_one_word_race(device: ahg.Device) -> None:
    a, b = _streams(device)
    word = device.malloc(8)
    with ahg.race_check(on_race="collect") as rc:
        await a.write_value_32(word, 1)
        await b.write_value_64(word, 2)  # its 8 bytes cover the 4 of the first
        await device.synchronize()
        await a.write_value_32(word, 3)  # after the host synchronised: ordered
        await a.synchronize()
    (report,) = rc.reports
    assert report.kind == "write-after-write"
    assert ("write_value_32" in report.first.op, "write_value_64" in report.second.op) == (
        True,
        True,
    )
    destroy(word, a, b)


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_racing_write_value_before_it_is_enqueued(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    word = device.malloc(4)
    with ahg.race_check(on_race="raise") as rc:
        await a.launch_kernel(store, 1, 1, (3, word))
        before = (b.statistics(), rc.statistics().ops)
        with pytest.raises(ahg.RaceError):
            await b.write_value_32(word, 9)
        assert (b.statistics(), rc.statistics().ops) == before  # nothing enqueued
        await a.synchronize()
        await b.write_value_32(word, 9)  # ordered now: accepted
        await b.synchronize()
    assert device.view(word, np.uint32, 1)[0] == 9
    destroy(word, a, b)


# -- a wait takes the order of the write that released it ------------------------------------------


async def _handshake(
    device: ahg.Device,
    a: ahg.Stream,
    b: ahg.Stream,
    x: ahg.DevicePtr,
    flag: ahg.DevicePtr,
    out: ahg.DevicePtr,
    *,
    bits: int = 32,
    wait: tuple[int, Any, int] = (1, F.EQ, 0xFFFF_FFFF),
    written: int = 1,
    waiter_first: bool = False,
) -> None:
    """Stream a: produce(x), then write ``written`` to ``flag``; stream b: wait on ``flag``,
    then consume(x) (enqueued before a's work when ``waiter_first``)."""
    value, condition, mask = wait
    wait_value = b.wait_value_32 if bits == 32 else b.wait_value_64
    write_value = a.write_value_32 if bits == 32 else a.write_value_64

    async def waiter() -> None:
        await wait_value(flag, value, condition, mask)
        await b.launch_kernel(consume, 1, 1, (x, out))

    if waiter_first:
        await waiter()
    await a.launch_kernel(produce, 1, 1, (x,))
    await write_value(flag, written)
    if not waiter_first:
        await waiter()
    await b.synchronize()
    await a.synchronize()


@pytest.mark.asyncio
@pytest.mark.parametrize("waiter_first", [False, True])
@pytest.mark.parametrize("on_race", ["collect", "raise"])
async def test_a_flag_handshake_orders_the_consumer_after_the_producer(
    device: ahg.Device, waiter_first: bool, on_race: Any
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race=on_race) as rc:
        await _handshake(device, a, b, x, flag, out, waiter_first=waiter_first)
        assert device.view(out, np.uint32, 1, readonly=True)[0] == 7  # the host after both
    assert rc.reports == []
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("bits", "wait", "written"),
    [
        (64, (2**40, F.EQ, 2**64 - 1), 2**40),
        (32, (4, F.GEQ, 0xFFFF_FFFF), 9),
        (64, (2**33, F.GEQ, 2**64 - 1), 2**34),
        (32, (0x10, F.AND, 0xF0), 0x1F),
        (64, (2**60, F.AND, 2**64 - 1), 2**60 + 1),
        (32, (0x0F, F.NOR, 0x0F), 0xF0),  # the flag's low bits stay clear: the NOR holds
        (32, (0xF0, F.EQ, 0xF0), 0xF3),  # compared under the mask
    ],
)
async def test_every_condition_and_size_of_wait_takes_the_releasing_writes_order(
    device: ahg.Device, bits: int, wait: tuple[int, Any, int], written: int
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    device.view(flag, np.uint64, 1)[0] = 0xF if wait[1] is F.NOR else 0  # not yet met
    with ahg.race_check(on_race="collect") as rc:
        await _handshake(device, a, b, x, flag, out, bits=bits, wait=wait, written=written)
    assert rc.reports == []
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_wait_released_by_an_earlier_write_does_not_order_later_producer_work(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await a.write_value_32(flag, 1)
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await a.launch_kernel(produce, 1, 1, (x,))  # after the write: nothing orders it
        assert rc.reports == []  # decided when the wait is released
        await b.synchronize()
        await a.synchronize()
    (report,) = rc.reports
    assert report.kind == "write-after-read"
    assert ("consume" in report.first.op, "produce" in report.second.op) == (True, True)
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_late_report_warns_at_the_hosts_next_synchronisation(device: ahg.Device) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="raise") as rc:
        await a.write_value_32(flag, 1)
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await a.launch_kernel(produce, 1, 1, (x,))  # accepted: the race is not known yet
        with pytest.warns(ahg.RaceWarning, match="write-after-read"):
            await b.synchronize()
        await a.synchronize()
    assert len(rc.reports) == 1
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_wait_released_by_a_host_write_takes_the_hosts_order(device: ahg.Device) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        device.view(x, np.uint32, 1)[0] = 7  # before the release: ordered by it
        device.view(flag, np.uint32, 1)[0] = 1
        await b.synchronize()
        assert device.view(out, np.uint32, 1, readonly=True)[0] == 7
        assert rc.reports == []
        await b.wait_value_32(flag, 2, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        device.view(flag, np.uint32, 1)[0] = 2
        device.view(x, np.uint32, 1)[0] = 8  # after the release: races the consumer
        await b.synchronize()
    (report,) = rc.reports
    assert (report.kind, report.second.where) == ("write-after-read", "host")
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_wait_released_by_a_kernel_invents_no_order(device: ahg.Device) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await a.launch_kernel(produce, 1, 1, (x,))
        await a.launch_kernel(store, 1, 1, (1, flag))  # releases the wait: which, is not known
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await b.synchronize()
        await a.synchronize()
    (report,) = rc.reports
    assert report.kind == "read-after-write"
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_write_value_overwritten_before_the_wait_looked_is_not_its_releaser(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await a.write_value_32(flag, 1)
        await a.synchronize()
        device.view(flag, np.uint32, 1)[0] = 0  # the host takes the 1 back
        await a.launch_kernel(produce, 1, 1, (x,))
        await a.launch_kernel(store, 1, 1, (1, flag))  # the real releaser: a kernel
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await b.synchronize()
        await a.synchronize()
    assert [r.kind for r in rc.reports] == ["read-after-write"]
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_the_order_a_wait_takes_reaches_events_and_the_host(device: ahg.Device) -> None:
    a, b = _streams(device)
    c = device.create_stream(non_blocking=True)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        await b.wait_value_32(flag, 1, F.EQ)
        await b.record_event(event)  # after the wait: its record follows the write
        await c.wait_event(event)
        await c.launch_kernel(consume, 1, 1, (x, out))  # after the wait, through the event
        await a.launch_kernel(produce, 1, 1, (x,))
        await a.write_value_32(flag, 1)
        await event.synchronize()
        device.view(x, np.uint32, 1, readonly=True)  # the host knows the producer: the event
        await c.synchronize()
    assert rc.reports == []
    destroy(x, flag, out, a, b, c, event)


@pytest.mark.asyncio
async def test_a_wait_that_fails_leaves_the_races_behind_it_reported(device: ahg.Device) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        waited = await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await a.launch_kernel(produce, 1, 1, (x,))
        await asyncio.sleep(0)
        device.free(flag)  # the wait fails: no write released it
        with pytest.raises(ahg.InvalidDevicePointer):
            await waited
        with pytest.raises(ahg.InvalidDevicePointer):
            await b.synchronize()
        await a.synchronize()
        assert rc.statistics().reports == 1
    assert [r.kind for r in rc.reports] == ["write-after-read"]
    destroy(x, out, a, b)


@pytest.mark.asyncio
async def test_memops_of_a_blocking_stream_and_the_null_stream_are_checked(
    device: ahg.Device,
) -> None:
    blocking = device.create_stream()
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    null = device.null_stream
    with ahg.race_check(on_race="collect") as rc:
        await null.launch_kernel(produce, 1, 1, (x,))
        await null.write_value_32(flag, 1)
        await blocking.wait_value_32(flag, 1, F.EQ)  # ordered anyway: legacy rules
        await blocking.launch_kernel(consume, 1, 1, (x, out))
        await device.synchronize()
    assert rc.reports == []
    destroy(x, flag, out, blocking)


# -- captured: host nodes running the operation ----------------------------------------------------


@pytest.mark.asyncio
async def test_a_captured_write_value_races_an_unordered_eager_reader(device: ahg.Device) -> None:
    a, b = _streams(device)
    word, out = device.malloc(4), device.malloc(4)
    async with a.capture() as capture:
        await a.write_value_32(word, 5)
    graph_exec = capture.graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        await graph_exec.launch(a)
        await b.launch_kernel(consume, 1, 1, (word, out))
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "read-after-write"
    assert "graph exec" in report.first.op
    destroy(graph_exec, capture.graph, word, out, a, b)


def test_the_static_check_sees_a_captured_write_values_word(device: ahg.Device) -> None:
    async def build() -> tuple[ahg.Graph, list[ahg.GraphNode]]:
        stream = device.create_stream(non_blocking=True)
        async with stream.capture() as capture:
            await stream.write_value_32(word, 5)
        stream.destroy()
        (write,) = capture.graph.nodes()
        reader = capture.graph.add_kernel_node(consume, 1, 1, (word, out))
        return capture.graph, [write, reader]

    word, out = device.malloc(4), device.malloc(4)
    graph, (write, reader) = ahg.run(build())
    (report,) = graph.check_races()
    assert report.kind in ("read-after-write", "write-after-read")
    graph.add_dependencies(write, reader)
    assert graph.check_races() == []
    destroy(graph, word, out)


@pytest.mark.asyncio
@pytest.mark.parametrize("waiter_first", [False, True])
async def test_a_captured_handshake_orders_a_graphs_consumer_after_eager_work(
    device: ahg.Device, waiter_first: bool
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    async with b.capture() as capture:
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await b.write_value_32(flag, 0)  # re-armed for the next launch
    graph_exec = capture.graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        for _ in range(2):
            if waiter_first:
                await graph_exec.launch(b)
            await a.launch_kernel(produce, 1, 1, (x,))
            await a.write_value_32(flag, 1)
            if not waiter_first:
                await graph_exec.launch(b)
            await b.synchronize()
            await a.synchronize()
        assert rc.reports == []
        await a.launch_kernel(produce, 1, 1, (x,))  # nothing releases a launch after this
        await a.write_value_32(flag, 1)
        await a.synchronize()
        await graph_exec.launch(b)  # released by the value already there: ordered anyway
        await b.synchronize()
    assert rc.reports == []
    destroy(graph_exec, capture.graph, x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_captured_write_value_releases_an_eager_wait_with_the_launchs_order(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    async with a.capture() as capture:
        await a.launch_kernel(produce, 1, 1, (x,))
        await a.write_value_32(flag, 1)
    graph_exec = capture.graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await graph_exec.launch(a)
        await b.synchronize()
        await a.synchronize()
    assert rc.reports == []
    destroy(graph_exec, capture.graph, x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_race_found_as_a_wait_is_released_reaches_a_check_left_before_any_sync(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await a.write_value_32(flag, 1)
        waited = await b.wait_value_32(flag, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await a.launch_kernel(produce, 1, 1, (x,))
        await testing.loop_turns()  # the device releases the wait; the host does not sync
        assert waited.done()
    assert [r.kind for r in rc.reports] == ["write-after-read"]
    await device.synchronize()
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
@pytest.mark.parametrize(("write_bits", "offset", "wait_bits"), [(64, 4, 32), (32, 4, 64)])
async def test_a_wait_on_part_of_a_written_word_takes_its_writes_order(
    device: ahg.Device, write_bits: int, offset: int, wait_bits: int
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await a.launch_kernel(produce, 1, 1, (x,))
        if write_bits == 64:
            await a.write_value_64(flag, 1 << 32)  # its high half is the waited word
            await b.wait_value_32(flag + offset, 1, F.EQ)
        else:
            await a.write_value_32(flag + offset, 1)  # the high half of the waited word
            await b.wait_value_64(flag, 1 << 32, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))
        await b.synchronize()
        await a.synchronize()
    assert rc.reports == []
    destroy(x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_graph_node_before_its_captured_wait_is_not_taken_as_after_it(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag, out = device.malloc(4), device.malloc(8), device.malloc(4)
    async with a.capture() as capture:
        await a.launch_kernel(produce, 1, 1, (x,))  # runs as the launch starts
        await a.wait_value_32(flag, 1, F.EQ)
    graph_exec = capture.graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        await b.launch_kernel(consume, 1, 1, (x, out))
        await b.write_value_32(flag, 1)  # releases the graph's wait, after the consumer
        await graph_exec.launch(a)  # its producer races the consumer all the same
        (report,) = rc.reports
        await a.synchronize()
        await b.synchronize()
    assert report.kind == "write-after-read"
    assert len(rc.reports) == 1
    destroy(graph_exec, capture.graph, x, flag, out, a, b)


@pytest.mark.asyncio
async def test_a_wait_met_by_a_host_value_already_there_invents_no_order(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, out = device.malloc(4), device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        old = device.malloc(8)
        await a.write_value_32(old, 1)  # another word's write_value of the same value
        await a.synchronize()
        device.free(old)
        flag = device.malloc(8)
        device.view(flag, np.uint32, 1)[0] = 1
        await a.launch_kernel(produce, 1, 1, (x,))
        await b.wait_value_32(flag, 1, F.EQ)  # met by the host's value, before the producer
        await b.launch_kernel(consume, 1, 1, (x, out))
        await b.synchronize()
        await a.synchronize()
    assert [r.kind for r in rc.reports] == ["read-after-write"]
    destroy(x, out, flag, a, b)


@pytest.mark.asyncio
async def test_a_launch_is_not_taken_as_after_a_captured_wait_that_comes_after_its_work(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    c = device.create_stream(non_blocking=True)
    x, first, second, out = device.malloc(4), device.malloc(8), device.malloc(8), device.malloc(4)
    async with b.capture() as capture:
        await b.wait_value_32(first, 1, F.EQ)
        await b.launch_kernel(consume, 1, 1, (x, out))  # after the first wait only
        await b.wait_value_32(second, 1, F.EQ)
    graph_exec = capture.graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        await graph_exec.launch(b)
        await c.launch_kernel(produce, 1, 1, (x,))
        await c.write_value_32(second, 1)  # follows the producer, releases only the second
        await a.write_value_32(first, 1)  # releases the consumer: nothing orders the producer
        await b.synchronize()
        await c.synchronize()
        await a.synchronize()
    assert [r.kind for r in rc.reports] == ["write-after-read"]
    destroy(graph_exec, capture.graph, x, first, second, out, a, b, c)


@pytest.mark.asyncio
async def test_the_host_awaiting_a_wait_learns_the_write_that_released_it(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag = device.malloc(4), device.malloc(8)
    with ahg.race_check(on_race="collect") as rc:
        waited = await b.wait_value_32(flag, 1, F.EQ)  # enqueued first: its clock knows no a
        await a.launch_kernel(produce, 1, 1, (x,))
        await a.write_value_32(flag, 1)
        await waited
        assert device.view(x, np.uint32, 1, readonly=True)[0] == 7  # after the producer
        await a.synchronize()
    assert rc.reports == []
    destroy(x, flag, a, b)


@pytest.mark.asyncio
async def test_two_unordered_ops_after_the_same_pending_wait_race_at_once(
    device: ahg.Device,
) -> None:
    a, b = _streams(device)
    x, flag = device.malloc(4), device.malloc(8)
    event = device.create_event()
    with ahg.race_check(on_race="raise") as rc:
        await b.wait_value_32(flag, 1, F.EQ)
        await b.record_event(event)
        await a.wait_event(event)  # a and b both come after the wait
        await a.launch_kernel(produce, 1, 1, (x,))
        with pytest.raises(ahg.RaceError):  # the wait orders neither: refused at the call
            await b.launch_kernel(store, 1, 1, (2, x))
        device.view(flag, np.uint32, 1)[0] = 1  # the host releases it
        await b.synchronize()
        await a.synchronize()
    assert len(rc.reports) == 1
    destroy(x, flag, event, a, b)


@pytest.mark.asyncio
async def test_a_launch_planned_for_a_closed_executables_proxy_is_left_to_the_launcher(
    device: ahg.Device,
) -> None:
    """A closed executable's launcher holds only a weak proxy of it: a launch that got its
    signal set as another thread destroyed the executable is planned with that proxy, and
    must then be refused by the launcher (InvalidValue), not fail in the checker."""
    stream = device.create_stream(non_blocking=True)
    word = device.malloc(8)
    async with stream.capture() as capture:
        await stream.wait_value_32(word, 1, F.EQ)
        await stream.write_value_32(word, 0)
    graph_exec = capture.graph.instantiate()
    with ahg.race_check(on_race="collect"):
        plan = race._CHECKER.launching(weakref.proxy(graph_exec), stream, None)
    assert plan is not None
    destroy(graph_exec, capture.graph, word, stream)
