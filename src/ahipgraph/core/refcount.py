"""Thread-safe reference counting with batch retain/release.

A :class:`RefCounted` object starts with one or more references; ``retain(n)`` and ``release(n)``
move the count by ``n`` at once (HIP retains and releases user objects in batches), and the
subclass hook :meth:`RefCounted._last_release` runs exactly once, on the thread of the call that
dropped the count to zero, outside the lock.

Invariants: the count never goes below zero; a dead object cannot be retained again; the hook
runs once.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["RefCounted"]


class RefCounted:
    """Base for objects whose lifetime is shared (execs, user objects, argument slots)."""

    __slots__ = ("_ref_lock", "_refcount")

    def __init__(self, initial: int = 1) -> None:
        if initial < 1:
            raise ValueError(f"initial reference count must be >= 1, got {initial}")
        # Any lock: a subclass may share a reentrant lock with its own book-keeping.
        self._ref_lock: AbstractContextManager[Any] = threading.Lock()
        self._refcount = initial

    @property
    def refcount(self) -> int:
        return self._refcount

    def retain(self, count: int = 1) -> None:
        """Add ``count`` references.

        Raises:
            ValueError: ``count`` is not positive, or the object is already dead.
        """
        if count < 1:
            raise ValueError(f"retain count must be >= 1, got {count}")
        with self._ref_lock:
            if self._refcount == 0:
                raise ValueError(f"{self!r} is dead and cannot be retained")
            self._refcount += count

    def release(self, count: int = 1) -> bool:
        """Drop ``count`` references; return True when this call dropped the last one.

        Raises:
            ValueError: ``count`` is not positive or exceeds the current count.
        """
        if count < 1:
            raise ValueError(f"release count must be >= 1, got {count}")
        with self._ref_lock:
            if count > self._refcount:
                raise ValueError(f"cannot release {count} of {self._refcount} references")
            self._refcount -= count
            last = self._refcount == 0
        if last:
            self._last_release()
        return last

    def _last_release(self) -> None:
        """Called once, when the count reaches zero. Subclasses free their resources here."""
