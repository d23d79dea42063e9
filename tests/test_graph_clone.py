"""Clone: an independent deep copy that keeps node identity, and find_in_clone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from cleanup import destroy


def noop(*_: Any) -> None:
    pass


def shape(graph: ahg.Graph) -> tuple[list[tuple[int, ahg.NodeType]], list[tuple[int, int]]]:
    """What a clone must reproduce: node ids and types in order, and edges by id."""
    return (
        [(node.id, node.type) for node in graph.nodes()],
        [(src.id, dst.id) for src, dst in graph.edges()],
    )


def test_clone_is_a_deep_copy_with_the_same_ids(device: ahg.Device) -> None:
    buf = device.malloc(64)
    graph = ahg.Graph()
    a = graph.add_memset_node(buf, 1, 64)
    b = graph.add_host_node(noop, (1,), deps=[a])
    c = graph.add_empty_node(deps=[a])
    graph.add_empty_node(deps=[b, c])
    copy = graph.clone()
    assert copy is not graph
    assert copy.id != graph.id
    assert copy.original is graph
    assert shape(copy) == shape(graph)
    for original, twin in zip(graph.nodes(), copy.nodes(), strict=True):
        assert twin is not original
        assert twin.graph is copy
        assert twin.hid != original.hid
        assert twin.params == original.params
    destroy(buf, graph, copy)


def test_clone_is_independent_both_ways(device: ahg.Device) -> None:
    buf = device.malloc(64)
    graph = ahg.Graph()
    a = graph.add_memset_node(buf, 1, 64)
    b = graph.add_empty_node(deps=[a])
    copy = graph.clone()
    a2, b2 = copy.find_in_clone(a), copy.find_in_clone(b)
    graph.add_empty_node(deps=[b])
    graph.remove_dependencies(a, b)
    a.set_memset_params(buf, 9, 8)
    assert a2.params.value == 1
    assert b2.dependencies() == [a2]
    assert len(copy.nodes()) == 2
    b2.destroy()
    copy.add_empty_node()
    assert b.alive
    assert len(graph.nodes()) == 3
    graph.destroy()
    assert copy.nodes()[0] is a2  # the copy outlives its original
    assert a2.params.value == 1
    destroy(buf, copy)


def test_find_in_clone() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    copy = graph.clone()
    twin = copy.find_in_clone(b)
    assert twin.id == b.id
    assert twin.graph is copy
    assert twin.dependencies() == [copy.find_in_clone(a)]
    destroy(graph, copy)


def test_find_in_clone_fails_for_nodes_added_after_cloning() -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    copy = graph.clone()
    late = graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        copy.find_in_clone(late)
    added_to_copy = copy.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        copy.find_in_clone(added_to_copy)  # a node of the clone itself is not an original
    destroy(graph, copy)


def test_find_in_clone_fails_for_foreign_destroyed_and_removed_nodes() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node()
    copy = graph.clone()
    unrelated = ahg.Graph()
    stranger = unrelated.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        copy.find_in_clone(stranger)
    with pytest.raises(ahg.InvalidValue):
        graph.find_in_clone(a)  # graph is not a clone
    with pytest.raises(ahg.InvalidValue):
        copy.find_in_clone(None)  # type: ignore[arg-type]
    copy.find_in_clone(b).destroy()
    with pytest.raises(ahg.InvalidValue):
        copy.find_in_clone(b)  # its copy was destroyed
    a.destroy()
    with pytest.raises(ahg.InvalidValue):
        copy.find_in_clone(a)  # the original handle is dead
    destroy(graph, copy, unrelated)


def test_clone_of_a_clone_finds_nodes_of_any_ancestor() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    first = graph.clone()
    second = first.clone()
    assert second.original is first
    assert second.find_in_clone(a).id == a.id
    assert second.find_in_clone(first.find_in_clone(a)).id == a.id
    destroy(graph, first, second)


def test_clone_copies_child_graphs_deeply() -> None:
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    node = graph.add_child_graph_node(child)
    copy = graph.clone()
    twin = copy.find_in_clone(node)
    embedded, embedded_copy = node.params.graph, twin.params.graph
    assert embedded_copy is not embedded
    assert embedded_copy.owner_node is twin
    assert shape(embedded_copy) == shape(embedded)
    embedded.add_empty_node()
    assert len(embedded_copy.nodes()) == 1
    copy.destroy()
    assert embedded_copy.destroyed
    assert not embedded.destroyed
    destroy(child, graph)


def test_clone_of_empty_and_cyclic_graphs() -> None:
    original = ahg.Graph()
    empty = original.clone()
    assert empty.nodes() == []
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    graph.add_dependencies(b, a)
    copy = graph.clone()
    assert [(s.id, d.id) for s, d in copy.edges()] == [(a.id, b.id), (b.id, a.id)]
    destroy(empty, graph, copy, original)


def test_clone_statistics_match() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    graph.add_empty_node(deps=[a])
    child = ahg.Graph()
    graph.add_child_graph_node(child, deps=[a])
    copy = graph.clone()
    ours, theirs = graph.statistics(), copy.statistics()
    assert (ours.nodes, ours.edges, ours.roots, ours.child_graphs) == (
        theirs.nodes,
        theirs.edges,
        theirs.roots,
        theirs.child_graphs,
    )
    destroy(graph, copy, child)


@settings(max_examples=50, deadline=None)
@given(
    count=st.integers(min_value=0, max_value=20),
    data=st.data(),
)
def test_random_dag_clone_is_isomorphic(count: int, data: st.DataObject) -> None:
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    edges = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=40)) if pairs else []
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(count)]
    if edges:
        graph.add_dependencies([nodes[i] for i, _ in edges], [nodes[j] for _, j in edges])
    copy = graph.clone()
    assert shape(copy) == shape(graph)
    twins = {node: copy.find_in_clone(node) for node in nodes}
    for node, twin in twins.items():
        assert [twins[d] for d in node.dependencies()] == twin.dependencies()
        assert [twins[s] for s in node.dependents()] == twin.dependents()
    copy.destroy()
    graph.destroy()
