"""A launched graph's event-wait nodes order what follows them even with no memory node
between: a record node after a wait node relays the waited event, and later work on the
launch stream follows every wait node of the launch.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg


async def _relay(record_after_wait: bool) -> list[ahg.RaceReport]:
    device = ahg.get_device(0)
    a = device.malloc(256)
    s0, s1, s2 = (device.create_stream(non_blocking=True) for _ in range(3))
    e1, e2 = device.create_event(), device.create_event()
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(e1)
    if record_after_wait:
        graph.add_event_record_node(e2, deps=[wait])
    executable = graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        await s0.memset(a, 1, 256)
        await s0.record_event(e1)
        await executable.launch(s1)
        if record_after_wait:  # e2 is recorded after the graph waited for e1
            await s2.wait_event(e2)
            await s2.memset(a, 2, 256)
        else:  # s1's later work follows the launch, its wait node included
            await s1.memset(a, 2, 256)
        await device.synchronize()
    for handle in (executable, graph, s0, s1, s2, e1, e2):
        handle.destroy()
    device.free(a)
    return rc.reports


@pytest.mark.asyncio
async def test_a_record_node_after_a_wait_node_relays_the_waited_event() -> None:
    assert await _relay(record_after_wait=True) == []


@pytest.mark.asyncio
async def test_work_after_a_launch_follows_its_wait_nodes() -> None:
    assert await _relay(record_after_wait=False) == []


@pytest.mark.asyncio
async def test_a_relay_without_the_first_record_still_races() -> None:
    device = ahg.get_device(0)
    a = device.malloc(256)
    s0, s1, s2 = (device.create_stream(non_blocking=True) for _ in range(3))
    e1, e2 = device.create_event(), device.create_event()
    graph = ahg.Graph()
    graph.add_event_record_node(e2, deps=[graph.add_event_wait_node(e1)])
    executable = graph.instantiate()
    with ahg.race_check(on_race="collect") as rc:
        await s0.record_event(e1)  # before the fill: the relay orders nothing of it
        await s0.memset(a, 1, 256)
        await executable.launch(s1)
        await s2.wait_event(e2)
        await s2.memset(a, 2, 256)
        await device.synchronize()
    for handle in (executable, graph, s0, s1, s2, e1, e2):
        handle.destroy()
    device.free(a)
    assert len(rc.reports) == 1
