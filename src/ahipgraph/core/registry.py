"""Handle registries with generations, holding their objects weakly.

Every object a user can hold (graph, node, exec, stream, event, user object) is registered while it
is alive. A registry is a slot table: registering takes a free slot and stamps it with the slot's
current generation; unregistering bumps the generation, so a destroyed handle can never validate
again, even after its slot is reused (the ABA problem HIP has with recycled addresses).

A slot holds a weak reference: the registry never keeps a handle alive. A handle dropped without
``destroy()`` is collected, its finalizer (``core/lifecycle.py``) warns, and its slot is retired
as an explicit unregister would retire it.

Invariants:
  * ``is_valid`` / ``get`` are O(1) and lock-free: each slot is one tuple read atomically.
  * ``register`` and ``unregister`` take a short ``threading`` lock and never block otherwise.
  * ``unregister`` succeeds exactly once per registration (it reports whether it did), which is
    what lets ``destroy()`` tell a first destroy from a second one under races.
  * A collected object's slot is retired lazily: the weak reference's callback (run by the
    collector, on any thread, possibly while this thread holds the lock) only appends to a
    list; the next call that takes the lock retires it. Counts are always reported after that.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

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


class _SlotRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows its slot, so its callback needs no lookup."""

    __slots__ = ("slot",)
    slot: int


class HandleRegistry(Generic[T]):
    """A thread-safe slot table mapping :class:`HandleId` to live objects, held weakly."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        # Each entry is (generation, weak reference or None); replaced whole, so reads are atomic.
        self._slots: list[tuple[int, _SlotRef | None]] = []
        self._free: list[int] = []
        self._live = 0
        self._registered_total = 0
        # References whose objects were collected, not yet retired (list.append is atomic).
        self._dead: list[_SlotRef] = []
        self._on_collected = self._dead.append

    def register(self, obj: T) -> HandleId:
        """Give ``obj`` a slot and return its handle id."""
        with self._lock:
            if self._dead:
                self._retire_dead_locked()
            if self._free:
                slot = self._free.pop()
                generation = self._slots[slot][0]
            else:
                slot = len(self._slots)
                generation = 0
                self._slots.append((generation, None))
            ref = _SlotRef(obj, self._on_collected)
            ref.slot = slot
            self._slots[slot] = (generation, ref)
            self._live += 1
            self._registered_total += 1
            return HandleId(slot, generation)

    def unregister(self, hid: HandleId) -> T | None:
        """Retire ``hid``; return its object the first time, ``None`` if it was not alive."""
        with self._lock:
            slot, generation = hid
            if not 0 <= slot < len(self._slots):
                return None
            current_generation, ref = self._slots[slot]
            obj = ref() if ref is not None else None
            if current_generation != generation or obj is None:
                return None
            self._retire_locked(slot, generation)
            return obj  # type: ignore[no-any-return]

    def _retire_locked(self, slot: int, generation: int) -> None:
        self._slots[slot] = (generation + 1, None)
        self._free.append(slot)
        self._live -= 1

    def _retire_dead_locked(self) -> None:
        dead = self._dead
        while dead:
            ref = dead.pop()
            generation, current = self._slots[ref.slot]
            if current is ref:  # still this object's slot: it was never unregistered
                self._retire_locked(ref.slot, generation)

    def get(self, hid: HandleId) -> T | None:
        """The live object for ``hid``, or ``None`` if it was destroyed or never existed."""
        slot, generation = hid
        slots = self._slots
        if not 0 <= slot < len(slots):
            return None
        current_generation, ref = slots[slot]
        if current_generation != generation or ref is None:
            return None
        obj: Any = ref()
        return obj  # type: ignore[no-any-return]

    def is_valid(self, hid: HandleId) -> bool:
        return self.get(hid) is not None

    def live_objects(self) -> list[T]:
        """A snapshot of the live objects, in slot order."""
        with self._lock:
            if self._dead:
                self._retire_dead_locked()
            objects = [ref() for _, ref in self._slots if ref is not None]
        return [obj for obj in objects if obj is not None]

    def _settle(self) -> None:
        if self._dead:
            with self._lock:
                self._retire_dead_locked()

    def __len__(self) -> int:
        self._settle()
        return self._live

    def statistics(self) -> RegistryStatistics:
        self._settle()
        return RegistryStatistics(self.kind, self._live, len(self._slots), self._registered_total)

    def __repr__(self) -> str:
        self._settle()
        return f"<HandleRegistry {self.kind} live={self._live} slots={len(self._slots)}>"
