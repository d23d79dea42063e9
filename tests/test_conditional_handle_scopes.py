"""Which conditional node a kernel's handle argument reaches, across child-graph copies.

Each child-graph node runs its own copy of a graph holding conditional nodes, with its own value
of the handles they read. A kernel sets the value of the nearest copy around it whose
conditional nodes read the handle, or else the executable's own. A kernel outside a copy (in
the parent graph, or in a sibling child graph) setting a handle only that copy reads would
write a value no conditional node reads, and its node would run on its default: instantiate
refuses it (``InvalidValue``), changing nothing, as it refuses a kernel setting an unrelated
graph's handle that no conditional node of the executable reads. A kernel inside a child graph
setting the parent's handle reaches the parent's node, and stays allowed.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot
from conditional_kernels import guarded, runs_the_body, set_handle


@pytest.mark.parametrize("where", ["parent", "sibling child graph"])
def test_a_kernel_setting_a_handle_only_another_copy_reads_is_refused(
    device: ahg.Device, where: str
) -> None:
    x = device.malloc(4)
    inner, handle, _ = guarded(x)
    outer = ahg.Graph()
    if where == "parent":
        first = outer.add_kernel_node(set_handle, 1, 1, (1, handle))
    else:
        sibling = ahg.Graph()
        sibling.add_kernel_node(set_handle, 1, 1, (1, handle))
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
@pytest.mark.parametrize("setter_in", ["the child graph, for the parent", "the copy, for itself"])
async def test_a_kernel_inside_reaches_the_node(device: ahg.Device, setter_in: str) -> None:
    x = device.malloc(4)
    guarded_graph, handle, conditional = guarded(x)
    setting = ahg.Graph() if setter_in.startswith("the child") else guarded_graph
    first = setting.add_kernel_node(set_handle, 1, 1, (1, handle))
    if setting is guarded_graph:  # the guarded graph runs as a child graph
        guarded_graph.add_dependencies([first], [conditional])
        outer = ahg.Graph()
        outer.add_child_graph_node(guarded_graph)
    else:  # the setting graph runs as a child graph of the guarded one
        outer = guarded_graph
        node = outer.add_child_graph_node(setting)
        outer.add_dependencies([node], [conditional])
    with outer.instantiate() as graph_exec:
        assert await runs_the_body(device, graph_exec, x)
    for graph in {id(g): g for g in (outer, guarded_graph, setting)}.values():
        graph.destroy()
    device.free(x)


def test_a_kernel_setting_an_unrelated_graphs_handle_is_refused(device: ahg.Device) -> None:
    """Another graph's handle, read by no conditional node of the executable: the kernel
    would set a value only this executable holds, never the other graph's node."""
    x = device.malloc(4)
    other, handle, _ = guarded(x)
    graph = ahg.Graph()
    graph.add_kernel_node(set_handle, 1, 1, (1, handle))
    baseline = leak_snapshot()
    with pytest.raises(ahg.InvalidValue, match="belongs to another graph"):
        graph.instantiate()
    assert leak_report(baseline) is None
    for g in (graph, other):
        g.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_kernel_setting_its_own_graphs_handle_that_nothing_reads_runs(
    device: ahg.Device,
) -> None:
    """The graph's own handle, its conditional node removed: setting it is harmless."""
    x = device.malloc(4)
    graph, handle, conditional = guarded(x)
    graph.add_kernel_node(set_handle, 1, 1, (1, handle))
    conditional.destroy()
    with graph.instantiate() as graph_exec, device.create_stream() as stream:
        await (await graph_exec.launch(stream))
    graph.destroy()
    device.free(x)
