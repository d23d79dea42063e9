"""Errors naming a node's type read as English: "an Empty node", "a Kernel node"."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.graph.node_type import a_node_of_type


@ahg.kernel
def nothing(t: ahg.Threads) -> None:
    """A kernel without arguments."""


def test_an_exec_setter_on_a_node_of_another_type_names_it_with_its_article() -> None:
    graph = ahg.Graph()
    empty = graph.add_empty_node()
    graph_exec = graph.instantiate()
    try:
        with pytest.raises(ahg.InvalidValue, match="is an Empty node, not Kernel"):
            graph_exec.set_kernel_node_params(empty, nothing, 1, 1, ())
    finally:
        graph_exec.destroy()
        graph.destroy()


def test_the_article_follows_the_type_name() -> None:
    assert a_node_of_type(ahg.NodeType.Empty) == "an Empty node"
    assert a_node_of_type(ahg.NodeType.EventRecord) == "an EventRecord node"
    assert a_node_of_type(ahg.NodeType.Kernel) == "a Kernel node"
    assert a_node_of_type(ahg.NodeType.MemAlloc) == "a MemAlloc node"
