"""The per-device graph memory pool (HIP's ``graph_mem_pool_``) and its attributes.

Graph memory-alloc nodes reserve addresses when they are added and commit memory when they run.
The memory comes from this pool: memory given back by a free node, by ``stream.free_async`` /
``device.free`` of a graph allocation, by an executable's auto-free-on-launch or by an executable
being destroyed stays *reserved* by the pool — still charged to the device, as HIP keeps it
mapped — and the next commit draws from it before asking the device for more.
``device.graph_mem_trim()`` returns the reserved bytes no allocation uses.

A launch that fails part way (an allocation the device cannot satisfy, a kernel fault) is no
different: the allocations it committed before the failure stay committed until freed, and what
its free nodes (which still run: a failure stops no other work) give back stays reserved, as a
successful launch's would. The next commit draws from it, so failing again does not grow the
pool, and ``graph_mem_trim()`` returns it.

Figures (``hipGraphMemAttributeType``):

* ``UsedMemCurrent``: bytes committed to graph allocations now;
* ``ReservedMemCurrent``: bytes the pool holds (used plus cached), never below used;
* ``UsedMemHigh`` / ``ReservedMemHigh``: their high-water marks since the last reset.

``set_graph_mem_attribute`` may only reset a high-water mark, and only to 0 (HIP's rule):
anything else is ``InvalidValue``. An unknown attribute is ``InvalidValue``; a device that does
not exist (or no longer does, after ``configure_devices``) is ``InvalidDevice``.

The pool's counters change only under its device memory's lock (every method here is called
with it held), so ``bytes_in_use`` and the pool never disagree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..core.errors import InvalidValue
from ..core.ints import as_int

__all__ = ["GraphMemAttribute", "GraphMemPool", "GraphPoolStatistics", "check_attribute"]


class GraphMemAttribute(enum.IntEnum):
    """``hipGraphMemAttributeType``, with HIP's numbers."""

    UsedMemCurrent = 0
    UsedMemHigh = 1
    ReservedMemCurrent = 2
    ReservedMemHigh = 3


@dataclass(frozen=True, slots=True)
class GraphPoolStatistics:
    used: int
    reserved: int
    used_high: int
    reserved_high: int
    cached: int
    commits: int
    reused_bytes: int


class GraphMemPool:
    """Counters of one device's graph memory pool. Call with the device memory's lock held."""

    __slots__ = ("_cached", "_commits", "_reserved_high", "_reused_bytes", "_used", "_used_high")

    def __init__(self) -> None:
        self._used = 0
        self._cached = 0  # reserved but unused: still charged to the device
        self._used_high = 0
        self._reserved_high = 0
        self._commits = 0
        self._reused_bytes = 0

    # The counters are read-only from outside: only commits, releases, trims and HIP's one
    # setter (``set_graph_mem_attribute``, a high-water mark back to 0) change them. A user
    # reaches the pool (``device.memory.graph_pool``): ``cached`` set ahead made a trim give
    # the device bytes no allocation had returned, so ``memory_info()`` reported more free
    # memory than there was (and ``bytes_in_use`` went negative); ``used`` set made
    # ``graph_mem_attribute`` report it.

    @property
    def used(self) -> int:
        """Bytes committed to graph allocations now (``UsedMemCurrent``)."""
        return self._used

    @property
    def cached(self) -> int:
        """Bytes the pool keeps that no allocation uses (still charged to the device)."""
        return self._cached

    @property
    def used_high(self) -> int:
        """The high-water mark of ``used`` since its last reset (``UsedMemHigh``)."""
        return self._used_high

    @property
    def reserved_high(self) -> int:
        """The high-water mark of ``reserved`` since its last reset (``ReservedMemHigh``)."""
        return self._reserved_high

    @property
    def commits(self) -> int:
        """Graph allocations committed so far."""
        return self._commits

    @property
    def reused_bytes(self) -> int:
        """Bytes commits took from the cache instead of the device."""
        return self._reused_bytes

    @property
    def reserved(self) -> int:
        return self._used + self._cached

    def to_charge(self, nbytes: int) -> int:
        """Bytes a commit of ``nbytes`` must take from the device (the rest comes from cache)."""
        return nbytes - min(self._cached, nbytes)

    def committed(self, nbytes: int) -> None:
        """A commit of ``nbytes`` succeeded (its new bytes were charged to the device)."""
        reused = min(self._cached, nbytes)
        self._cached -= reused
        self._reused_bytes += reused
        self._used += nbytes
        self._commits += 1
        self._used_high = max(self._used_high, self._used)
        self._reserved_high = max(self._reserved_high, self.reserved)

    def released(self, nbytes: int) -> None:
        """A graph allocation of ``nbytes`` gave its memory back: the pool keeps it."""
        self._used -= nbytes
        self._cached += nbytes

    def trim(self) -> int:
        """Drop the cached bytes; returns how many the device gets back."""
        freed, self._cached = self._cached, 0
        return freed

    def attribute(self, attr: Any) -> int:
        """The value of ``attr``. Raises InvalidValue for an unknown one."""
        checked = check_attribute(attr)
        return {
            GraphMemAttribute.UsedMemCurrent: self._used,
            GraphMemAttribute.UsedMemHigh: self._used_high,
            GraphMemAttribute.ReservedMemCurrent: self.reserved,
            GraphMemAttribute.ReservedMemHigh: self._reserved_high,
        }[checked]

    def set_attribute(self, attr: Any, value: Any) -> None:
        """Reset a high-water mark to 0; anything else is InvalidValue."""
        checked = check_attribute(attr)
        value = as_int(value, "value")
        if checked is GraphMemAttribute.UsedMemHigh and value == 0:
            self._used_high = 0
        elif checked is GraphMemAttribute.ReservedMemHigh and value == 0:
            self._reserved_high = 0
        else:
            raise InvalidValue(
                f"only UsedMemHigh and ReservedMemHigh can be set, and only to 0 "
                f"(got {checked.name} = {value})"
            )

    def statistics(self) -> GraphPoolStatistics:
        return GraphPoolStatistics(
            self._used,
            self.reserved,
            self._used_high,
            self._reserved_high,
            self._cached,
            self._commits,
            self._reused_bytes,
        )

    def __repr__(self) -> str:
        return (
            f"<GraphMemPool used={self._used} reserved={self.reserved} cached={self._cached} "
            f"used_high={self._used_high} reserved_high={self._reserved_high}>"
        )


def check_attribute(attr: Any) -> GraphMemAttribute:
    """``attr`` as a :class:`GraphMemAttribute`: TypeError for a non-integer, InvalidValue
    for an unknown number.

    Its ``__index__`` is user code: callers convert it before they take the allocator's lock
    (see ``DeviceMemory.graph_pool_attribute``), so it never runs while other threads wait.
    """
    checked = as_int(attr, "attribute", expected="an ahg.GraphMemAttribute")
    try:
        return GraphMemAttribute(checked)
    except ValueError:
        raise InvalidValue(f"{attr!r} is not a graph memory attribute") from None
