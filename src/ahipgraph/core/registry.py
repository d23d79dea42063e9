"""Handle registries with generations.

Every object a user can hold (graph, node, exec, stream, event, user object) is registered while it
is alive. A registry is a slot table: registering takes a free slot and stamps it with the slot's
current generation; unregistering bumps the generation, so a destroyed handle can never validate
again, even after its slot is reused (the ABA problem HIP has with recycled addresses).

Invariants:
  * ``is_valid`` / ``get`` are O(1) and lock-free: each slot is one tuple read atomically.
  * ``register`` and ``unregister`` take a short ``threading`` lock and never block otherwise.
  * ``unregister`` succeeds exactly once per registration (it reports whether it did), which is
    what lets ``destroy()`` tell a first destroy from a second one under races.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

__all__ = ["HandleId", "HandleRegistry", "RegistryStatistics"]

T = TypeVar("T")


class HandleId(NamedTuple):
    """Where an object lives in its registry, and which life of that slot it is."""

    slot: int
    generation: int


@dataclass(frozen=True, slots=True)
class RegistryStatistics:
    kind: str
    live: int
    slots: int
    registered_total: int


class HandleRegistry(Generic[T]):
    """A thread-safe slot table mapping :class:`HandleId` to live objects."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        # Each entry is (generation, object-or-None); replaced whole, so reads are atomic.
        self._slots: list[tuple[int, T | None]] = []
        self._free: list[int] = []
        self._live = 0
        self._registered_total = 0

    def register(self, obj: T) -> HandleId:
        """Give ``obj`` a slot and return its handle id."""
        with self._lock:
            if self._free:
                slot = self._free.pop()
                generation = self._slots[slot][0]
            else:
                slot = len(self._slots)
                generation = 0
                self._slots.append((generation, None))
            self._slots[slot] = (generation, obj)
            self._live += 1
            self._registered_total += 1
            return HandleId(slot, generation)

    def unregister(self, hid: HandleId) -> T | None:
        """Retire ``hid``; return its object the first time, ``None`` if it was not alive."""
        with self._lock:
            slot, generation = hid
            if not 0 <= slot < len(self._slots):
                return None
            current_generation, obj = self._slots[slot]
            if current_generation != generation or obj is None:
                return None
            self._slots[slot] = (generation + 1, None)
            self._free.append(slot)
            self._live -= 1
            return obj

    def get(self, hid: HandleId) -> T | None:
        """The live object for ``hid``, or ``None`` if it was destroyed or never existed."""
        slot, generation = hid
        slots = self._slots
        if not 0 <= slot < len(slots):
            return None
        current_generation, obj = slots[slot]
        return obj if current_generation == generation else None

    def is_valid(self, hid: HandleId) -> bool:
        return self.get(hid) is not None

    def live_objects(self) -> list[T]:
        """A snapshot of the live objects, in slot order."""
        with self._lock:
            return [obj for _, obj in self._slots if obj is not None]

    def __len__(self) -> int:
        return self._live

    def statistics(self) -> RegistryStatistics:
        return RegistryStatistics(self.kind, self._live, len(self._slots), self._registered_total)

    def __repr__(self) -> str:
        return f"<HandleRegistry {self.kind} live={self._live} slots={len(self._slots)}>"
