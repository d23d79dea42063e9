"""Edges and topology queries: a diamond, HIP's edge rules, cycles, random DAGs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from cleanup import destroy


def diamond() -> tuple[ahg.Graph, ahg.GraphNode, ahg.GraphNode, ahg.GraphNode, ahg.GraphNode]:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    c = graph.add_empty_node(deps=[a])
    d = graph.add_empty_node(deps=[b, c])
    return graph, a, b, c, d


# -- queries on a diamond ------------------------------------------------------------------------


def test_diamond_queries() -> None:
    graph, a, b, c, d = diamond()
    assert graph.nodes() == [a, b, c, d]
    assert graph.root_nodes() == [a]
    assert graph.edges() == [(a, b), (a, c), (b, d), (c, d)]
    assert a.dependencies() == []
    assert a.dependents() == [b, c]
    assert d.dependencies() == [b, c]
    assert d.dependents() == []
    destroy(graph)


def test_topological_order_is_kahn_with_insertion_order_fifo() -> None:
    # Insert the sink first: insertion order alone would be wrong, Kahn's order is not.
    graph = ahg.Graph()
    sink = graph.add_empty_node()
    x = graph.add_empty_node()
    y = graph.add_empty_node()
    z = graph.add_empty_node(deps=[y])
    graph.add_dependencies([z, x], [sink, sink])
    # Roots in insertion order (x, y), then successors as their in-degree reaches 0.
    assert graph.nodes() == [x, y, z, sink]
    assert graph.root_nodes() == [x, y]
    assert sink.dependencies() == [z, x]  # edge insertion order
    destroy(graph)


def test_successors_are_visited_in_edge_order() -> None:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    late = graph.add_empty_node()
    early = graph.add_empty_node()
    graph.add_dependencies([root, root], [early, late])
    assert graph.nodes() == [root, early, late]
    destroy(graph)


def test_empty_graph_queries() -> None:
    graph = ahg.Graph()
    assert graph.nodes() == []
    assert graph.root_nodes() == []
    assert graph.edges() == []
    destroy(graph)


# -- add_dependencies / remove_dependencies ------------------------------------------------------


def test_add_and_remove_dependencies() -> None:
    graph = ahg.Graph()
    a, b, c = (graph.add_empty_node() for _ in range(3))
    graph.add_dependencies([a, a], [b, c])
    graph.add_dependencies(b, c)  # single nodes are accepted
    assert graph.edges() == [(a, b), (a, c), (b, c)]
    graph.remove_dependencies([a], [c])
    assert graph.edges() == [(a, b), (b, c)]
    assert c.dependencies() == [b]
    graph.add_dependencies([], [])  # nothing to do is fine
    assert graph.statistics().edges == 2
    destroy(graph)


@pytest.mark.parametrize("bad", ["self", "null_from", "null_to", "foreign", "destroyed", "exists"])
def test_add_dependencies_rejects_bad_pairs_and_adds_nothing(bad: str) -> None:
    graph, a, b, c, _ = diamond()
    foreign = ahg.Graph()
    other = foreign.add_empty_node()
    gone = graph.add_empty_node()
    gone.destroy()
    pairs = {
        "self": (b, b),
        "null_from": (None, b),
        "null_to": (b, None),
        "foreign": (other, b),
        "destroyed": (gone, b),
        "exists": (a, b),
    }
    src, dst = pairs[bad]
    before = graph.edges()
    with pytest.raises(ahg.InvalidValue):
        # A valid pair first: HIP would add it before failing; here nothing is added.
        graph.add_dependencies([b, src], [c, dst])  # type: ignore[list-item]
    assert graph.edges() == before
    destroy(graph, foreign)


def test_add_dependencies_rejects_a_pair_given_twice() -> None:
    graph = ahg.Graph()
    a, b = graph.add_empty_node(), graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        graph.add_dependencies([a, a], [b, b])
    assert graph.edges() == []
    destroy(graph)


def test_dependency_lists_must_have_equal_length() -> None:
    graph, a, b, c, _ = diamond()
    with pytest.raises(ValueError, match="from-nodes"):
        graph.add_dependencies([a, b], [c])
    with pytest.raises(ValueError, match="from-nodes"):
        graph.remove_dependencies([a], [b, c])
    destroy(graph)


@pytest.mark.parametrize("bad", ["missing", "foreign", "null", "twice", "self"])
def test_remove_dependencies_rules(bad: str) -> None:
    graph, a, b, c, d = diamond()
    foreign = ahg.Graph()
    other = foreign.add_empty_node()
    pairs = {
        "missing": ([a, b], [b, c]),
        "foreign": ([a, other], [b, d]),
        "null": ([a, None], [b, d]),
        "twice": ([a, a], [b, b]),
        "self": ([a, b], [b, b]),
    }
    froms, tos = pairs[bad]
    before = graph.edges()
    with pytest.raises(ahg.InvalidValue):
        graph.remove_dependencies(froms, tos)  # type: ignore[arg-type]
    assert graph.edges() == before
    destroy(graph, foreign)


# -- cycles --------------------------------------------------------------------------------------


def test_cycle_is_accepted_when_added_and_reported_when_ordered() -> None:
    graph, a, b, c, d = diamond()
    graph.add_dependencies(d, a)  # accepted, as in HIP
    assert (d, a) in graph.edges()
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.nodes()
    assert graph.root_nodes() == []  # the other queries still work
    copy = graph.clone()  # so does cloning
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        copy.nodes()
    graph.remove_dependencies(d, a)  # breaking the cycle makes it orderable again
    assert graph.nodes() == [a, b, c, d]
    destroy(copy, graph)


def test_two_node_cycle_with_an_acyclic_part() -> None:
    graph = ahg.Graph()
    free = graph.add_empty_node()
    x = graph.add_empty_node()
    y = graph.add_empty_node(deps=[x])
    graph.add_dependencies(y, x)
    with pytest.raises(ahg.InvalidValue):
        graph.nodes()
    assert graph.root_nodes() == [free]
    x.destroy()
    assert graph.nodes() == [free, y]
    destroy(graph)


def test_cycle_inside_a_child_graph_does_not_affect_parent_order() -> None:
    child = ahg.Graph()
    p = child.add_empty_node()
    q = child.add_empty_node(deps=[p])
    child.add_dependencies(q, p)
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    assert parent.nodes() == [node]
    with pytest.raises(ahg.InvalidValue):
        node.params.graph.nodes()
    destroy(child, parent)


# -- random DAGs ---------------------------------------------------------------------------------


@st.composite
def dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    """A node count and edges i -> j with i < j (so acyclic), each edge at most once."""
    count = draw(st.integers(min_value=0, max_value=24))
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=60)) if pairs else []
    return count, edges


def build(count: int, edges: list[tuple[int, int]], split: int) -> tuple[ahg.Graph, list]:
    """Build the DAG: the first ``split`` edges are given as ``deps=`` when the node is added,
    the rest are added afterwards with one add_dependencies call."""
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode | None] = [None] * count
    as_deps = edges[:split]
    for index in range(count):
        deps = [nodes[i] for i, j in as_deps if j == index]
        nodes[index] = graph.add_empty_node(deps=deps)  # type: ignore[arg-type]
    later = edges[split:]
    if later:
        graph.add_dependencies([nodes[i] for i, _ in later], [nodes[j] for _, j in later])  # type: ignore[misc]
    return graph, nodes


@settings(max_examples=60, deadline=None)
@given(dag=dags(), split_fraction=st.floats(min_value=0, max_value=1))
def test_random_dag_order_respects_every_edge(
    dag: tuple[int, list[tuple[int, int]]], split_fraction: float
) -> None:
    count, edges = dag
    graph, nodes = build(count, edges, int(len(edges) * split_fraction))
    order = graph.nodes()
    assert sorted(n.id for n in order) == sorted(n.id for n in nodes)  # type: ignore[union-attr]
    position = {node: i for i, node in enumerate(order)}
    for src, dst in graph.edges():
        assert position[src] < position[dst]
    assert len(graph.edges()) == len(edges)
    expected_roots = [nodes[j] for j in range(count) if all(e[1] != j for e in edges)]
    assert graph.root_nodes() == expected_roots
    for node in order:
        assert all(position[dep] < position[node] for dep in node.dependencies())
        assert all(position[node] < position[succ] for succ in node.dependents())
    graph.destroy()


@settings(max_examples=40, deadline=None)
@given(dag=dags(), data=st.data())
def test_random_dag_back_edge_makes_a_cycle(
    dag: tuple[int, list[tuple[int, int]]], data: st.DataObject
) -> None:
    count, edges = dag
    if not edges:
        return
    graph, nodes = build(count, edges, len(edges))
    with graph:  # destroyed even when Hypothesis stops the example inside data.draw
        i, j = data.draw(st.sampled_from(edges))
        graph.add_dependencies(nodes[j], nodes[i])  # type: ignore[arg-type]
        with pytest.raises(ahg.InvalidValue):
            graph.nodes()
        graph.remove_dependencies(nodes[j], nodes[i])  # type: ignore[arg-type]
        assert len(graph.nodes()) == count


def test_edge_lists_may_be_any_iterable_as_deps_may() -> None:
    graph = ahg.Graph()
    a, b, c = (graph.add_empty_node() for _ in range(3))
    graph.add_dependencies((node for node in (a, b)), iter([c, c]))
    assert set(c.dependencies()) == {a, b}
    graph.remove_dependencies(iter([a]), (node for node in [c]))
    assert c.dependencies() == [b]
    graph.destroy()


@pytest.mark.parametrize("bad", [5, 1.5, object()])
def test_an_edge_list_that_is_no_iterable_is_named_in_the_error(bad: object) -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    with pytest.raises(TypeError, match="to_nodes must be a GraphNode or an iterable"):
        graph.add_dependencies(a, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_nodes must be a GraphNode or an iterable"):
        graph.remove_dependencies(bad, a)  # type: ignore[arg-type]
    assert graph.edges() == []
    graph.destroy()
