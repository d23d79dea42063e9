"""An executable made with ``check_races=True`` is as independent of its graph as any other.

Its race checker named the user's nodes in later setter and update reports by holding the
graph and its nodes: a graph dropped right after ``instantiate(check_races=True)`` was never
freed while the executable lived (no ForgottenHandleWarning, still registered, its user
objects and nodes kept). The checker now holds them weakly: while they live, reports name
them as before; once they are gone, reports name the executable's own nodes.
"""

from __future__ import annotations

import gc
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import registry_statistics
from cleanup import destroy


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def forget(box: list[Any]) -> list[str]:
    """Drop the handles in ``box`` (the test's only references), collect them, and return the
    ForgottenHandleWarning messages given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    assert all(issubclass(w.category, ahg.ForgottenHandleWarning) for w in caught)
    return [str(w.message) for w in caught]


def _plain(graph: ahg.Graph, buf: ahg.DevicePtr) -> None:
    first = graph.add_kernel_node(bump, 1, 1, (buf,))
    graph.add_memset_node(buf + 64, 0, 64, deps=first)


def _with_child_graph(graph: ahg.Graph, buf: ahg.DevicePtr) -> None:
    child = ahg.Graph()
    _plain(child, buf)
    graph.add_child_graph_node(child)
    child.destroy()


def _with_conditional(graph: ahg.Graph, buf: ahg.DevicePtr) -> None:
    _, (body,) = graph.add_conditional_node(graph.conditional_handle(1), ahg.ConditionalKind.If)
    _plain(body, buf)


def _with_conditional_in_child(graph: ahg.Graph, buf: ahg.DevicePtr) -> None:
    child = ahg.Graph()
    _with_conditional(child, buf)
    graph.add_child_graph_node(child)
    child.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "build", [_plain, _with_child_graph, _with_conditional, _with_conditional_in_child]
)
async def test_a_forgotten_graph_is_freed_while_its_race_checked_executable_lives(
    device: ahg.Device, build: Callable[[ahg.Graph, ahg.DevicePtr], None]
) -> None:
    buf = device.malloc(256)
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, "obj")
    live_before = registry_statistics()
    box: list[Any] = [ahg.Graph()]
    build(box[0], buf)
    box[0].retain_user_object(obj, move=True)
    graph_exec = box[0].instantiate(check_races=True)
    assert obj.refcount == 2  # the graph's and the executable's
    gone = weakref.ref(box[0])
    messages = forget(box)
    gc.collect()
    assert gone() is None
    assert any(message.startswith("unclosed graph #") for message in messages)
    live_after = registry_statistics()
    for registry in ("graph", "graph node"):
        assert live_after[registry].live == live_before[registry].live
    assert obj.refcount == 1
    await (await graph_exec.launch())  # still runs: it has its own copy
    assert ran == []
    graph_exec.destroy()
    assert ran == ["obj"]
    destroy(buf)


def _two_memsets(buf: ahg.DevicePtr, other: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_memset_node(buf, 1, 64)
    graph.add_kernel_node(bump, 1, 1, (other,))  # no edge: fine while the buffers differ
    return graph


def test_an_update_of_an_executable_whose_graph_is_gone_still_reports_its_race(
    device: ahg.Device,
) -> None:
    buf, other = device.malloc(256), device.malloc(256)
    box: list[Any] = [_two_memsets(buf, other)]
    graph_exec = box[0].instantiate(check_races=True)
    memset, kernel = (f"node {node.id}" for node in box[0].nodes())
    gone = weakref.ref(box[0])
    forget(box)
    gc.collect()
    assert gone() is None
    racing = ahg.Graph()
    racing.add_memset_node(buf, 1, 64)
    racing.add_kernel_node(bump, 1, 1, (buf,))  # now on the memset's buffer, unordered
    with pytest.raises(ahg.RaceError) as caught:
        graph_exec.update(racing)
    (report,) = caught.value.reports
    assert report.kind == "write-after-write"
    assert report.first.op == f"{memset} (Memset)"
    assert report.second.op == f"{kernel} (Kernel 'bump')"
    assert report.first.node is None
    assert report.second.node is None
    assert report.fix_edge is None
    assert report.fix == (
        f"add an edge from {memset} (Memset) to {kernel} (Kernel 'bump') in their graph"
    )
    destroy(graph_exec, racing, buf, other)


def test_a_destroyed_graph_s_dropped_nodes_are_not_kept_and_an_update_still_reports(
    device: ahg.Device,
) -> None:
    buf, other = device.malloc(256), device.malloc(256)
    graph = _two_memsets(buf, other)
    node = graph.nodes()[1]
    kernel = f"node {node.id} (Kernel 'bump')"
    graph_exec = graph.instantiate(check_races=True)
    graph.destroy()
    gone = weakref.ref(node)
    del node
    gc.collect()
    assert gone() is None
    racing = ahg.Graph()
    racing.add_memset_node(buf, 1, 64)
    racing.add_kernel_node(bump, 1, 1, (buf,))
    with pytest.raises(ahg.RaceError) as caught:
        graph_exec.update(racing)
    (report,) = caught.value.reports
    assert report.second.op == kernel
    assert report.second.node is None
    assert report.fix_edge is None
    destroy(graph_exec, racing, buf, other)


def _child_then_memset(target: ahg.DevicePtr, buf: ahg.DevicePtr) -> ahg.Graph:
    graph, child = ahg.Graph(), ahg.Graph()
    child.add_kernel_node(bump, 1, 1, (target,))
    graph.add_child_graph_node(child)
    child.destroy()
    graph.add_memset_node(buf, 0, 64)  # no edge to the child-graph node
    return graph


def test_an_update_still_reports_a_race_inside_a_child_graph_whose_graph_is_gone(
    device: ahg.Device,
) -> None:
    buf, other = device.malloc(256), device.malloc(256)
    box: list[Any] = [_child_then_memset(other, buf)]
    graph_exec = box[0].instantiate(check_races=True)
    holder = box[0].nodes()[0]
    child_level = f"child graph of node {holder.id}"
    del holder
    gone = weakref.ref(box[0])
    forget(box)
    gc.collect()
    assert gone() is None
    racing = _child_then_memset(buf, buf)  # the child's kernel now writes the memset's buffer
    with pytest.raises(ahg.RaceError) as caught:
        graph_exec.update(racing)
    (report,) = caught.value.reports
    assert report.first.where == child_level
    assert report.first.op.endswith("(Kernel 'bump')")
    assert report.first.node is None
    assert report.fix_edge is None
    assert report.fix.startswith("add an edge from ")
    destroy(graph_exec, racing, buf, other)
