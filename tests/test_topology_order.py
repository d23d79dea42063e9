"""``Graph.nodes()`` is Kahn's order with an insertion-order FIFO, whatever shape the graph has.

The ordering walks chains without queueing and counts only roots and joins; these tests hold it
to a plain Kahn's algorithm written from the public accessors, over random graphs with edges
added and removed afterwards (which leave one-element and empty dependency lists behind).
"""

from __future__ import annotations

import random
from collections import deque

import pytest

import ahipgraph as ahg
from ahipgraph.graph.topology import ordered_columns


def _reference_order(graph: ahg.Graph) -> list[ahg.GraphNode]:
    """Kahn's algorithm: roots in insertion order, successors in edge order, FIFO."""
    members = graph.root_nodes()
    every: list[ahg.GraphNode] = []
    seen: set[ahg.GraphNode] = set()
    stack = list(members)
    while stack:  # every node, reachable or not, found through the edges
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        every.append(node)
        stack.extend(node.dependents())
        stack.extend(node.dependencies())
    indegree = {node: len(node.dependencies()) for node in every}
    ready = deque(members)
    order = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for succ in node.dependents():
            indegree[succ] -= 1
            if not indegree[succ]:
                ready.append(succ)
    return order


def _random_graph(rng: random.Random, size: int) -> ahg.Graph:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for _ in range(size):
        roll = rng.random()
        if not nodes or roll < 0.1:
            deps: list[ahg.GraphNode] = []
        elif roll < 0.6:
            deps = [nodes[-1]]  # a chain link
        elif roll < 0.8:
            deps = [rng.choice(nodes)]  # a fork
        else:
            deps = rng.sample(nodes, min(len(nodes), rng.randint(2, 4)))  # a join
        nodes.append(graph.add_empty_node(deps=deps))
    for _ in range(size // 5):  # edits that leave other forms of the edge lists behind
        src, dst = sorted(rng.sample(range(size), 2))
        a, b = nodes[src], nodes[dst]
        if b in a.dependents():
            graph.remove_dependencies(a, b)
        else:
            graph.add_dependencies(a, b)
    return graph


@pytest.mark.parametrize("seed", range(40))
def test_nodes_is_kahns_order_on_random_graphs(seed: int) -> None:
    rng = random.Random(seed)
    graph = _random_graph(rng, rng.randint(1, 60))
    try:
        order = graph.nodes()
        assert order == _reference_order(graph)
        assert len(order) == len(set(order))
        # What a snapshot takes: the same order, its dependency columns from the same walk.
        same, first, multi = ordered_columns(graph)
        assert same == order
        assert (list(first), multi) == _general_dep_indices(order)
    finally:
        graph.destroy()


def test_chain_fork_and_join_orders() -> None:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    left = [graph.add_empty_node(deps=[root])]
    right = [graph.add_empty_node(deps=[root])]
    for _ in range(3):
        left.append(graph.add_empty_node(deps=[left[-1]]))
        right.append(graph.add_empty_node(deps=[right[-1]]))
    join = graph.add_empty_node(deps=[left[-1], right[-1]])
    tail = graph.add_empty_node(deps=[join])
    # Breadth first across the branches, as HIP orders them: the chain walk must not run
    # one branch ahead of the other while the other is queued.
    expected = [root, *[n for pair in zip(left, right, strict=True) for n in pair], join, tail]
    assert graph.nodes() == expected
    graph.destroy()


def test_cycle_is_invalid_value_and_lone_dependency_cycles_too() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    c = graph.add_empty_node(deps=[b])
    graph.add_dependencies(c, b)  # b now has two dependencies: a and c
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.nodes()
    graph.destroy()
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    graph.add_dependencies(b, a)  # a cycle of lone dependencies, no root at all
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.nodes()
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        ordered_columns(graph)
    graph.destroy()


def _general_dep_indices(
    order: list[ahg.GraphNode],
) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    position = {node: index for index, node in enumerate(order)}
    first: list[int] = []
    multi: dict[int, tuple[int, ...]] = {}
    for index, node in enumerate(order):
        deps = node.dependencies()
        if len(deps) == 1 and type(node._deps) is ahg.GraphNode:
            first.append(position[deps[0]])
        else:
            first.append(-1)
            multi[index] = tuple(position[dep] for dep in deps)
    return first, multi
