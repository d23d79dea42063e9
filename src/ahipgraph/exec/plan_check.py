"""The plan verifier: is every declared edge enforced by the executable's slots and signals?

HIP's runtime has shipped graphs whose executables dropped declared edges (rocm-systems
#11499, #11359): the graph was right, the schedule was not. This check reads what a replay
really runs — each slot's op list, its :class:`SignalSlotOp` and :class:`WaitSlotsOp` — not the
planner's intentions, and proves for every declared edge ``u -> v`` (through child graphs and
op-less nodes, transitively) that ``u``'s op completes before ``v``'s starts in every
interleaving.

It runs the slots abstractly: each slot advances until a wait names a signal no op has raised
yet; a raised signal carries its slot's vector clock (per slot, the last position known done)
and a wait joins it. If every slot is stuck, the plan deadlocks, and that is reported too.
Signals a launch binds from outside (the previous launch, event nodes) order nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..device.ops import SignalSlotOp, WaitSlotsOp
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
    slot_ops = graph_exec._version.slot_ops
    pooled = graph_exec._plan.num_signals
    problems: list[str] = []
    raisers: dict[int, int] = {}
    for ops in slot_ops:
        for op in ops:
            if isinstance(op, SignalSlotOp):
                raisers[op.slot] = raisers.get(op.slot, 0) + 1
    for signal, count in sorted(raisers.items()):
        if count != 1:
            problems.append(f"signal {signal} is raised by {count} ops, not one")
    position_clock = _run(slot_ops, pooled, problems)
    flat = flatten(graph_exec._graph, None, None)
    located = compiled.locations
    nearest: list[set[int]] = []
    for node in flat:
        near: set[int] = set()
        for dep in node.deps:
            if flat[dep].exec_node in located:
                near.add(dep)
            else:
                near |= nearest[dep]
        nearest.append(near)
        here = located.get(node.exec_node)
        if here is None:
            continue
        clock = position_clock.get(here)
        for dep in near:
            slot, position = located[flat[dep].exec_node]
            if clock is None or clock[slot] < position:
                problems.append(
                    f"edge {_name(flat[dep].exec_node)} -> {_name(node.exec_node)} is not "
                    f"enforced: slot {here[0]} op {here[1]} may start before slot {slot} "
                    f"op {position} is done"
                )
    return problems


def _run(
    slot_ops: Sequence[Sequence[object]], pooled: int, problems: list[str]
) -> dict[tuple[int, int], list[int]]:
    """Each op position's vector clock over the slots (-1: nothing of that slot known)."""
    slots = len(slot_ops)
    clocks = [[-1] * slots for _ in range(slots)]
    pcs = [0] * slots
    raised: dict[int, list[int]] = {}
    out: dict[tuple[int, int], list[int]] = {}
    while True:
        progressed = False
        for slot in range(slots):
            ops = slot_ops[slot]
            clock = clocks[slot]
            while pcs[slot] < len(ops):
                pc = pcs[slot]
                op = ops[pc]
                if isinstance(op, WaitSlotsOp):
                    inner = [s for s in op.slots if s < pooled]
                    if any(s not in raised for s in inner):
                        break  # blocked until the signal is raised
                    for s in inner:
                        other = raised[s]
                        for k in range(slots):
                            if other[k] > clock[k]:
                                clock[k] = other[k]
                clock[slot] = pc  # everything up to here on this slot is done
                out[(slot, pc)] = list(clock)
                if isinstance(op, SignalSlotOp) and op.slot < pooled:
                    raised[op.slot] = list(clock)
                pcs[slot] = pc + 1
                progressed = True
        if all(pcs[s] >= len(slot_ops[s]) for s in range(slots)):
            return out
        if not progressed:
            stuck = [f"slot {s} op {pcs[s]}" for s in range(slots) if pcs[s] < len(slot_ops[s])]
            problems.append(f"the plan deadlocks: {', '.join(stuck)} wait forever")
            return out


def _name(node: ExecNode) -> str:
    return f"node {node.id} ({node.type.name})"
