"""The planner's column cut gives exactly the segments of its per-node loop.

Graphs without child-graph nodes of ``_COLUMN_CUT_MIN`` nodes or more are cut with column
operations; these tests hold that path to the per-node loop (which smaller graphs and graphs
with child graphs still take) on chains, wide fork-joins and random graphs.
"""

from __future__ import annotations

import random

import pytest

import ahipgraph as ahg
from ahipgraph.exec import planner
from ahipgraph.exec.snapshot import snapshot


def _cuts(segments: list[planner.Segment]) -> list[tuple[int, object, type, list[int]]]:
    return [(s.id, s.nodes, type(s.nodes), s.deps) for s in segments]


def _same_cut(graph: ahg.Graph) -> list[planner.Segment]:
    copy, _ = snapshot(graph)
    loop = planner._cut_segments_nodes(copy)
    columns = planner._cut_segments_columns(copy)
    assert _cuts(columns) == _cuts(loop)
    return columns


def _fork_join(branches: int, length: int) -> ahg.Graph:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    tails = []
    for _ in range(branches):
        node = root
        for _ in range(length):
            node = graph.add_empty_node(deps=[node])
        tails.append(node)
    graph.add_empty_node(deps=tails)
    return graph


@pytest.mark.parametrize(("branches", "length"), [(1, 1), (1, 200), (7, 3), (50, 1), (40, 9)])
def test_fork_join_cut_matches_the_loop(branches: int, length: int) -> None:
    graph = _fork_join(branches, length)
    try:
        segments = _same_cut(graph)
        if length >= 3:  # each branch one evenly spaced segment (Kahn's order interleaves them)
            assert all(type(s.nodes) is range for s in segments[1:-1])
    finally:
        graph.destroy()


@pytest.mark.parametrize("seed", range(30))
def test_random_graph_cut_matches_the_loop(seed: int) -> None:
    rng = random.Random(seed)
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for _ in range(rng.randint(1, 150)):
        roll = rng.random()
        if not nodes or roll < 0.1:
            deps: list[ahg.GraphNode] = []
        elif roll < 0.6:
            deps = [nodes[-1]]
        elif roll < 0.8:
            deps = [rng.choice(nodes)]
        else:
            deps = rng.sample(nodes, min(len(nodes), 3))
        nodes.append(graph.add_empty_node(deps=deps))
    try:
        _same_cut(graph)
    finally:
        graph.destroy()


def test_which_cut_plan_graph_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    taken: list[str] = []
    for name in ("_cut_segments_nodes", "_cut_segments_columns"):
        real = getattr(planner, name)

        def spy(graph: object, real: object = real, name: str = name) -> object:
            taken.append(name)
            return real(graph)  # type: ignore[operator]

        monkeypatch.setattr(planner, name, spy)
    small, large = _fork_join(2, 2), _fork_join(4, 40)
    child = ahg.Graph()
    child.add_child_graph_node(small)
    for _ in range(planner._COLUMN_CUT_MIN):
        child.add_empty_node()
    try:
        for graph, expected in [
            (small, "_cut_segments_nodes"),
            (large, "_cut_segments_columns"),
            (child, "_cut_segments_nodes"),  # a child graph: the loop's type checks
        ]:
            taken.clear()
            copy, _ = snapshot(graph)
            planner.plan_graph(copy)
            assert taken == [expected]
    finally:
        for graph in (small, large, child):
            graph.destroy()
