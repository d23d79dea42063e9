"""Footprints: the device bytes a graph node or an eager operation reads and writes.

Copies and fills touch exact byte ranges (a pitched one row by row, up to a bound); a free (or a
graph memory node) touches its whole allocation as a write; a kernel pointer argument touches
from the pointer to the end of its allocation, read-write ("conservative"), unless its kernel
says better: ``ConstPtr`` reads, ``extents=`` bounds the range ("declared"). A host function
touches what ``ahg.host_function(fn, reads=, writes=)`` declares. The static check
(:mod:`.races`) and the dynamic checker (:mod:`ahipgraph.tools.race`) share these, and the
allocation lookups behind them (:data:`ALLOCATIONS`).
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, NamedTuple

from ..device.host_function import HostFunction
from ..device.ops import FreeOp
from ..device.pointer import DevicePtr
from ..graph.node_type import NodeType
from ..graph.params import MemAllocParams, MemFreeParams
from ..runtime.device import get_device
from ..runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.pitched import PitchedCopyParams
from ..runtime.stream_memops import StreamMemOp

if TYPE_CHECKING:
    from .snapshot import ExecNode

__all__ = [
    "ALLOCATIONS",
    "CONSERVATIVE",
    "DECLARED",
    "EXACT",
    "LOOKUP_MEMO",
    "Access",
    "allocation_of",
    "footprint",
    "kernel_footprint",
    "kernel_footprint_of",
    "merge",
    "node_footprint",
]

# Allocation lookups kept per device memory.
_MAX_CACHED = 1 << 16

# How sure a footprint's range is: the exact bytes, what the kernel declares, or from the
# pointer to the end of its allocation.
EXACT, DECLARED, CONSERVATIVE = "exact", "declared", "conservative"
# A pitched copy or fill of up to this many rows is that many exact ranges; a larger one is
# one conservative range from its first byte to its last (shadow memory scans its ranges).
_MAX_ROWS = 64


class Access(NamedTuple):
    """Bytes ``[start, end)`` of device ``device``'s address space, read or written.

    A named tuple, not a frozen dataclass: the dynamic checker makes one per range of every
    eager op, and a tuple is built several times faster."""

    device: int
    start: int
    end: int
    write: bool
    atomic: bool = False
    precision: str = EXACT

    def conflicts(self, other: Access) -> bool:
        return (
            self.device == other.device
            and self.start < other.end
            and other.start < self.end
            and (self.write or other.write)
            and not (self.atomic and other.atomic)
        )


class _AllocationCache:
    """``memory.allocation_of``, memoised per device memory until that memory frees anything.

    The checkers ask for the allocation under a pointer on every op and node; the answer
    only changes when memory goes away (addresses are never handed out twice by one
    memory, and ``DeviceMemory.frees`` counts every free, decommit and unreserve) or when
    the device table is reconfigured (a different memory object). Only hits are kept, so
    a later allocation is found; each memory keeps at most ``_MAX_CACHED`` entries.
    """

    def __init__(self) -> None:
        # ordinal -> (its memory, weakly: a replaced device's memory is not kept alive;
        # that memory's free count; address -> (base, size))
        self._by_device: dict[int, tuple[weakref.ref[Any], int, dict[int, tuple[int, int]]]] = {}

    def lookup(self, device: int, address: int) -> tuple[Any, int, int] | None:
        """(memory, base, nbytes) of the allocation holding ``address`` now, or None."""
        memo: dict[tuple[int, int], Any] | None = getattr(LOOKUP_MEMO, "memo", None)
        if memo is not None:  # inside one graph check: nothing is freed meanwhile
            key = (device, address)
            if key in memo:
                return memo[key]  # type: ignore[no-any-return]
        try:
            memory = get_device(device).memory
        except Exception:  # a pointer of no device, or a device table reconfigured since
            memory = None
        found = None if memory is None else self.lookup_in(device, memory, address)
        if memo is not None:
            memo[(device, address)] = found
        return found

    def lookup_in(self, device: int, memory: Any, address: int) -> tuple[Any, int, int] | None:
        """:meth:`lookup` when the caller knows ``memory`` is device ``device``'s memory now
        (an eager op's stream's device: its enqueue was accepted)."""
        entry = self._by_device.get(device)
        frees = memory._frees
        if entry is None or entry[0]() is not memory or entry[1] != frees:
            entry = self._by_device[device] = (weakref.ref(memory), frees, {})
        table = entry[2]
        hit = table.get(address)
        if hit is None:
            hit = memory.allocation_of(address)
            if hit is None:
                return None
            if len(table) < _MAX_CACHED:
                table[address] = hit
        return (memory, hit[0], hit[1])

    def clear(self) -> None:
        self._by_device = {}

    def statistics(self) -> dict[str, int]:
        return {"devices": len(self._by_device)} | {
            "entries": sum(len(entry[2]) for entry in list(self._by_device.values()))
        }

    def __repr__(self) -> str:
        return f"<AllocationCache devices={len(self._by_device)}>"


ALLOCATIONS = _AllocationCache()
LOOKUP_MEMO = threading.local()  # .memo: lookups memoised during one graph check on this thread


def allocation_of(ptr: DevicePtr) -> tuple[int, int] | None:
    found = ALLOCATIONS.lookup(ptr.device, ptr.address)
    return None if found is None else (found[1], found[2])


def _whole(ptr: DevicePtr, precision: str = EXACT) -> list[Access]:
    found = allocation_of(ptr)
    if found is None:
        return []
    base, nbytes = found
    return [Access(ptr.device, base, base + nbytes, True, False, precision)]


def footprint(work: Any, device: Any = None) -> list[Access]:
    """The device bytes an op or node's parameters touch (empty for host work and events).

    ``device``: the device an eager op is enqueued on, if the caller has it (its memory is
    then known current, which saves a device-table lookup per kernel pointer)."""
    if isinstance(work, KernelParams):
        return kernel_footprint(work, device)
    if isinstance(work, PitchedCopyParams):
        return _pitched_copy_footprint(work)
    if isinstance(work, MemcpyParams):
        out = []
        nbytes = work.nbytes
        if nbytes:
            d, s = work.dst, work.src
            if isinstance(d, DevicePtr) and d.address:  # not the null pointer
                out.append(Access(d.device, d.address, d.address + nbytes, True))
            if isinstance(s, DevicePtr) and s.address:
                out.append(Access(s.device, s.address, s.address + nbytes, False))
        return out
    if isinstance(work, MemsetParams):
        if not work.width or not work.height or not work.dst.address:
            return []
        return _rows(work.dst, work.width * work.element_size, work.pitch, work.height, 0, 1, True)
    if isinstance(work, FreeOp | MemFreeParams | MemAllocParams):
        return _whole(work.ptr)
    if isinstance(work, HostParams) and isinstance(work.fn, HostFunction):
        return _host_footprint(work.fn)
    if isinstance(work, StreamMemOp):
        return _memop_footprint(work)
    if isinstance(work, HostParams) and isinstance(work.fn, StreamMemOp):  # a captured one
        return _memop_footprint(work.fn)
    return []


def _memop_footprint(memop: StreamMemOp) -> list[Access]:
    """A ``write_value_*`` writes its word. A ``wait_value_*`` touches nothing here: its read
    polls a word other work is meant to write while it waits (any write may release it), so
    it races with none; the order it gives is the race checker's (:mod:`ahipgraph.tools.race`)."""
    if memop.flag is not None:
        return []
    ptr = memop.ptr
    return [Access(ptr.device, ptr.address, ptr.address + memop.bits // 8, True)]


def _rows(
    ptr: DevicePtr, width: int, pitch: int, height: int, slice_pitch: int, depth: int, write: bool
) -> list[Access]:
    """The ``depth`` slices of ``height`` rows of ``width`` bytes a pitched copy touches at
    ``ptr`` (rows ``pitch`` bytes apart, slices ``slice_pitch``): rows that touch are one
    range, and more than ``_MAX_ROWS`` separate rows one conservative range over them all."""
    if pitch == width and (depth == 1 or slice_pitch == width * height):
        start = ptr.address  # no gaps: one exact range
        return [Access(ptr.device, start, start + width * height * depth, write)]
    if height * depth > _MAX_ROWS:
        end = ptr.address + (depth - 1) * slice_pitch + (height - 1) * pitch + width
        return [Access(ptr.device, ptr.address, end, write, False, CONSERVATIVE)]
    starts = sorted(
        ptr.address + z * slice_pitch + y * pitch for z in range(depth) for y in range(height)
    )
    out: list[Access] = []
    lo, hi = starts[0], starts[0] + width
    for start in starts[1:]:
        if start <= hi:
            hi = max(hi, start + width)
        else:
            out.append(Access(ptr.device, lo, hi, write))
            lo, hi = start, start + width
    out.append(Access(ptr.device, lo, hi, write))
    return out


def _pitched_copy_footprint(work: PitchedCopyParams) -> list[Access]:
    """The rows a pitched (2D/3D) copy writes and reads, from each side's offset, pitch and
    slice height: the bytes between rows are not touched, so an op on them does not race."""
    if not (work.width and work.height and work.depth):
        return []
    out: list[Access] = []
    for end, offset, pitch, slice_height, write in (
        (work.dst, work.dst_offset, work.dst_pitch, work.dst_slice_height, True),
        (work.src, work.src_offset, work.src_pitch, work.src_slice_height, False),
    ):
        if isinstance(end, DevicePtr) and end.address:
            out += _rows(
                end + offset,
                work.width,
                pitch,
                work.height,
                slice_height * pitch,
                work.depth,
                write,
            )
    return out


def _host_footprint(fn: HostFunction) -> list[Access]:
    """What a declared host function touches (an undeclared one: nothing that is seen)."""
    out: list[Access] = []
    for regions, write in ((fn._reads, False), (fn._writes, True)):
        for ptr, nbytes in regions:
            if nbytes is not None:
                out.append(
                    Access(ptr.device, ptr.address, ptr.address + nbytes, write, False, DECLARED)
                )
                continue
            found = allocation_of(ptr)
            end = ptr.address + 1 if found is None else found[0] + found[1]
            out.append(Access(ptr.device, ptr.address, end, write, False, CONSERVATIVE))
    return out


def kernel_footprint(params: KernelParams, device: Any = None) -> list[Access]:
    layout = params.kernel.layout
    reaches = layout.pointer_reaches
    if reaches is None or device is not None:
        return kernel_footprint_of(layout, params.args, device)
    # The common case (no declared extent, no stream device), with the graph check's memo of
    # allocation lookups read inline.
    out: list[Access] = []
    args = params.args
    memo: dict[Any, Any] | None = getattr(LOOKUP_MEMO, "memo", None)
    for index, write, atomic in reaches:
        ptr = args[index]
        if not isinstance(ptr, DevicePtr):
            continue
        address = ptr.address
        if not address:
            continue
        ordinal = ptr.device
        key = (ordinal, address)
        if memo is not None and key in memo:
            found = memo[key]
        else:
            found = ALLOCATIONS.lookup(ordinal, address)
        end = address + 1 if found is None else found[1] + found[2]
        out.append(_new_access(Access, (ordinal, address, end, write, atomic, CONSERVATIVE)))
    return out


def kernel_footprint_of(layout: Any, args: Any, device: Any) -> list[Access]:
    """Any kernel's footprint: declared extents, and ``device``'s memory known current."""
    out: list[Access] = []
    lookup = ALLOCATIONS.lookup
    here = device.ordinal if device is not None else -1
    for pointer in layout.pointers:
        ptr = args[pointer.index]
        if not isinstance(ptr, DevicePtr) or not ptr.address:
            continue
        access = pointer.access
        write = access != "const"
        atomic = access == "atomic"
        extent = pointer.extent
        if extent is not None:
            count = max(0, pointer.elements(args) or 0)
            end = ptr.address + count * pointer.itemsize
            out.append(Access(ptr.device, ptr.address, end, write, atomic, DECLARED))
            continue
        if ptr.device == here:  # the stream's own device: its memory is current
            found = ALLOCATIONS.lookup_in(here, device.memory, ptr.address)
        else:
            found = lookup(ptr.device, ptr.address)
        end = ptr.address + 1 if found is None else found[1] + found[2]
        out.append(_new_access(Access, (ptr.device, ptr.address, end, write, atomic, CONSERVATIVE)))
    return out


_new_access = tuple.__new__  # an Access from its six fields, skipping the generated __new__


def node_footprint(node: ExecNode) -> list[Access]:
    """A node's footprint; a disabled node touches nothing but keeps its edges."""
    if not node.enabled or node.type is NodeType.Graph:
        return []
    params = node.params
    if type(params) is KernelParams:  # the commonest node, without footprint's type tests
        return kernel_footprint(params)
    return footprint(params)


def merge(accesses: list[Access]) -> list[Access]:
    """Fewer, larger ranges covering ``accesses``: what a replay checks against the world.

    Ranges of one kind (write or read, atomic or not) that touch are joined; the precision of a
    joined range is the weakest of its parts.
    """
    rank = {EXACT: 0, DECLARED: 1, CONSERVATIVE: 2}
    groups: dict[tuple[int, bool, bool], list[Access]] = {}
    for access in accesses:
        groups.setdefault((access.device, access.write, access.atomic), []).append(access)
    out: list[Access] = []
    for (device, write, atomic), items in groups.items():
        items.sort(key=lambda a: a.start)
        start, end, precision = items[0].start, items[0].end, items[0].precision
        for a in items[1:]:
            if a.start <= end:
                end = max(end, a.end)
                if rank[a.precision] > rank[precision]:
                    precision = a.precision
            else:
                out.append(Access(device, start, end, write, atomic, precision))
                start, end, precision = a.start, a.end, a.precision
        out.append(Access(device, start, end, write, atomic, precision))
    return out
