"""Simulated device memory: an address space per device, bounds-checked on every access.

Design:
  * Addresses are handed out by a bump pointer, with a guard gap after each allocation, so a
    freed address is not reused until the pointer has been through the whole range: a stale
    pointer does not alias a newer allocation for as long as the range lasts (HIP's allocators
    reuse at once). Each device owns the bounded range ``[(ordinal + 1) << 40, (ordinal + 2)
    << 40)``: ranges of different devices are disjoint and all lie below 2**64, so a pointer
    from another device never resolves here and every address fits a 64-bit kernel argument.
    When the pointer reaches the end of the range, it goes on in the freed addresses between
    the live allocations, from where it stands and then from the start of the range (next fit,
    still with the guard gaps): a long run that keeps allocating and freeing (an instantiate
    takes about 128 KiB of addresses for its arguments, and a loop of them gets through 2**40
    bytes in well under an hour) never runs out while memory is free. An allocation or
    reservation that fits in no free run of addresses is ``OutOfMemory``.
  * The bytes of an allocation live in a numpy ``uint8`` buffer. Typed views for kernels are
    cached per (address, dtype) and dropped when the allocation is freed.
  * Reservations (for graph memory-alloc nodes) take address space without bytes; ``commit`` backs
    a reservation with memory and ``decommit`` returns the bytes but keeps the addresses.

Invariants: ``bytes_in_use`` is the sum of the sizes of committed allocations plus the graph
memory pool's cached bytes (:mod:`.graph_pool`: graph allocations give their memory back to the
pool, which keeps it until ``trim_graph_pool``); it never exceeds
the device's memory size; every allocation lies inside the device's address range; every resolve
either returns an in-bounds (allocation, offset) or raises a HipError. A failed allocation,
reservation or commit changes nothing: every check runs before any state changes. All public
methods are thread-safe (one short lock).
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from ..core.errors import InvalidDevicePointer, InvalidValue, OutOfMemory
from ..core.ints import as_int, int_or_none
from ..core.lifecycle import NoCopy
from . import hooks
from .graph_pool import GraphMemAttribute, GraphMemPool, GraphPoolStatistics, check_attribute
from .pointer import UNTRACKED, DevicePtr, PointerOrigin, issued

__all__ = [
    "ADDRESS_SPACE_BYTES",
    "ALLOCATION_ALIGNMENT",
    "MAX_DEVICES",
    "Allocation",
    "DeviceMemory",
    "MemoryInfo",
    "MemoryStatistics",
    "check_size",
]


class MemoryInfo(NamedTuple):
    """What ``Device.memory_info()`` answers (``hipMemGetInfo``): free and total bytes.

    A tuple, so ``free, total = device.memory_info()`` unpacks it as HIP's two out-parameters;
    the fields name the two numbers for code that reads one of them.
    """

    free: int
    total: int


ALLOCATION_ALIGNMENT = 256
_ADDRESS_SPACE_SHIFT = 40
ADDRESS_SPACE_BYTES = 1 << _ADDRESS_SPACE_SHIFT
"""Bytes of address space each device owns."""
MAX_DEVICES = (1 << (64 - _ADDRESS_SPACE_SHIFT)) - 1
"""How many devices have an address range below 2**64 (device 0's range starts at 2**40)."""


class Allocation:
    """One allocation (or reservation) in the address space."""

    __slots__ = (
        "announced",
        "base",
        "buffer",
        "claimer",
        "claims",
        "commits_pending",
        "contested",
        "dropped",
        "extra_frees",
        "freeing",
        "graph_frees",
        "instantiated",
        "launched",
        "nbytes",
        "node_free_taken",
        "node_frees",
        "node_frees_unrun",
        "prior",
        "reserved",
        "runtime",
        "stale_node_frees",
        "user_freed",
        "views",
    )

    def __init__(
        self, base: int, nbytes: int, buffer: npt.NDArray[np.uint8] | None, *, reserved: bool
    ) -> None:
        self.base = base
        self.nbytes = nbytes
        self.buffer = buffer  # None while a reservation has no memory behind it
        self.reserved = reserved  # made by reserve(): its addresses outlive its memory
        # The runtime's own (malloc(runtime=True)): only a free(runtime=True) gives it back.
        self.runtime = False
        # How many stream frees of this memory (free_async) are admitted and not yet run: no
        # other free may take it meanwhile (see DeviceMemory.claim_free).
        self.freeing = 0
        # Graph launches taken behind a pending free (see allow_another_free): each commits
        # memory there again, so one more free of it may be pending at once.
        self.extra_frees = 0
        # Of those launches, how many were taken behind a free node's free or an auto-free
        # (not run yet), which holds no claim but counts against extra_frees as a pending
        # free would.
        self.node_frees = 0
        # Free nodes of other graphs whose launch was taken (announce_free) and which have not
        # run yet (free_by_node).
        self.node_frees_unrun = 0
        # An auto-free relaunch was taken unordered with such a free node still to run, both
        # freeing the last launch's memory (see contest_latest_free): the second must find it
        # gone. Set until one of the two runs; an auto-free that runs first makes the node's
        # free stale: it fails rather than free the relaunch's memory.
        self.contested = False
        self.stale_node_frees = 0
        self.claims = 0  # how many stream-ordered frees were ever admitted (numbers each one)
        self.claimer: weakref.ref[object] | None = None  # the stream of the latest one
        self.announced = False  # the latest one is a free node's (announce_free), no claim
        # claimer and announced as they were before the latest claim_free, which
        # release_claim puts back if that free is never enqueued.
        self.prior: tuple[weakref.ref[object] | None, bool] = (None, False)
        # Unreserved while a stream held a free of it: that free gives the addresses back.
        self.dropped = False
        # A reservation a memory-free node of its own graph frees (see mark_graph_frees):
        # every launch's memory is freed by the graph, so no other free of it is accepted.
        self.graph_frees = False
        # A reservation an executable commits at its launches (mark_instantiated); until
        # then no launch can put memory there, so no free of it is accepted (see claim_free).
        self.instantiated = False
        # A launch that commits it was taken (launch_taken). Until then no memory is there,
        # nor ordered anywhere ahead of a free made now: no free of it is accepted either.
        self.launched = False
        # The latest launch's memory is freed by another graph's free node, whose launch was
        # taken after it (announce_free), and no launch that commits it again was taken since
        # (launch_taken): nothing is left for the user to free (see claim_free).
        self.node_free_taken = False
        # The latest launch's memory has a free of the user's taken (a free_async admitted,
        # or a free), and no launch that commits it again was taken since (launch_taken):
        # another free of it would be a second one (see claim_free).
        self.user_freed = False
        # Launches that commit it taken whose commit has not run yet: a free meanwhile
        # (Device.free) frees an earlier launch's memory, not the latest one's. One that
        # failed before its commit keeps counting: such frees then only set nothing.
        self.commits_pending = 0
        self.views: dict[tuple[int, np.dtype[np.generic]], npt.NDArray[np.generic]] = {}

    @property
    def end(self) -> int:
        return self.base + self.nbytes

    def __repr__(self) -> str:
        state = "committed" if self.buffer is not None else "reserved"
        return f"<Allocation 0x{self.base:x}+{self.nbytes} {state}>"


@dataclass(frozen=True, slots=True)
class MemoryStatistics:
    """Counts of one device's memory; ``address_space_used`` is how far the bump pointer went
    (past the end of the range once it ran out; from the start again once it reuses freed
    addresses)."""

    allocations: int
    reservations: int
    bytes_in_use: int
    peak_bytes_in_use: int
    total_bytes: int
    address_space_used: int
    graph_pool_cached: int = 0  # of bytes_in_use: kept by the graph pool until trimmed
    # Of allocations / bytes_in_use: the device's own for as long as it lives (symbol storage).
    static_allocations: int = 0
    static_bytes: int = 0


class DeviceMemory(NoCopy):
    """The allocator and address space of one device."""

    def __init__(self, ordinal: int, total_bytes: int) -> None:
        if not 0 <= ordinal < MAX_DEVICES:
            raise ValueError(f"device ordinal {ordinal} has no address range below 2**64")
        self._ordinal = ordinal
        self._total_bytes = total_bytes
        # What the pointers handed out here know of this memory (see device/pointer.py): a
        # successor has the same ordinal and addresses, so this is what tells them apart.
        self._origin = PointerOrigin()
        self._address_base = (ordinal + 1) << _ADDRESS_SPACE_SHIFT
        self._address_end = self._address_base + ADDRESS_SPACE_BYTES  # exclusive
        # Re-entrant: the collector may run inside it (an allocation's record, a view's key),
        # and a ``__del__`` it calls may free or allocate memory of this device on this very
        # thread (a buffer object that frees its pointer when collected). Every critical
        # section makes its objects before it reads the state it acts on (see _insert), so
        # such a nested call is safe.
        self._lock = threading.RLock()
        self._next_address = self._address_base
        # Where the free run of addresses the bump pointer is in ends (exclusive, less the guard
        # gap before the live allocation there): the range's end until the pointer first
        # reaches it, then the end of the freed run it moved to (see _find_room).
        self._room_end = self._address_end
        self._graph_pool = GraphMemPool()  # memory behind reservations; guarded by _lock
        self._bases: list[int] = []  # sorted; every live allocation or reservation
        self._by_base: dict[int, Allocation] = {}
        self._bytes_in_use = 0
        # Every cached typed view, by (address, dtype): entries go when their allocation does.
        self._views: dict[tuple[int, np.dtype[np.generic]], npt.NDArray[np.generic]] = {}
        self._peak = 0
        self._static: set[int] = set()  # bases of the device's own allocations (symbols)
        # Bumped whenever memory goes away (free, decommit, unreserve): a dispatch op that kept
        # the typed views it decoded knows from a changed count that one may be gone.
        self._frees = 0
        # Peer memories whose addresses kernels here may use, by ordinal (see device/peer.py).
        self._peers: dict[int, DeviceMemory] = {}
        # The memories that have this one among their peers: when memory goes away here, the
        # views their dispatch ops kept of it are stale too, so their ``frees`` move as well.
        # Replaced whole (never changed in place) under device/peer.py's lock.
        self._mapped_by: tuple[DeviceMemory, ...] = ()

    # What the memory is and where it stands: read-only from outside. A user reaches it
    # (``device.memory``): ``total_bytes`` set to 0 made every malloc fail with OutOfMemory;
    # ``ordinal`` set to another device's made malloc hand out pointers naming that device,
    # which its ``free`` then refused (a leak); ``peers`` cleared made kernels on peer memory
    # fail while ``can_access_peer`` still said True. The allocator, peer access and the
    # dispatch ops (which compare ``frees`` on every kernel) read and write the private names:
    # these properties are for users and are on no hot path. ``peers`` is a read-only view.

    @property
    def ordinal(self) -> int:
        """The device whose memory this is: every pointer it hands out names it."""
        return self._ordinal

    @property
    def total_bytes(self) -> int:
        """The device's memory size (``DeviceProperties.memory_bytes``)."""
        return self._total_bytes

    @property
    def address_base(self) -> int:
        """The first address of the device's address range."""
        return self._address_base

    @property
    def address_end(self) -> int:
        """The end of the device's address range (exclusive)."""
        return self._address_end

    @property
    def graph_pool(self) -> GraphMemPool:
        """The device's graph memory pool (what ``graph_mem_attribute`` reads)."""
        return self._graph_pool

    @property
    def frees(self) -> int:
        """How many times memory went away here (frees, decommits, unreserves)."""
        return self._frees

    @property
    def peers(self) -> Mapping[int, DeviceMemory]:
        """The peer memories kernels here may use, by ordinal (``enable_peer_access``)."""
        return MappingProxyType(self._peers)

    @property
    def mapped_by(self) -> tuple[DeviceMemory, ...]:
        """The memories that have this one among their peers."""
        return self._mapped_by

    # -- allocation -----------------------------------------------------------------------------

    def malloc(self, nbytes: int, *, runtime: bool = False) -> DevicePtr:
        """Allocate ``nbytes`` of device memory (``hipMalloc``). Zero bytes gives the null pointer.

        ``runtime``: the memory is the runtime's own (an executable's kernel arguments or
        conditional-handle cells, as HIP's kernarg pool), not the user's: a user's free of it
        (``Device.free`` or ``free_async`` of a pointer made by hand at its address) is
        refused, and only :meth:`free` with ``runtime=True`` gives it back, so the executable
        holding it never finds it freed under it.

        Raises:
            InvalidValue: ``nbytes`` is negative.
            OutOfMemory: the device does not have ``nbytes`` free, or its address range has no
                room left for them.
        """
        nbytes = check_size(nbytes)
        if nbytes == 0:
            return DevicePtr(self._ordinal, 0)
        with self._lock:
            allocation = Allocation(0, nbytes, None, reserved=False)  # first: see _insert
            allocation.runtime = runtime
            span = self._check_addresses(nbytes)
            self._check_free(nbytes)
            allocation.buffer = self._backing(nbytes)
            self._insert(allocation, span)  # may still refuse: before anything is charged
            self._charge(nbytes)
        return issued(self._ordinal, allocation.base, self._origin)

    def free(self, ptr: DevicePtr | None, *, claimed: bool = False, runtime: bool = False) -> None:
        """Free an allocation made by :meth:`malloc` (``hipFree``). Null (or None) is a no-op.

        Freeing memory a graph memory-alloc node committed returns the memory but keeps the
        node's reserved addresses, so the graph can allocate there again on its next launch.
        ``claimed`` is the stream-ordered free that :meth:`claim_free` admitted, running:
        only it may free memory a claim holds. ``runtime`` is the runtime giving back memory
        of its own (:meth:`malloc` with ``runtime=True``): only it may free that memory.

        Raises:
            InvalidValue: ``ptr`` is not the start of a live allocation on this device, a
                stream holds a free of it (``claimed`` says which of the two frees this is),
                or a graph's memory-free node frees it (see :meth:`mark_graph_frees` and
                :meth:`announce_free`), or no launch of it was taken yet; it is a symbol's
                storage, or the runtime's own memory and ``runtime`` is False.
            TypeError: ``ptr`` is neither a DevicePtr nor None.
        """
        given: object = ptr  # callers are untyped Python: check what really came in
        if given is None:
            return  # hipFree(nullptr)
        if not isinstance(given, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {given!r}")
        if not ptr:
            return
        with self._lock:
            allocation = self._at_base(ptr)
            if (
                claimed
                and allocation is not None
                and allocation.buffer is None
                and allocation.freeing
            ):
                # A free_async of a graph allocation the stream reached before any launch
                # committed it: it fails, and its claim goes with it, so the memory a later
                # launch commits there can still be freed.
                self._claim_ran(allocation)
                allocation.user_freed = False
                if allocation.dropped and not allocation.freeing:  # waited for frees only
                    self._remove(allocation)
                raise InvalidValue(
                    f"{ptr!r} is a graph allocation with no memory behind it when the "
                    "stream reached its free_async: order the free after the launch "
                    "that allocates it"
                )
            self._check_freeable(ptr, allocation, claimed, runtime)
            assert allocation is not None
            if claimed:
                self._claim_ran(allocation)
            if allocation.reserved:
                # A claimed free set it when admitted: it may run for an earlier launch's
                # memory, once a relaunch behind it has cleared it for its own.
                # Nor does a free that comes before a taken launch's commit (with
                # AUTO_FREE_ON_LAUNCH, while that launch is in flight): it frees the memory
                # before the one that launch leaves, which still takes a free.
                allocation.user_freed |= not claimed and not allocation.commits_pending
                self._drop_views(allocation)
                allocation.buffer = None
                self._graph_pool.released(allocation.nbytes)  # the pool keeps the bytes
                if allocation.dropped and not allocation.freeing:  # unreserved meanwhile
                    self._remove(allocation)  # the addresses go too
            else:
                self._remove(allocation)
                self._bytes_in_use -= allocation.nbytes
        if self._mapped_by:
            self._tell_mappers()

    def check_free(self, ptr: DevicePtr) -> None:
        """Raise what :meth:`free` of ``ptr``, a DevicePtr that is not null, would raise (not
        as a claimed free); else nothing.

        Changes nothing: what a caller that must tell someone of a free before it happens (the
        race checker, see ``Device.free``) runs first, so a refused free is told to no one.
        """
        with self._lock:
            self._check_freeable(ptr, self._at_base(ptr), claimed=False)

    def _check_freeable(
        self,
        ptr: DevicePtr,
        allocation: Allocation | None,
        claimed: bool,
        runtime: bool = False,
    ) -> None:
        """The checks of :meth:`free` (``allocation`` is the one at ``ptr``). Hold the lock."""
        if allocation is not None and not claimed:  # the graph frees it: a second free
            _check_not_graph_freed(ptr, allocation)
        if allocation is None and self._foreign_origin(ptr):
            raise InvalidValue(self._replaced_message(ptr))
        if allocation is None or allocation.buffer is None:
            if allocation is not None and allocation.commits_pending:
                # A graph launch that allocates it was taken and has not committed: this free
                # does not wait for it (as hipFree would), so say why rather than "no such".
                raise InvalidValue(
                    f"{ptr!r} is not a live allocation of device {self._ordinal} yet: the graph "
                    "launch that allocates it has not committed memory there (it is queued, "
                    "or failed before it did), and free does not wait for work in flight: "
                    "synchronize first, or free_async in the launch's stream order"
                )
            raise InvalidValue(f"{ptr!r} is not a live allocation of device {self._ordinal}")
        if allocation.base in self._static:  # a symbol's: freed, the symbol would be dead
            raise InvalidValue(
                f"{ptr!r} is a device symbol's storage on device {self._ordinal}, "
                "not an allocation to free"
            )
        if allocation.runtime and not runtime:
            raise InvalidValue(_runtime_message(ptr, self._ordinal))
        if bool(allocation.freeing) != claimed:
            raise InvalidValue(_freeing_message(ptr, claimed))

    @staticmethod
    def _claim_ran(allocation: Allocation) -> None:
        """A claimed free ran (or failed): its claim, and a launch's extra room, are spent."""
        allocation.freeing -= 1
        if allocation.extra_frees:
            allocation.extra_frees -= 1
            allocation.node_frees = min(allocation.node_frees, allocation.extra_frees)

    def claim_free(self, ptr: DevicePtr, by: object = None) -> None:
        """Admit a stream-ordered free of ``ptr`` (``free_async``), which runs later.

        From now until that free runs, every other free of the allocation is refused, so a
        second ``free_async`` or a ``free`` of it fails when it is called, not when the stream
        reaches the first one (which might by then free memory a graph launch committed
        there again). :meth:`release_claim` takes the claim back if the free is never enqueued.

        A graph memory-alloc node's reservation may be claimed before any memory is behind it,
        once a launch that allocates it was taken: that launch may still be queued ahead of
        the free on the stream (the stream-ordered pattern of HIP and CUDA: launch, use,
        ``free_async``, no host wait). Before any launch was taken it is refused (no memory
        exists there yet). If the stream reaches the free before a launch committed the
        memory (a launch on another stream), the free fails there (see :meth:`free`). A graph
        launch taken behind a pending free (:meth:`allow_another_free`) commits memory there
        again, so one more free of it may then be pending: launch, use, free, in a loop with no
        host wait.

        Raises:
            InvalidValue: ``ptr`` is not the start of a live allocation or reservation on this
                device, is a device symbol's storage, a stream already holds a free of it, or
                a graph's memory-free node frees it (see :meth:`mark_graph_frees` and
                :meth:`announce_free`).
        """
        with self._lock:
            allocation = self._claimable(ptr)
            allocation.user_freed = True
            allocation.freeing += 1
            allocation.claims += 1
            allocation.prior = (allocation.claimer, allocation.announced)
            allocation.claimer = None if by is None else weakref.ref(by)
            allocation.announced = False

    def release_claim(self, ptr: DevicePtr) -> None:
        """Undo :meth:`claim_free`: the free it admitted was not enqueued after all."""
        with self._lock:
            allocation = self._by_base.get(ptr.address)
            if allocation is None or not allocation.freeing:
                return
            allocation.freeing -= 1
            allocation.claims -= 1  # never made: no relaunch may count it (see latest_free)
            allocation.claimer, allocation.announced = allocation.prior  # the free before it
            allocation.user_freed = False  # it was False when the claim was admitted
            if allocation.dropped and not allocation.freeing:  # unreserved while it stood
                self._unreserve_locked(allocation)
        if self._mapped_by:
            self._tell_mappers()

    def claim_pending(self, ptr: DevicePtr) -> bool:
        """The latest stream-ordered free of ``ptr``'s allocation (see :meth:`latest_free`)
        is a ``free_async`` (:meth:`claim_free`) and a claimed free is still to run."""
        with self._lock:
            allocation = self._at_base(ptr)
            return allocation is not None and allocation.freeing > 0 and not allocation.announced

    def contest_latest_free(self, ptr: DevicePtr) -> bool:
        """An auto-free-on-launch relaunch was taken on another stream than the latest free of
        ``ptr``'s allocation (see :meth:`latest_free`), unordered with it: if that free is still
        to run, it and the relaunch's auto-free both free the last launch's memory, and
        whichever runs second must find it gone rather than free the memory the relaunch
        commits there. Says whether it is still to run, and then gives the relaunch no room
        for a free of its own memory until it ran.

        A ``free_async``'s claim needs nothing more: the auto-free's :meth:`decommit` drops
        the claims past the room made, and such a claim fails when its stream reaches it. A
        free node's free (:meth:`announce_free`) holds no claim, so it is marked contested
        here: counted as a pending free against the room (as :meth:`allow_another_free`
        counts one, without making room), and made stale if the auto-free runs first (see
        :meth:`free_by_node`).
        """
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is None:
                return False
            if not allocation.announced:
                return allocation.freeing > 0
            if not allocation.node_frees_unrun:
                return False
            if not allocation.contested:
                allocation.contested = True
                allocation.node_frees += 1
            return True

    def latest_free(self, ptr: DevicePtr) -> tuple[int, object]:
        """The latest stream-ordered free made of ``ptr``'s allocation (a ``free_async``
        admitted by :meth:`claim_free`, or a graph launch freeing it, :meth:`announce_free`),
        run or not: its number and the ``by`` it was made with; ``(0, None)`` when none was.

        Frees are numbered from 1 over the allocation's life, so a caller that noted one can
        tell a later free from the one it already counted (a graph launch taken on it).
        """
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is None:
                return 0, None
            claimer = allocation.claimer
            return allocation.claims, None if claimer is None else claimer()

    def announce_free(self, ptr: DevicePtr, by: object) -> None:
        """A graph launch on ``by`` (a stream) that frees ``ptr``'s reservation with a free node
        was taken: number it as a stream-ordered free (see :meth:`latest_free`). Unlike
        :meth:`claim_free` it holds nothing: the node's free never fails."""
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is not None:
                allocation.claims += 1
                allocation.claimer = weakref.ref(by)
                allocation.announced = True
                allocation.node_free_taken = True
                allocation.node_frees_unrun += 1

    def launch_taken(self, ptr: DevicePtr) -> None:
        """A launch of the executable that allocates ``ptr``'s reservation (with no free node
        of its own) was taken: its memory is there to be freed again, by the user or by
        another graph's free node, whatever freed the previous launch's."""
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is not None:
                allocation.node_free_taken = allocation.user_freed = False
                allocation.launched = True
                allocation.commits_pending += 1

    def allow_another_free(self, ptr: DevicePtr, *, not_run: bool, decommit: bool = False) -> None:
        """A graph launch that commits ``ptr``'s reservation again was taken behind the latest
        free of it (see :meth:`latest_free`), or behind its own auto-free (``decommit``):
        while that free is pending, one more free may be pending at once (see
        :meth:`claim_free`).

        A free node's free (:meth:`announce_free`) and an auto-free hold no claim: ``not_run``
        (the caller knows it has not run yet) says it is pending. It counts as a pending free
        against that room, and the room keeps a ``free_async`` of the relaunch's memory from
        being dropped when that free runs (see :meth:`decommit`).
        """
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is None:
                return
            if decommit or allocation.announced:
                if not_run:
                    allocation.extra_frees += 1
                    allocation.node_frees += 1
            elif allocation.freeing:
                allocation.extra_frees += 1

    def check_claimable(self, ptr: DevicePtr) -> None:
        """Raise what :meth:`claim_free` of ``ptr`` would raise; else nothing. Changes nothing.

        What a ``free_async`` checks before it parks for ring room, so every refusal it will
        meet (a symbol's storage included) comes at once, not once the ring has room.
        """
        with self._lock:
            self._claimable(ptr)

    def _claimable(self, ptr: DevicePtr) -> Allocation:
        """The allocation :meth:`claim_free` of ``ptr`` claims, after its checks. Hold the lock."""
        allocation = self._at_base(ptr)
        if allocation is None:
            if self._foreign_origin(ptr):
                raise InvalidValue(self._replaced_message(ptr))
            raise InvalidValue(f"{ptr!r} is not a live allocation of device {self._ordinal}")
        if allocation.base in self._static:
            raise InvalidValue(
                f"{ptr!r} is a device symbol's storage on device {self._ordinal}, "
                "not an allocation to free"
            )
        if allocation.runtime:
            raise InvalidValue(_runtime_message(ptr, self._ordinal))
        _check_not_graph_freed(ptr, allocation)
        if allocation.freeing + allocation.node_frees > allocation.extra_frees:
            raise InvalidValue(_freeing_message(ptr, False))
        return allocation

    def mark_graph_frees(self, ptr: DevicePtr) -> None:
        """``ptr``'s reservation is freed by a memory-free node of the graph that allocates it
        (a capture's ``free_async`` of its own ``malloc_async``, or ``add_mem_free_node``).

        Every launch of that graph commits the memory and frees it again before the launch
        completes, so no launch leaves memory behind for a ``free_async`` or a ``free``: both
        are refused when called (``InvalidValue``, as ``hipFreeAsync`` refuses a pointer that
        is no live allocation it may free), in every state of the graph (not instantiated,
        not launched, a launch in flight or done), instead of being accepted and failing the
        stream when it reaches the free. Never undone: a memory-free node cannot be destroyed,
        and a graph holding memory nodes is instantiated once, with both nodes. No free of it
        can be pending: none is admitted before the graph is instantiated
        (:meth:`mark_instantiated`), and none marks a range an executable took without it.
        """
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is not None and allocation.reserved:
                allocation.graph_frees = True

    def mark_instantiated(self, ptr: DevicePtr) -> None:
        """An executable now commits ``ptr``'s reservation at its launches. Before, the
        addresses of a graph that was never instantiated have no memory any launch could put
        there, so a free of them is refused when called (``InvalidValue``, as ``hipFreeAsync``
        of an address that is no allocation), rather than failing the stream when it gets
        there. So is a free until the executable's first launch is taken
        (:meth:`launch_taken`): a graph allocation's memory exists from the launch that
        allocates it, and only from then may a ``free_async`` be ordered behind one (see
        :meth:`claim_free`)."""
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is not None and allocation.reserved:
                allocation.instantiated = True

    def mark_static(self, ptr: DevicePtr) -> None:
        """Count ``ptr``'s allocation as the device's own (a symbol's storage), not a user's."""
        with self._lock:
            if ptr.address in self._by_base:
                self._static.add(ptr.address)

    def reserve(self, nbytes: int) -> DevicePtr:
        """Reserve address space without memory (graph memory-alloc nodes).

        Raises:
            InvalidValue: ``nbytes`` is zero or negative.
            OutOfMemory: the device's address range has no room left for ``nbytes``.
        """
        nbytes = check_size(nbytes)
        if nbytes == 0:
            raise InvalidValue("cannot reserve zero bytes")
        with self._lock:
            allocation = Allocation(0, nbytes, None, reserved=True)  # first: see _insert
            self._insert(allocation, self._check_addresses(nbytes))
        return issued(self._ordinal, allocation.base, self._origin)

    def commit(self, ptr: DevicePtr) -> None:
        """Back a reservation with memory. Raises OutOfMemory; committing twice is InvalidValue."""
        with self._lock:
            allocation = self._reservation(ptr)
            if allocation.buffer is not None:
                raise InvalidValue(f"{ptr!r} is already committed")
            pool = self._graph_pool
            extra = pool.to_charge(allocation.nbytes)  # the rest comes from the pool's cache
            self._check_free(extra)
            buffer = self._backing(allocation.nbytes)
            self._charge(extra)
            pool.committed(allocation.nbytes)
            allocation.buffer = buffer
            if allocation.commits_pending:
                allocation.commits_pending -= 1

    def _backing(self, nbytes: int) -> npt.NDArray[np.uint8]:
        """Host memory behind ``nbytes`` of device memory: a device may claim more memory than
        the host has, and a host that cannot back an allocation makes it ``OutOfMemory``, not
        Python's ``MemoryError``. Changes nothing when it fails."""
        try:
            return np.zeros(nbytes, dtype=np.uint8)
        except MemoryError as error:
            raise OutOfMemory(
                f"device {self._ordinal}: the host cannot back {nbytes} bytes of device memory"
            ) from error

    def decommit(self, ptr: DevicePtr) -> None:
        """Return a reservation's memory, keeping its addresses. Idempotent.

        A stream's pending free of that memory (:meth:`claim_free`) then finds it gone and
        fails, rather than free what a later launch commits there. A claim on a reservation
        with no memory behind it is for the memory the next commit puts there, so decommitting
        nothing (an auto-free-on-launch launch starting) leaves it in place. So are the claims
        a relaunch taken behind this free made room for (:meth:`allow_another_free`): they
        are for the memory that relaunch commits next (launch, free-node graph, relaunch,
        ``free_async``, or with auto-free-on-launch launch, launch, ``free_async``, with no
        host wait); this free spends one such room.
        """
        with self._lock:
            allocation = self._reservation(ptr)
            if allocation.buffer is not None and allocation.contested:
                # the auto-free of a contested free node's (see contest_latest_free) ran
                # first: the node's free, still to run, is for the memory freed here
                allocation.contested = False
                allocation.stale_node_frees += 1
            self._decommit_locked(allocation)
        if self._mapped_by:
            self._tell_mappers()

    def free_by_node(self, ptr: DevicePtr) -> None:
        """A memory-free node's free of ``ptr``'s reservation runs: :meth:`decommit`, unless
        the memory it was for is gone already.

        That is a free node of another graph contested by an auto-free relaunch
        (:meth:`contest_latest_free`) whose auto-free ran first: the memory there now is the
        relaunch's, so this free fails (on its stream) and frees nothing, as a ``free_async``
        that came second does.

        A reservation already given back is nothing to free (as :meth:`decommit`'s caller
        takes its refusal).

        Raises:
            InvalidValue: that free's memory is gone.
        """
        with self._lock:
            allocation = self._at_base(ptr)
            if allocation is None or not allocation.reserved:
                return
            if allocation.node_frees_unrun:
                allocation.node_frees_unrun -= 1
            if allocation.stale_node_frees:
                allocation.stale_node_frees -= 1
                raise InvalidValue(
                    f"{ptr!r} was freed before the stream reached its free node: the "
                    "auto-free of a relaunch on another stream, unordered with it, freed it "
                    "first (order the free before the relaunch)"
                )
            if allocation.contested:  # this free comes first: the auto-free finds it gone
                allocation.contested = False
                if allocation.buffer is None and allocation.node_frees:
                    allocation.node_frees -= 1  # no memory here: no decommit spends the count
            self._decommit_locked(allocation)
        if self._mapped_by:
            self._tell_mappers()

    def _decommit_locked(self, allocation: Allocation) -> None:
        """:meth:`decommit` of ``allocation``. Hold the lock; tell the mappers after."""
        if allocation.buffer is not None:
            allocation.freeing = min(allocation.freeing, allocation.extra_frees)
            if allocation.extra_frees:
                allocation.extra_frees -= 1
            if allocation.node_frees:
                allocation.node_frees -= 1
            allocation.buffer = None
            self._drop_views(allocation)
            self._graph_pool.released(allocation.nbytes)
            if allocation.dropped and not allocation.freeing:  # waited for frees only
                self._remove(allocation)

    def unreserve(self, ptr: DevicePtr) -> None:
        """Give back a reservation's address space (and its memory, if committed).

        A reservation a stream holds a free of (:meth:`claim_free`) stays until that free
        runs, and goes with it: an executable destroyed right after a launch and a
        ``free_async`` ordered behind it (launch, free, destroy: HIP's and CUDA's stream
        order) gives its ranges back as the launch completes, before the stream reaches the
        free, which must still find the memory it frees.
        """
        with self._lock:
            allocation = self._reservation(ptr)
            if allocation.freeing:
                allocation.dropped = True
                return
            self._unreserve_locked(allocation)
        if self._mapped_by:
            self._tell_mappers()

    def _unreserve_locked(self, allocation: Allocation) -> None:
        if allocation.buffer is not None:
            self._graph_pool.released(allocation.nbytes)
        self._remove(allocation)

    def _tell_mappers(self) -> None:
        """Memory went away here: the devices mapping this one as a peer must not keep using
        views of it (their dispatch ops compare their own ``frees``). Called without this
        memory's lock held, so two peers freeing at once never wait on each other's lock."""
        for mapper in self._mapped_by:
            mapper.peer_memory_changed()

    def peer_memory_changed(self) -> None:
        """Memory this device reached through a peer went away, or the peer's mapping did:
        views kept of it are stale (``frees`` moves, as for memory of its own)."""
        with self._lock:
            self._frees += 1

    # -- the graph memory pool (see graph_pool.py) -------------------------------------------------

    def trim_graph_pool(self) -> int:
        """Give the graph pool's unused bytes back to the device; returns how many."""
        with self._lock:
            freed = self._graph_pool.trim()
            self._bytes_in_use -= freed
            return freed

    def graph_pool_statistics(self) -> GraphPoolStatistics:
        """The graph memory pool's counters, read together under the allocator's lock."""
        with self._lock:
            return self._graph_pool.statistics()

    def graph_pool_attribute(self, attr: GraphMemAttribute | int) -> int:
        """A graph memory-pool figure (InvalidValue for an unknown attribute).

        The attribute is converted before the lock is taken: its ``__index__`` is user code,
        which must not run while every other thread's allocation waits for it (one that
        waited for such a thread deadlocked).
        """
        checked = check_attribute(attr)
        with self._lock:
            return self._graph_pool.attribute(checked)

    def set_graph_pool_attribute(self, attr: GraphMemAttribute | int, value: int) -> None:
        """Reset a high-water mark of the graph memory pool to 0 (else InvalidValue).

        Both arguments are converted before the lock is taken (see graph_pool_attribute).
        """
        checked, number = check_attribute(attr), as_int(value, "value")
        with self._lock:
            self._graph_pool.set_attribute(checked, number)

    def _at_base(self, ptr: DevicePtr) -> Allocation | None:
        """The allocation or reservation of this device that starts at ``ptr``, or None.

        A hand-made pointer's fields may be anything: only int fields name an allocation (a
        float or numpy address equal to a base would otherwise free or claim it, a bool
        device would pass for device 1, and an object's ``__eq__`` would run under the lock).
        """
        if type(ptr.device) is not int or type(ptr.address) is not int or self._foreign_origin(ptr):
            return None
        return self._by_base.get(ptr.address) if ptr.device == self._ordinal else None

    def _foreign_origin(self, ptr: DevicePtr) -> bool:
        """Whether ``ptr``, of this memory's ordinal, came from another memory than this one:
        a device that ``configure_devices`` replaced, whose addresses this memory reuses. A
        pointer made by hand has no known origin, and is looked up by its ordinal."""
        origin = ptr._origin
        return (
            origin is not self._origin and origin is not UNTRACKED and ptr.device == self._ordinal
        )

    def _reservation(self, ptr: DevicePtr) -> Allocation:
        allocation = self._at_base(ptr)
        if allocation is None or not allocation.reserved:
            raise InvalidValue(f"{ptr!r} is not a reservation of device {self._ordinal}")
        return allocation

    def _check_free(self, nbytes: int) -> None:
        """Raise OutOfMemory unless ``nbytes`` more memory fit. Hold the lock; changes nothing."""
        if hooks.observers is not None:  # fault injection may refuse the allocation
            for observer in hooks.observers:
                observer.allocating(self, nbytes)
        if self._bytes_in_use + nbytes > self._total_bytes:
            free = self._total_bytes - self._bytes_in_use
            raise OutOfMemory(f"device {self._ordinal}: {nbytes} bytes requested, {free} free")

    def _charge(self, nbytes: int) -> None:
        """Account ``nbytes`` more memory in use, after :meth:`_check_free`. Hold the lock."""
        self._bytes_in_use += nbytes
        self._peak = max(self._peak, self._bytes_in_use)

    def _check_addresses(self, nbytes: int) -> int:
        """The aligned span for ``nbytes``; OutOfMemory unless the range has room for it, at
        the bump pointer or, once the range is used up, in a freed run of addresses
        (:meth:`_room_for`). Changes nothing (hold the lock)."""
        span = -(-nbytes // ALLOCATION_ALIGNMENT) * ALLOCATION_ALIGNMENT
        if self._room_for(span) < 0:
            raise self._no_room(nbytes)
        return span

    def _no_room(self, nbytes: int) -> OutOfMemory:
        left = max(0, self._address_end - self._next_address)
        return OutOfMemory(
            f"device {self._ordinal}: {nbytes} bytes of address space requested, "
            f"{left} left of its {ADDRESS_SPACE_BYTES} and no freed run of addresses "
            "that holds them"
        )

    def _room_for(self, span: int) -> int:
        """Where ``span`` bytes go: the bump pointer while its run has room, else the first
        freed run that holds them (:meth:`_find_room`); -1 if none does."""
        if self._next_address + span <= self._room_end:
            return self._next_address
        return self._find_room(span)

    def _find_room(self, span: int) -> int:
        """The base of the first free run of addresses that holds ``span`` bytes with the guard
        gaps, from the bump pointer on and then from the start of the range; -1 if none.

        A free run lies between two live allocations (or the range's start or end), less a
        guard gap after the one before and before the one after. The walk makes no object the
        collector tracks (see :meth:`_insert`), and costs one step per live allocation: it
        runs only once the pointer has been through the whole range, and again each time the
        free run it moved to is used up.
        """
        bases, by_base, align = self._bases, self._by_base, ALLOCATION_ALIGNMENT
        count = len(bases)
        first = bisect.bisect_right(bases, self._next_address)  # the run the pointer is in
        index = first
        while index <= count:
            found = self._room_before(index, span, bases, by_base, align)
            if found >= 0:
                return found
            index += 1
        index = 0
        while index <= first and index <= count:
            found = self._room_before(index, span, bases, by_base, align)
            if found >= 0:
                return found
            index += 1
        return -1

    def _room_before(
        self, index: int, span: int, bases: list[int], by_base: dict[int, Allocation], align: int
    ) -> int:
        """The base of the free run before ``bases[index]`` (after the last allocation when
        ``index`` is their count) if it holds ``span`` bytes, else -1."""
        if index:
            before = by_base[bases[index - 1]]
            low = before.base - (-before.nbytes // align) * align + align
        else:
            low = self._address_base
        high = bases[index] - align if index < len(bases) else self._address_end
        return low if high - low >= span else -1

    def _insert(self, allocation: Allocation, span: int) -> None:
        """Place ``allocation`` (made before its checks) in room for ``span`` bytes (from
        :meth:`_check_addresses`); OutOfMemory, changing nothing, if there is none left.

        The record is made by the caller before it checks anything, since making an object
        may run the collector, and a ``__del__`` it calls may allocate or free on this device
        (the lock is re-entrant): a nested allocation between the checks and this would
        invalidate them, and one between reading the placement and entering the base would
        leave ``_bases`` unsorted, so lookups would miss live allocations. From the checks to
        here nothing makes a tracked object.
        """
        # Placed afresh: an allocation nested in the checks (see above) may have moved on.
        base = self._room_for(span)
        if base < 0:  # and taken the only room there was: refused before anything changes
            raise self._no_room(span)
        if base != self._next_address:  # moved to a freed run: it ends at the next allocation
            index = bisect.bisect_right(self._bases, base)
            bases = self._bases
            self._room_end = (
                bases[index] - ALLOCATION_ALIGNMENT if index < len(bases) else self._address_end
            )
        # A guard gap after each allocation; the bump pointer may pass the end of the range only
        # here, after the last allocation that fits there.
        self._next_address = base + span + ALLOCATION_ALIGNMENT
        allocation.base = base
        self._by_base[base] = allocation
        bases = self._bases
        if not bases or base > bases[-1]:
            bases.append(base)  # the bump pointer's usual case: the list stays sorted
        else:
            bisect.insort(bases, base)

    def _remove(self, allocation: Allocation) -> None:
        del self._by_base[allocation.base]
        index = bisect.bisect_left(self._bases, allocation.base)
        del self._bases[index]
        self._drop_views(allocation)
        allocation.buffer = None

    # -- access ---------------------------------------------------------------------------------

    def resolve(self, ptr: DevicePtr, nbytes: int) -> tuple[npt.NDArray[np.uint8], int]:
        """Return (buffer, offset) for ``nbytes`` at ``ptr``, bounds-checked.

        Raises:
            InvalidValue: null pointer, negative size, or a range past the allocation's end.
            InvalidDevicePointer: the address is not inside any live allocation of this device.
        """
        allocation, buffer = self._checked(ptr, nbytes, reserved_ok=False)
        assert buffer is not None
        return buffer, ptr.address - allocation.base

    def check_range(self, ptr: DevicePtr, nbytes: int) -> None:
        """Validate a range that work will touch later: committed memory or reserved addresses.

        Building work (a graph node, a stream operation) validates with this; running it
        resolves with :meth:`resolve`. A graph memory-alloc node's reserved range is therefore
        usable by later nodes before any memory is behind it, as in HIP.

        Raises:
            InvalidValue / InvalidDevicePointer: as :meth:`resolve`.
        """
        self._checked(ptr, nbytes, reserved_ok=True)

    def _checked(
        self, ptr: DevicePtr, nbytes: int, *, reserved_ok: bool
    ) -> tuple[Allocation, npt.NDArray[np.uint8] | None]:
        nbytes = check_size(nbytes)
        if not ptr:
            raise InvalidValue("null device pointer")
        with self._lock:  # a free on another thread must not change the allocation mid-lookup
            allocation = self._find(ptr, reserved_ok=reserved_ok)
            buffer = allocation.buffer
        offset = ptr.address - allocation.base
        if offset + nbytes > allocation.nbytes:
            raise InvalidValue(
                f"{nbytes} bytes at {ptr!r} run past the end of {allocation!r} (offset {offset})"
            )
        return allocation, buffer

    def _find(self, ptr: DevicePtr, *, reserved_ok: bool = False) -> Allocation:
        """The allocation holding ``ptr`` (committed, or also reserved). Hold the lock.

        Only int fields are compared: a hand-made pointer's other objects would run their
        own ``__eq__`` or ``__lt__`` (user code) under the lock, and a bool device would pass
        for device 0 or 1.
        """
        if (
            type(ptr.device) is int
            and type(ptr.address) is int
            and ptr.device == self._ordinal
            and not self._foreign_origin(ptr)
        ):
            bases = self._bases
            index = bisect.bisect_right(bases, ptr.address) - 1
            if index >= 0:
                allocation = self._by_base.get(bases[index])
                if (
                    allocation is not None
                    and (reserved_ok or allocation.buffer is not None)
                    and ptr.address < allocation.end
                ):
                    return allocation
        raise InvalidDevicePointer(self._not_found_message(ptr))

    def _not_found_message(self, ptr: DevicePtr) -> str:
        """Why :meth:`_find` found nothing at ``ptr``: another device's pointer, or one of a
        replaced device, is named as such (its address may well be inside an allocation of
        its own device)."""
        if self._foreign_origin(ptr):
            return self._replaced_message(ptr, "inside ")
        if type(ptr.device) is int and ptr.device != self._ordinal:
            return (
                f"{ptr!r} is not inside a live allocation of device {self._ordinal}: it is a "
                f"pointer of device {ptr.device}"
            )
        return f"{ptr!r} is not inside a live allocation of device {self._ordinal}"

    def _replaced_message(self, ptr: DevicePtr, inside: str = "") -> str:
        return (
            f"{ptr!r} is not {inside}a live allocation of device {self._ordinal}: it comes "
            "from a device configure_devices replaced, whose addresses this one reuses"
        )

    def allocation_of(self, address: int) -> tuple[int, int] | None:
        """(base, nbytes) of the allocation or reservation holding ``address``, or None.

        What the race checker turns a kernel's pointer argument into a byte range with. An
        address that is not an int (a hand-made pointer's) is inside nothing.
        """
        if type(address) is not int:  # the lookup would compare it with the int bases
            return None
        with self._lock:
            try:
                allocation = self._find(DevicePtr(self._ordinal, address), reserved_ok=True)
            except InvalidDevicePointer:
                return None
        return allocation.base, allocation.nbytes

    def view(self, address: int, dtype: np.dtype[np.generic]) -> npt.NDArray[np.generic]:
        """A typed view from ``address`` to the end of its allocation (kernel pointer arguments).

        Views are cached, so decoding the same pointer again costs one dict lookup.

        Raises:
            InvalidDevicePointer: the address is not inside a live allocation.
        """
        key = (address, dtype)
        view = self._views.get(key)  # the dispatch fast path: one dict lookup, no lock
        if view is not None:
            return view
        if not self._address_base <= address < self._address_end:
            owner = (address >> _ADDRESS_SPACE_SHIFT) - 1
            peer = self._peers.get(owner)
            if peer is not None:  # peer access enabled: the owner's allocator resolves it
                return peer.view(address, dtype)
            raise InvalidDevicePointer(self._foreign(address, owner))
        with self._lock:  # see resolve()
            allocation = self._holding_or_ending_at(address)
            assert allocation.buffer is not None
            offset = address - allocation.base
            count = (allocation.nbytes - offset) // dtype.itemsize
            view = np.frombuffer(allocation.buffer, dtype=dtype, count=count, offset=offset)
            allocation.views[key] = view
            self._views[key] = view
        return view

    def _holding_or_ending_at(self, address: int) -> Allocation:
        """The live allocation holding ``address``, or ending just before it. Hold the lock.

        A pointer one past an allocation's end (``x + nbytes``, the end of a range) is a legal
        kernel argument in HIP, which faults only when a thread dereferences it: its view is
        empty, so any access through it fails as an out-of-range one does. No other allocation
        starts there (a guard gap follows each, and addresses are never reused), so the empty
        view cached under that address can never stand for another allocation's bytes.

        Raises:
            InvalidDevicePointer: neither (the message names ``address`` itself).
        """
        try:
            return self._find(DevicePtr(self._ordinal, address))
        except InvalidDevicePointer:
            if address > self._address_base:
                with contextlib.suppress(InvalidDevicePointer):
                    before = self._find(DevicePtr(self._ordinal, address - 1))
                    if before.end == address:
                        return before
            raise

    def _foreign(self, address: int, owner: int) -> str:
        """Why ``address``, outside this device's range, does not resolve here: the message
        names the device that owns it (a pointer made with this device's ordinal would
        misname it)."""
        if owner < 0:
            return f"address {address:#x} is not a device address (device {self._ordinal})"
        return (
            f"address {address:#x} lies in device {owner}'s address range, and device "
            f"{self._ordinal} has no peer access to it"
        )

    def _drop_views(self, allocation: Allocation) -> None:
        """Forget an allocation's cached views (it is being freed). Call with the lock held."""
        self._frees += 1
        for key in allocation.views:
            self._views.pop(key, None)
        allocation.views.clear()

    # -- reporting ------------------------------------------------------------------------------

    @property
    def bytes_in_use(self) -> int:
        return self._bytes_in_use

    def memory_info(self) -> MemoryInfo:
        """(free, total) bytes, as ``hipMemGetInfo``."""
        return MemoryInfo(self._total_bytes - self._bytes_in_use, self._total_bytes)

    def statistics(self) -> MemoryStatistics:
        with self._lock:
            allocations = sum(1 for a in self._by_base.values() if a.buffer is not None)
            static = [self._by_base[base] for base in self._static]
            return MemoryStatistics(
                allocations=allocations,
                reservations=len(self._by_base) - allocations,
                bytes_in_use=self._bytes_in_use,
                peak_bytes_in_use=self._peak,
                total_bytes=self._total_bytes,
                address_space_used=self._next_address - self._address_base,
                graph_pool_cached=self._graph_pool._cached,
                static_allocations=len(static),
                static_bytes=sum(a.nbytes for a in static),
            )

    def __repr__(self) -> str:
        return (
            f"<DeviceMemory device={self._ordinal} in_use={self._bytes_in_use}/{self._total_bytes} "
            f"allocations={len(self._by_base)}>"
        )


def _check_not_graph_freed(ptr: DevicePtr, allocation: Allocation) -> None:
    """Refuse a stream-ordered free of memory a graph frees, or that no launch allocates yet
    (see DeviceMemory.claim_free)."""
    if allocation.graph_frees:
        raise InvalidValue(_graph_frees_message(ptr))
    if allocation.reserved and not allocation.instantiated:
        raise InvalidValue(
            f"{ptr!r} is the reserved address of a memory-alloc node of a graph that was not "
            "instantiated: no launch allocates memory there to free"
        )
    if allocation.node_free_taken:
        raise InvalidValue(
            f"{ptr!r} is freed by a memory-free node of a graph whose launch was taken after "
            "the last launch that allocates it: that launch's memory cannot be freed again"
        )
    if allocation.reserved and not allocation.launched:
        raise InvalidValue(
            f"{ptr!r} is the reserved address of a memory-alloc node whose executable was "
            "never launched: a graph allocation's memory exists from the first launch that "
            "allocates it, so there is nothing to free yet (launch it first)"
        )
    if allocation.user_freed and not allocation.freeing:  # a pending one: claim_free's count
        raise InvalidValue(
            f"{ptr!r} was freed (free_async or free) since the last launch that allocates it "
            "was taken: that launch's memory cannot be freed again"
        )


def _runtime_message(ptr: DevicePtr, ordinal: int) -> str:
    return (
        f"{ptr!r} is memory the runtime keeps on device {ordinal} for a graph executable "
        "(kernel arguments or conditional-handle cells), not an allocation to free"
    )


def _graph_frees_message(ptr: DevicePtr) -> str:
    return (
        f"{ptr!r} is freed by a memory-free node of the graph that allocates it: "
        "the graph frees it itself, so it cannot be freed again"
    )


def _freeing_message(ptr: DevicePtr, claimed: bool) -> str:
    if claimed:
        return f"{ptr!r} was freed before the stream reached its free_async"
    return f"{ptr!r} is already being freed by a stream (free_async)"


def check_size(nbytes: object) -> int:
    """``nbytes`` as a plain int (numpy ints are accepted), refused if negative.

    Callers above convert a size with this before they check their handles, when the size
    is not an exact ``int``: its ``__index__`` is user code, which may destroy them.
    """
    size = int_or_none(nbytes)
    if size is None:
        raise TypeError(f"a size must be an int, got {type(nbytes).__name__}")
    if size < 0:
        raise InvalidValue(f"negative size {size}")
    return size
