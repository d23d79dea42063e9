"""Handle registries with generations, holding their objects weakly.

Every object a user can hold (graph, node, exec, stream, event, user object) is registered while it
is alive. A registry is a slot table: registering takes a free slot and stamps it with the slot's
current generation; unregistering bumps the generation, so a destroyed handle can never validate
again, even after its slot is reused (the ABA problem HIP has with recycled addresses).

A slot holds a weak reference: the registry never keeps a handle alive. A handle dropped without
``destroy()`` is collected, its finalizer (``core/lifecycle.py``) warns, and its slot is retired
as an explicit unregister would retire it.

Invariants:
  * ``is_valid`` / ``get`` are O(1) and lock-free (see ``get`` for why the reads are safe).
  * ``register`` and ``unregister`` take a short ``threading`` lock and never block otherwise.
  * ``unregister`` succeeds exactly once per registration (it reports whether it did), which is
    what lets ``destroy()`` tell a first destroy from a second one under races.
  * A collected object's slot is retired lazily: the weak reference's callback (run by the
    collector, on any thread, possibly while this thread holds the lock) only appends to a
    list; the next call that takes the lock retires it. Counts are always reported after that.
  * The lock is reentrant. A collection can start at any allocation a locked section makes (a
    list grown, a snapshot built), and the finalizers it runs are user code that may read this
    very registry's ``statistics()``, ``len`` or ``repr``, on the thread that holds the lock.
    They must not wait for it: they settle and count in place. Every locked section is written
    so that such a nested read (and the retiring it does) at any of its allocations leaves it
    correct: it only ever appends to the free list and moves counts by ``+=`` / ``-=``.
"""

from __future__ import annotations

import threading
import weakref
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

__all__ = ["HandleId", "HandleRegistry", "RegistryStatistics", "SlotTable"]

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


_new_tuple = tuple.__new__


class _SlotRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that knows its slot, so its callback needs no lookup."""

    __slots__ = ("slot",)
    slot: int


class SlotTable:
    """What every generation-checked registry shares: the slots' generations, the free list,
    the counts, and retiring the slots of collected objects lazily under the lock.

    A subclass holds what each slot refers to and retires dead references
    (``_retire_dead_locked``); statistics, ``len`` and ``repr`` are the same for all of them,
    so leak checks and tests treat every registry alike.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.RLock()  # reentrant: see the module notes
        # Indexed by slot; a subclass keeps its references in a parallel array. No record per
        # slot: a registry of a million graph nodes would otherwise hold a million extra
        # tuples for the collector to walk. The int columns are machine-int ``array``s, not
        # lists: the collector visits a list's every item on every full pass (a million-entry
        # list of ints is a million visits, and stays so while the slots sit free after their
        # graph is destroyed), but never looks inside an array.
        self._generations: array[int] = array("q")
        self._free: array[int] = array("q")
        self._live = 0
        self._registered_total = 0
        # References whose objects were collected, not yet retired (list.append is atomic).
        self._dead: list[Any] = []
        self._on_collected = self._dead.append

    if TYPE_CHECKING:  # each subclass retires the slots of its collected references

        def _retire_dead_locked(self) -> None: ...

    def _settle(self) -> None:
        if self._dead:
            with self._lock:
                self._retire_dead_locked()

    def __len__(self) -> int:
        self._settle()
        return self._live

    def statistics(self) -> RegistryStatistics:
        self._settle()
        return RegistryStatistics(
            self.kind, self._live, len(self._generations), self._registered_total
        )

    def __repr__(self) -> str:
        self._settle()
        return f"<HandleRegistry {self.kind} live={self._live} slots={len(self._generations)}>"


class HandleRegistry(SlotTable, Generic[T]):
    """A thread-safe slot table mapping :class:`HandleId` to live objects, held weakly."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self._refs: list[_SlotRef | None] = []  # each slot's weak reference, None while free

    def register(self, obj: T) -> HandleId:
        """Give ``obj`` a slot and return its handle id."""
        ref = _SlotRef(obj, self._on_collected)
        with self._lock:
            if self._dead:
                self._retire_dead_locked()
            if self._free:
                slot = self._free.pop()
                generation = self._generations[slot]
                self._refs[slot] = ref
            else:
                slot = len(self._refs)
                generation = 0
                self._generations.append(0)
                self._refs.append(ref)
            ref.slot = slot
            self._live += 1
            self._registered_total += 1
        return _new_tuple(HandleId, (slot, generation))  # HandleId(slot, generation), sooner

    def unregister(self, hid: HandleId) -> T | None:
        """Retire ``hid``; return its object the first time, ``None`` if it was not alive."""
        with self._lock:
            slot, generation = hid
            if not 0 <= slot < len(self._refs):
                return None
            ref = self._refs[slot]
            obj = ref() if ref is not None else None
            if self._generations[slot] != generation or obj is None:
                return None
            self._retire_locked(slot, generation)
            return obj  # type: ignore[no-any-return]

    def _retire_locked(self, slot: int, generation: int) -> None:
        # The reference goes first, then the generation moves on: a lock-free ``get`` that
        # read the old generation then reads no reference (see ``get``).
        self._refs[slot] = None
        self._generations[slot] = generation + 1
        self._free.append(slot)
        self._live -= 1

    def _retire_dead_locked(self) -> None:
        dead = self._dead
        while dead:
            ref = dead.pop()
            if self._refs[ref.slot] is ref:  # still this object's slot: never unregistered
                self._retire_locked(ref.slot, self._generations[ref.slot])

    def get(self, hid: HandleId) -> T | None:
        """The live object for ``hid``, or ``None`` if it was destroyed or never existed.

        Lock-free: a slot's generation only grows, and it is read on both sides of the
        reference. If it is ``hid``'s both times, no retire (which clears the reference, then
        moves the generation on) came between, so the reference read is ``hid``'s own and not
        that of a later registration reusing the slot.
        """
        slot, generation = hid
        generations = self._generations
        if not 0 <= slot < len(generations) or generations[slot] != generation:
            return None
        ref = self._refs[slot]
        if ref is None or generations[slot] != generation:
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
            objects = [ref() for ref in self._refs if ref is not None]
        return [obj for obj in objects if obj is not None]
