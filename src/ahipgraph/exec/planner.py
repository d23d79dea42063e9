"""The instantiate planner: segments, levels, strands and the sync plan.

Everything here is synchronous and pure: it takes an :class:`ExecGraph` and returns a
:class:`Plan`, so it can be unit-tested without a device or an event loop.

1. **Segments.** The topological order is cut into linear chains. A node starts a new segment
   when it does not have exactly one dependency (a root or a join), when its dependency forks
   (has several dependents), or when it or its dependency is a child-graph node (a child graph
   always is a segment of its own, as in HIP's segmented scheduler).
2. **Levels.** A segment's level is one more than the highest level among the segments it
   depends on; roots are level 0.
3. **Strands.** Each level's segments are spread round-robin over at most ``max_streams`` strands;
   strand 0 is the launch stream. With ``use_priority`` a level is first sorted by the segments'
   most urgent kernel priority, so the most urgent segment lands on the launch stream.
4. **Sync plan.** Only edges between different strands need a signal. Waits are deduplicated with
   per-strand vector clocks: a strand that already knows (directly or transitively) that a producer
   finished does not wait for it again. A segment's dependencies are visited latest first (by
   position on their strand), so a join after many segments of one strand waits only for the
   last of them. Every other strand's last segment signals, and the launch
   stream's program ends by joining them, so when strand 0 completes the whole launch has.

Invariants: on every strand, segments are in level order and every wait points to a lower level,
so a launch can never deadlock against itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from ..graph.node_type import NodeType
from .snapshot import ExecGraph

__all__ = ["Plan", "Segment", "plan_graph"]


@dataclass(slots=True, eq=False)
class Segment:
    """A linear chain of nodes that runs on one strand."""

    id: int
    # Indices into the ExecGraph, in order: a range when evenly spaced (see _compact).
    nodes: list[int] | range
    deps: list[int] = field(default_factory=list)  # segment ids this one waits for
    level: int = 0
    strand: int = 0
    position: int = 0  # order on its strand
    priority: int = 0
    waits: list[int] = field(default_factory=list)  # after dedup: producer segment ids
    signal: int | None = None  # index of its completion signal, if anyone waits on it


@dataclass(slots=True, eq=False)
class Plan:
    """How one graph runs: segments per strand, and which signals connect them."""

    segments: list[Segment]
    strands: list[list[int]]  # per strand: segment ids in dispatch order
    num_signals: int  # completion signals per launch (START included when strands > 1)
    start_signal: int | None  # signal strand 0 raises so the other strands may begin
    final_waits: list[int]  # segment ids strand 0 joins at the end
    levels: int

    @property
    def num_strands(self) -> int:
        return len(self.strands)


def _cut_segments(graph: ExecGraph) -> list[Segment]:
    if graph.flat and len(graph) >= _COLUMN_CUT_MIN:
        return _cut_segments_columns(graph)
    return _cut_segments_nodes(graph)


# Below this many nodes the per-node loop is as quick as the column operations' fixed costs.
_COLUMN_CUT_MIN = 64


def _cut_segments_columns(graph: ExecGraph) -> list[Segment]:
    """:func:`_cut_segments_nodes` for a graph without child-graph nodes, in column operations.

    The same segments, ids, node lists and dependencies: a node continues its dependency's
    segment exactly when it has one dependency and that dependency has one dependent. Segment
    ids go to the other nodes (the segments' heads) in index order; each continuing node's
    head is found by pointer doubling over the dependency column (a node's dependency comes
    before it in the order), and each segment's nodes are its members in index order.
    """
    count = len(graph)
    first_deps, multi = graph.first_deps()
    deps = np.frombuffer(first_deps, dtype=np.int64)
    linked = deps[deps >= 0]
    if multi:  # joins' dependencies (and roots', none)
        linked = np.concatenate(
            [linked, np.fromiter(chain.from_iterable(multi.values()), np.int64)]
        )
    dependents = np.bincount(linked, minlength=count)  # what graph.dependent_counts() counts
    index = np.arange(count, dtype=np.int64)
    continues = deps >= 0
    continues[continues] = dependents[deps[continues]] == 1
    head = np.where(continues, deps, index)
    while True:  # pointer doubling: every node's head, in log(depth) passes
        further = head[head]
        if np.array_equal(further, head):
            break
        head = further
    heads = np.flatnonzero(~continues)
    segment_id = np.empty(count, dtype=np.int64)
    segment_id[heads] = np.arange(len(heads), dtype=np.int64)
    segment_of = segment_id[head]
    members = np.argsort(segment_of, kind="stable")  # each segment's nodes, in index order
    sizes = np.bincount(segment_of, minlength=len(heads))
    ends = np.cumsum(sizes)
    starts = ends - sizes
    # A segment of three or more nodes evenly spaced is a range (what _compact makes).
    gaps = np.diff(members)
    first_gap = gaps[np.minimum(starts, max(count - 2, 0))] if count > 1 else gaps
    spaced = np.ones(len(heads), dtype=bool)
    if count > 1:
        inner = segment_of[members[1:]] == segment_of[members[:-1]]
        owner = segment_of[members[1:]]
        uneven = inner & (gaps != first_gap[owner])
        spaced[owner[uneven]] = False
    segment_list = segment_of.tolist()
    member_list = members.tolist()
    segments: list[Segment] = []
    for sid, (start, end, size, even, node) in enumerate(
        zip(
            starts.tolist(),
            ends.tolist(),
            sizes.tolist(),
            spaced.tolist(),
            heads.tolist(),
            strict=True,
        )
    ):
        nodes: list[int] | range
        if size >= 3 and even:
            step = member_list[start + 1] - member_list[start]
            nodes = range(member_list[start], member_list[end - 1] + 1, step)
        else:
            nodes = member_list[start:end]
        dep = first_deps[node]
        segment = Segment(sid, nodes)
        segment.deps = sorted({segment_list[d] for d in ((dep,) if dep >= 0 else multi[node])})
        segments.append(segment)
    return segments


def _cut_segments_nodes(graph: ExecGraph) -> list[Segment]:
    segment_of: list[int] = [0] * len(graph)
    segments: list[Segment] = []
    members: list[list[int]] = []  # each segment's nodes while they are cut
    dependents = graph.dependent_counts()
    types = graph.types()  # columns: no node record is made
    first_deps, multi = graph.first_deps()
    flat = graph.flat  # no child-graph node: the type tests below always pass
    graph_type = NodeType.Graph  # held here: an enum member read per node costs
    for index, dep in enumerate(first_deps):
        if (
            dep >= 0
            and dependents[dep] == 1
            and (flat or (types[index] is not graph_type and types[dep] is not graph_type))
        ):
            segment_id = segment_of[dep]
            members[segment_id].append(index)
        else:
            segment_id = len(segments)
            segment = Segment(segment_id, [index])
            segment.deps = sorted({segment_of[d] for d in ((dep,) if dep >= 0 else multi[index])})
            segments.append(segment)
            members.append(segment.nodes)  # type: ignore[arg-type]  # a list until compacted
        segment_of[index] = segment_id
    for segment in segments:
        segment.nodes = _compact(segment.nodes)
    return segments


def _compact(nodes: list[int] | range) -> list[int] | range:
    """``nodes`` as a ``range`` when they are evenly spaced (a chain, or a branch of a wide
    fork-join in Kahn's order), which holds no int per node; else as they are."""
    if len(nodes) < 3:
        return nodes
    start, step = nodes[0], nodes[1] - nodes[0]
    if step <= 0:
        return nodes
    spaced = range(start, nodes[-1] + 1, step)
    if len(spaced) == len(nodes) and all(map(int.__eq__, nodes, spaced)):
        return spaced
    return nodes


def _priority(types: list[NodeType], params: list[Any], segment: Segment) -> int:
    """Most urgent (lowest) declared priority among a segment's kernel nodes."""
    best = 0
    for index in segment.nodes:
        if types[index] is NodeType.Kernel:
            best = min(best, params[index].priority)
    return best


def plan_graph(graph: ExecGraph, *, max_streams: int = 4, use_priority: bool = False) -> Plan:
    """Plan ``graph`` for execution over at most ``max_streams`` parallel strands."""
    if max_streams < 1:
        raise ValueError(f"max_streams must be >= 1, got {max_streams}")
    segments = _cut_segments(graph)
    by_level: list[list[Segment]] = []
    types = graph.types()
    params = graph.params_column() if use_priority else []
    for segment in segments:  # created in topological order, so deps come first
        segment.level = 1 + max((segments[d].level for d in segment.deps), default=-1)
        if segment.level == len(by_level):
            by_level.append([])
        by_level[segment.level].append(segment)
        if use_priority:
            segment.priority = _priority(types, params, segment)

    width = max((len(level) for level in by_level), default=1)
    num_strands = max(1, min(max_streams, width))
    strands: list[list[int]] = [[] for _ in range(num_strands)]
    for level in by_level:
        ordered = sorted(level, key=lambda s: s.priority) if use_priority else level
        for i, segment in enumerate(ordered):
            segment.strand = i % num_strands
            segment.position = len(strands[segment.strand])
            strands[segment.strand].append(segment.id)

    # Sync plan with vector clocks: known[strand][other] = highest position on `other` known done.
    known = [[-1] * num_strands for _ in range(num_strands)]
    done_clock: dict[int, list[int]] = {}
    producers: set[int] = set()
    for level in by_level:
        for segment in sorted(level, key=lambda s: (s.strand, s.position)):
            clock = known[segment.strand]
            deps = segment.deps
            if len(deps) > 1:  # the latest on each strand first: it covers the earlier ones
                deps = sorted(deps, key=lambda d: -segments[d].position)
            for dep_id in deps:
                dep = segments[dep_id]
                if dep.strand == segment.strand or clock[dep.strand] >= dep.position:
                    continue
                segment.waits.append(dep_id)
                producers.add(dep_id)
                for k, seen in enumerate(done_clock[dep_id]):
                    if seen > clock[k]:
                        clock[k] = seen
            clock[segment.strand] = segment.position
            done_clock[segment.id] = list(clock)

    final_waits: list[int] = []
    join_clock = list(known[0]) if num_strands > 1 else []
    for strand in range(1, num_strands):
        if not strands[strand]:
            continue
        last = segments[strands[strand][-1]]
        if join_clock[strand] >= last.position:
            continue
        final_waits.append(last.id)
        producers.add(last.id)
        for k, seen in enumerate(done_clock[last.id]):
            if seen > join_clock[k]:
                join_clock[k] = seen

    start_signal = 0 if num_strands > 1 else None
    next_signal = 1 if num_strands > 1 else 0
    for segment_id in sorted(producers):
        segments[segment_id].signal = next_signal
        next_signal += 1
    return Plan(segments, strands, next_signal, start_signal, final_waits, len(by_level))
