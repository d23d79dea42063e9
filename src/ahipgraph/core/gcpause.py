"""Pausing Python's cyclic garbage collector while a bulk build allocates.

Instantiating or cloning a graph allocates several container objects per node, all of which stay
reachable (nothing built there becomes garbage unless the call fails). The collector counts
those allocations and runs young-generation passes every few hundred, plus a full pass over
every live object each time the survivors grow by a quarter: for a million-node graph that is
thousands of passes that can free nothing, about half the cost of the build. :func:`paused`
switches the collector off for the duration of such a build and back on afterwards.

What is saved is the repeated full passes over everything alive; the young objects the build
made are still counted, so the first allocation after the pause runs one young-generation pass
over them (a replay right after instantiate pays that). Objects a paused build makes and drops
(an update's snapshot) cost the collector nothing at all.

Building a large graph node by node is the same bulk build, spread over the user's own loop of
``add_*_node`` calls (or captured operations), with no ``with`` block around it. There
:func:`pause_until_yield` pauses the collector from inside the build, and the event loop
switches it back on: at its next iteration, which comes when the building task awaits
something that suspends or ends. A build in a task is one synchronous burst, so its pause
lasts exactly as long as the build; a thread without a running event loop is never paused this
way (nothing would say when its build ended). When such a pause ends a large build, one pass
over both young generations (:func:`_settle_young`) does what two young passes would.

Two known limits (pinned by strict xfails in ``tests/test_hostile_stop11.py``): a
``gc.disable()`` the program makes during a burst is undone when the burst ends, and a loop
stopped in the very iteration that built, and then neither run again nor closed, keeps the
collector off until it is.

Only the collector's automatic passes are affected: reference counting frees everything as
usual, and an explicit ``gc.collect()`` still works. Nested and concurrent pauses (several
threads instantiating at once) are counted, and the collector is switched back on only by the
last one to finish, and only if it was on when the first one began; a program that keeps the
collector off keeps it off.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["pause_until_yield", "paused"]

_lock = threading.RLock()  # re-entrant: a pause freed by the collector ends inside its own lock
_depth = 0
_restore = False


def _enter() -> None:
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1


def _leave() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0 and _restore:
            gc.enable()


@contextmanager
def paused() -> Iterator[None]:
    """Keep the collector's automatic passes off inside the ``with`` block."""
    _enter()
    try:
        yield
    finally:
        _leave()


# A burst that left at least this many young tracked objects ends with one pass over them.
_BULK_YOUNG = 100_000


def _settle_young() -> None:
    """One pass over both young generations (``gc.collect(1)``) after a large burst.

    What a bulk build made lives as long as its graph. Left to the collector, each of its
    objects would be walked by a first-generation pass, again by a second-generation pass, and
    then by the full pass their promotion brings; one pass over both young generations does
    the first two at once. It frees young garbage as those passes would and promotes the
    survivors with the collector's own accounting, so full passes come as they always do.
    """
    if gc.get_count()[0] >= _BULK_YOUNG:
        gc.collect(1)


class _Burst:
    """One pause that the running event loop ends: called at its next iteration.

    If the loop is closed first, its queue drops the callback, and the pause ends when this is
    freed: a loop that never runs again cannot keep the collector off.
    """

    __slots__ = ("ended",)

    def __init__(self) -> None:
        self.ended = False

    def __call__(self) -> None:
        with _lock:
            if self.ended:
                return
            self.ended = True
            last = _depth == 1 and _restore
        _leave()
        if last:
            _settle_young()

    __del__ = __call__


def pause_until_yield() -> None:
    """Pause the collector until the running event loop's next iteration (a bulk build).

    Does nothing without a running loop in this thread, or with the collector already off
    (paused, or switched off by the program).
    """
    if not gc.isenabled():
        return
    loop = asyncio._get_running_loop()
    if loop is None:
        return
    burst = _Burst()
    _enter()
    try:
        loop.call_soon(burst)
    except RuntimeError:  # a closed loop: no pause, and the build goes on
        burst()
    except BaseException:
        burst()
        raise
