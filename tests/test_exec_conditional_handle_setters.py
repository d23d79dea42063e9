"""Executable setters and updates giving a kernel a conditional handle the executable has no
value for.

An executable gives each handle its cells when it is made, for the nodes that use it then. New
kernel parameters passing another handle (one of another graph, or one made after
instantiate) would leave the handle's token in the arguments, and every launch would then fail
on the device with a bad address. The setters refuse it
(``InvalidValue``) and ``exec.update`` fails (``ParametersChanged``, naming the node), changing
nothing: the executable launches on as before.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from conditional_kernels import guarded, runs_the_body, set_handle


def with_setter(x: ahg.DevicePtr) -> tuple[ahg.Graph, ahg.ConditionalHandle, ahg.GraphNode]:
    """``set_handle(1, h)`` then the guarded IF; the graph, its handle and the setter node."""
    graph, handle, conditional = guarded(x)
    decide = graph.add_kernel_node(set_handle, 1, 1, (1, handle))
    graph.add_dependencies([decide], [conditional])
    return graph, handle, decide


@pytest.mark.asyncio
@pytest.mark.parametrize("whose", ["another graph's", "made after instantiate"])
async def test_a_setter_refuses_a_handle_the_executable_has_no_value_for(
    device: ahg.Device, whose: str
) -> None:
    x = device.malloc(4)
    graph, _, decide = with_setter(x)
    other = ahg.Graph()
    with graph.instantiate() as graph_exec:
        stranger = (other if whose == "another graph's" else graph).conditional_handle()
        arena = graph_exec.statistics().arena
        with pytest.raises(ahg.InvalidValue, match="has no value in this executable"):
            graph_exec.set_kernel_node_params(decide, set_handle, 1, 1, (1, stranger))
        assert graph_exec.statistics().arena == arena
        assert await runs_the_body(device, graph_exec, x)
    for g in (graph, other):
        g.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_an_update_passing_a_handle_made_after_instantiate_fails(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph, _, decide = with_setter(x)
    with graph.instantiate() as graph_exec:
        later = graph.conditional_handle()
        new = graph.clone()
        new.find_in_clone(decide).set_kernel_params(set_handle, 1, 1, (1, later))
        with pytest.raises(ahg.GraphExecUpdateFailure) as failure:
            graph_exec.update(new)
        result = failure.value.result  # type: ignore[attr-defined]
        assert result.kind is ahg.UpdateResultKind.ParametersChanged
        assert result.node is new.find_in_clone(decide)
        assert "has no value in this executable" in result.reason
        assert await runs_the_body(device, graph_exec, x)
    for g in (graph, new):
        g.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_child_graph_setter_refuses_a_handle_the_executable_has_no_value_for(
    device: ahg.Device,
) -> None:
    x = device.malloc(4)
    outer, handle, _ = with_setter(x)
    child = ahg.Graph()
    child.add_kernel_node(set_handle, 1, 1, (1, handle))  # the parent's handle: reaches its node
    node = outer.add_child_graph_node(child)
    with outer.instantiate() as graph_exec:
        stranger = ahg.Graph()
        replacement = ahg.Graph()
        replacement.add_kernel_node(set_handle, 1, 1, (1, stranger.conditional_handle()))
        with pytest.raises(ahg.InvalidValue, match="has no value in this executable"):
            graph_exec.set_child_graph_node_params(node, replacement)
        assert await runs_the_body(device, graph_exec, x)
    for g in (outer, child, stranger, replacement):
        g.destroy()
    device.free(x)
