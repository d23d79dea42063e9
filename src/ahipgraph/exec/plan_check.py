"""The plan verifier: is every declared edge enforced by the executable's strands and signals?

HIP's runtime has shipped graphs whose executables dropped declared edges (rocm-systems
#11499, #11359): the graph was right, the schedule was not. This check reads what a replay
really runs — each strand's op list, its
:class:`SignalIndexOp` and :class:`WaitSignalIndicesOp` — not the
planner's intentions, and proves for every declared edge ``u -> v`` (through child graphs and
op-less nodes, transitively) that ``u``'s op completes before ``v``'s starts in every
interleaving.

It runs the strands (the plan's parallel op lists) abstractly: each strand advances until a wait
names a signal index no op has raised yet; a raised signal carries its strand's vector clock
(per strand, the last position known done) and a wait joins it. If every strand is stuck, the
plan deadlocks, and that is reported too.
Signals a launch binds from outside (the previous launch, event nodes) order nothing here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..device.ops import SignalIndexOp, WaitSignalIndicesOp
from .races import flatten

if TYPE_CHECKING:
    from .graph_exec import GraphExec
    from .snapshot import ExecNode

__all__ = ["unenforced_edges"]


def unenforced_edges(graph_exec: GraphExec) -> list[str]:
    """Every declared edge the executable's programs do not enforce, described; [] if none.

    Reads the current version's op lists (after updates and setters too).
    """
    compiled = graph_exec._compiled
    strand_ops = graph_exec._version.strand_ops
    pooled = graph_exec._plan.num_signals
    problems: list[str] = []
    raisers: dict[int, int] = {}
    for ops in strand_ops:
        for op in ops:
            if isinstance(op, SignalIndexOp):  # op.index: the signal index it raises
                raisers[op.index] = raisers.get(op.index, 0) + 1
    for signal, count in sorted(raisers.items()):
        if count != 1:
            problems.append(f"signal {signal} is raised by {count} ops, not one")
    position_clock = _run(strand_ops, pooled, problems)
    graph = graph_exec._graph
    runs = None if graph.made else compiled.index_runs(graph)
    if runs is not None:  # a copy of kernel runs held as columns: read by index, none made
        located: list[tuple[int, int] | None] = [None] * len(graph)
        for strand, first, indices, _ in runs:
            for position, index in enumerate(indices, first):
                located[index] = (strand, position)
        deps: Sequence[Sequence[int]] = list(map(graph.deps_of, range(len(graph))))
        types = graph.types()

        def name(index: int) -> str:
            return f"node {graph.id_of(index)} ({types[index].name})"

    else:
        flat = flatten(graph, None, None)
        by_node = compiled.locations
        located = [by_node.get(node.exec_node) for node in flat]
        deps = [node.deps for node in flat]

        def name(index: int) -> str:
            return _name(flat[index].exec_node)

    _check_edges(deps, located, position_clock, name, problems)
    return problems


def _check_edges(
    deps: Sequence[Sequence[int]],
    located: list[tuple[int, int] | None],
    position_clock: dict[tuple[int, int], list[int]],
    name: Callable[[int], str],
    problems: list[str],
) -> None:
    """Each edge ``u -> v`` between nodes with ops (by index; through op-less nodes, whose
    nearest ops with one stand for them): ``v``'s op must know ``u``'s done."""
    nearest: list[set[int]] = []
    for index, node_deps in enumerate(deps):
        near: set[int] = set()
        for dep in node_deps:
            if located[dep] is not None:
                near.add(dep)
            else:
                near |= nearest[dep]
        nearest.append(near)
        here = located[index]
        if here is None:
            continue
        clock = position_clock.get(here)
        for dep in near:
            where = located[dep]
            assert where is not None
            strand, position = where
            if clock is None or clock[strand] < position:
                problems.append(
                    f"edge {name(dep)} -> {name(index)} is not "
                    f"enforced: strand {here[0]} op {here[1]} may start before strand {strand} "
                    f"op {position} is done"
                )


def _run(
    strand_ops: Sequence[Sequence[object]], pooled: int, problems: list[str]
) -> dict[tuple[int, int], list[int]]:
    """Each op position's vector clock over the strands (-1: nothing of that strand known).

    Signal indices below ``pooled`` are the plan's own signals; the others are per-launch
    bindings (previous launch, event nodes), which order nothing here.
    """
    strands = len(strand_ops)
    clocks = [[-1] * strands for _ in range(strands)]
    pcs = [0] * strands
    raised: dict[int, list[int]] = {}  # signal index -> the clock it carries
    out: dict[tuple[int, int], list[int]] = {}
    while True:
        progressed = False
        for strand in range(strands):
            ops = strand_ops[strand]
            clock = clocks[strand]
            while pcs[strand] < len(ops):
                pc = pcs[strand]
                op = ops[pc]
                if isinstance(op, WaitSignalIndicesOp):
                    inner = [index for index in op.indices if index < pooled]
                    if any(index not in raised for index in inner):
                        break  # blocked until the signal is raised
                    for index in inner:
                        other = raised[index]
                        for k in range(strands):
                            if other[k] > clock[k]:
                                clock[k] = other[k]
                clock[strand] = pc  # everything up to here on this strand is done
                out[(strand, pc)] = list(clock)
                if isinstance(op, SignalIndexOp) and op.index < pooled:
                    raised[op.index] = list(clock)
                pcs[strand] = pc + 1
                progressed = True
        if all(pcs[k] >= len(strand_ops[k]) for k in range(strands)):
            return out
        if not progressed:
            stuck = [
                f"strand {k} op {pcs[k]}" for k in range(strands) if pcs[k] < len(strand_ops[k])
            ]
            problems.append(f"the plan deadlocks: {', '.join(stuck)} wait forever")
            return out


def _name(node: ExecNode) -> str:
    return f"node {node.id} ({node.type.name})"
