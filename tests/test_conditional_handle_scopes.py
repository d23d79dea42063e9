"""Which conditional node a kernel's handle argument reaches, across child-graph copies.

Each child-graph node runs its own copy of a graph holding conditional nodes, with its own value
of the handles they read. A kernel sets the value of the nearest copy around it whose
conditional nodes read the handle, or else the executable's own. A kernel outside a copy (in
the parent graph, or in a sibling child graph) setting a handle only that copy reads would
write a value no conditional node reads, and its node would run on its default: instantiate
refuses it (``InvalidValue``), changing nothing. A kernel inside a child graph setting the
parent's handle reaches the parent's node, and stays allowed.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot

K = ahg.ConditionalKind


@ahg.kernel
def setter(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = value


def guarded(x: ahg.DevicePtr) -> tuple[ahg.Graph, ahg.ConditionalHandle, ahg.GraphNode]:
    """An IF node (default 0: off) that writes 42 to x[0]; the graph, handle and node."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    node, (body,) = graph.add_conditional_node(handle, K.If)
    body.add_kernel_node(put, 1, 1, (42, x))
    return graph, handle, node


@pytest.mark.parametrize("where", ["parent", "sibling child graph"])
def test_a_kernel_setting_a_handle_only_another_copy_reads_is_refused(
    device: ahg.Device, where: str
) -> None:
    x = device.malloc(4)
    inner, handle, _ = guarded(x)
    outer = ahg.Graph()
    if where == "parent":
        first = outer.add_kernel_node(setter, 1, 1, (1, handle))
    else:
        sibling = ahg.Graph()
        sibling.add_kernel_node(setter, 1, 1, (1, handle))
        first = outer.add_child_graph_node(sibling)
        sibling.destroy()
    outer.add_child_graph_node(inner, deps=[first])
    baseline = leak_snapshot()
    with pytest.raises(ahg.InvalidValue, match="inside a child graph it is not part of"):
        outer.instantiate()
    assert leak_report(baseline) is None
    for graph in (outer, inner):
        graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_kernel_inside_a_child_graph_sets_the_parents_handle(device: ahg.Device) -> None:
    x = device.malloc(4)
    outer, handle, conditional = guarded(x)
    child = ahg.Graph()
    child.add_kernel_node(setter, 1, 1, (1, handle))
    node = outer.add_child_graph_node(child)
    outer.add_dependencies([node], [conditional])
    with outer.instantiate() as graph_exec, device.create_stream() as stream:
        await (await graph_exec.launch(stream))
    assert device.view(x, np.int32, 1).tolist() == [42]
    for graph in (outer, child):
        graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_kernel_inside_the_copy_sets_its_own_handle(device: ahg.Device) -> None:
    x = device.malloc(4)
    inner, handle, conditional = guarded(x)
    first = inner.add_kernel_node(setter, 1, 1, (1, handle))
    inner.add_dependencies([first], [conditional])
    outer = ahg.Graph()
    outer.add_child_graph_node(inner)
    with outer.instantiate() as graph_exec, device.create_stream() as stream:
        await (await graph_exec.launch(stream))
    assert device.view(x, np.int32, 1).tolist() == [42]
    for graph in (outer, inner):
        graph.destroy()
    device.free(x)
