"""``find_in_clone`` answers on either graph of a clone pair, as API.md promises.

``clone.find_in_clone(node)`` finds the clone's copy of an original node (HIP's
``hipGraphNodeFindInClone``). API.md also lets a user ask the other graph
(``graph.find_in_clone(node)`` "or on the clone"): the original, asked with a node of its
clone, answers the node that node was copied from.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


def test_the_original_finds_the_node_a_clone_node_was_copied_from() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    copy = graph.clone()
    twin = copy.find_in_clone(b)  # on the clone: as HIP
    try:
        assert graph.find_in_clone(twin) is b  # on the original: the way back
        assert graph.find_in_clone(copy.find_in_clone(a)) is a
        deeper = copy.clone()  # a clone of a clone, either way round
        assert graph.find_in_clone(deeper.find_in_clone(b)) is b
        deeper.destroy()
    finally:
        destroy(graph, copy)


def test_the_clone_finds_its_copy_and_unrelated_graphs_are_refused() -> None:
    """The clone finds its copies; a graph neither clone nor original of the node's refuses."""
    graph = ahg.Graph()
    a = graph.add_empty_node()
    copy = graph.clone()
    assert copy.find_in_clone(a).id == a.id
    unrelated = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        unrelated.find_in_clone(copy.find_in_clone(a))
    with pytest.raises(ahg.InvalidValue, match="not clones of one another"):
        copy.find_in_clone(unrelated.add_empty_node())
    destroy(graph, copy, unrelated)


def test_the_original_refuses_a_clone_node_it_has_no_source_for() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    copy = graph.clone()
    added = copy.add_empty_node()  # made in the clone: copied from nothing
    with pytest.raises(ahg.InvalidValue, match="was not copied from"):
        graph.find_in_clone(added)
    twin = copy.find_in_clone(a)
    a.destroy()  # its source is gone
    with pytest.raises(ahg.InvalidValue, match="was not copied from"):
        graph.find_in_clone(twin)
    copy.destroy()
    with pytest.raises(ahg.InvalidValue):  # a node of a destroyed clone
        graph.find_in_clone(twin)
    graph.destroy()
