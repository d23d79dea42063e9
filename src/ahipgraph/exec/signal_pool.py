"""The signal-set pool (HIP's ``GraphSignalManager``).

Every launch of an executable needs a set of completion signals to connect its parallel
strands (the plan's parallel op lists). The pool holds ``num_sets`` sets of ``count`` signals
from instantiate on: the first is made at once, the others when a launch first needs them (a
wide graph's set holds a signal per branch, and most executables never have sixteen launches
in flight); a launch borrows one in O(1) and gives it back, re-armed, when its last packet
completes, so once each set was made replays allocate nothing.

When the pool is empty, ``acquire_nowait`` either creates a new set (counted as a miss; the pool
keeps it — HIP's behaviour) or, in waiting mode, reports that nothing is free; ``acquire`` then
parks on the one wait primitive. ``release`` hands the set straight to the first waiter, so a
non-blocking acquire can never jump the queue, and a waiter cancelled after the hand-off gives
the set back.

The counts are safe against launches of one executable from two threads' event loops at once
(they take sets before their submission claims the device) without a lock: nothing is counted by
a read-modify-write of a shared field. A set counts its own borrows, and only while it is
borrowed, by its one borrower; a set made because the pool ran dry is appended to a list (one
atomic step); ``statistics()`` adds them up.

Each set also carries ``extra`` bindings after its own signals (signal indices ``count`` and
up): per-launch references to signals the pool does not own (the previous launch's completion,
event records and waits). They are overwritten by every launch and cleared on release;
re-arming never touches them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..core.errors import InvalidValue
from ..core.lifecycle import NoCopy
from ..core.waitqueue import RECHECK, WaitQueue
from ..device.signal import Signal

__all__ = ["SignalSet", "SignalSetPool", "SignalPoolStatistics", "REACHED"]

REACHED = Signal(0)
"""A signal that is always reached: the binding for "nothing to wait for"."""


class SignalSet:
    """``count`` pooled signals followed by ``extra`` per-launch bindings.

    ``borrows``: how many acquires took this set (a refused launch's is given back). Changed
    only by the set's current borrower, so never by two threads at once.
    """

    __slots__ = ("borrows", "count", "signals")

    def __init__(self, count: int, extra: int) -> None:
        self.borrows = 0
        self.count = count
        self.signals: list[Signal] = [Signal(1) for _ in range(count)] + [REACHED] * extra

    def rearm(self) -> None:
        signals = self.signals
        for i in range(self.count):
            signals[i].rearm(1)
        for i in range(self.count, len(signals)):
            signals[i] = REACHED

    def __repr__(self) -> str:
        return f"<SignalSet count={self.count} extra={len(self.signals) - self.count}>"


@dataclass(frozen=True, slots=True)
class SignalPoolStatistics:
    sets: int
    free: int
    in_use: int
    prepopulated: int
    misses: int
    acquires: int
    waiters: int


class SignalSetPool(NoCopy):
    """A pool of :class:`SignalSet` for one executable."""

    def __init__(
        self, count: int, *, extra: int = 0, num_sets: int = 16, wait_when_empty: bool = False
    ) -> None:
        if num_sets < 1 and wait_when_empty:
            raise ValueError("a waiting pool needs at least one set")
        self._count = count
        self._extra = extra
        self._prepopulated = num_sets
        self._wait_when_empty = wait_when_empty
        self._free: deque[SignalSet] = deque(
            SignalSet(count, extra) for _ in range(min(num_sets, 1))
        )
        # Prepopulated sets made when first needed, one placeholder each (popped: atomic).
        self._unmade: list[None] = [None] * max(num_sets - 1, 0)
        self._made: list[SignalSet] = list(self._free)  # every set made: their borrows
        self._grown: list[None] = []  # one entry per miss (appended: atomic)
        self._closed_acquires = 0  # the borrows of the sets close() dropped
        self._waiters = WaitQueue()
        self._closed = False

    # How the pool was made and whether it is closed: read-only from outside. A user reaches
    # the pool (``graph_exec.pool``): ``closed`` set to True made every launch fail with
    # InvalidValue ("the signal-set pool is closed"); ``count`` set made later sets the wrong
    # size for the executable's programs; ``wait_when_empty`` changed what the instantiate
    # flags asked for. Only the executable, through ``close()``, changes any of them.

    @property
    def count(self) -> int:
        """Completion signals per set (one per signal the executable's plan raises)."""
        return self._count

    @property
    def extra(self) -> int:
        """Signals per set beyond ``count`` (a cross-device launch's markers)."""
        return self._extra

    @property
    def prepopulated(self) -> int:
        """Sets the pool was made with (the ``signal_sets`` of instantiate)."""
        return self._prepopulated

    @property
    def wait_when_empty(self) -> bool:
        """Whether a launch that finds no free set waits for one (else the pool grows)."""
        return self._wait_when_empty

    @property
    def closed(self) -> bool:
        """True once the executable was destroyed: no set is handed out any more."""
        return self._closed

    def acquire_nowait(self, *, grow: bool = True) -> SignalSet | None:
        """A free set; else a new one (a miss) if ``grow`` and the pool does not wait; else None.

        Raises:
            InvalidValue: the pool is closed.
        """
        if self._closed:
            raise InvalidValue("the signal-set pool is closed")
        # Each take is one atomic pop after its check: launches of one executable from two
        # threads' loops may take at the same moment (they claim the device only when they
        # submit), and the one that finds the set gone goes on as if it had not been there.
        if self._free and not self._waiters:
            try:
                signal_set = self._free.popleft()
            except IndexError:  # taken meanwhile by a launch on another thread's loop
                pass
            else:
                signal_set.borrows += 1  # ours alone now: no other thread counts on it
                return signal_set
        if self._unmade and not self._waiters:  # a prepopulated set, made now
            try:
                self._unmade.pop()
            except IndexError:  # the last one, counted meanwhile by another thread's launch
                pass
            else:
                return self._made_set()
        if self._waiters.reclaim():  # sets handed to launches whose event loop closed
            return self.acquire_nowait(grow=grow)
        if self._wait_when_empty or not grow:
            return None
        self._grown.append(None)
        return self._made_set()

    def _made_set(self) -> SignalSet:
        """A new set, borrowed by the caller and counted among the sets made."""
        signal_set = SignalSet(self._count, self._extra)
        signal_set.borrows = 1
        self._made.append(signal_set)
        return signal_set

    async def acquire(self, gone: Callable[[], bool] | None = None) -> SignalSet | None:
        """A set, parking until one is released if the pool waits when empty; None when
        ``gone()`` became True first (:meth:`wake_gone`): the launch's stream was destroyed."""
        taken = self.acquire_nowait()
        if taken is not None:
            return taken
        handed: SignalSet | None = await self._waiters.park(on_abandon=self.release, gone=gone)
        if handed is RECHECK:
            return None
        assert handed is not None
        handed.borrows += 1  # ours alone now, as in acquire_nowait
        return handed

    def wake_gone(self) -> None:
        """Wake the parked acquires whose ``gone()`` is now True: they take no set."""
        self._waiters.wake_gone()

    def release(self, signal_set: SignalSet) -> None:
        """Re-arm a set and hand it to the first waiter, or put it back on the free list."""
        signal_set.rearm()
        if self._closed:
            return
        if not self._waiters.unpark(signal_set):
            self._free.append(signal_set)

    def give_back(self, signal_set: SignalSet) -> None:
        """Return a set taken by a launch that was then refused: as :meth:`release`, and the
        acquire is not counted, so a failed launch leaves the statistics as they were."""
        signal_set.borrows -= 1  # still the caller's set: counted by it alone
        self.release(signal_set)

    def all_borrowed(self) -> list[SignalSet]:
        """Every set, when each is borrowed (none free, none left to make, the pool open);
        else an empty list. For a waiter asking whether any set can come back at all."""
        if self._free or self._unmade or self._closed:
            return []
        return list(self._made)  # a copy: a launch on another thread's loop may make a set

    @property
    def waiting(self) -> int:
        """How many acquires are parked for a set."""
        return len(self._waiters)

    def fail_waiters(self, error: BaseException) -> None:
        """Wake every parked acquire with ``error`` (its executable was destroyed)."""
        self._waiters.fail_all(error)

    def close(self) -> None:
        """Drop every set (the executable is being freed; no launch is in flight)."""
        self._closed = True
        # The free sets' borrows are final: keep their sum, drop them. A set still borrowed
        # (by a launch being refused as the executable is freed) stays counted by its borrower,
        # whose give_back must still uncount it.
        free = {id(signal_set) for signal_set in self._free}
        made = list(self._made)
        self._closed_acquires += sum(s.borrows for s in made if id(s) in free)
        self._made = [s for s in made if id(s) not in free]
        self._free.clear()
        self._unmade.clear()

    def _acquires(self) -> int:
        # Over a copy: a launch on another thread's loop may make a set meanwhile.
        return self._closed_acquires + sum(s.borrows for s in list(self._made))

    @property
    def in_use(self) -> int:
        """Sets borrowed now (0 once closed), in O(1): a trace samples it after every packet."""
        if self._closed:
            return 0
        sets = self._prepopulated + len(self._grown)
        return sets - len(self._free) - len(self._unmade)

    def statistics(self) -> SignalPoolStatistics:
        free = len(self._free) + len(self._unmade)
        misses = len(self._grown)
        sets = self._prepopulated + misses
        return SignalPoolStatistics(
            sets=sets,
            free=free,
            in_use=0 if self._closed else sets - free,
            prepopulated=self._prepopulated,
            misses=misses,
            acquires=self._acquires(),
            waiters=len(self._waiters),
        )

    def __repr__(self) -> str:
        stats = self.statistics()
        return (
            f"<SignalSetPool count={self._count} free={stats.free}/{stats.sets} "
            f"misses={stats.misses} waiters={stats.waiters}>"
        )
