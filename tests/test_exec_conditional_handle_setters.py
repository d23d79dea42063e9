"""Executable setters and updates giving a kernel a conditional handle the executable has no
value for.

An executable gives each handle its cells when it is made, for the nodes that use it then. New
kernel parameters passing another handle (one of another graph, one made after instantiate, or
any handle to an executable made without one) would leave the handle's token in the arguments,
and every launch would then fail on the device with a bad address. The setters refuse it
(``InvalidValue``) and ``exec.update`` fails (``ParametersChanged``, naming the node), changing
nothing: the executable launches on as before.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

K = ahg.ConditionalKind


@ahg.kernel
def setter(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = value


def guarded(x: ahg.DevicePtr) -> tuple[ahg.Graph, ahg.ConditionalHandle, ahg.GraphNode]:
    """``setter(1, h)`` then IF h: x[0] = 42; the graph, its handle and the setter node."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    decide = graph.add_kernel_node(setter, 1, 1, (1, handle))
    _, (body,) = graph.add_conditional_node(handle, K.If, deps=[decide])
    body.add_kernel_node(put, 1, 1, (42, x))
    return graph, handle, decide


async def launches_as_before(
    device: ahg.Device, graph_exec: ahg.GraphExec, x: ahg.DevicePtr
) -> None:
    device.view(x, np.int32, 1)[:] = 0
    with device.create_stream() as stream:
        await (await graph_exec.launch(stream))
    assert device.view(x, np.int32, 1).tolist() == [42]


@pytest.mark.asyncio
@pytest.mark.parametrize("whose", ["another graph's", "made after instantiate"])
async def test_a_setter_refuses_a_handle_the_executable_has_no_value_for(
    device: ahg.Device, whose: str
) -> None:
    x = device.malloc(4)
    graph, _, decide = guarded(x)
    other = ahg.Graph()
    with graph.instantiate() as graph_exec:
        stranger = (other if whose == "another graph's" else graph).conditional_handle()
        arena = graph_exec.statistics().arena
        with pytest.raises(ahg.InvalidValue, match="has no value in this executable"):
            graph_exec.set_kernel_node_params(decide, setter, 1, 1, (1, stranger))
        assert graph_exec.statistics().arena == arena
        await launches_as_before(device, graph_exec, x)
    for g in (graph, other):
        g.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_an_update_passing_a_handle_made_after_instantiate_fails(device: ahg.Device) -> None:
    x = device.malloc(4)
    graph, _, decide = guarded(x)
    with graph.instantiate() as graph_exec:
        later = graph.conditional_handle()
        new = graph.clone()
        new.find_in_clone(decide).set_kernel_params(setter, 1, 1, (1, later))
        with pytest.raises(ahg.GraphExecUpdateFailure) as failure:
            graph_exec.update(new)
        result = failure.value.result  # type: ignore[attr-defined]
        assert result.kind is ahg.UpdateResultKind.ParametersChanged
        assert result.node is new.find_in_clone(decide)
        assert "has no value in this executable" in result.reason
        await launches_as_before(device, graph_exec, x)
    for g in (graph, new):
        g.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_child_graph_setter_refuses_a_handle_the_executable_has_no_value_for(
    device: ahg.Device,
) -> None:
    x = device.malloc(4)
    outer, handle, _ = guarded(x)
    child = ahg.Graph()
    child.add_kernel_node(setter, 1, 1, (1, handle))  # the parent's handle: reaches its node
    node = outer.add_child_graph_node(child)
    with outer.instantiate() as graph_exec:
        stranger = ahg.Graph()
        replacement = ahg.Graph()
        replacement.add_kernel_node(setter, 1, 1, (1, stranger.conditional_handle()))
        with pytest.raises(ahg.InvalidValue, match="has no value in this executable"):
            graph_exec.set_child_graph_node_params(node, replacement)
        await launches_as_before(device, graph_exec, x)
    for g in (outer, child, stranger, replacement):
        g.destroy()
    device.free(x)
