"""Bookkeeping for memory-alloc and memory-free nodes.

A memory-alloc node reserves device address space when it is added (``DeviceMemory.reserve``:
addresses, no bytes); the executable commits memory behind it at run time. Later nodes may use
the pointer at once, so node validation must accept a range inside such a reservation even
though nothing is committed yet (the device's own ``resolve`` only knows committed memory).

This module keeps the process-wide table HIP keeps per graph (``memAllocNodePtrs_``):

  * every live reservation made by an alloc node, with the graph that made it;
  * whether a free node has claimed it. A free node must name the start of a reservation that no
    other free node has claimed yet, in *some* live graph, as in HIP (a second free is
    InvalidValue).

Ownership of the address space: the graph that made a reservation owns it until it is destroyed
or instantiated — from then on an executable owns the range (it commits and decommits it, and
unreserves it when it is destroyed). As in HIP, a free node may free an allocation of another
graph, even one already destroyed: the allocating graph's destroy leaves behind, as *orphans*,
its unfreed reservations that an executable owns or that another graph's free node claims. An
orphan no executable owns is forgotten (and unreserved) when the graph holding its free node
is destroyed; one an executable owns stays claimable until the executable gives it back. An
uninstantiated graph's allocation that no free node claims goes with its graph, so nothing is
left behind.
Destroying the graph that holds a free node of a live graph's allocation
makes that allocation free-able again.

The table is keyed weakly by the device-memory object, not the ordinal: reconfiguring devices (as
tests do) can never make an old entry alias a new device's addresses, and a dropped device's
memory is collected with its entries instead of being pinned here.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import dataclass

from ..core.errors import HipError, InvalidValue
from ..device.memory import DeviceMemory
from ..device.pointer import DevicePtr
from ..runtime.device import get_device

__all__ = ["RESERVATIONS", "Reservation", "ReservationTable", "memory_of"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """An alloc node's range: its start pointer, size and device ordinal."""

    ptr: DevicePtr
    nbytes: int
    device: int


@dataclass(eq=False, slots=True)
class _Entry:
    reservation: Reservation
    owner: object | None  # the allocating graph; None once it is gone (an orphan)
    freed_by: object | None = None
    exec_owned: bool = False  # an executable owns (and will unreserve) the range


class ReservationTable:
    """Live alloc-node reservations, by device memory (weakly) and base address. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # No entry refers to its memory object, so a dropped device's memory can be collected.
        self._by_memory: weakref.WeakKeyDictionary[DeviceMemory, dict[int, _Entry]] = (
            weakref.WeakKeyDictionary()
        )

    def reserve(self, nbytes: int, device: int, owner: object) -> Reservation:
        """Reserve ``nbytes`` on ``device`` for an alloc node of ``owner``.

        Raises:
            InvalidDevice: no such device. InvalidValue: a zero or negative size.
        """
        memory = get_device(device).memory
        ptr = memory.reserve(nbytes)
        reservation = Reservation(ptr, nbytes, device)
        with self._lock:
            self._by_memory.setdefault(memory, {})[ptr.address] = _Entry(reservation, owner)
        return reservation

    def find(self, ptr: DevicePtr) -> Reservation | None:
        """The reservation that contains ``ptr``, if any."""
        memory = memory_of(ptr)
        if memory is None:
            return None
        with self._lock:
            for base, entry in self._by_memory.get(memory, {}).items():
                if base <= ptr.address < base + entry.reservation.nbytes:
                    return entry.reservation
        return None

    def claim_free(self, ptr: DevicePtr, owner: object) -> Reservation:
        """Mark the reservation starting at ``ptr`` as freed by a node of ``owner``.

        Raises:
            InvalidValue: ``ptr`` is not the start of a live reservation, or one already freed,
                or it is a pointer of a device ``configure_devices`` replaced.
        """
        # A hand-made pointer's fields may be anything: only int fields name a reservation, as
        # for the device's own free (a float address equal to a base would claim it for a free
        # node that frees nothing, and refuse the real one).
        plain = type(ptr.device) is int and type(ptr.address) is int
        if plain and ptr._origin.replaced:  # the successor's range at its address is not it
            raise InvalidValue(
                f"{ptr!r} was not allocated by a graph memory-alloc node of device "
                f"{ptr.device}: it comes from a device configure_devices replaced, whose "
                "addresses this one reuses"
            )
        memory = memory_of(ptr) if plain else None
        with self._lock:
            entry = self._by_memory.get(memory, {}).get(ptr.address) if memory else None
            if entry is None:
                raise InvalidValue(f"{ptr!r} was not allocated by a graph memory-alloc node")
            if entry.freed_by is not None:
                raise InvalidValue(f"{ptr!r} already has a memory-free node")
            entry.freed_by = owner
            # Its own graph frees it, and no executable took the range without this node: no
            # launch leaves its memory for the user to free (see mark_graph_frees).
            own = entry.owner is owner and not entry.exec_owned
        if own and memory is not None:  # not under the table's lock (see release_owner)
            memory.mark_graph_frees(ptr)
        return entry.reservation

    def hand_over(self, ptrs: list[DevicePtr]) -> None:
        """An executable now owns the ranges at ``ptrs`` (it commits them and unreserves them
        when it is destroyed); the graph that reserved them no longer gives them back.

        Per range, not per graph: a graph instantiated before it held an alloc node, or given
        one after, still owns that node's range.
        """
        taken: list[tuple[DeviceMemory, DevicePtr]] = []
        with self._lock:
            for ptr in ptrs:
                memory = memory_of(ptr)
                entry = self._by_memory.get(memory, {}).get(ptr.address) if memory else None
                if entry is not None:
                    entry.exec_owned = True
                    assert memory is not None
                    taken.append((memory, ptr))
        for memory, ptr in taken:  # not under the table's lock (see release_owner)
            memory.mark_instantiated(ptr)

    def release_owner(self, owner: object) -> None:
        """``owner`` (a graph) is gone: settle its reservations and its free claims.

        Its allocations freed by its own free nodes are forgotten (and unreserved unless an
        executable owns the range); its other allocations become orphans, still claimable by a
        free node, unless no executable owns them and no free node claims them (forgotten and
        unreserved). Its claims on other graphs' allocations are withdrawn, and an orphan that
        loses its claim is forgotten, unless an executable owns it: another free node may
        then still free what that executable allocates.
        """
        dropped: list[tuple[DeviceMemory, _Entry]] = []
        with self._lock:
            for memory, table in list(self._by_memory.items()):
                for base, entry in list(table.items()):
                    if entry.owner is owner:
                        mine = not entry.exec_owned  # no executable took the range
                        if entry.freed_by is owner or (entry.freed_by is None and mine):
                            # Freed by its own graph, or no executable took it and no free
                            # node claims it: nothing can use the range any more.
                            del table[base]
                            if mine:
                                dropped.append((memory, entry))
                        else:
                            entry.owner = None
                    elif entry.freed_by is owner:
                        entry.freed_by = None
                        # An orphan an executable still owns stays claimable: that executable
                        # commits it at every launch, and gives the range back when freed.
                        if entry.owner is None and not entry.exec_owned:
                            del table[base]
                            dropped.append((memory, entry))
        for memory, entry in dropped:
            with contextlib.suppress(HipError):  # an executable already gave the range back
                memory.unreserve(entry.reservation.ptr)

    def give_back(self, memory: DeviceMemory, ptr: DevicePtr) -> None:
        """An executable gives back its range at ``ptr``: no free node can claim it any more,
        and its addresses (and memory, if committed) return to ``memory``.

        ``memory`` is the one the executable committed the range in, fixed when it was made,
        never looked up again by ordinal: once ``configure_devices`` replaced the device, the
        ordinal names a new memory whose own reservations start at the same addresses.
        """
        with self._lock:
            table = self._by_memory.get(memory)
            if table is not None:
                table.pop(ptr.address, None)
        with contextlib.suppress(HipError):  # already given back
            memory.unreserve(ptr)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(table) for table in self._by_memory.values())

    def __repr__(self) -> str:
        return f"<ReservationTable reservations={len(self)}>"


def memory_of(ptr: DevicePtr) -> DeviceMemory | None:
    """The memory of the device ``ptr`` belongs to (an alloc node's own device, which need not
    be the executable's), or None if there is no such device any more."""
    try:
        return get_device(ptr.device).memory
    except (HipError, TypeError):
        return None


RESERVATIONS = ReservationTable()
