"""The thread-id arrays kernel bodies index with: ``t.ids`` is ``arange(grid * block)``.

Design:
  * Every launch of the same size shares one read-only array, so a replayed graph does not
    rebuild its ids on every dispatch. The arrays live in a small LRU cache bounded by count
    and by bytes: a program that launches many distinct sizes keeps only the recent ones (an
    unbounded cache would hold one array per size ever launched, which grows with the square of
    the largest size). An array bigger than the byte budget is built per access, never cached.
  * The simulator materialises every thread id, so a launch may not have more than
    :data:`MAX_THREADS_PER_LAUNCH` threads: :func:`~ahipgraph.device.kernel.launch_dims` rejects
    bigger launches with ``InvalidConfiguration`` when the launch is made (HIP's code for a bad
    launch configuration), and :meth:`ThreadIdsCache.ids` refuses them too, so a 2**41-thread
    grid never reaches ``np.arange``.

Invariants: ``entries <= max_entries`` and ``nbytes <= max_bytes`` after every call; ``nbytes``
is the sum of the cached arrays' sizes. Thread-safe (one short lock), since kernel bodies may
run in worker threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..core.errors import InvalidConfiguration

__all__ = ["MAX_THREADS_PER_LAUNCH", "THREAD_IDS", "ThreadIdsCache", "ThreadIdsStatistics"]

MAX_THREADS_PER_LAUNCH = 1 << 26
"""Most threads one launch may have: its ids take 512 MiB as int64."""


@dataclass(frozen=True, slots=True)
class ThreadIdsStatistics:
    """What the cache holds (``counts``, most recently used last) and how it has been used."""

    entries: int
    nbytes: int
    max_entries: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int
    counts: tuple[int, ...]


class ThreadIdsCache:
    """A small LRU cache of read-only ``arange(count)`` arrays, bounded by count and bytes."""

    def __init__(self, *, max_entries: int = 16, max_bytes: int = 64 << 20) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError("cache bounds must be non-negative")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        # Reentrant: a collection can start at an allocation made under it (statistics()
        # builds its record there), and a finalizer it runs may read statistics() again.
        self._lock = threading.RLock()
        self._arrays: OrderedDict[int, npt.NDArray[np.int64]] = OrderedDict()
        self._nbytes = 0
        self._hits = self._misses = self._evictions = 0

    def ids(self, count: int) -> npt.NDArray[np.int64]:
        """The read-only linear ids ``0 .. count - 1``.

        Raises:
            InvalidConfiguration: ``count`` is past :data:`MAX_THREADS_PER_LAUNCH`.
        """
        with self._lock:
            ids = self._arrays.get(count)
            if ids is not None:
                self._arrays.move_to_end(count)
                self._hits += 1
                return ids
            self._misses += 1
        if count > MAX_THREADS_PER_LAUNCH:
            raise InvalidConfiguration(
                f"{count} threads in one launch; the simulator materialises at most "
                f"{MAX_THREADS_PER_LAUNCH}"
            )
        ids = np.arange(count, dtype=np.int64)  # built outside the lock: it may be large
        ids.flags.writeable = False
        # Handed out as a view of that read-only array: an array that owns its data may be made
        # writeable again (a body could then change every later launch's ids); a view may not.
        ids = ids.view()
        if ids.nbytes <= self.max_bytes and self.max_entries:
            with self._lock:
                self._insert(count, ids)
        return ids

    def _insert(self, count: int, ids: npt.NDArray[np.int64]) -> None:
        """Cache ``ids``, evicting least recently used arrays to fit. Hold the lock."""
        if count in self._arrays:  # another thread built the same size meanwhile
            return
        while self._arrays and (
            len(self._arrays) >= self.max_entries or self._nbytes + ids.nbytes > self.max_bytes
        ):
            _, evicted = self._arrays.popitem(last=False)
            self._nbytes -= evicted.nbytes
            self._evictions += 1
        self._arrays[count] = ids
        self._nbytes += ids.nbytes
        assert len(self._arrays) <= self.max_entries
        assert self._nbytes <= self.max_bytes

    def clear(self) -> None:
        """Drop every cached array (the counters stay)."""
        with self._lock:
            self._arrays.clear()
            self._nbytes = 0

    def statistics(self) -> ThreadIdsStatistics:
        with self._lock:
            return ThreadIdsStatistics(
                entries=len(self._arrays),
                nbytes=self._nbytes,
                max_entries=self.max_entries,
                max_bytes=self.max_bytes,
                hits=self._hits,
                misses=self._misses,
                evictions=self._evictions,
                counts=tuple(self._arrays),
            )

    def __repr__(self) -> str:
        return (
            f"<ThreadIdsCache entries={len(self._arrays)}/{self.max_entries} "
            f"bytes={self._nbytes}/{self.max_bytes}>"
        )


THREAD_IDS = ThreadIdsCache()
"""The process-wide cache behind :attr:`Threads.ids <ahipgraph.device.kernel.Threads.ids>`."""
