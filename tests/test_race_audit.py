"""Race checker audit: a check entered again while its block is open.

``ahg.race_check()`` returns a block object that may be entered again while it is open (a
nested ``with`` of the same object, or a function it decorates called inside its own
``with`` block). Leaving the inner block turned the whole check off: ``active`` said False
while the outer block was still open, and the races of that task then went to whichever
check was entered last anywhere (another task's, in its mode) instead of its own.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy

N = 16


@ahg.kernel
def fill(t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.float32]) -> None:
    out[:n] = 1.0


@pytest.mark.asyncio
async def test_a_check_entered_again_stays_active_until_its_outer_block_ends() -> None:
    check = ahg.race_check(on_race="collect")
    with check as outer:
        with check as inner:
            assert inner is outer
        assert outer.active  # the outer block is still open
    assert not outer.active


@pytest.mark.asyncio
async def test_a_decorated_call_inside_the_same_check_leaves_it_active(
    device: ahg.Device,
) -> None:
    check = ahg.race_check(on_race="collect")
    buf = device.malloc(N * 4)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)

    @check
    async def ordered() -> None:
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s1.synchronize()

    with check as rc:
        await ordered()
        assert rc.active
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s2.launch_kernel(fill, 1, N, (N, buf))  # unordered with s1's write
        await device.synchronize()
    assert [r.kind for r in rc.reports] == ["write-after-write"]
    assert not rc.active
    destroy(buf, s1, s2)


@pytest.mark.asyncio
async def test_a_race_after_an_inner_exit_goes_to_its_own_check_not_another_tasks(
    device: ahg.Device,
) -> None:
    """Task A's collect check, entered twice and left once, still takes A's races; task B's
    raise check, entered after that, neither raises in A nor gets A's report."""
    buf = device.malloc(N * 4)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    a_left_inner = asyncio.Event()
    b_entered = asyncio.Event()
    a_done = asyncio.Event()
    b_reports: list[ahg.RaceReport] = []

    async def task_b() -> None:
        await a_left_inner.wait()
        with ahg.race_check(on_race="raise") as rb:  # entered last anywhere
            b_entered.set()
            await a_done.wait()
        b_reports.extend(rb.reports)

    async def task_a() -> list[ahg.RaceReport]:
        check = ahg.race_check(on_race="collect")
        try:
            with check as ra:
                with check:
                    pass
                a_left_inner.set()
                await b_entered.wait()
                await s1.launch_kernel(fill, 1, N, (N, buf))
                await s2.launch_kernel(fill, 1, N, (N, buf))  # races: must not raise here
                await device.synchronize()
            return ra.reports
        finally:
            a_done.set()

    async with asyncio.timeout(5):
        b = asyncio.create_task(task_b())
        a_reports = await asyncio.create_task(task_a())
        await b
    assert [r.kind for r in a_reports] == ["write-after-write"]
    assert b_reports == []
    destroy(buf, s1, s2)


# -- graph.to_dot(races=...) --------------------------------------------------------------------


def test_dot_refuses_a_race_report_of_another_graph(device: ahg.Device) -> None:
    """A report of another graph (a clone's included) was drawn as that graph's nodes and
    edge, outside every cluster of this graph's text: phantom nodes, silently."""
    buf = device.malloc(N * 4)
    graph = ahg.Graph()
    graph.add_kernel_node(fill, 1, N, (N, buf))
    graph.add_kernel_node(fill, 1, N, (N, buf))
    clone = graph.clone()
    other = ahg.Graph()
    other.add_kernel_node(fill, 1, N, (N, buf))
    other.add_kernel_node(fill, 1, N, (N, buf))
    (own,) = graph.check_races()
    (cloned,) = clone.check_races()
    (foreign,) = other.check_races()
    plain = graph.to_dot()
    for report in (cloned, foreign):
        with pytest.raises(ValueError, match="not a node of"):
            graph.to_dot(races=[own, report])
    drawn = graph.to_dot(races=[own])
    assert drawn != plain
    assert "add this edge" in drawn
    assert f"graph_{other.id}_" not in drawn
    assert f"graph_{clone.id}_" not in drawn
    destroy(graph, clone, other, buf)


def test_dot_draws_a_race_inside_child_graphs_and_bodies(device: ahg.Device) -> None:
    buf = device.malloc(N * 4)
    child = ahg.Graph()
    child.add_kernel_node(fill, 1, N, (N, buf))
    graph = ahg.Graph()
    graph.add_child_graph_node(child)
    handle = graph.conditional_handle(1)
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_child_graph_node(child)
    reports = graph.check_races()
    assert reports
    drawn = graph.to_dot(races=reports)
    assert "add this edge" in drawn
    destroy(graph, child, buf)
