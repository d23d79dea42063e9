"""Graphs and executables, audited as a user of HIP graphs would: each test is a case where
the library differed from what HIP_SEMANTICS.md, API.md or its own documentation promise.

Each refused call is shown to change nothing (the executable's ``statistics()`` before and
after), and every handle a test makes is given back.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@ahg.kernel
def close_branch(t: ahg.Threads, handle: ahg.CondHandle) -> None:
    ahg.set_conditional(handle, 0)


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


def _conditional_first(graph: ahg.Graph, out: ahg.DevicePtr) -> ahg.GraphNode:
    """An IF node (the graph's first node) whose body writes ``out``."""
    handle = graph.conditional_handle(default=1)
    node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_kernel_node(put, 1, 1, (1, out))
    return node


def _update_failure(graph_exec: ahg.GraphExec, graph: ahg.Graph) -> ahg.UpdateResult:
    before = graph_exec.statistics()
    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        graph_exec.update(graph)
    assert graph_exec.statistics() == before  # a refused update changed nothing
    result: ahg.UpdateResult = info.value.result  # type: ignore[attr-defined]
    return result


# -- exec.update names the first node that fails, in the graph's order (HIP_SEMANTICS §5.2) ------


def test_update_names_a_changed_conditional_before_a_later_node_s_freed_memory(
    device: ahg.Device,
) -> None:
    """§5.2: HIP checks index by index; a conditional node whose body changed comes first in
    the new graph, so it is the error node, not the memset after it whose memory was freed."""
    out = device.malloc(8)
    graph = ahg.Graph()
    conditional = _conditional_first(graph, out)
    fill = graph.add_memset_node(out, 0, 8, deps=[conditional])
    graph_exec = graph.instantiate()
    new = graph.clone()
    new.find_in_clone(conditional).params.bodies[0].add_empty_node()
    gone = device.malloc(8)
    new.find_in_clone(fill).set_memset_params(gone, 0, 8)
    device.free(gone)
    result = _update_failure(graph_exec, new)
    assert result.kind is ahg.UpdateResultKind.ParametersChanged
    assert result.node is new.find_in_clone(conditional)
    assert "conditional node" in result.reason
    destroy(graph_exec, graph, new, out)


def test_update_names_a_changed_conditional_before_a_later_kernel_s_unknown_handle(
    device: ahg.Device,
) -> None:
    """§5.2: a kernel passing a handle the executable has no value for fails only after the
    changed conditional node ahead of it in the graph's order."""
    out = device.malloc(8)
    graph = ahg.Graph()
    conditional = _conditional_first(graph, out)
    handle = conditional.params.handle
    kernel = graph.add_kernel_node(close_branch, 1, 1, (handle,), deps=[conditional])
    graph_exec = graph.instantiate()
    new = graph.clone()
    new.find_in_clone(conditional).params.bodies[0].add_empty_node()
    unknown = new.conditional_handle()  # made after instantiate: the executable has no value
    new.find_in_clone(kernel).set_kernel_params(close_branch, 1, 1, (unknown,))
    result = _update_failure(graph_exec, new)
    assert result.node is new.find_in_clone(conditional)
    assert "conditional node" in result.reason
    destroy(graph_exec, graph, new, out)


def test_update_names_a_kernel_over_the_device_s_limits_before_a_later_changed_conditional(
    device: ahg.Device,
) -> None:
    """§5.2: a kernel the executable's device cannot run fails its SetParams before the
    changed conditional node after it is reached."""
    small = ahg.DeviceProperties(max_threads_per_block=256)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    out = ahg.get_device(0).malloc(8)
    graph = ahg.Graph()
    kernel = graph.add_kernel_node(tick, 1, 64)
    handle = graph.conditional_handle(default=1)
    conditional, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If, deps=[kernel])
    body.add_kernel_node(put, 1, 1, (1, out))
    graph_exec = graph.instantiate(device=ahg.get_device(1))
    new = graph.clone()
    new.find_in_clone(kernel).set_kernel_params(tick, 1, 512)  # over device 1's 256 threads
    new.find_in_clone(conditional).params.bodies[0].add_empty_node()
    result = _update_failure(graph_exec, new)
    assert result.kind is ahg.UpdateResultKind.NotSupported
    assert result.node is new.find_in_clone(kernel)
    destroy(graph_exec, graph, new, out)


# -- exec.set_child_graph_node_params: the child's whole shape first (HIP_SEMANTICS §5.1) --------


@pytest.mark.parametrize("later_change", ["freed memory", "unknown handle"])
def test_child_setter_reports_changed_conditional_bodies_before_a_later_node_s_parameters(
    device: ahg.Device, later_change: str
) -> None:
    """§5.1: ``validateChildGraphNodeSetParams`` compares the whole child before any node's
    ``SetParams`` (Unknown). An executable keeps the bodies it was made with, so changed
    bodies are a shape change, reported before the InvalidValue of a node after them."""
    out = device.malloc(8)
    child = ahg.Graph()
    conditional = _conditional_first(child, out)
    handle = conditional.params.handle
    fill = child.add_memset_node(out, 0, 8, deps=[conditional])
    kernel = child.add_kernel_node(close_branch, 1, 1, (handle,), deps=[fill])
    graph = ahg.Graph()
    node = graph.add_child_graph_node(child)
    graph_exec = graph.instantiate()
    new = child.clone()
    new.find_in_clone(conditional).params.bodies[0].add_empty_node()
    if later_change == "freed memory":
        gone = device.malloc(8)
        new.find_in_clone(fill).set_memset_params(gone, 0, 8)
        device.free(gone)
    else:
        unknown = new.conditional_handle()
        new.find_in_clone(kernel).set_kernel_params(close_branch, 1, 1, (unknown,))
    before = graph_exec.statistics()
    with pytest.raises(ahg.Unknown, match="child graph does not match: a conditional node"):
        graph_exec.set_child_graph_node_params(node, new)
    assert graph_exec.statistics() == before
    destroy(graph_exec, graph, child, new, out)


# -- a conditional body's host copy, compared without numpy's elementwise == ----------------------


def _body_copy_to_host(graph: ahg.Graph, out: ahg.DevicePtr, host: np.ndarray) -> ahg.GraphNode:
    """An IF node whose body copies ``out`` into the host array ``host``."""
    handle = graph.conditional_handle(default=1)
    node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_memcpy_node(host, out, 8)
    return node


@pytest.mark.parametrize("other", ["equal contents", "other contents", "other size"])
def test_update_refuses_a_body_copy_into_another_host_array_as_a_changed_body(
    device: ahg.Device, other: str
) -> None:
    """An executable keeps the bodies it was made with: a body copy into another host array
    is a changed body (ParametersChanged, naming the conditional node), not numpy's
    ValueError from comparing the two arrays element by element."""
    out = device.malloc(8)
    host = np.zeros(2, np.int64)
    graph = ahg.Graph()
    conditional = _body_copy_to_host(graph, out, host)
    graph_exec = graph.instantiate()
    same = graph.clone()
    assert graph_exec.update(same).kind is ahg.UpdateResultKind.Success  # the same array
    new = graph.clone()
    array = {
        "equal contents": np.zeros(2, np.int64),
        "other contents": np.ones(2, np.int64),
        "other size": np.zeros(3, np.int64),
    }[other]
    new.find_in_clone(conditional).params.bodies[0].nodes()[0].set_memcpy_params(array, out, 8)
    result = _update_failure(graph_exec, new)
    assert result.kind is ahg.UpdateResultKind.ParametersChanged
    assert result.node is new.find_in_clone(conditional)
    destroy(graph_exec, graph, same, new, out)


def test_child_setter_refuses_a_body_copy_into_another_host_array_as_another_shape(
    device: ahg.Device,
) -> None:
    """The child-graph setter's answer for changed bodies (Unknown), not numpy's ValueError."""
    out = device.malloc(8)
    child = ahg.Graph()
    conditional = _body_copy_to_host(child, out, np.zeros(2, np.int64))
    graph = ahg.Graph()
    node = graph.add_child_graph_node(child)
    graph_exec = graph.instantiate()
    new = child.clone()
    body = new.find_in_clone(conditional).params.bodies[0]
    body.nodes()[0].set_memcpy_params(np.zeros(2, np.int64), out, 8)
    before = graph_exec.statistics()
    with pytest.raises(ahg.Unknown, match="child graph does not match: a conditional node"):
        graph_exec.set_child_graph_node_params(node, new)
    assert graph_exec.statistics() == before
    destroy(graph_exec, graph, child, new, out)


@pytest.mark.asyncio
async def test_update_keeps_a_body_whose_edges_were_added_in_another_order(
    device: ahg.Device,
) -> None:
    """DESIGN: an update compares each node's set of dependencies, so the same edges added in
    another order are the same topology; a conditional body is compared by the same rule,
    not refused as a changed body."""
    out = device.malloc(16)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    conditional, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    first = body.add_kernel_node(put, 1, 1, (1, out))
    second = body.add_kernel_node(put, 1, 1, (2, out + 8))
    body.add_kernel_node(put, 1, 1, (3, out), deps=[first, second])
    graph_exec = graph.instantiate()
    new = graph.clone()
    new_body = new.find_in_clone(conditional).params.bodies[0]
    join = new_body.nodes()[-1]
    deps = join.dependencies()
    new_body.remove_dependencies(deps, [join, join])
    new_body.add_dependencies(deps[::-1], [join, join])
    assert join.dependencies() == deps[::-1]
    assert graph_exec.update(new).kind is ahg.UpdateResultKind.Success
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert device.view(out, np.int64, 2).tolist() == [3, 2]
    destroy(graph_exec, graph, new, stream, out)


# -- a child graph's kernel may set its own graph's handle, as in that graph alone ----------------


@pytest.mark.asyncio
@pytest.mark.parametrize("depth", [1, 2])
async def test_a_child_graph_s_kernel_setting_its_own_unread_handle_is_instantiated_as_alone(
    device: ahg.Device, depth: int
) -> None:
    """A graph whose kernel sets its own handle that no conditional node reads instantiates
    (the value is simply unread); embedded as a child graph (at any depth) it is the same
    graph, not a kernel setting another graph's handle."""
    child = ahg.Graph()
    child.add_kernel_node(close_branch, 1, 1, (child.conditional_handle(),))
    child.instantiate().destroy()  # alone: accepted
    made = [child]
    for _ in range(depth):
        parent = ahg.Graph()
        parent.add_child_graph_node(made[-1])
        made.append(parent)
    stream = device.create_stream()
    with made[-1].instantiate() as graph_exec:
        await (await graph_exec.launch(stream))
    destroy(stream, *made)


def test_a_kernel_setting_a_child_graph_s_unread_handle_is_still_refused(
    device: ahg.Device,
) -> None:
    """The handle of a graph inside this one is not this graph's: a kernel of the enclosing
    graph setting it, with nothing reading it, is refused as before."""
    child = ahg.Graph()
    handle = child.conditional_handle()
    child.add_kernel_node(close_branch, 1, 1, (handle,))
    graph = ahg.Graph()
    graph.add_child_graph_node(child)
    graph.add_kernel_node(close_branch, 1, 1, (handle,))
    before = device.statistics()
    with pytest.raises(ahg.InvalidValue, match="belongs to another graph"):
        graph.instantiate()
    assert device.statistics() == before
    destroy(graph, child)
