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

Only the collector's automatic passes are affected: reference counting frees everything as
usual, and an explicit ``gc.collect()`` still works. Nested and concurrent pauses (several
threads instantiating at once) are counted, and the collector is switched back on only by the
last one to finish, and only if it was on when the first one began; a program that keeps the
collector off keeps it off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0
_restore = False


@contextmanager
def paused() -> Iterator[None]:
    """Keep the collector's automatic passes off inside the ``with`` block."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
