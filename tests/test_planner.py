"""The instantiate planner is pure: segments, levels, strands and the sync plan, with no device."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ahipgraph.exec.planner import Plan, plan_graph
from ahipgraph.exec.snapshot import ExecGraph, ExecNode
from ahipgraph.graph.node_type import NodeType


def make_graph(deps: list[tuple[int, ...]], types: dict[int, NodeType] | None = None) -> ExecGraph:
    types = types or {}
    nodes = [
        ExecNode(i, i, types.get(i, NodeType.Empty), None, tuple(d)) for i, d in enumerate(deps)
    ]
    return ExecGraph(0, nodes)


def segment_nodes(plan: Plan) -> list[list[int]]:
    return [list(segment.nodes) for segment in plan.segments]  # a range when evenly spaced


def test_chain_is_one_segment_on_the_launch_stream() -> None:
    plan = plan_graph(make_graph([(), (0,), (1,), (2,)]))
    assert segment_nodes(plan) == [[0, 1, 2, 3]]
    assert plan.num_strands == 1
    assert plan.num_signals == 0
    assert plan.start_signal is None
    assert plan.final_waits == []


def test_diamond_cuts_at_fork_and_join() -> None:
    #   0 -> 1 -> 3
    #   0 -> 2 -> 3
    plan = plan_graph(make_graph([(), (0,), (0,), (1, 2)]))
    assert segment_nodes(plan) == [[0], [1], [2], [3]]
    assert [s.level for s in plan.segments] == [0, 1, 1, 2]
    assert plan.num_strands == 2
    # Level 1 spreads round-robin: node 1 on the launch stream, node 2 on strand 1.
    assert [s.strand for s in plan.segments] == [0, 0, 1, 0]
    # Only cross-strand edges need a signal: 0 -> 2 and 2 -> 3; 0 -> 1 -> 3 stay in order.
    assert plan.segments[1].waits == []
    assert plan.segments[2].waits == [0]
    assert plan.segments[3].waits == [2]
    assert plan.final_waits == []  # strand 1's last segment is already joined by node 3
    assert plan.start_signal == 0
    assert plan.num_signals == 3  # START + completions of segments 0 and 2


def test_child_graph_node_is_a_segment_of_its_own() -> None:
    plan = plan_graph(make_graph([(), (0,), (1,)], {1: NodeType.Graph}))
    assert segment_nodes(plan) == [[0], [1], [2]]
    assert plan.num_strands == 1


def test_strands_never_exceed_max_streams() -> None:
    fan = [()] + [(0,)] * 10 + [tuple(range(1, 11))]
    plan = plan_graph(make_graph(fan), max_streams=4)
    assert plan.num_strands == 4
    assert sorted(len(ids) for ids in plan.strands) == [2, 2, 3, 5]


def test_redundant_waits_are_dropped_transitively() -> None:
    # 0 forks to 1 and 2 (different strands); 3 depends on 1 and 2; 4 depends on 2 and 3.
    # Once 3 waited for 2, 4 (after 3 on the same strand) need not wait for 2 again.
    plan = plan_graph(make_graph([(), (0,), (0,), (1, 2), (2, 3)]))
    by_node = {s.nodes[0]: s for s in plan.segments}
    assert by_node[3].strand == by_node[4].strand == 0
    assert by_node[3].waits == [by_node[2].id]
    assert by_node[4].waits == []


def test_use_priority_puts_the_most_urgent_segment_on_the_launch_stream() -> None:
    class Params:
        def __init__(self, priority: int) -> None:
            self.priority = priority

    nodes = [
        ExecNode(0, 0, NodeType.Empty, None, ()),
        ExecNode(1, 1, NodeType.Kernel, Params(0), (0,)),
        ExecNode(2, 2, NodeType.Kernel, Params(-1), (0,)),
    ]
    graph = ExecGraph(0, nodes)
    plain = plan_graph(graph)
    urgent = plan_graph(graph, use_priority=True)
    assert plain.segments[2].strand == 1
    assert urgent.segments[2].strand == 0


def random_dag(rng: random.Random, size: int) -> list[tuple[int, ...]]:
    deps: list[tuple[int, ...]] = []
    for i in range(size):
        candidates = list(range(i))
        k = rng.randint(0, min(3, i))
        deps.append(tuple(sorted(rng.sample(candidates, k))))
    return deps


def simulate(plan: Plan, graph: ExecGraph) -> list[int]:
    """Run the plan's strands round-robin, op by op, as independent queues; return node order.

    Proves the plan cannot deadlock and that every dependency runs first.
    """
    done_segments: set[int] = set()
    positions = [0] * plan.num_strands
    started = {0}
    order: list[int] = []
    progress = True
    while progress:
        progress = False
        for strand, ids in enumerate(plan.strands):
            if strand not in started and plan.start_signal is not None:
                started.add(strand)  # strand 0 raised START before its first segment
            if positions[strand] == len(ids):
                continue
            segment = plan.segments[ids[positions[strand]]]
            if not all(w in done_segments for w in segment.waits):
                continue
            order.extend(segment.nodes)
            done_segments.add(segment.id)
            positions[strand] += 1
            progress = True
    assert all(p == len(ids) for p, ids in zip(positions, plan.strands, strict=True)), "deadlock"
    return order


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=1, max_value=40))
def test_random_dags_respect_every_edge_and_never_deadlock(seed: int, size: int) -> None:
    graph = make_graph(random_dag(random.Random(seed), size))
    plan = plan_graph(graph)
    order = simulate(plan, graph)
    assert sorted(order) == list(range(size))
    position = {node: i for i, node in enumerate(order)}
    for node in graph.nodes:
        for dep in node.deps:
            assert position[dep] < position[node.index]
    assert plan.num_strands <= 4


def test_max_streams_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_streams"):
        plan_graph(make_graph([()]), max_streams=0)
