"""A child-graph node cannot take its own graph, nor the graph that one was cloned from.

HIP's ``validateChildGraphNodeSetParams`` serves ``hipGraphNodeSetParams`` and
``hipGraphExecChildGraphNodeSetParams`` alike: a null or destroyed graph is InvalidValue; the
node's own parent graph, or the graph that parent was cloned from, is ``hipErrorUnknown``.
The node setters (``set_child_graph``, ``set_params``) took either, and the executable's setter
refused only the parent itself. Adding a graph as its own child stays allowed (HIP's hip-test:
the copy is taken before the node exists).
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


def test_the_node_setters_refuse_the_nodes_own_graph(device: ahg.Device) -> None:
    graph = ahg.Graph()
    inner = ahg.Graph()
    inner.add_empty_node()
    node = graph.add_child_graph_node(inner)
    embedded = node.get_child_graph()
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        node.set_child_graph(graph)
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        node.set_params(ahg.ChildGraphParams(graph))
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        node.set_params(ahg.GraphNodeParams(ahg.NodeType.Graph, graph))
    assert node.get_child_graph() is embedded  # nothing was swapped
    assert graph.statistics().nodes == 1
    itself = graph.add_child_graph_node(graph)  # adding a graph as its own child is allowed
    assert itself.get_child_graph().statistics().nodes == 1
    destroy(graph, inner)


def test_a_clone_refuses_the_graph_it_was_cloned_from(device: ahg.Device) -> None:
    graph = ahg.Graph()
    inner = ahg.Graph()
    inner.add_empty_node()
    graph.add_child_graph_node(inner)
    clone = graph.clone()
    node = clone.nodes()[0]
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        node.set_child_graph(graph)
    graph_exec = clone.instantiate()
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        graph_exec.set_child_graph_node_params(node, graph)
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        graph_exec.set_child_graph_node_params(node, clone)
    replacement = ahg.Graph()  # the same shape from any other graph is accepted
    replacement.add_empty_node()
    graph_exec.set_child_graph_node_params(node, replacement)
    node.set_child_graph(replacement)
    destroy(graph_exec, graph, clone, inner, replacement)


def test_a_null_or_destroyed_graph_is_checked_first(device: ahg.Device) -> None:
    original, inner = ahg.Graph(), ahg.Graph()
    original.add_child_graph_node(inner)
    clone = original.clone()
    node = clone.nodes()[0]
    original.destroy()  # the graph the clone came from, now destroyed: InvalidValue first
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        node.set_child_graph(original)
    with pytest.raises(ahg.InvalidValue, match="null"):
        node.set_child_graph(None)  # type: ignore[arg-type]
    destroy(clone, inner)
