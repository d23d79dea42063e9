"""Two nodes inside one conditional body race when the body's own edges do not order them.

A body is a graph: within one run of it (an IF or SWITCH choice, one WHILE iteration) only
its edges order its nodes, so ``graph.check_races()`` and ``instantiate(check_races=True)``
compare a body's nodes with each other, as they compare a graph's, however deep the body
lies (inside another body, or holding a child graph). Iterations of a WHILE body run one
after another, so a node of one iteration is ordered after every node of the one before.
Two bodies of one node never run together, so they are not compared with each other.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import ahipgraph as ahg
from cleanup import destroy, run_once


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def _body(graph: ahg.Graph, kind: ahg.ConditionalKind = ahg.ConditionalKind.If) -> ahg.Graph:
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, kind)
    return body


def _if_body(graph: ahg.Graph) -> ahg.Graph:
    return _body(graph)


def _while_body(graph: ahg.Graph) -> ahg.Graph:
    return _body(graph, ahg.ConditionalKind.While)


def _body_inside_a_body(graph: ahg.Graph) -> ahg.Graph:
    return _body(_body(graph), ahg.ConditionalKind.While)


def _body_inside_a_child_graph(graph: ahg.Graph) -> ahg.Graph:
    """The body of an IF node inside a child graph: the child node's copy of it."""
    child = ahg.Graph()
    _body(child)
    node = graph.add_child_graph_node(child)
    child.destroy()
    (conditional,) = node.get_child_graph().nodes()
    (body,) = conditional.params.bodies
    return body


WHERE: dict[str, Callable[[ahg.Graph], ahg.Graph]] = {
    "an IF body": _if_body,
    "a WHILE body": _while_body,
    "a body inside a body": _body_inside_a_body,
    "a body inside a child graph": _body_inside_a_child_graph,
}


def _pair(
    device: ahg.Device, where: str, ordered: bool
) -> tuple[ahg.Graph, ahg.Graph, ahg.GraphNode, ahg.GraphNode, ahg.DevicePtr]:
    """A graph whose body (``where``) fills an allocation and bumps it: after the fill (an
    edge in the body) or unordered. Nothing else in the graph touches it."""
    a = device.malloc(256)
    graph = ahg.Graph()
    body = WHERE[where](graph)
    fill = body.add_memset_node(a, 0, 256)
    kernel = body.add_kernel_node(bump, 1, 1, (a,), deps=[fill] if ordered else [])
    return graph, body, fill, kernel, a


@pytest.mark.parametrize("where", WHERE)
def test_an_unordered_pair_inside_a_body_is_reported_and_refused(
    device: ahg.Device, where: str
) -> None:
    graph, body, fill, kernel, a = _pair(device, where, ordered=False)
    reports = graph.check_races()
    (report,) = reports
    assert report.kind == "write-after-write"
    assert report.first.op == f"node {fill.id} (Memset)"
    assert report.second.op == f"node {kernel.id} (Kernel 'bump')"
    assert report.first.where == report.second.where == f"graph {body.id}"
    assert report.fix_edge == (fill, kernel)
    assert report.first.node is fill
    assert report.second.node is kernel
    with pytest.raises(ahg.RaceError) as refused:
        graph.instantiate(check_races=True)
    assert [str(r) for r in refused.value.reports] == [str(r) for r in reports]
    destroy(graph, a)


@pytest.mark.parametrize("where", WHERE)
def test_a_pair_ordered_by_the_bodys_edge_is_not_reported(device: ahg.Device, where: str) -> None:
    """With the edge, a WHILE body's bump of one iteration and fill of the next conflict
    too, but the runtime runs an iteration to its end before it reads the handle again
    (``ConditionalOp.run``): they are ordered, and nothing is reported."""
    graph, _, _, _, a = _pair(device, where, ordered=True)
    assert graph.check_races() == []
    destroy(graph.instantiate(check_races=True), graph, a)


def test_a_child_graph_inside_a_body_is_compared_with_its_siblings(device: ahg.Device) -> None:
    a = device.malloc(256)
    graph = ahg.Graph()
    body = _body(graph)
    fill = body.add_memset_node(a, 0, 256)
    child = ahg.Graph()
    child.add_kernel_node(bump, 1, 1, (a,))
    holder = body.add_child_graph_node(child)
    child.destroy()
    (report,) = graph.check_races()
    assert report.first.op == f"node {fill.id} (Memset)"
    assert report.second.op.endswith("(Kernel 'bump')")
    assert report.second.where == f"child graph of node {holder.id}"
    assert report.fix_edge == (fill, holder)  # the edge goes in the body, to the child node
    with pytest.raises(ahg.RaceError):
        graph.instantiate(check_races=True)
    body.add_dependencies(fill, holder)
    assert graph.check_races() == []
    destroy(graph, a)


def test_two_bodies_of_one_node_are_not_compared(device: ahg.Device) -> None:
    """An IF with an else runs one of its two bodies, never both."""
    a = device.malloc(256)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, bodies = graph.add_conditional_node(handle, ahg.ConditionalKind.If, size=2)
    for body in bodies:
        body.add_kernel_node(bump, 1, 1, (a,))
    assert graph.check_races() == []
    destroy(graph, a)


@pytest.mark.asyncio
async def test_the_dynamic_checker_leaves_pairs_inside_a_launch_to_the_static_check(
    device: ahg.Device,
) -> None:
    """The dynamic checker sees a launch as one op touching what all its nodes (bodies
    included) touch, checked against the world: the order between one launch's nodes is
    the declared edges, which the static check reads. It reports a pair inside a body
    exactly as it reports one between top-level nodes: neither, so the same launch is
    refused by ``instantiate(check_races=True)`` instead."""
    graph, _, _, _, a = _pair(device, "an IF body", ordered=False)
    flat = ahg.Graph()
    flat.add_memset_node(a, 0, 256)
    flat.add_kernel_node(bump, 1, 1, (a,))
    assert len(graph.check_races()) == len(flat.check_races()) == 1
    executables = [graph.instantiate(), flat.instantiate()]
    with ahg.race_check(on_race="collect") as rc:
        for exe in executables:
            await run_once(exe, device)
    assert rc.reports == []
    assert int(device.view(a, "int32", 1, readonly=True)[0]) == 1  # each body ran once
    destroy(*executables, graph, flat, a)
