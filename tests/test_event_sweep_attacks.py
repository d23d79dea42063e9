"""Attacks on events and their graph nodes that earlier tests missed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import loop_turns


@ahg.kernel(duration_ns=10_000)
def ten_us(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_a_wait_node_before_a_record_node_of_its_event_waits_for_the_older_record() -> None:
    """A graph whose record node of ``event`` depends on a wait node of ``event`` (on another
    strand). The compiled order put the record first, so the wait took the launch's own new
    record and the launch waited for itself forever. The wait must take the record made
    before the launch, as HIP's topological launch does."""
    (device,) = ahg.configure_devices(1)
    stream = device.create_stream()
    event = device.create_event()
    graph = ahg.Graph()
    first = graph.add_kernel_node(ten_us, 1, 1)
    second = graph.add_kernel_node(ten_us, 1, 1, deps=[first])
    other = graph.add_kernel_node(ten_us, 1, 1)
    wait = graph.add_event_wait_node(event, deps=[other])
    graph.add_event_record_node(event, deps=[second, wait])
    graph_exec = graph.instantiate()
    await stream.launch_kernel(ten_us, 1, 1)
    await stream.record_event(event)
    await stream.synchronize()
    before = event.time_ns
    assert before is not None
    await graph_exec.launch(stream)
    await asyncio.wait_for(stream.synchronize(), 10)  # hung before the fix
    after = event.time_ns
    assert after is not None
    assert after > before
    # A second launch waits for the first one's record, and ends too.
    await graph_exec.launch(stream)
    await asyncio.wait_for(stream.synchronize(), 10)
    assert graph_exec.statistics().in_flight == 0
    destroy(graph_exec, graph, stream, event)


@pytest.mark.asyncio
async def test_an_event_recorded_by_two_nodes_ends_on_the_later_nodes_record() -> None:
    """``first`` record node -> kernel -> ``last`` record node of one event; ``last`` is on
    the launch strand, ``first`` on another, so the strands' order bound ``last`` first and
    the event ended pointing at ``first``'s earlier record: ``synchronize()`` returned and
    ``time_ns`` read before the later record ran."""
    (device,) = ahg.configure_devices(1)
    stream = device.create_stream()
    start, event = device.create_event(), device.create_event()
    graph = ahg.Graph()
    head = graph.add_kernel_node(ten_us, 1, 1)
    longer = graph.add_kernel_node(ten_us, 1, 1, deps=[head])
    short = graph.add_kernel_node(ten_us, 1, 1)
    first = graph.add_event_record_node(event, deps=[short])
    middle = graph.add_kernel_node(ten_us, 1, 1, deps=[first])
    graph.add_event_record_node(event, deps=[longer, middle])
    graph_exec = graph.instantiate()
    await stream.record_event(start)
    await graph_exec.launch(stream)
    await event.synchronize()
    # ``short`` and ``middle`` (10 us each) ran in turn before the later record.
    assert ahg.elapsed_time(start, event) >= 0.020
    await stream.synchronize()
    destroy(graph_exec, graph, stream, start, event)


@ahg.kernel(duration_ns=1_000_000)
def one_ms(t: ahg.Threads) -> None:
    pass


async def _until(done: Callable[[], bool]) -> None:
    """Poll ``done`` once per loop turn, as a host spinning on a query does."""
    while not done():
        await loop_turns(1)


@pytest.mark.asyncio
@pytest.mark.parametrize("seen_by", ["event.query", "stream.query"])
async def test_a_record_after_the_host_saw_work_complete_by_a_query_is_not_earlier(
    seen_by: str,
) -> None:
    """The host saw ``busy``'s work complete with a query, then recorded ``after`` on an idle
    stream. Only synchronize() moved the host's clock, so ``after`` was stamped at the
    clock's older time and ``elapsed_time(done, after)`` came out at -1 ms."""
    (device,) = ahg.configure_devices(1)
    busy, idle = device.create_stream(), device.create_stream()
    done, after = device.create_event(), device.create_event()
    await busy.launch_kernel(one_ms, 1, 1)
    await busy.record_event(done)
    await busy.synchronize()
    await busy.launch_kernel(one_ms, 1, 1)
    await busy.record_event(done)
    await _until(done.query if seen_by == "event.query" else busy.query)
    assert done.time_ns is not None
    assert device.clock.now >= done.time_ns
    await idle.record_event(after)
    await _until(after.query)
    assert ahg.elapsed_time(done, after) >= 0
    destroy(busy, idle, done, after)
