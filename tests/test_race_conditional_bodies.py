"""A conditional node touches what its bodies' nodes touch, at the node's place: whether a
body runs is decided on the device, so the dynamic checker (a launch's footprint) and the
static check (the node against its unordered siblings) both count every body's nodes.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


@pytest.mark.asyncio
@pytest.mark.parametrize("check_races", [False, True])
async def test_a_conditional_body_races_with_unordered_eager_work(check_races: bool) -> None:
    device = ahg.get_device(0)
    a = device.malloc(256)
    s1, s2 = (device.create_stream(non_blocking=True) for _ in range(2))
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_kernel_node(bump, 1, 1, (a,))
    executable = graph.instantiate(check_races=check_races)
    with ahg.race_check(on_race="collect") as rc:
        await s1.memset(a, 0, 256)
        await executable.launch(s2)  # the body writes a, after nothing of s1
        await device.synchronize()
    for done in (executable, graph, s1, s2):
        done.destroy()
    device.free(a)
    (report,) = rc.reports
    assert report.kind == "write-after-write"


def test_the_static_check_sees_a_conditional_body_against_its_siblings() -> None:
    device = ahg.get_device(0)
    a = device.malloc(256)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    graph.add_memset_node(a, 0, 256)  # no edge to the conditional node
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_kernel_node(bump, 1, 1, (a,))
    with pytest.raises(ahg.RaceError):
        graph.instantiate(check_races=True)
    graph.destroy()
    device.free(a)
