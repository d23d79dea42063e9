"""Where an eager op's accesses fall, and how a race's parties are named.

The dynamic race checker (:mod:`ahipgraph.tools.race`) asks this module which allocation each
of an op's byte ranges lies in (remembering one-range answers until the memory frees
anything), what a host-source copy reads, and how to label an op and a site in a report.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device.ops import CopyOp, host_bytes
from ..device.pointer import DevicePtr
from ..exec.footprints import ALLOCATIONS, Access, footprint
from ..exec.race_reports import RaceSite
from ..runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.stream_memops import StreamMemOp
from ..runtime.stream_memory import FreeOp
from .race_clocks import MAX_PENDING, CheckerState, Lane, OpRecord
from .race_sites import site_text

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..runtime.device import Device

__all__ = [
    "WORK_LABELS",
    "allocation_at",
    "host_source",
    "located_footprint",
    "race_site",
    "stream_name",
    "work_label",
]


def host_source(copy: CopyOp) -> bytes:
    """The bytes ``copy`` reads from its host array (all of it, the common case, is faster)."""
    src = copy.src
    assert isinstance(src, np.ndarray)
    if src.nbytes == copy.nbytes and src.flags.c_contiguous:
        return src.tobytes()
    return host_bytes(src, copy.nbytes).tobytes()


def stream_name(lane: Lane | None) -> str:
    return lane.name if lane is not None else "a stream"


def allocation_at(access: Access) -> tuple[DeviceMemory, int, int] | None:
    """(memory, base, nbytes) of the allocation holding ``access.start`` now, or None."""
    return ALLOCATIONS.lookup(access.device, access.start)


_new_access = tuple.__new__  # an Access from its six fields, skipping the generated __new__


def located_footprint(
    work: Any, device: Device, st: CheckerState
) -> list[tuple[Access, DeviceMemory, int, Any]]:
    """An eager op's footprint, each range with the (memory, base) of the allocation under its
    start, and that memory's shadow table when it is the device's (else None: look it up);
    ranges outside every allocation are left out (shadow memory has nothing for them).

    What :func:`footprint` and one allocation lookup per range give. The common ops (a kernel
    with one pointer parameter reaching the end of its allocation, a copy between the host and
    the device, a one-row fill) touch one range of the stream's own device, decided by the
    kernel's pointer fields and the pointer, or by the kind, address and size: those are
    kept in ``st.located`` (per device) and found again by a dict lookup. An entry
    holds only while the device's memory is the same object and has freed nothing since
    (an allocation's extent changes only by a free; addresses are never handed out twice by
    one memory), and only ranges found inside an allocation are kept (a later allocation
    may cover a miss). The key's objects are kept in the entry and compared by identity, so
    a re-declared kernel never reuses a dead one's entry."""
    kind = type(work)
    here, memory_here = device.ordinal, device.memory
    entry = st.located.get(here)
    if entry is None or entry[0]() is not memory_here or entry[1] != memory_here._frees:
        table = st.shadow.get(memory_here)  # made now (empty) if new: one per memory, kept
        if table is None:
            table = st.shadow[memory_here] = {}
        entry = st.located[here] = (weakref.ref(memory_here), memory_here._frees, {}, table)
    memo: dict[Any, Any] = entry[2]
    table_here = entry[3]
    owner: Any
    if kind is KernelParams:
        reaches = owner = work.kernel.layout.pointer_reaches
        if reaches is not None and len(reaches) == 1:
            index, write, atomic = reaches[0]
            ptr = work.args[index]
            if type(ptr) is DevicePtr and ptr.device == here:
                key: Any = (id(reaches), ptr.address)
                known = memo.get(key)
                if known is not None and known[0] is owner:
                    return [(known[1], memory_here, known[2], table_here)]
                if not ptr.address:
                    return []
                found = ALLOCATIONS.lookup_in(here, memory_here, ptr.address)
                if found is None:
                    return []
                address = ptr.address
                access = _new_access(
                    Access, (here, address, found[1] + found[2], write, atomic, "conservative")
                )
                if len(memo) >= MAX_PENDING:
                    memo.clear()
                memo[key] = (owner, access, found[1])
                return [(access, memory_here, found[1], table_here)]
    elif kind is MemcpyParams or kind is MemsetParams:
        owner = kind
        if kind is MemcpyParams:
            dst, src, nbytes = work.dst, work.src, work.nbytes
            if type(dst) is DevicePtr and type(src) is not DevicePtr:
                ptr, write = dst, True  # to the device
            elif type(src) is DevicePtr and type(dst) is not DevicePtr:
                ptr, write = src, False  # from the device
            else:
                ptr = None
        else:
            ptr, write = work.dst, True
            nbytes = work.width * work.element_size if work.height == 1 else 0
        if ptr is not None and nbytes and ptr.device == here:
            key = (id(kind), ptr.address, nbytes, write)
            known = memo.get(key)
            if known is not None and known[0] is owner:
                return [(known[1], memory_here, known[2], table_here)]
            accesses = footprint(work, device)
            if len(accesses) == 1 and accesses[0].start == ptr.address:
                found = ALLOCATIONS.lookup_in(here, memory_here, ptr.address)
                if found is None:
                    return []
                if len(memo) >= MAX_PENDING:
                    memo.clear()
                memo[key] = (owner, accesses[0], found[1])
                return [(accesses[0], memory_here, found[1], table_here)]
    out: list[tuple[Access, DeviceMemory, int, Any]] = []
    for access in footprint(work, device):
        if access.device == here:
            found = ALLOCATIONS.lookup_in(here, memory_here, access.start)
            if found is not None:
                out.append((access, memory_here, found[1], table_here))
        else:
            found = ALLOCATIONS.lookup(access.device, access.start)
            if found is not None:
                out.append((access, found[0], found[1], None))
    return out


def race_site(op: OpRecord, access: Access, lo: int = 0, hi: int = 0) -> RaceSite:
    label = f"op #{op.number} {op.label}"
    if op.graph is not None:
        part = Access(access.device, lo, hi, access.write) if lo < hi else access
        nodes = op.graph.nodes_touching(part)
        if nodes:
            more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
            label += f" ({', '.join(nodes[:3])}{more})"
    return RaceSite(
        label,
        op.lane.name,
        site_text(op.site),
        access.start,
        access.end,
        access.precision,
        access.write,
    )


# label by kernel, copy kind or params type (an enum's .name alone costs half a microsecond);
# the checker's one-pass plan reads it directly
WORK_LABELS: dict[Any, str] = {}


def work_label(work: Any) -> str:
    kind = type(work)
    if kind is StreamMemOp:  # not kept by type: the label names the operation and its size
        return f"{'wait' if work.flag is not None else 'write'}_value_{work.bits}"
    key = work.kernel if kind is KernelParams else work.kind if kind is MemcpyParams else kind
    label = WORK_LABELS.get(key)
    if label is None:
        if isinstance(work, KernelParams):
            label = f"Kernel {work.kernel.name!r}"
        elif isinstance(work, MemcpyParams):
            label = f"Memcpy {work.kind.name}"
        elif isinstance(work, FreeOp):
            label = "free_async"
        elif isinstance(work, HostParams):
            label = "host function"
        else:
            label = kind.__name__.replace("Params", "")
        specific = isinstance(work, KernelParams | MemcpyParams)  # a subclass: not by type
        if kind in (KernelParams, MemcpyParams) or not specific:
            if len(WORK_LABELS) >= MAX_PENDING:
                WORK_LABELS.clear()
            WORK_LABELS[key] = label
    return label
