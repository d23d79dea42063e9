"""The graph-node registry: generation-checked handles without a weak reference per node.

:class:`~ahipgraph.core.registry.HandleRegistry` holds each object through its own weak
reference, so that the registry never keeps a handle alive. A graph node needs none of its own:
it lives exactly as long as its graph holds it (``graph._by_id``), and its graph is what the
registry must not keep alive. So each slot holds the *graph's* weak reference (one shared by
all of that graph's nodes) and the node's id, and a lookup asks the graph for the node. A graph
of a million nodes thus has a million fewer weak references for memory and for the cyclic
collector to walk.

The contract is HandleRegistry's (same methods, statistics and repr, so leak checks and tests
treat both alike): ``register`` stamps a slot with its generation, ``unregister`` succeeds once
and moves the generation on, so a destroyed node's handle never validates again, even after
its slot is reused. A graph collected without ``destroy()`` retires all its nodes' slots at the
next call that takes the lock, as a collected handle's slot is retired there.

The caller registers a node under its graph's lock and enters it in ``graph._by_id`` before
anyone else can see it; :meth:`get` finds a node only through that entry.

**Spare slots.** A graph takes slots from the table in blocks, under the registry's lock, and
gives them to its new nodes one by one under its own lock (which the caller holds), so a
growing graph (a captured chain, a build loop) takes the registry's lock once per block rather
than once per node: an uncontended lock is a large part of what registering one node costs. A
block is as large as the graph's nodes so far (1, 1, 2, 4, ... up to :data:`_BLOCK_LIMIT`), so
a small graph holds few spares. A spare slot has no owner (``find`` sees nothing there, and its
generation was never handed out); the counts leave the spares out (``live`` and
``registered_total`` are those of nodes), and the spares go back to the free list with their
graph's other slots, when it is destroyed or collected. A block is written into the graph's
list of slots when it is taken, not slot by slot as its nodes take them: retiring the graph's
slots skips every slot it does not own (a spare has no owner), so the list may name a slot the
graph never gave out, or one it gave out twice, and retires each of its nodes exactly once.
"""

from __future__ import annotations

import weakref
from array import array
from typing import TYPE_CHECKING, Any

from ..core.registry import HandleId, RegistryStatistics, SlotTable

if TYPE_CHECKING:
    from .node import GraphNode

__all__ = ["ROW_BITS", "ROW_MASK", "NodeRegistry", "node_handle"]

_new_tuple = tuple.__new__

# A node keeps its handle as one int (see GraphNode): the registry row in the low ROW_BITS
# bits, the row's generation above them. A table of 2**32 rows would hold terabytes of nodes.
ROW_BITS = 32
ROW_MASK = (1 << ROW_BITS) - 1


def node_handle(slot: int, generation: int) -> int:
    """The one int a node keeps for its handle ``(slot, generation)``: the slot itself while
    its generation is 0 (a fresh row), so no other int is made for it."""
    return slot | generation << ROW_BITS if generation else slot


class _GraphRef(weakref.ref):  # type: ignore[type-arg]
    """A graph's weak reference, shared by its nodes' slots; knows those slots."""

    __slots__ = ("slots", "spare")
    slots: array[int]  # machine ints: the collector never walks them (see SlotTable)
    spare: array[int]  # slots taken for this graph's next nodes, not given to one yet


# A free-list array shrunk by this many items or more at once is reallocated whole (CPython's
# array_resize): blocks are cut from its end in steps one shorter.
_SHRINK_STEP = 15


_BLOCK_LIMIT = 256  # spare slots a graph takes at once, at most


class NodeRegistry(SlotTable):
    """A thread-safe slot table of graph nodes, each found through its (weakly held) graph."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        # Parallel to the generations: the owning graph's reference (None while the slot is
        # free) and the node's id in that graph (an ``array``, as the generations).
        self._owners: list[_GraphRef | None] = []
        self._ids: array[int] = array("q")
        # The references of graphs holding spare slots (see the module notes), by identity.
        self._sparing: dict[int, _GraphRef] = {}

    def register(self, node: GraphNode) -> HandleId:
        """Give ``node`` a slot (its graph's lock held) and return its handle id."""
        self.enter(node)
        handle = node._handle
        return _new_tuple(HandleId, (handle & ROW_MASK, handle >> ROW_BITS))

    def enter(self, node: GraphNode) -> None:
        """:meth:`register`, storing the slot and generation in the node's own field
        (:func:`node_handle`).

        What a new node calls, once per node added, captured or cloned: no handle tuple is
        made only to be taken apart again. The slot is one of the graph's spares (taken from
        the table a block at a time, see the module notes): the node's id is stored before its
        owner, so a lock-free ``find`` never sees the owner with another node's id.
        """
        graph: Any = node.graph
        ref: _GraphRef | None = graph._node_registry_ref
        if ref is None or not ref.spare:
            ref = self._take_spares(graph, ref)
        slot = ref.spare.pop()
        self._ids[slot] = node.id
        self._owners[slot] = ref
        node._handle = node_handle(slot, self._generations[slot])

    def columns(self) -> tuple[array[int], list[_GraphRef | None], array[int]]:
        """The generations, owners and ids columns, for ``Graph._attach``.

        ``_attach`` does what :meth:`enter` does, inline (a call per node added, captured or
        cloned costs more than the entry itself), through these: the same objects for the
        registry's whole life, since the table only ever grows them in place. It takes a block
        of spare slots with :meth:`take_spare` when its graph has none left.
        """
        return self._generations, self._owners, self._ids

    def take_spare(self, graph: Any) -> _GraphRef:
        """``graph``'s registry reference, holding at least one spare slot (its lock held)."""
        ref: _GraphRef | None = graph._node_registry_ref
        if ref is None or not ref.spare:
            ref = self._take_spares(graph, ref)
        return ref

    def _take_spares(self, graph: Any, ref: _GraphRef | None) -> _GraphRef:
        """Give ``graph`` (its lock held) a block of spare slots; make its reference first."""
        if ref is None:  # the graph's first node (its lock held: no other thread makes one)
            ref = _GraphRef(graph, self._on_collected)
            ref.slots = array("q")
            ref.spare = array("q")
            graph._node_registry_ref = ref
        count = min(max(len(ref.slots), 1), _BLOCK_LIMIT)
        lock = self._lock
        lock.acquire()  # not ``with``: its enter and exit calls cost twice the lock itself
        try:
            if self._dead:
                self._retire_dead_locked()
            free = self._free
            taken = min(count, len(free))
            spare = array("q")
            if taken:  # the free list's last slots: spare.pop() gives them as free.pop() would
                spare = free[len(free) - taken :]
                # Cut in short steps: an array shrunk by 16 or more items at once is reallocated
                # whole, which for a free list left by a million-node graph is megabytes per
                # block.
                left = taken
                while left:
                    step = min(left, _SHRINK_STEP)
                    del free[len(free) - step :]
                    left -= step
            fresh = count - taken
            if fresh:  # new slots at the end of the table
                start = len(self._owners)
                self._generations.extend(array("q", bytes(8 * fresh)))
                self._owners.extend([None] * fresh)
                self._ids.extend(array("q", bytes(8 * fresh)))
                spare = array("q", range(start + fresh - 1, start - 1, -1)) + spare
            ref.spare = spare
            ref.slots.extend(spare)  # the whole block, now (see the module notes)
            self._sparing[id(ref)] = ref
            self._live += count
            self._registered_total += count
        finally:
            lock.release()
        return ref

    def _spares_locked(self) -> int:
        """How many slots graphs hold as spares (the registry's lock held)."""
        return sum(len(ref.spare) for ref in self._sparing.values())

    def _give_back_spares_locked(self, ref: _GraphRef) -> None:
        """Return ``ref``'s spare slots to the free list (its graph destroyed or collected)."""
        if self._sparing.pop(id(ref), None) is None:
            return
        spare = ref.spare
        ref.spare = array("q")
        count = len(spare)
        # Never handed out: no handle carries their generation, so none needs to move on.
        self._free.extend(spare)
        self._live -= count
        self._registered_total -= count

    def statistics(self) -> RegistryStatistics:
        """The table's counts, of nodes: spare slots are counted as slots only."""
        with self._lock:
            if self._dead:
                self._retire_dead_locked()
            spares = self._spares_locked()
            return RegistryStatistics(
                self.kind,
                self._live - spares,
                len(self._generations),
                self._registered_total - spares,
            )

    def __len__(self) -> int:
        return self.statistics().live

    def __repr__(self) -> str:
        stats = self.statistics()
        return f"<HandleRegistry {self.kind} live={stats.live} slots={stats.slots}>"

    def unregister(self, hid: HandleId) -> GraphNode | None:
        """Retire ``hid``; return its node the first time, ``None`` if it was not alive."""
        with self._lock:
            slot, generation = hid
            node = self.find(slot, generation)
            if node is None:
                return None
            ref = self._owners[slot]
            if ref is not None and ref.spare and id(ref) in self._sparing:
                # Its graph lives on (the caller holds its lock) and would give its next node a
                # spare: the slot, its generation moved on, is that spare, as the free list
                # (where it goes otherwise) gives it to the next node registered.
                self._owners[slot] = None
                self._generations[slot] = generation + 1
                ref.spare.append(slot)
                self._registered_total += 1  # a spare again: the counts leave spares out
            else:
                self._retire_locked(slot, generation)
            return node

    def unregister_graph(self, graph: Any) -> None:
        """Retire the slots of every node of ``graph`` still registered (its lock held).

        What :meth:`unregister` does for each of them, under one lock rather than one each: a
        destroyed graph's nodes all die together. Slots of nodes destroyed earlier were retired
        then (or hold another graph's node now) and are left alone.
        """
        ref: _GraphRef | None = graph._node_registry_ref
        if ref is None:  # it never had a node
            return
        with self._lock:
            owners = self._owners
            generations = self._generations
            for slot in ref.slots:
                if owners[slot] is ref:
                    self._retire_locked(slot, generations[slot])
            ref.slots = array("q")
            self._give_back_spares_locked(ref)

    def _retire_locked(self, slot: int, generation: int) -> None:
        # The owner goes first, then the generation moves on: a lock-free ``get`` that read
        # the old generation then reads no owner (see ``get``).
        self._owners[slot] = None
        self._generations[slot] = generation + 1
        self._free.append(slot)
        self._live -= 1

    def _retire_dead_locked(self) -> None:
        dead = self._dead
        while dead:
            ref = dead.pop()
            owners = self._owners
            for slot in ref.slots:
                if owners[slot] is ref:  # still this graph's node: never unregistered
                    self._retire_locked(slot, self._generations[slot])
            ref.slots = array("q")
            self._give_back_spares_locked(ref)

    def get(self, hid: HandleId) -> GraphNode | None:
        """The live node for ``hid``, or ``None`` if it was destroyed or never existed."""
        slot, generation = hid
        return self.find(slot, generation)

    def find(self, slot: int, generation: int) -> GraphNode | None:
        """:meth:`get` for a handle given as its two ints (what a node's one int holds; see
        GraphNode).

        Lock-free, as :meth:`HandleRegistry.get`: the generation is read on both sides of the
        slot's owner and id, so a retire (owner cleared, then generation moved on) or a reuse
        in between is seen.
        """
        generations = self._generations
        if not 0 <= slot < len(generations) or generations[slot] != generation:
            return None
        ref = self._owners[slot]
        node_id = self._ids[slot]
        if ref is None or generations[slot] != generation:
            return None
        graph: Any = ref()
        if graph is None:
            return None
        node: GraphNode | None = graph._by_id.get(node_id)
        return node

    def is_valid(self, hid: HandleId) -> bool:
        return self.get(hid) is not None

    def live_objects(self) -> list[GraphNode]:
        """A snapshot of the live nodes, in slot order."""
        with self._lock:
            if self._dead:
                self._retire_dead_locked()
            entries = [
                (ref, self._ids[slot]) for slot, ref in enumerate(self._owners) if ref is not None
            ]
        nodes = []
        for ref, node_id in entries:
            graph: Any = ref()
            node = None if graph is None else graph._by_id.get(node_id)
            if node is not None:
                nodes.append(node)
        return nodes
