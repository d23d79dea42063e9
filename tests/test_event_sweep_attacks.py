"""Attacks on events and their graph nodes that earlier tests missed."""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy


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
