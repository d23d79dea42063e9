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

**Segments are columns.** A wide graph has a segment per branch (a 1,000-branch fork-join of
10,000 nodes has 1,002), and the executable keeps its plan as long as it lives. So a plan holds
its segments as a :class:`SegmentTable`: one machine int per segment for each field (first
node, spacing, length, dependency, level, strand, position), with the few segments that need
more (uneven node lists, several dependencies, waits, signals) aside in dicts. Planning reads
and writes those columns and makes no object per segment; ``plan.segments[i]`` makes the
:class:`Segment` record of segment ``i`` when something reads it (a test, the plan's DOT
output), each time.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, overload

import numpy as np

from ..core.int_array import IntArray
from ..graph.node_type import NodeType
from .snapshot import ExecGraph

__all__ = ["Plan", "Segment", "SegmentNodes", "SegmentTable", "plan_graph"]


@dataclass(slots=True, eq=False)
class Segment:
    """A linear chain of nodes that runs on one strand (a record of one segment of a plan)."""

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


class SegmentTable(Sequence[Segment]):
    """A plan's segments as columns, indexed by segment id (see the module notes).

    A segment's nodes are ``first, first + step, ...`` (``size`` of them), or, where they
    are not evenly spaced, the list ``irregular[id]`` (``step`` 0). Its dependency is
    ``dep[id]``, or -1 where ``multi[id]`` holds its 0 or several (segment ids, ascending).
    Reading an item makes a :class:`Segment` record of the columns.
    """

    __slots__ = (
        "dep",
        "first",
        "irregular",
        "level",
        "multi",
        "position",
        "priority",
        "signal",
        "size",
        "step",
        "strand",
        "waits",
    )

    def __init__(self) -> None:
        self.first: IntArray = array("q")
        self.step: IntArray = array("q")
        self.size: IntArray = array("q")
        self.irregular: dict[int, list[int]] = {}
        self.dep: IntArray = array("q")
        self.multi: dict[int, IntArray] = {}
        self.level: IntArray = array("i")
        self.strand: IntArray = array("i")
        self.position: IntArray = array("i")
        self.priority: dict[int, int] = {}  # the segments whose priority is not 0
        self.waits: dict[int, list[int]] = {}  # the segments that wait: producer ids
        self.signal: dict[int, int] = {}  # the producers: their completion signal's index

    @classmethod
    def of(cls, segments: Sequence[Segment]) -> SegmentTable:
        """The table of ``segments`` (ids 0, 1, ... in order): their cut (nodes and deps)."""
        table = cls()
        for segment in segments:
            table.append(segment.nodes, segment.deps)
        return table

    def append(self, nodes: Sequence[int], deps: list[int]) -> None:
        """Add the next segment's nodes (in order) and dependencies (ascending)."""
        sid = len(self.size)
        count = len(nodes)
        if count >= 2:
            first, step = nodes[0], nodes[1] - nodes[0]
            if count >= 3 and type(nodes) is not range:
                spaced = range(first, nodes[-1] + 1, step) if step > 0 else range(0)
                if len(spaced) != count or any(map(int.__ne__, nodes, spaced)):
                    self.irregular[sid] = list(nodes)
                    step = 0
        else:
            first, step = nodes[0], 1
        self.first.append(first)
        self.step.append(step)
        self.size.append(count)
        if len(deps) == 1:
            self.dep.append(deps[0])
        else:
            self.dep.append(-1)
            self.multi[sid] = array("q", deps)

    def nodes(self, sid: int) -> list[int] | range:
        """Segment ``sid``'s node indices: a ``range`` when evenly spaced and 3 or more."""
        step = self.step[sid]
        if not step:
            return self.irregular[sid]
        first, count = self.first[sid], self.size[sid]
        spaced = range(first, first + step * (count - 1) + 1, step)
        return spaced if count >= 3 else list(spaced)

    def take(self, column: list[Any], sid: int) -> list[Any]:
        """``column``'s entries at segment ``sid``'s nodes, in order (a slice: one C loop)."""
        step = self.step[sid]
        if not step:
            return list(map(column.__getitem__, self.irregular[sid]))
        first = self.first[sid]
        return column[first : first + step * (self.size[sid] - 1) + 1 : step]

    def deps(self, sid: int) -> list[int]:
        """The segment ids segment ``sid`` depends on, ascending."""
        dep = self.dep[sid]
        return [dep] if dep >= 0 else list(self.multi[sid])

    def __len__(self) -> int:
        return len(self.size)

    @overload
    def __getitem__(self, sid: int) -> Segment: ...

    @overload
    def __getitem__(self, sid: slice) -> list[Segment]: ...

    def __getitem__(self, sid: int | slice) -> Segment | list[Segment]:
        if isinstance(sid, slice):
            return [self[i] for i in range(len(self))[sid]]
        sid = range(len(self))[sid]  # IndexError past the end; negative from the end
        return Segment(
            sid,
            self.nodes(sid),
            self.deps(sid),
            self.level[sid] if self.level else 0,
            self.strand[sid] if self.strand else 0,
            self.position[sid] if self.position else 0,
            self.priority.get(sid, 0),
            list(self.waits.get(sid, ())),
            self.signal.get(sid),
        )

    def __iter__(self) -> Iterator[Segment]:
        return map(self.__getitem__, range(len(self)))

    def __repr__(self) -> str:
        return f"<SegmentTable segments={len(self)} waiting={len(self.waits)}>"


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """How one graph runs: segments per strand, and which signals connect them.

    Frozen: a user reaches it (``graph_exec.plan``), and ``statistics()``, ``plan_dot()`` and
    the plan check read it for the executable's life.
    """

    segments: SegmentTable
    strands: list[IntArray]  # per strand: segment ids in dispatch order
    num_signals: int  # completion signals per launch (START included when strands > 1)
    start_signal: int | None  # signal strand 0 raises so the other strands may begin
    final_waits: list[int]  # segment ids strand 0 joins at the end
    levels: int

    @property
    def num_strands(self) -> int:
        return len(self.strands)


def _cut_segments(graph: ExecGraph) -> SegmentTable:
    if graph.flat:
        count = len(graph)
        if graph.is_chain():
            # One segment, what the loop and the column cut make, found with two comparisons
            # in C (the column cut's pointer doubling would take a pass per doubling of its
            # length).
            table = SegmentTable()
            table.append(range(count), [])
            return table
        if count >= _COLUMN_CUT_MIN:
            return _cut_segments_columns(graph)
    return SegmentTable.of(_cut_segments_nodes(graph))


# Below this many nodes the per-node loop is as quick as the column operations' fixed costs.
_COLUMN_CUT_MIN = 64


def _cut_segments_columns(graph: ExecGraph) -> SegmentTable:
    """:func:`_cut_segments_nodes` for a graph without child-graph nodes, in column operations.

    The same segments, ids, node lists and dependencies: a node continues its dependency's
    segment exactly when it has one dependency and that dependency has one dependent. Segment
    ids go to the other nodes (the segments' heads) in index order; each continuing node's
    head is found by pointer doubling over the dependency column (a node's dependency comes
    before it in the order), and each segment's nodes are its members in index order. The
    table's columns are made by column operations too: only segments with uneven nodes or
    other than one dependency take a step of Python each.
    """
    count = len(graph)
    first_deps, multi = graph.first_deps()
    # "i" or "q" (see kahn_columns.index_column): widened, as every column made below is
    deps = np.frombuffer(first_deps, dtype=first_deps.typecode).astype(np.int64, copy=False)
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
    table = SegmentTable()
    steps = np.where(sizes >= 2, first_gap if count > 1 else 1, 1)
    irregular = np.flatnonzero(~spaced & (sizes >= 3))
    steps[irregular] = 0
    table.first = array("q", members[starts].tobytes())
    table.step = array("q", steps.astype(np.int64).tobytes())
    table.size = array("q", sizes.astype(np.int64).tobytes())
    member_list = members.tolist() if len(irregular) else []
    for sid, start, end in zip(
        irregular.tolist(), starts[irregular].tolist(), ends[irregular].tolist(), strict=True
    ):
        table.irregular[sid] = member_list[start:end]
    head_dep = deps[heads]
    lone = head_dep >= 0
    table.dep = array("q", np.where(lone, segment_of[np.where(lone, head_dep, 0)], -1).tobytes())
    others = np.flatnonzero(~lone)  # roots and joins: their nodes' dependencies, by segment
    dep_column = table.dep
    for sid, node in zip(others.tolist(), heads[others].tolist(), strict=True):
        found = sorted(set(segment_of[np.array(multi[node], dtype=np.int64)].tolist()))
        if len(found) == 1:  # a join of nodes of one segment
            dep_column[sid] = found[0]
        else:
            table.multi[sid] = array("q", found)
    return table


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


def _priorities(graph: ExecGraph, table: SegmentTable) -> None:
    """Each segment's most urgent (lowest) declared kernel priority, where it is not 0.

    A segment's kernels include those of its child graphs (at any depth), which run on its
    strand. A segment without kernels declares the default, 0; one whose kernels are all of
    the least urgent priority (1) declares that, so it sorts after the default ones (HIP's
    ``declared_priority`` is the most urgent priority among the segment's kernels).
    """
    types, params = graph.types(), graph.params_column()
    kernel, child = NodeType.Kernel, NodeType.Graph
    for sid in range(len(table)):
        best: int | None = None
        for index in table.nodes(sid):
            kind = types[index]
            if kind is kernel:
                priority = params[index].priority
                best = priority if best is None else min(best, priority)
            elif kind is child:
                inner = _child_priority(graph.nodes[index].child)
                if inner is not None:
                    best = inner if best is None else min(best, inner)
        if best:
            table.priority[sid] = best


def _child_priority(copy: ExecGraph | None) -> int | None:
    """The most urgent priority among a child graph copy's kernels (its own child graphs'
    included), or None when it has none."""
    if copy is None:
        return None
    priorities = [node.params.priority for node in copy.walk() if node.type is NodeType.Kernel]
    return min(priorities, default=None)


# From this many segments on, levels, strands and the sync plan's common case are worked out
# with column operations (see _plan_columns).
_COLUMN_PLAN_MIN = 64
# A level's segments on one strand, from this many on, are checked for waits in one operation.
_COLUMN_GROUP_MIN = 16


def plan_graph(graph: ExecGraph, *, max_streams: int = 4, use_priority: bool = False) -> Plan:
    """Plan ``graph`` for execution over at most ``max_streams`` parallel strands."""
    if max_streams < 1:
        raise ValueError(f"max_streams must be >= 1, got {max_streams}")
    table = _cut_segments(graph)
    count = len(table)
    if count == 1:  # one segment (a chain): one strand, one level, nothing to wait for
        table.level, table.strand, table.position = (
            array("i", [0]),
            array("i", [0]),
            array("i", [0]),
        )
        if use_priority:
            _priorities(graph, table)
        return Plan(table, [array("i", [0])], 0, None, [], 1)
    if count >= _COLUMN_PLAN_MIN and not use_priority:
        return _plan_columns(table, max_streams)
    dep, multi = table.dep, table.multi
    # Levels, in segment order (a segment's dependencies come before it).
    level = [0] * count
    by_level: list[list[int]] = []
    for sid, lone in enumerate(dep):
        if lone >= 0:
            here = level[lone] + 1
        else:
            here = 1 + max(map(level.__getitem__, multi[sid]), default=-1)
        level[sid] = here
        if here == len(by_level):
            by_level.append([])
        by_level[here].append(sid)
    if use_priority:
        _priorities(graph, table)
        urgency = table.priority.get
        by_level = [sorted(ids, key=lambda sid: urgency(sid, 0)) for ids in by_level]

    width = max(map(len, by_level), default=1)
    num_strands = max(1, min(max_streams, width))
    strands: list[IntArray] = [array("i") for _ in range(num_strands)]
    strand = [0] * count
    position = [0] * count
    for ids in by_level:  # round-robin over the strands, in the level's order
        for k in range(min(num_strands, len(ids))):
            on = ids[k::num_strands]
            base = len(strands[k])
            for offset, sid in enumerate(on, base):
                strand[sid] = k
                position[sid] = offset
            strands[k].extend(on)

    # Sync plan with vector clocks: known[strand][other] = highest position on `other` known done.
    # A level's segments are visited by (strand, position): strand k's are ids[k::num_strands].
    known = [[-1] * num_strands for _ in range(num_strands)]
    done_clock: list[list[int]] = [[]] * count  # each visited segment's clock, once visited
    waits = table.waits
    producers: set[int] = set()
    by_position = position.__getitem__
    for ids in by_level:
        for k in range(min(num_strands, len(ids))):
            clock = known[k]
            for sid in ids[k::num_strands]:
                lone = dep[sid]
                if lone >= 0:
                    if strand[lone] == k or clock[strand[lone]] >= position[lone]:
                        clock[k] = position[sid]  # the common case: nothing to wait for
                        done_clock[sid] = clock.copy()
                        continue
                    sources: Sequence[int] = (lone,)
                else:  # the latest on each strand first: it covers the earlier ones
                    sources = sorted(multi[sid], key=by_position, reverse=True)
                for source in sources:
                    source_strand = strand[source]
                    if source_strand == k or clock[source_strand] >= position[source]:
                        continue
                    waits.setdefault(sid, []).append(source)
                    producers.add(source)
                    for j, seen in enumerate(done_clock[source]):
                        if seen > clock[j]:
                            clock[j] = seen
                clock[k] = position[sid]
                done_clock[sid] = clock.copy()

    final_waits, start_signal, next_signal = _join_and_number(
        table, strands, known[0], position.__getitem__, done_clock.__getitem__, producers
    )
    table.level = array("i", level)
    table.strand = array("i", strand)
    table.position = array("i", position)
    return Plan(table, strands, next_signal, start_signal, final_waits, len(by_level))


def _join_and_number(
    table: SegmentTable,
    strands: Sequence[Sequence[int]],
    known: Sequence[int],
    position_of: Callable[[int], int],
    done_clock: Callable[[int], Sequence[int]],
    producers: set[int],
) -> tuple[list[int], int | None, int]:
    """The end of a sync plan, for the loop and the column planner alike: the final waits (each
    side strand's last segment the launch strand does not already know is done, in strand
    order) and the signal numbers of every producer.

    ``known`` is the launch strand's clock at its end. Returns the final waits, the start
    signal (0 when there are side strands) and the number of signals.
    """
    num_strands = len(strands)
    final_waits: list[int] = []
    join_clock = list(known) if num_strands > 1 else []
    for k in range(1, num_strands):
        if not strands[k]:
            continue
        last = strands[k][-1]
        if join_clock[k] >= position_of(last):
            continue
        final_waits.append(last)
        producers.add(last)
        for j, seen in enumerate(done_clock(last)):
            if seen > join_clock[j]:
                join_clock[j] = seen
    start_signal = 0 if num_strands > 1 else None
    next_signal = 1 if num_strands > 1 else 0
    for sid in sorted(producers):
        table.signal[sid] = next_signal
        next_signal += 1
    return final_waits, start_signal, next_signal


def _plan_columns(table: SegmentTable, max_streams: int) -> Plan:
    """:func:`plan_graph`'s levels, strands and sync plan for many segments (a wide
    fork-join's branches), with column operations where the loop does a step per segment.

    The same plan: a segment's level is its nearest ancestor through lone dependencies that
    has none or several (an *anchor*: its level is worked out in a loop over the anchors) plus
    the number of steps to it (pointer doubling); each level's segments go round-robin over
    the strands as the loop deals them; and the vector clocks are the loop's, with a segment's
    done clock held as a shared copy of its strand's clock and its own position, so the common
    case (nothing to wait for, checked for a level's segments on a strand at once) copies
    nothing. Only segments that wait take a step of Python each.
    """
    count = len(table)
    dep = np.frombuffer(table.dep, dtype=np.int64)
    multi = table.multi
    # Levels: the anchors' in a loop, the rest from their anchor.
    lone = dep >= 0
    anchor = np.where(lone, dep, np.arange(count, dtype=np.int64))
    steps = lone.astype(np.int64)
    while True:
        further = anchor[anchor]
        if np.array_equal(further, anchor):
            break
        steps = steps + steps[anchor]
        anchor = further
    anchors = np.flatnonzero(~lone).tolist()
    anchor_level: dict[int, int] = {}
    anchor_of, steps_of = anchor.tolist(), steps.tolist()
    for sid in anchors:  # ascending: a dependency's anchor comes before
        anchor_level[sid] = 1 + max(
            (anchor_level[anchor_of[d]] + steps_of[d] for d in multi[sid]), default=-1
        )
    levels_of_anchors = np.zeros(count, dtype=np.int64)
    levels_of_anchors[anchors] = [anchor_level[sid] for sid in anchors]
    level = levels_of_anchors[anchor] + steps
    per_level = np.bincount(level)
    width = int(per_level.max())
    num_strands = max(1, min(max_streams, width))
    # Strands: each level's segments (ascending ids) dealt round-robin, as the loop deals them.
    order = np.argsort(level, kind="stable")
    starts = np.cumsum(per_level) - per_level
    within = np.arange(count, dtype=np.int64) - np.repeat(starts, per_level)
    strand_sorted = within % num_strands
    dealt = np.maximum(
        0, (per_level[:, np.newaxis] - np.arange(num_strands) + num_strands - 1) // num_strands
    )
    before = np.cumsum(dealt, axis=0) - dealt  # each strand's segments in the levels before
    strand = np.empty(count, dtype=np.int64)
    position = np.empty(count, dtype=np.int64)
    strand[order] = strand_sorted
    position[order] = before[level[order], strand_sorted] + within // num_strands
    strands = [
        array("i", order[strand_sorted == k].astype(np.int32).tobytes()) for k in range(num_strands)
    ]

    # The sync plan: the loop's vector clocks. done_base[b] is a clock shared by the segments
    # whose base is b; a segment's done clock is it with its own strand's entry its position.
    strand_of, position_of, dep_of = strand.tolist(), position.tolist(), dep.tolist()
    known = [[-1] * num_strands for _ in range(num_strands)]
    done_base: list[list[int]] = []
    base_of = np.zeros(count, dtype=np.int64)
    waits = table.waits
    producers: set[int] = set()

    def done_clock(sid: int) -> list[int]:
        clock = list(done_base[base_of[sid]])
        clock[strand_of[sid]] = position_of[sid]
        return clock

    def wait_step(sid: int, k: int, clock: list[int]) -> None:
        """The loop's step for a segment that may wait (a join, or a dependency not known)."""
        lone_dep = dep_of[sid]
        sources: Sequence[int]
        if lone_dep >= 0:
            sources = (lone_dep,)
        else:  # the latest on each strand first: it covers the earlier ones
            sources = sorted(multi[sid], key=position_of.__getitem__, reverse=True)
        for source in sources:
            source_strand = strand_of[source]
            if source_strand == k or clock[source_strand] >= position_of[source]:
                continue
            waits.setdefault(sid, []).append(source)
            producers.add(source)
            for j, seen in enumerate(done_clock(source)):
                if seen > clock[j]:
                    clock[j] = seen
        clock[k] = position_of[sid]
        base_of[sid] = len(done_base)
        done_base.append(clock.copy())

    for start, size in zip(starts.tolist(), per_level.tolist(), strict=True):
        ids = order[start : start + size]
        for k in range(min(num_strands, size)):
            clock = known[k]
            group = ids[k::num_strands]
            at = 0
            while at < len(group):
                rest = group[at:]
                if len(rest) < _COLUMN_GROUP_MIN:  # a step each, as the loop
                    shared = -1  # the base of the segments since the last wait, if any
                    for sid in rest.tolist():
                        lone_dep = dep_of[sid]
                        if lone_dep >= 0 and (
                            strand_of[lone_dep] == k
                            or clock[strand_of[lone_dep]] >= position_of[lone_dep]
                        ):
                            clock[k] = position_of[sid]
                            if shared < 0:
                                shared = len(done_base)
                                done_base.append(clock.copy())
                            base_of[sid] = shared
                            continue
                        wait_step(sid, k, clock)
                        shared = -1
                    break
                deps = dep[rest]
                safe = np.maximum(deps, 0)
                known_now = np.array(clock, dtype=np.int64)
                quiet = (deps >= 0) & (
                    (strand[safe] == k) | (known_now[strand[safe]] >= position[safe])
                )
                stops = np.flatnonzero(~quiet)
                run = int(stops[0]) if len(stops) else len(rest)
                if run:  # nothing to wait for: one shared base, the strand's clock moves on
                    clock[k] = int(position[rest[run - 1]])
                    base_of[rest[:run]] = len(done_base)
                    done_base.append(clock.copy())
                if run < len(rest):
                    wait_step(int(rest[run]), k, clock)
                at += run + 1

    final_waits, start_signal, next_signal = _join_and_number(
        table, strands, known[0], position_of.__getitem__, done_clock, producers
    )
    table.level = array("i", level.astype(np.int32).tobytes())
    table.strand = array("i", strand.astype(np.int32).tobytes())
    table.position = array("i", position.astype(np.int32).tobytes())
    return Plan(table, strands, next_signal, start_signal, final_waits, len(per_level))


class SegmentNodes(Sequence[int]):
    """The nodes of several segments of a table, one segment after the other.

    What a run of kernel segments compiled together holds (``Compiled``'s runs, for the
    locations and argument slots made on first use): a machine int per segment, where a list
    of the nodes would hold an int per node.
    """

    __slots__ = ("_ids", "_length", "_table")

    def __init__(self, table: SegmentTable, ids: IntArray) -> None:
        self._table = table
        self._ids = ids
        self._length = sum(map(table.size.__getitem__, ids))

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(map(self._table.nodes, self._ids))

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> list[int]: ...

    def __getitem__(self, index: int | slice) -> int | list[int]:
        if isinstance(index, slice):
            return list(self)[index]
        index = range(self._length)[index]  # IndexError past the end; negative from the end
        size = self._table.size
        for sid in self._ids:
            if index < size[sid]:
                return self._table.nodes(sid)[index]
            index -= size[sid]
        raise AssertionError("unreachable: the index was checked against the length")

    def __repr__(self) -> str:
        return f"<SegmentNodes segments={len(self._ids)} nodes={self._length}>"
