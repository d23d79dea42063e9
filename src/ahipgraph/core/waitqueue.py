"""The one wait primitive: a FIFO of futures with hand-off on wake.

Every place in ahipgraph that blocks a task — stream and event synchronisation, launch completion,
pools that run dry — parks on a :class:`WaitQueue`. Fairness and cancellation are solved here once:

* ``park()`` appends a future and waits for it; waiters wake in FIFO order.
* ``unpark(value)`` hands ``value`` to the first waiter that is still waiting and returns True, or
  returns False when nobody waits (the caller then keeps the item, e.g. puts it on a free list).
  Handing over directly means a later non-blocking acquire can never jump the queue.
* A waiter cancelled *before* the hand-off simply leaves the queue. A waiter cancelled *after* it
  was handed a value (the future resolved, but the task was cancelled before it resumed) gives the
  value back through ``on_abandon`` so no item is lost.

A WaitQueue belongs to the event loop of its waiters. A wake may come from any thread: a waiter
is resolved on its own loop's thread (``call_soon_threadsafe`` from another thread).
A waiter whose loop was closed (plain ``loop.close()``, its task never resumed) is dead: wakes
skip it, so an item is never handed to it and nothing raises "Event loop is closed". A waiter
handed an item just before its loop closed never resumes to use it or give it back:
:meth:`WaitQueue.reclaim` (called by the owner, on another loop, when it runs short) gives such
items back through ``on_abandon``. So does an item handed from another thread whose delivery
(a callback on the waiter's loop) never ran because that loop closed first: until delivered,
the item is *in transit*, owned by whichever of the delivery, ``reclaim`` or the waiter's closed
coroutine takes it first.

A waiter may park with a ``gone`` check: what it waits *for* is still wanted only while
``gone()`` is False (a stream enqueue waiting for ring room, for as long as its stream is not
destroyed). Whoever makes ``gone()`` True calls :meth:`WaitQueue.wake_gone`, which wakes each
such waiter with :data:`RECHECK` instead of an item: nothing was handed, so nothing is given
back, and the waiter re-checks its call (which then fails). A wait whose ``gone()`` is
already True when it parks returns ``RECHECK`` at once: the check runs after the waiter is
listed, so a ``wake_gone`` on another thread either finds it listed or is seen by it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["RECHECK", "WaitQueue", "WaitQueueStatistics"]

_current_loop = asyncio._get_running_loop  # the caller's loop or None, never raising


class _Recheck:
    """The type of :data:`RECHECK`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "RECHECK"


# What :meth:`WaitQueue.wake_gone` hands a waiter whose ``gone()`` became True: no item.
RECHECK: Any = _Recheck()


def _settle(
    future: asyncio.Future[Any],
    value: Any,
    error: BaseException | None,
    on_abandon: Callable[[Any], None] | None,
    in_transit: dict[asyncio.Future[Any], tuple[Any, Callable[[Any], None]]] | None = None,
) -> None:
    """Resolve ``future`` (on its loop's thread). One cancelled before a value handed from
    another thread arrived never had it: the value goes back through ``on_abandon``. A value
    listed ``in_transit`` is delivered only if still listed: its waiter's closed coroutine
    may have taken it (see the module notes)."""
    if in_transit is not None and in_transit.pop(future, None) is None:
        return
    if future.done():
        if on_abandon is not None and value is not RECHECK:  # RECHECK is no item
            on_abandon(value)
    elif error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


@dataclass(frozen=True, slots=True)
class WaitQueueStatistics:
    """``waiters`` parked; ``in_transit`` items handed from another thread, not yet delivered
    (each is delivered, or given back by :meth:`WaitQueue.reclaim` if its loop closed)."""

    waiters: int
    in_transit: int = 0


class WaitQueue:
    """A FIFO of parked tasks."""

    __slots__ = ("_abandon", "_gone", "_in_transit", "_orphans", "_waiters")

    def __init__(self) -> None:
        self._waiters: deque[asyncio.Future[Any]] = deque()
        # Parked waiters that give a handed item back if they never use it, and how.
        self._abandon: dict[asyncio.Future[Any], Callable[[Any], None]] = {}
        # Items handed to waiters whose coroutine was closed before it resumed, for reclaim().
        self._orphans: deque[tuple[Any, Callable[[Any], None]]] = deque()
        # Parked waiters with a ``gone`` check, for wake_gone() (see the module notes).
        self._gone: dict[asyncio.Future[Any], Callable[[], bool]] = {}
        # Items handed from another thread to waiters that give them back, until delivered
        # on the waiter's loop (see _settle): one whose loop closes first is reclaimed.
        self._in_transit: dict[asyncio.Future[Any], tuple[Any, Callable[[Any], None]]] = {}

    async def park(
        self,
        on_abandon: Callable[[Any], None] | None = None,
        gone: Callable[[], bool] | None = None,
    ) -> Any:
        """Wait until :meth:`unpark` hands this waiter a value, and return it.

        Args:
            on_abandon: called with the handed value if the task is cancelled after the hand-off,
                or by :meth:`reclaim` if its loop closed before it resumed.
            gone: the wait is wanted only while this returns False: :meth:`wake_gone` wakes
                the waiter with :data:`RECHECK` once it returns True (see the module notes).
                It must be cheap, run no user code and be safe from any thread.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        if on_abandon is not None:
            self._abandon[future] = on_abandon
        if gone is not None:
            self._gone[future] = gone
            if gone():  # checked once listed: see the module notes
                self._discard(future)
                self._gone.pop(future, None)
                self._abandon.pop(future, None)
                return RECHECK
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                # Handed a value, then cancelled before resuming: give it back.
                callback = self._abandon.pop(future, None)
                if callback is not None and future.result() is not RECHECK:
                    callback(future.result())
            else:
                self._discard(future)
            raise
        except GeneratorExit:
            # The coroutine was closed without resuming (its task destroyed with its closed
            # loop, or by the collector): it never uses what it was handed. Kept for reclaim()
            # rather than given back here, wherever and whenever the collector runs. Only
            # while still listed: a reclaim() that ran first (its loop closed) gave it back.
            owned = self._abandon.pop(future, None)
            if future.done() and not future.cancelled() and owned is not None:
                if future.result() is not RECHECK:
                    self._orphans.append((future.result(), owned))
            else:
                self._discard(future)
                handed = self._in_transit.pop(future, None)  # on its way, never to be used
                if handed is not None:
                    self._orphans.append(handed)
            raise
        finally:
            self._abandon.pop(future, None)
            if gone is not None:
                self._gone.pop(future, None)

    def reclaim(self) -> bool:
        """Give back, through ``on_abandon``, what was handed to waiters whose event loop
        closed (or whose coroutine was closed) before they resumed (they never will), and drop
        their waiters that were never handed anything. True if anything was given back or dropped.

        Call it from the owner's next loop, where the closed loop can no longer run.
        """
        if not self._abandon and not self._orphans and not self._in_transit:
            return False
        changed = False
        orphans = self._orphans
        while orphans:
            try:
                value, on_abandon = orphans.popleft()
            except IndexError:  # emptied meanwhile by a reclaim() on another thread
                break
            on_abandon(value)
            changed = True
        for future in list(self._in_transit):  # their delivery was dropped with their loop
            if future.get_loop().is_closed():
                handed = self._in_transit.pop(future, None)
                if handed is not None:
                    handed[1](handed[0])
                    changed = True
        for future, on_abandon in list(self._abandon.items()):
            if future.get_loop().is_closed():
                if self._abandon.pop(future, None) is None:
                    continue  # its coroutine was closed meanwhile (another thread) and kept it
                changed = True
                if future.done() and not future.cancelled():
                    if future.result() is not RECHECK:
                        on_abandon(future.result())
                else:
                    self._discard(future)
        return changed

    def _discard(self, future: asyncio.Future[Any]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(future)

    def unpark(self, value: Any = None) -> bool:
        """Hand ``value`` to the first live waiter; return False if there is none."""
        waiters = self._waiters
        while waiters:
            try:
                future = waiters.popleft()
            except IndexError:  # emptied meanwhile by a wake on another thread
                break
            if not future.done() and self._resolve(future, value, None):
                return True
        return False

    def unpark_all(self, value: Any = None) -> int:
        """Wake every waiter with ``value``; return how many were woken."""
        return self._wake_all(value, None)

    def fail_all(self, error: BaseException) -> int:
        """Wake every waiter by raising ``error`` in it; return how many were woken."""
        return self._wake_all(None, error)

    def wake_gone(self) -> int:
        """Wake, with :data:`RECHECK`, every waiter whose ``gone()`` is now True; return how
        many were woken. Safe from any thread; costs a dict check when no waiter has a
        ``gone`` check. Each leaves the queue at once (no longer counted among the waiters)."""
        if not self._gone:
            return 0
        woken = 0
        # Over a copy: the loop's thread may park or leave meanwhile (list() is one C call).
        for future, gone in list(self._gone.items()):
            if not future.done() and gone():
                self._discard(future)
                if self._resolve(future, RECHECK, None):
                    woken += 1
        return woken

    def _wake_all(self, value: Any, error: BaseException | None) -> int:
        woken = 0
        waiters = self._waiters
        while waiters:
            try:
                future = waiters.popleft()
            except IndexError:  # emptied meanwhile by a wake on another thread
                break
            if not future.done() and self._resolve(future, value, error):
                woken += 1
        return woken

    def _resolve(
        self, future: asyncio.Future[Any], value: Any, error: BaseException | None
    ) -> bool:
        """Resolve a waiter on its own loop's thread; False if that loop is closed.

        A wake may come from another thread (an executable destroyed on a plain thread while
        a launch waits on the device's loop): a future is never resolved off its loop's thread,
        which would neither be safe nor wake a loop sleeping in its selector.
        """
        loop = future.get_loop()
        if loop.is_closed():
            return False
        if loop is _current_loop():
            _settle(future, value, error, None)
            return True
        on_abandon = None if error is not None else self._abandon.get(future)
        in_transit = None
        if on_abandon is not None and value is not RECHECK:
            in_transit = self._in_transit  # until delivered: see the module notes
            in_transit[future] = (value, on_abandon)
        try:
            loop.call_soon_threadsafe(_settle, future, value, error, on_abandon, in_transit)
        except RuntimeError:  # closed meanwhile: the waiter is dead
            # Unless reclaim() (another thread) took the item meanwhile and gave it back: the
            # hand-off is then made, and the caller must not hand the item on again.
            return in_transit is not None and in_transit.pop(future, None) is None
        return True

    def __len__(self) -> int:
        # Counted over a copy: another thread (a destroy, statistics()) may count while the
        # loop's thread parks and wakes, and walking the deque itself in Python code would
        # then fail with "deque mutated during iteration". list() copies it in one C call.
        return sum(1 for future in list(self._waiters) if not future.done())

    def __bool__(self) -> bool:
        # Every queued future is pending: woken ones are popped, cancelled ones discarded.
        return bool(self._waiters)

    def statistics(self) -> WaitQueueStatistics:
        return WaitQueueStatistics(waiters=len(self), in_transit=len(self._in_transit))

    def __repr__(self) -> str:
        transit = len(self._in_transit)
        return f"<WaitQueue waiters={len(self)}" + (f" in_transit={transit}>" if transit else ">")
