"""A conditional node touches what its bodies' nodes touch, at the node's place: whether a
body runs is decided on the device, so the dynamic checker (a launch's footprint) and the
static check (the node against its unordered siblings) both count every body's nodes, on a
plain graph (``graph.check_races()``) as at instantiate, however deep the body.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy, run_once


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


def _body_in_if(graph: ahg.Graph) -> tuple[ahg.GraphNode, ahg.Graph]:
    """A top-level IF node and its body."""
    handle = graph.conditional_handle(default=1)
    node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    return node, body


def _plain_body(graph: ahg.Graph, a: ahg.DevicePtr) -> ahg.GraphNode:
    node, body = _body_in_if(graph)
    body.add_kernel_node(bump, 1, 1, (a,))
    return node


def _body_in_a_body(graph: ahg.Graph, a: ahg.DevicePtr) -> ahg.GraphNode:
    node, body = _body_in_if(graph)
    handle = body.conditional_handle(default=1)
    _, (inner,) = body.add_conditional_node(handle, ahg.ConditionalKind.While)
    inner.add_kernel_node(bump, 1, 1, (a,))
    return node


def _child_graph_in_a_body(graph: ahg.Graph, a: ahg.DevicePtr) -> ahg.GraphNode:
    node, body = _body_in_if(graph)
    child = ahg.Graph()
    child.add_kernel_node(bump, 1, 1, (a,))
    body.add_child_graph_node(child)
    child.destroy()
    return node


def _body_in_a_child_graph(graph: ahg.Graph, a: ahg.DevicePtr) -> ahg.GraphNode:
    child = ahg.Graph()
    _plain_body(child, a)
    node = graph.add_child_graph_node(child)
    child.destroy()
    return node


BODIES = {
    "a body": _plain_body,
    "a body inside a body": _body_in_a_body,
    "a child graph inside a body": _child_graph_in_a_body,
    "a body inside a child graph": _body_in_a_child_graph,
}


def _fill_then_body(
    device: ahg.Device, where: str, ordered: bool
) -> tuple[ahg.Graph, ahg.DevicePtr]:
    """A fill of an allocation, and ``where`` a conditional body writes it: after the fill
    (an edge to the node holding the body) or unordered."""
    a = device.malloc(256)
    graph = ahg.Graph()
    fill = graph.add_memset_node(a, 0, 256)
    holder = BODIES[where](graph, a)
    if ordered:
        graph.add_dependencies(fill, holder)
    return graph, a


@pytest.mark.parametrize("where", BODIES)
def test_a_plain_graph_check_reports_a_conditional_body_as_instantiate_does(
    device: ahg.Device, where: str
) -> None:
    graph, a = _fill_then_body(device, where, ordered=False)
    reports = graph.check_races()
    with pytest.raises(ahg.RaceError) as refused:
        graph.instantiate(check_races=True)
    assert [str(r) for r in reports] == [str(r) for r in refused.value.reports]
    (report,) = reports
    assert report.kind == "write-after-write"
    assert report.second.precision == "conservative"  # the body's kernel, not the node itself
    destroy(graph, a)


@pytest.mark.parametrize("where", BODIES)
def test_a_plain_graph_check_sees_a_conditional_body_ordered_by_an_edge(
    device: ahg.Device, where: str
) -> None:
    graph, a = _fill_then_body(device, where, ordered=True)
    assert graph.check_races() == []
    destroy(graph.instantiate(check_races=True), graph, a)


def test_a_plain_graph_check_sees_a_body_that_instantiate_would_refuse(
    device: ahg.Device,
) -> None:
    """A body holding a host node cannot be instantiated, but the check needs no device
    work: it still counts what the host function declares at the conditional node."""
    a = device.malloc(256)
    graph = ahg.Graph()
    graph.add_memset_node(a, 0, 256)
    _, body = _body_in_if(graph)
    body.add_host_node(ahg.host_function(lambda: None, writes=[a]))
    (report,) = graph.check_races()
    assert report.kind == "write-after-write"
    assert report.second.op.endswith("(Conditional)")
    with pytest.raises(ahg.NotSupported):
        graph.instantiate()
    destroy(graph, a)


@pytest.mark.asyncio
async def test_an_update_racing_a_conditional_body_is_refused_and_changes_nothing(
    device: ahg.Device,
) -> None:
    """``check_races=True`` promises an executable with no unordered conflicting pair: an
    update aiming an unordered sibling at the memory a body writes is checked against the
    body, refused with the report instantiate would give, and the executable runs as before."""
    a, b = device.malloc(256), device.malloc(256)
    graph = ahg.Graph()
    fill = graph.add_memset_node(a, 1, 256)  # no edge to the conditional node
    _, body = _body_in_if(graph)
    body.add_kernel_node(bump, 1, 1, (b,))
    exe = graph.instantiate(check_races=True)
    fill.set_memset_params(b, 1, 256)  # now the fill writes what the body writes
    with pytest.raises(ahg.RaceError) as refused:
        exe.update(graph)
    (report,) = refused.value.reports
    assert str(report) == str(graph.check_races()[0])
    assert report.second.op.endswith("(Conditional)")
    await device.memset(b, 0, 256)
    await run_once(exe, device)
    assert int(device.view(a, "uint8", 1, readonly=True)[0]) == 1  # the fill kept its target
    assert int(device.view(b, "int32", 1, readonly=True)[0]) == 1  # the body bumped a zero
    destroy(exe, graph, a, b)


def test_an_update_changing_a_conditional_body_is_refused_so_the_check_stands(
    device: ahg.Device,
) -> None:
    """An executable keeps the bodies it was made with: an update that changes a body (here
    into a race with an unordered sibling) is refused whether or not it would race, so what
    ``check_races=True`` proved at instantiate still holds."""
    a, b = device.malloc(256), device.malloc(256)
    graph = ahg.Graph()
    graph.add_memset_node(a, 1, 256)
    _, body = _body_in_if(graph)
    kernel_node = body.add_kernel_node(bump, 1, 1, (b,))
    exe = graph.instantiate(check_races=True)
    kernel_node.set_kernel_params(bump, 1, 1, (a,))  # the body now writes what the fill writes
    assert len(graph.check_races()) == 1
    with pytest.raises(ahg.GraphExecUpdateFailure) as refused:
        exe.update(graph)
    assert refused.value.result.kind is ahg.UpdateResultKind.ParametersChanged
    with pytest.raises(ahg.InvalidValue):  # nor can a setter reach a body's node
        exe.set_kernel_node_params(kernel_node, bump, 1, 1, (a,))
    destroy(exe, graph, a, b)
