"""Adversarial iterables for ``Graph.add_dependencies`` / ``remove_dependencies``.

Any iterable of nodes is read once; whatever goes wrong (the iterable raises, an entry is not
a node, the sides differ in length) leaves the graph's edges as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.fixture
def graph() -> Iterator[ahg.Graph]:
    with ahg.Graph() as graph:
        yield graph


def _raising(first: ahg.GraphNode) -> Iterator[ahg.GraphNode]:
    yield first
    raise RuntimeError("the iterable failed midway")


@pytest.mark.parametrize("op", ["add", "remove"])
def test_bad_iterables_change_nothing(graph: ahg.Graph, op: str) -> None:
    a, b, c = (graph.add_empty_node() for _ in range(3))
    graph.add_dependencies([a], [c])
    before = graph.edges()
    call: Callable[..., None] = graph.add_dependencies if op == "add" else graph.remove_dependencies
    with pytest.raises(RuntimeError, match="midway"):
        call(_raising(a), [b, c])
    with pytest.raises(RuntimeError, match="midway"):
        call([a, b], _raising(c))
    with pytest.raises(TypeError, match="GraphNode"):
        call([a, 1], [b, c])
    with pytest.raises(TypeError, match="GraphNode"):
        call("ab", "cd")
    with pytest.raises(TypeError, match="from_nodes"):
        call(5, b)
    with pytest.raises(TypeError, match="to_nodes"):
        call(a, 5.0)
    with pytest.raises(ValueError, match="1 from-nodes but 2 to-nodes"):
        call(iter([a]), iter([b, c]))
    with pytest.raises(ahg.InvalidValue, match="null"):
        call(None, b)
    other = ahg.Graph()
    try:
        with pytest.raises(ahg.InvalidValue, match="another graph"):
            call([other.add_empty_node()], [b])
    finally:
        other.destroy()
    assert graph.edges() == before


def test_other_iterables_of_nodes_work_both_ways(graph: ahg.Graph) -> None:
    a, b, c = (graph.add_empty_node() for _ in range(3))
    graph.add_dependencies(np.array([a, a], dtype=object), (n for n in (b, c)))
    assert sorted(graph.edges(), key=lambda e: e[1].id) == [(a, b), (a, c)]
    graph.remove_dependencies(iter([a]), {c: None})
    assert graph.edges() == [(a, b)]
    # a listed twice in one call: refused whole, nothing added
    with pytest.raises(ahg.InvalidValue):
        graph.add_dependencies(iter([b, b]), iter([c, c]))
    assert graph.edges() == [(a, b)]
