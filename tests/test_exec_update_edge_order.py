"""Whole-graph update: a join whose edges were added in another order.

``exec.update`` compared each node's dependency positions as an ordered tuple, so a graph
rebuilt with ``c`` depending on ``[b, a]`` instead of ``[a, b]`` — the same topology — was
refused as TopologyChanged. HIP compares the dependency count and CUDA the edge set; either
accepts it. The same comparison serves ``set_child_graph_node_params`` (HIP's hipErrorUnknown
for a real change), which refused such a child too. Another set of dependencies is still a
change.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


def _join(ptr: ahg.DevicePtr, out: np.ndarray, value: int, order: str) -> ahg.Graph:
    """Two memsets into ``ptr``'s halves, then a copy of both to ``out`` joining them."""
    graph = ahg.Graph()
    halves = {
        "a": graph.add_memset_node(ptr, value, 8),
        "b": graph.add_memset_node(ptr + 8, value + 1, 8),
    }
    graph.add_memcpy_node(out, ptr, 16, deps=[halves[name] for name in order])
    return graph


@pytest.mark.asyncio
async def test_update_accepts_the_same_join_with_its_edges_in_another_order(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(16)
    out = np.zeros(16, np.uint8)
    graph = _join(ptr, out, 1, "ab")
    graph_exec = graph.instantiate()
    swapped = _join(ptr, out, 5, "ba")
    result = graph_exec.update(swapped)
    assert result.kind is ahg.UpdateResultKind.Success
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert out.tolist() == [5] * 8 + [6] * 8  # the new values, copied after both memsets
    # Another set of dependencies is still a change: the copy no longer waits for b.
    other = ahg.Graph()
    a = other.add_memset_node(ptr, 1, 8)
    other.add_memset_node(ptr + 8, 2, 8)
    other.add_memcpy_node(out, ptr, 16, deps=[a])
    with pytest.raises(ahg.GraphExecUpdateFailure, match="TopologyChanged"):
        graph_exec.update(other)
    destroy(graph_exec, graph, swapped, other, stream, ptr)


@pytest.mark.asyncio
async def test_child_graph_setter_accepts_the_same_join_with_its_edges_in_another_order(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(16)
    out = np.zeros(16, np.uint8)
    child = _join(ptr, out, 1, "ab")
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    graph_exec = parent.instantiate()
    swapped = _join(ptr, out, 7, "ba")
    graph_exec.set_child_graph_node_params(node, swapped)
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert out.tolist() == [7] * 8 + [8] * 8
    destroy(graph_exec, parent, child, swapped, stream, ptr)
