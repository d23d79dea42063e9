"""Signals: the only cross-queue synchronisation on the simulated device (HSA semantics).

A signal holds an integer. Completing a packet decrements its completion signal; a barrier packet
waits until each of its signals is at or below a target (zero for a barrier-AND); re-arming sets
the value again so a signal can be reused by the next launch. Each change is stamped with the
simulated time at which it happened, so a waiter knows when, on the device timeline, its wait was
satisfied.

Two kinds of waiter:
  * device-side watchers (hardware queues parked on a barrier) register a plain callback;
  * host-side tasks ``await signal.wait()``, which parks on the one wait primitive.

A signal may also carry the error of the packet that completed it, which is how a kernel failure
reaches whoever waits for that work.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.errors import HipError
from ..core.lifecycle import NoCopy
from ..core.waitqueue import RECHECK, WaitQueue

__all__ = ["Signal"]


class Signal(NoCopy):
    """A countdown value with a timestamp of its last change."""

    __slots__ = ("_error", "_lot", "_time", "_value", "_watchers")

    def __init__(self, value: int = 1) -> None:
        self._value = value
        self._time = 0  # simulated ns of the last change
        self._error: HipError | None = None
        self._watchers: list[tuple[int, Callable[[], None]]] | None = None
        self._lot: WaitQueue | None = None

    # Where the signal stands is read-only from outside: only the packets completing, the
    # barriers re-arming it and a launch's set being re-armed change it, through the methods
    # below. A user reaches signals (``event.signal``, ``stream.tail``): an assigned value
    # made a pending record say done (``query()`` True, ``synchronize()`` returning while its
    # work ran, a barrier on it let through), an assigned error failed or hid a failure, an
    # assigned time moved the host's clock. The runtime reads the private slots: these
    # properties are for users and are on no hot path.

    @property
    def value(self) -> int:
        """What is left to complete: the signal is reached when it is at or below zero."""
        return self._value

    @property
    def time(self) -> int:
        """The simulated ns of its last change."""
        return self._time

    @property
    def error(self) -> HipError | None:
        """The failure of the work that completed it, if that work failed."""
        return self._error

    def reached(self, target: int = 0) -> bool:
        return self._value <= target

    def decrement(self, time_ns: int, error: HipError | None = None) -> None:
        """Complete one unit of work at ``time_ns`` (optionally failed with ``error``)."""
        self._value -= 1
        self._time = time_ns
        if error is not None and self._error is None:
            self._error = error
        if self._watchers or self._lot is not None:  # nobody waits, mostly: skip the call
            self._notify()

    def set(self, value: int, time_ns: int) -> None:
        self._value = value
        self._time = time_ns
        self._notify()

    def rearm(self, value: int = 1) -> None:
        """Make the signal pending again for reuse. Only legal when nobody is waiting on it."""
        assert not self._watchers, "re-armed a signal that has device waiters"
        assert not self._lot, "re-armed a signal that has host waiters"
        self._value = value
        self._time = 0
        self._error = None

    def when_reached(self, target: int, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the value is at or below ``target`` (now, if it already is)."""
        if self._value <= target:
            callback()
            return
        if self._watchers is None:
            self._watchers = []
        self._watchers.append((target, callback))

    async def wait(self, target: int = 0, gone: Callable[[], bool] | None = None) -> None:
        """Park the calling task until the value is at or below ``target``, or until
        ``gone()`` is True and :meth:`wake_gone` is called (the waiter checks which)."""
        while self._value > target:
            if self._lot is None:
                self._lot = WaitQueue()
            if await self._lot.park(gone=gone) is RECHECK:
                return

    def wake_gone(self) -> None:
        """Wake the host waiters whose ``gone()`` is now True (see :meth:`wait`)."""
        lot = self._lot
        if lot is not None:
            lot.wake_gone()

    def _notify(self) -> None:
        watchers = self._watchers
        if watchers:
            value = self._value
            ready = [cb for target, cb in watchers if value <= target]
            if ready:
                self._watchers = [(t, cb) for t, cb in watchers if value > t] or None
                for callback in ready:
                    callback()
        if self._lot is not None:
            self._lot.unpark_all()

    @property
    def waiters(self) -> int:
        return len(self._watchers or ()) + (len(self._lot) if self._lot is not None else 0)

    def __repr__(self) -> str:
        return f"<Signal value={self._value} t={self._time}ns waiters={self.waiters}>"
