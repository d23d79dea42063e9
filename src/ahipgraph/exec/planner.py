"""The instantiate planner: segments, levels, stream slots and the sync plan.

Everything here is synchronous and pure: it takes an :class:`ExecGraph` and returns a
:class:`Plan`, so it can be unit-tested without a device or an event loop.

1. **Segments.** The topological order is cut into linear chains. A node starts a new segment
   when it does not have exactly one dependency (a root or a join), when its dependency forks
   (has several dependents), or when it or its dependency is a child-graph node (a child graph
   always is a segment of its own, as in HIP's segmented scheduler).
2. **Levels.** A segment's level is one more than the highest level among the segments it
   depends on; roots are level 0.
3. **Slots.** Each level's segments are spread round-robin over at most ``max_streams`` slots;
   slot 0 is the launch stream. With ``use_priority`` a level is first sorted by the segments'
   most urgent kernel priority, so the most urgent segment lands on the launch stream.
4. **Sync plan.** Only edges between different slots need a signal. Waits are deduplicated with
   per-slot vector clocks: a slot that already knows (directly or transitively) that a producer
   finished does not wait for it again. Every other slot's last segment signals, and the launch
   stream's program ends by joining them, so when slot 0 completes the whole launch has.

Invariants: on every slot, segments are in level order and every wait points to a lower level,
so a launch can never deadlock against itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.node_type import NodeType
from .snapshot import ExecGraph

__all__ = ["Plan", "Segment", "plan_graph"]


@dataclass(slots=True, eq=False)
class Segment:
    """A linear chain of nodes that runs on one slot."""

    id: int
    nodes: list[int]  # indices into the ExecGraph, in order
    deps: list[int] = field(default_factory=list)  # segment ids this one waits for
    level: int = 0
    slot: int = 0
    position: int = 0  # order on its slot
    priority: int = 0
    waits: list[int] = field(default_factory=list)  # after dedup: producer segment ids
    signal: int | None = None  # index of its completion signal, if anyone waits on it


@dataclass(slots=True, eq=False)
class Plan:
    """How one graph runs: segments per slot, and which signals connect them."""

    segments: list[Segment]
    slots: list[list[int]]  # per slot: segment ids in dispatch order
    num_signals: int  # completion signals per launch (START included when slots > 1)
    start_signal: int | None  # signal slot 0 raises so the other slots may begin
    final_waits: list[int]  # segment ids slot 0 joins at the end
    levels: int

    @property
    def num_slots(self) -> int:
        return len(self.slots)


def _cut_segments(graph: ExecGraph) -> list[Segment]:
    segment_of: list[int] = [0] * len(graph.nodes)
    segments: list[Segment] = []
    dependents = graph.dependent_counts()
    for node in graph.nodes:
        deps = node.deps
        starts_new = (
            len(deps) != 1
            or dependents[deps[0]] != 1
            or node.type is NodeType.Graph
            or graph.nodes[deps[0]].type is NodeType.Graph
        )
        if starts_new:
            segment = Segment(len(segments), [node.index])
            segment.deps = sorted({segment_of[d] for d in deps})
            segments.append(segment)
        else:
            segment = segments[segment_of[deps[0]]]
            segment.nodes.append(node.index)
        segment_of[node.index] = segment.id
    return segments


def _priority(graph: ExecGraph, segment: Segment) -> int:
    """Most urgent (lowest) declared priority among a segment's kernel nodes."""
    best = 0
    for index in segment.nodes:
        node = graph.nodes[index]
        if node.type is NodeType.Kernel:
            best = min(best, node.params.priority)
    return best


def plan_graph(graph: ExecGraph, *, max_streams: int = 4, use_priority: bool = False) -> Plan:
    """Plan ``graph`` for execution over at most ``max_streams`` parallel slots."""
    if max_streams < 1:
        raise ValueError(f"max_streams must be >= 1, got {max_streams}")
    segments = _cut_segments(graph)
    by_level: list[list[Segment]] = []
    for segment in segments:  # created in topological order, so deps come first
        segment.level = 1 + max((segments[d].level for d in segment.deps), default=-1)
        if segment.level == len(by_level):
            by_level.append([])
        by_level[segment.level].append(segment)
        if use_priority:
            segment.priority = _priority(graph, segment)

    width = max((len(level) for level in by_level), default=1)
    num_slots = max(1, min(max_streams, width))
    slots: list[list[int]] = [[] for _ in range(num_slots)]
    for level in by_level:
        ordered = sorted(level, key=lambda s: s.priority) if use_priority else level
        for i, segment in enumerate(ordered):
            segment.slot = i % num_slots
            segment.position = len(slots[segment.slot])
            slots[segment.slot].append(segment.id)

    # Sync plan with vector clocks: known[slot][other] = highest position on `other` known done.
    known = [[-1] * num_slots for _ in range(num_slots)]
    done_clock: dict[int, list[int]] = {}
    producers: set[int] = set()
    for level in by_level:
        for segment in sorted(level, key=lambda s: (s.slot, s.position)):
            clock = known[segment.slot]
            for dep_id in segment.deps:
                dep = segments[dep_id]
                if dep.slot == segment.slot or clock[dep.slot] >= dep.position:
                    continue
                segment.waits.append(dep_id)
                producers.add(dep_id)
                for k, seen in enumerate(done_clock[dep_id]):
                    if seen > clock[k]:
                        clock[k] = seen
            clock[segment.slot] = segment.position
            done_clock[segment.id] = list(clock)

    final_waits: list[int] = []
    join_clock = list(known[0]) if num_slots > 1 else []
    for slot in range(1, num_slots):
        if not slots[slot]:
            continue
        last = segments[slots[slot][-1]]
        if join_clock[slot] >= last.position:
            continue
        final_waits.append(last.id)
        producers.add(last.id)
        for k, seen in enumerate(done_clock[last.id]):
            if seen > join_clock[k]:
                join_clock[k] = seen

    start_signal = 0 if num_slots > 1 else None
    next_signal = 1 if num_slots > 1 else 0
    for segment_id in sorted(producers):
        segments[segment_id].signal = next_signal
        next_signal += 1
    return Plan(segments, slots, next_signal, start_signal, final_waits, len(by_level))
