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

Ownership of the address space: the graph that made a reservation gives it back when it is
destroyed, unless it was instantiated — from then on the executable owns the range (it commits
and decommits it, and unreserves it when it is destroyed). Destroying the graph that holds a
free node makes the allocation free-able again.

Reservations are keyed by the device-memory object, not the ordinal, so reconfiguring devices
(as tests do) can never make an old entry alias a new device's addresses.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..core.errors import HipError, InvalidValue
from ..device.device import get_device
from ..device.memory import DeviceMemory
from ..device.pointer import DevicePtr

__all__ = ["RESERVATIONS", "Reservation", "ReservationTable"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """An alloc node's range: its start pointer, size and device ordinal."""

    ptr: DevicePtr
    nbytes: int
    device: int


@dataclass(eq=False, slots=True)
class _Entry:
    reservation: Reservation
    memory: DeviceMemory
    owner: object
    freed_by: object | None = None


class ReservationTable:
    """Live alloc-node reservations, by device memory and base address. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_memory: dict[DeviceMemory, dict[int, _Entry]] = {}

    def reserve(self, nbytes: int, device: int, owner: object) -> Reservation:
        """Reserve ``nbytes`` on ``device`` for an alloc node of ``owner``.

        Raises:
            InvalidDevice: no such device. InvalidValue: a zero or negative size.
        """
        memory = get_device(device).memory
        ptr = memory.reserve(nbytes)
        reservation = Reservation(ptr, nbytes, device)
        with self._lock:
            self._by_memory.setdefault(memory, {})[ptr.address] = _Entry(reservation, memory, owner)
        return reservation

    def find(self, ptr: DevicePtr) -> Reservation | None:
        """The reservation that contains ``ptr``, if any."""
        memory = _memory_of(ptr)
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
            InvalidValue: ``ptr`` is not the start of a live reservation, or one already freed.
        """
        memory = _memory_of(ptr)
        with self._lock:
            entry = self._by_memory.get(memory, {}).get(ptr.address) if memory else None
            if entry is None:
                raise InvalidValue(f"{ptr!r} was not allocated by a graph memory-alloc node")
            if entry.freed_by is not None:
                raise InvalidValue(f"{ptr!r} already has a memory-free node")
            entry.freed_by = owner
            return entry.reservation

    def release_owner(self, owner: object, *, unreserve: bool) -> None:
        """Forget ``owner``'s reservations (unreserving them if asked) and its free claims."""
        dropped: list[_Entry] = []
        with self._lock:
            for table in self._by_memory.values():
                for base, entry in list(table.items()):
                    if entry.owner is owner:
                        del table[base]
                        dropped.append(entry)
                    elif entry.freed_by is owner:
                        entry.freed_by = None
        if unreserve:
            for entry in dropped:
                entry.memory.unreserve(entry.reservation.ptr)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(table) for table in self._by_memory.values())

    def __repr__(self) -> str:
        return f"<ReservationTable reservations={len(self)}>"


def _memory_of(ptr: DevicePtr) -> DeviceMemory | None:
    try:
        return get_device(ptr.device).memory
    except (HipError, TypeError):
        return None


RESERVATIONS = ReservationTable()
