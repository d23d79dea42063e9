"""Whether device work waiting for a signal waits for itself.

An async kernel body or host function runs while its packet holds the head of its hardware
queue, and the queue runs nothing behind that packet until the body ends. A body that awaits
work queued behind it (its own stream's ``synchronize``, an event recorded after it, its own
completion, a launch it enqueued on its own queue) would wait for good: HIP forbids HIP calls
in a host function for this reason, and a GPU deadlocks. The engine refuses such a wait with
:class:`IllegalState` (``Engine._wait_signal``), using :func:`waits_for_head`.

The walk is exact for what it sees and never guesses: a signal's producers are the queued
programs that complete it (``completion``) or write it (an op of a graph replay that
decrements a signal of its set says which, with ``written_signal``); a program needs every
program ahead of it on its queue and the signals its barrier and wait ops name. A wait it
cannot see through (a stream memory wait, another device's work, another body's own await)
counts as no dependency, so a refused wait is always a real cycle, and a cycle through what
it cannot see still hangs as it would on a GPU.

A wait for the first of several signals (a graph launch waiting for whichever launch returns
a signal set first: ``Launcher.acquire``) is refused with :func:`each_waits_for_head`: only
when every one of them needs the head.

It runs only when device work parks on an unreached signal, never on an enqueue or a replay.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .ops import WaitSignalIndicesOp, WaitSignalsOp

if TYPE_CHECKING:
    from .hwqueue import HardwareQueue
    from .program import Program
    from .signal import Signal

__all__ = ["each_waits_for_head", "waits_for_head"]


def waits_for_head(queue: HardwareQueue, signals: Iterable[Signal]) -> bool:
    """True when reaching any of ``signals`` needs the packet at the head of ``queue``
    (the one running the device work that asks) to finish first."""
    packets = {q: q.packets() for q in queue._engine._queues}
    placed = [(q, i, p) for q, queued in packets.items() for i, p in enumerate(queued)]
    expanded: dict[HardwareQueue, int] = {}  # per queue: its first n packets were walked
    seen: set[int] = set()
    todo = list(signals)
    while todo:
        signal = todo.pop()
        if signal._value <= 0 or id(signal) in seen:
            continue
        seen.add(id(signal))
        for owner, index, program in placed:
            if not _produces(program, signal):
                continue
            if owner is queue:  # behind the head, or the head itself: after the work ends
                return True
            done = expanded.get(owner, 0)
            if index < done:
                continue
            expanded[owner] = index + 1
            for ahead in packets[owner][done : index + 1]:
                todo.extend(_waits_of(ahead))
    return False


def each_waits_for_head(queue: HardwareQueue, signals: Iterable[Signal]) -> bool:
    """True when reaching each of ``signals`` needs the packet at the head of ``queue``: a
    wait for whichever is reached first would never end. False for no signals."""
    signals = list(signals)
    return bool(signals) and all(waits_for_head(queue, (signal,)) for signal in signals)


def _produces(program: Program, signal: Signal) -> bool:
    if program.completion is signal:
        return True
    signals = program.signals
    if not signals:
        return False
    for op in program.ops[program.pc :]:
        written = getattr(op, "written_signal", None)  # a run of kernels is a bare int
        if written is not None and written(program) is signal:
            return True
    return False


def _waits_of(program: Program) -> list[Signal]:
    """The signals ``program`` still waits for before it can finish."""
    waits = list(program.barrier or ())
    for op in program.ops[program.pc :]:
        if type(op) is WaitSignalsOp:
            waits.extend(op.signals)
        elif type(op) is WaitSignalIndicesOp:
            waits.extend(program.signals[i] for i in op.indices)
    return waits
