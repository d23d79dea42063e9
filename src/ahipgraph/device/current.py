"""The calling task's current device ordinal (HIP's per-thread ``hipSetDevice`` state).

HIP keeps the current device per host thread; here it is per asyncio task (and per OS thread
outside a task), held in a :class:`contextvars.ContextVar`. A new OS thread starts on device 0,
as in HIP. A new task starts with the choice of the code that created it (contextvars are
copied into tasks), so ``set_device`` before ``asyncio.gather`` reaches the gathered tasks,
while a task's own ``set_device`` never reaches its parent or its siblings.

The variable lives in the device layer because ``get_device()`` defaults to it; the public
``set_device`` / ``current_device`` are in :mod:`ahipgraph.runtime.current`.
"""

from __future__ import annotations

from contextvars import ContextVar

__all__ = ["current_ordinal", "current_ordinal_now", "set_current_ordinal"]

_CURRENT: ContextVar[int] = ContextVar("ahipgraph_current_device", default=0)

# current_ordinal() as the variable's own (C) method: what the per-node paths call (a kernel
# node's or a captured launch's device limits are read once per node), with no Python frame.
current_ordinal_now = _CURRENT.get


def current_ordinal() -> int:
    """The ordinal ``set_device`` last chose in this task (0 if it never ran)."""
    return _CURRENT.get()


def set_current_ordinal(ordinal: int) -> None:
    """Make ``ordinal`` current for this task; the caller has validated it."""
    _CURRENT.set(ordinal)
