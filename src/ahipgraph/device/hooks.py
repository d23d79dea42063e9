"""Hook points through which the tools layer watches and disturbs the simulated device.

Tracing (:mod:`ahipgraph.tools.trace`) and fault injection (:mod:`ahipgraph.testing.faults`)
live above the device, but they need to see each op run, each packet submitted and each
device allocation, and faults must be able to make an op fail or hang. Rather than the
device layer knowing about either, it reports to *observers* through three hook points:

* ``HardwareQueue.submit`` calls :meth:`Observer.submitted` for every packet (host enqueues);
* ``Program.run`` runs its ops through an observed twin of its loop, so an observer sees
  each op start and finish (and may replace an op by a failure or a hang), and how an op's
  async body (a coroutine kernel or host function, a hang) ended when it failed;
* ``DeviceMemory._charge`` calls :meth:`Observer.allocating` (an observer may refuse).

When nothing observes, ``observers`` is ``None`` and each hook point costs exactly one
predictable branch (``if hooks.observers is not None``): the launch path does not move.

Invariants: ``observers`` is ``None`` or a non-empty tuple, replaced whole (never mutated), so
a reader on any thread sees a consistent set; observers are called on the thread that does the
work (the device's event loop for ops and submits, any thread for allocations).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hwqueue import HardwareQueue
    from .memory import DeviceMemory
    from .ops import Op
    from .program import Program
    from .signal import Signal

__all__ = ["Observer", "install", "observers", "uninstall"]


class Observer:
    """Base class of device observers; every method is a no-op here."""

    def submitted(self, queue: HardwareQueue, program: Program) -> None:
        """A packet was appended to ``queue`` (called before the queue may run it)."""

    def op_starting(self, program: Program, op: Op) -> Any:
        """``op`` is about to run. Return an awaitable to run *instead* (a hang), or raise
        to make the op fail as if its body had raised; return ``None`` to let it run."""
        return None

    def op_finished(
        self, program: Program, op: Op, start_ns: int, error: BaseException | None
    ) -> None:
        """``op`` ran from ``start_ns`` to ``program.time`` (a barrier: once it passed)."""

    def barrier_passed(self, program: Program, signals: tuple[Signal, ...], start_ns: int) -> None:
        """``program``'s barrier (see :attr:`Program.barrier`) waited from ``start_ns`` to
        ``program.time`` for ``signals``; its first op runs next."""

    def op_failed(self, program: Program, op: Op, error: BaseException) -> None:
        """The async body of ``op`` (reported by :meth:`op_finished` when it was started, as
        the program moves on only once it ends) failed with ``error``."""

    def program_finished(self, program: Program) -> None:
        """``program`` ran its last op; its completion signal is about to be decremented."""

    def allocating(self, memory: DeviceMemory, nbytes: int) -> None:
        """``nbytes`` of device memory are about to be charged; raise to refuse them."""


observers: tuple[Observer, ...] | None = None
_lock = threading.Lock()


def install(observer: Observer) -> None:
    """Start calling ``observer`` from the hook points (after those already installed)."""
    global observers
    with _lock:
        observers = (*(observers or ()), observer)


def uninstall(observer: Observer) -> None:
    """Stop calling ``observer``. Removing one that is not installed is a no-op."""
    global observers
    with _lock:
        rest = tuple(o for o in observers or () if o is not observer)
        observers = rest or None


def op_starting(watchers: Sequence[Observer], program: Program, op: Op) -> Any:
    """The first replacement any observer asks for (see :meth:`Observer.op_starting`)."""
    for observer in watchers:
        replacement = observer.op_starting(program, op)
        if replacement is not None:
            return replacement
    return None
