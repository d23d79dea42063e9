"""The kernel-argument arena (HIP's ``GraphKernelArgManager``).

An executable packs every kernel node's arguments into device memory once, at instantiate, and a
replay dispatches straight from those bytes. The arena owns that memory:

* **Chunks** are device allocations, so they show in ``memory_info``. Allocation bumps through
  the newest chunk with alignment; a full chunk adds a new one of the same size.
* **Sizing.** Instantiate sizes the first chunk for every kernel node plus headroom for updates.
* **Reclaim.** An update that must not disturb launches in flight writes new arguments to a new
  slot; the superseded slot is freed once no launch uses it and is reused by later updates of
  the same size. HIP never frees kernarg space until the exec dies; here growth stays bounded.
* **Flush.** Host writes become visible to the device only after :meth:`flush` (the HDP flush
  on real hardware). In strict mode a dispatch that would read unflushed bytes fails.
* :meth:`close` returns every chunk to the device allocator at once.

Thread-safety: one short lock; slots are plain records. The lock is reentrant: a collection can
start at any allocation made under it (a new chunk, a slot record), and a finalizer it runs may
read :meth:`statistics` (through ``exec.statistics()``) on the thread that holds it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, overload

from ..core.errors import InvalidValue
from ..core.lifecycle import NoCopy
from ..device.table import live

if TYPE_CHECKING:
    from ..device.pointer import DevicePtr
    from ..runtime.device import Device

__all__ = [
    "ArenaStatistics",
    "ArgSlot",
    "ArgSpan",
    "KernelArgArena",
    "ARG_ALIGNMENT",
    "reserved_on",
    "HEADROOM_BYTES",
]

ARG_ALIGNMENT = 16
HEADROOM_BYTES = 128 * 1024  # HIP's kKernArgChunkSize


class _Tally:
    """The bytes every arena of one device reserves (see :func:`reserved_on`)."""

    __slots__ = ("bytes",)

    def __init__(self) -> None:
        self.bytes = 0


# Kept as chunks come and go, which is rare (an executable's first chunk, a full one, a close),
# so a trace's counter track, which reads it after every packet, pays O(1) rather than asking
# every live executable. A tally is found (or made) before the lock is taken: the sum under the
# lock makes only an int, which no collection starts from, so no finalizer's instantiate can
# nest inside it and lose an update.
_TALLIES: weakref.WeakKeyDictionary[Device, _Tally] = weakref.WeakKeyDictionary()
_TALLY_LOCK = threading.Lock()


def reserved_on(device: Device) -> int:
    """The bytes the kernel-argument arenas of ``device``'s live executables reserve."""
    tally = _TALLIES.get(device)
    return 0 if tally is None else tally.bytes


def _tally(device: Device, chunks: int, chunk_bytes: int) -> None:
    tally = _TALLIES.setdefault(device, _Tally())
    delta = chunks * chunk_bytes
    with _TALLY_LOCK:
        tally.bytes += delta


# Consecutive argument places in one chunk: (chunk, its buffer, offsets, sizes); see place_spans.
ArgSpan = tuple[int, memoryview, Sequence[int], Sequence[int]]


# Items that one ``bytes.join`` writes: the join keeps a buffer record (80 bytes) per item and
# builds its whole result before the copy, so a million items would take 100 MB of fresh memory
# on every instantiate; in runs of this many both stay small and are reused while still cached.
JOIN_RUN = 2048


def _write_evenly(
    buffer: memoryview, top: int, step: int, pad: bytes, datas: Sequence[bytes]
) -> None:
    """Write ``datas`` into ``buffer`` from ``top``, one every ``step`` bytes, ``pad`` (zeros)
    between them: what ``buffer[top:...] = pad.join(datas)`` writes, in runs of
    :data:`JOIN_RUN` items. Each run but the last ends with its last item's padding, so the
    next run starts on its own slot."""
    count = len(datas)
    last = count - JOIN_RUN
    for start in range(0, count, JOIN_RUN):
        run = [*datas[start : start + JOIN_RUN], b""] if start < last else datas[start:]
        payload = pad.join(run)
        at = top + start * step
        buffer[at : at + len(payload)] = payload


class _Repeated(Sequence[int]):
    """``count`` times ``value``, without a slot each: the sizes of a run of one kernel."""

    __slots__ = ("_count", "_value")

    def __init__(self, value: int, count: int) -> None:
        self._value, self._count = value, count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> int: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[int, ...]: ...

    def __getitem__(self, index: int | slice) -> int | tuple[int, ...]:
        if isinstance(index, slice):
            return (self._value,) * len(range(self._count)[index])
        range(self._count)[index]  # IndexError past the end, as a tuple's
        return self._value

    def __iter__(self) -> Iterator[int]:
        return repeat(self._value, self._count)

    def __repr__(self) -> str:
        return f"({self._value},) * {self._count}"


class ArgSlot:
    """A range of an arena chunk holding one kernel node's arguments."""

    __slots__ = ("buffer", "chunk", "offset", "size")

    def __init__(self, chunk: int, buffer: memoryview, offset: int, size: int) -> None:
        self.chunk = chunk
        # The chunk's bytes as a memoryview: the host writes through it and dispatches decode
        # from it (struct reads a memoryview several times faster than a numpy array).
        self.buffer = buffer
        self.offset = offset
        self.size = size

    def __repr__(self) -> str:
        return f"<ArgSlot chunk={self.chunk} offset={self.offset} size={self.size}>"


@dataclass(frozen=True, slots=True)
class ArenaStatistics:
    chunks: int
    chunk_bytes: int
    bytes_reserved: int
    live_slots: int
    free_slots: int
    allocations: int
    reuses: int
    unflushed: int


class KernelArgArena(NoCopy):
    """Bump-allocated, chunked kernel-argument memory of one executable on one device."""

    def __init__(self, device: Device, chunk_bytes: int, *, strict: bool = False) -> None:
        self._device = device
        self._chunk_bytes = max(ARG_ALIGNMENT, -(-chunk_bytes // ARG_ALIGNMENT) * ARG_ALIGNMENT)
        self._strict = strict
        self._lock = threading.RLock()  # reentrant: see the module notes
        self._chunks: list[tuple[DevicePtr, memoryview]] = []
        self._top = 0  # bump offset in the newest chunk
        self._free: dict[int, list[ArgSlot]] = {}  # reclaimed slots by size
        self._live = 0
        self._allocations = 0
        self._reuses = 0
        self._unflushed: set[tuple[int, int]] = set()  # (chunk, offset) written, not flushed
        self._closed = False
        # Bumped by every write: a dispatch op that kept its decoded arguments decodes again
        # once this count moves (see ahipgraph.device.ops.KernelOp.make).
        self._writes = 0

    # What the arena is and where it stands: read-only from outside. A user reaches the arena
    # (``graph_exec.arena``): ``writes`` set back to what it was before a
    # ``set_kernel_node_params`` made the next launch run the kernel with its old arguments
    # (the dispatch ops decode again only when the count moves); ``closed`` set to True made
    # ``close()`` a no-op, so destroying the executable leaked its argument chunks' device
    # memory. The executable and the dispatch ops read and write the private names.

    @property
    def device(self) -> Device:
        """The device whose memory holds the arguments."""
        return self._device

    @property
    def chunk_bytes(self) -> int:
        """The size of each chunk of argument memory."""
        return self._chunk_bytes

    @property
    def strict(self) -> bool:
        """Whether every kernel gets its own slot (no sharing of identical arguments)."""
        return self._strict

    @property
    def closed(self) -> bool:
        """True once the executable was destroyed and the arena gave its memory back."""
        return self._closed

    @property
    def writes(self) -> int:
        """Writes to argument memory so far."""
        return self._writes

    def _new_chunk(self) -> tuple[DevicePtr, memoryview]:
        # The runtime's own memory, as HIP's kernarg pool, not the user's hipMalloc: so the
        # capture rule for malloc()/free() does not apply (instantiating or destroying an
        # executable while another stream captures neither fails nor invalidates that capture).
        # Fault injection still sees it: it hooks the allocator itself.
        live(self._device)
        ptr = self._device.memory.malloc(self._chunk_bytes, runtime=True)  # no user may free it
        buffer, offset = self._device.memory.resolve(ptr, self._chunk_bytes)
        chunk = buffer[offset : offset + self._chunk_bytes]
        return ptr, memoryview(chunk)  # type: ignore[arg-type]

    def _open(self) -> None:
        """Make the first chunk, as the first allocation would (nothing if there is one).

        Raises:
            OutOfMemory: the device is full (nothing changed).
        """
        with self._lock:
            if not self._closed and not self._chunks:
                self._chunks.append(self._new_chunk())
                self._top = 0
                _tally(self._device, 1, self._chunk_bytes)

    def allocate(self, size: int) -> ArgSlot:
        """A slot of ``size`` bytes, aligned to ``ARG_ALIGNMENT``; reuses a reclaimed slot first.

        Raises:
            OutOfMemory: a new chunk was needed and the device is full.
            InvalidValue: ``size`` does not fit in a chunk, or the arena is closed.
        """
        # The bump case (no reclaimed slot of this size, room left in the newest chunk) is what
        # instantiate does once per kernel node: carve it here, without the planning of
        # allocate_all, which handles everything else.
        size = max(size, 1)
        with self._lock:
            top = self._top
            if (
                not self._closed
                and self._chunks
                and top + size <= self._chunk_bytes
                and not self._free.get(size)
            ):
                index = len(self._chunks) - 1
                slot = ArgSlot(index, self._chunks[index][1], top, size)
                self._top = -(-(top + size) // ARG_ALIGNMENT) * ARG_ALIGNMENT
                self._allocations += 1
                self._live += 1
                return slot
        return self.allocate_all([size])[0]

    def allocate_all(self, sizes: Sequence[int]) -> list[ArgSlot]:
        """One slot per size, all or none: an update takes every slot it needs before it
        writes any, so a failure half way leaves the arena (and the device) as it was.

        The new chunks the slots need are allocated from the device first; only when all of
        them exist are the slots carved, which cannot fail.

        Raises:
            OutOfMemory: new chunks were needed and the device is full (none is kept).
            InvalidValue: a size does not fit in a chunk, or the arena is closed.
        """
        sizes = [max(size, 1) for size in sizes]
        for size in sizes:
            if size > self._chunk_bytes:
                raise InvalidValue(
                    f"{size} bytes of kernel arguments exceed a {self._chunk_bytes}-byte chunk"
                )
        with self._lock:
            if self._closed:
                raise InvalidValue("the kernel-argument arena is closed")
            # Plan: which sizes reuse a reclaimed slot, where the others go, how many chunks.
            reused: dict[int, int] = {}
            top, have_chunk, new_chunks = self._top, bool(self._chunks), 0
            places: list[tuple[int, int] | None] = []
            for size in sizes:
                if len(self._free.get(size, ())) > reused.get(size, 0):
                    reused[size] = reused.get(size, 0) + 1
                    places.append(None)
                    continue
                if not have_chunk or top + size > self._chunk_bytes:
                    new_chunks, top, have_chunk = new_chunks + 1, 0, True
                places.append((new_chunks, top))
                top = -(-(top + size) // ARG_ALIGNMENT) * ARG_ALIGNMENT
            chunks: list[tuple[DevicePtr, memoryview]] = []
            try:
                for _ in range(new_chunks):
                    chunks.append(self._new_chunk())
            except BaseException:
                for ptr, _ in chunks:
                    self._device.memory.free(ptr, runtime=True)
                raise
            # Commit: nothing below can fail.
            base = len(self._chunks) - 1
            self._chunks.extend(chunks)
            if chunks:
                _tally(self._device, len(chunks), self._chunk_bytes)
            self._top = top
            slots: list[ArgSlot] = []
            for size, place in zip(sizes, places, strict=True):
                if place is None:
                    self._reuses += 1
                    slots.append(self._free[size].pop())
                else:
                    index = base + place[0]
                    slots.append(ArgSlot(index, self._chunks[index][1], place[1], size))
                    self._allocations += 1
                self._live += 1
            return slots

    def write(self, slot: ArgSlot, data: bytes) -> None:
        """Copy host bytes into a slot; they become visible to dispatches after :meth:`flush`."""
        if len(data) > slot.size:
            raise InvalidValue(f"{len(data)} bytes do not fit in {slot!r}")
        slot.buffer[slot.offset : slot.offset + len(data)] = data
        self._writes += 1
        if self._strict:
            with self._lock:
                self._unflushed.add((slot.chunk, slot.offset))

    def count_writes(self, count: int) -> None:
        """Count ``count`` rewrites made in place through the buffer of a span of slots.

        A whole-graph update rewrites a million slots by their spans (see
        :meth:`place_spans`), without an :class:`ArgSlot` each; what :meth:`write` counts
        for one slot it counts here for all of them, so every dispatch that kept decoded
        arguments decodes again. Not for a strict arena, whose writes are each remembered
        until flushed.
        """
        if self._strict:
            raise ValueError("a strict arena counts each write with its slot (see write)")
        self._writes += count

    def place(self, data: bytes, size: int) -> ArgSlot:
        """:meth:`allocate` a slot of ``size`` bytes and :meth:`write` ``data`` into it.

        What instantiate does once per kernel node: in the common case (room left in the
        newest chunk, no reclaimed slot of this size) both happen in one critical section.

        Raises:
            InvalidValue: ``data`` is longer than ``size``, or as :meth:`allocate`.
            OutOfMemory: as :meth:`allocate`.
        """
        if len(data) > max(size, 1):
            raise InvalidValue(f"{len(data)} bytes do not fit in a {size}-byte slot")
        size = max(size, 1)
        with self._lock:
            top = self._top
            if (
                not self._strict
                and not self._closed
                and self._chunks
                and top + size <= self._chunk_bytes
                and not self._free.get(size)
            ):
                index = len(self._chunks) - 1
                buffer = self._chunks[index][1]
                slot = ArgSlot(index, buffer, top, size)
                self._top = -(-(top + size) // ARG_ALIGNMENT) * ARG_ALIGNMENT
                self._allocations += 1
                self._live += 1
                buffer[top : top + len(data)] = data
                self._writes += 1
                return slot
        slot = self.allocate(size)
        self.write(slot, data)
        return slot

    def place_many(self, datas: Sequence[bytes], sizes: Sequence[int]) -> list[ArgSlot]:
        """:meth:`place` each ``datas[i]`` in a slot of ``sizes[i]`` bytes, in order.

        What instantiate does for a run of kernel nodes: the common case (room left in the
        newest chunk, no reclaimed slot of the size) bumps through the chunk under one
        critical section for the whole run; any other item takes :meth:`place`, which also
        raises its errors. The slots, offsets and counts are those of ``place`` called in turn.
        """
        return [
            ArgSlot(chunk, buffer, offset, size)
            for chunk, buffer, offsets, sizes_of in self.place_spans(datas, sizes)
            for offset, size in zip(offsets, sizes_of, strict=True)
        ]

    def place_spans(self, datas: Sequence[bytes], sizes: Sequence[int]) -> list[ArgSpan]:
        """:meth:`place_many` without an :class:`ArgSlot` per item: the same places, bytes and
        counts, given as spans of consecutive items that share a chunk.

        Instantiate keeps a million nodes' places this way: an ArgSlot is an object the
        garbage collector walks, where a span's offsets are one ``range`` (a run of one kernel)
        or a list of ints the dispatch ops share. Each span is ``(chunk, buffer, offsets,
        sizes)``; the slots are ``ArgSlot(chunk, buffer, offset, size)`` for each offset and
        size in turn, and :meth:`place_many` is exactly that.

        Raises:
            As :meth:`place`, for the first item that fails; the items before it stay placed.
        """
        count = len(datas)
        if count > 1:
            if not self._chunks and len(datas[0]) <= max(sizes[0], 1) <= self._chunk_bytes:
                # The first item would make the first chunk (it fits one): make it first, so
                # the run is placed as one span, the first item at offset 0 as before.
                self._open()
            if not self._chunks:  # the first item makes the first chunk, the rest follow it
                head = self.place(datas[0], sizes[0])
                return [
                    (head.chunk, head.buffer, (head.offset,), (head.size,)),
                    *self.place_spans(datas[1:], sizes[1:]),
                ]
            uniform = self._place_uniform(datas, sizes)
            if uniform is not None:
                return [uniform]
        out: list[ArgSpan] = []
        i = 0
        while i < count:
            with self._lock:
                if not self._strict and not self._closed and self._chunks:
                    index = len(self._chunks) - 1
                    buffer = self._chunks[index][1]
                    limit = self._chunk_bytes
                    free = self._free
                    top = self._top
                    first = i
                    offsets: list[int] = []
                    placed_sizes: list[int] = []
                    while i < count:
                        data = datas[i]
                        size = sizes[i] or 1  # max(size, 1): sizes are never negative
                        if len(data) > size or top + size > limit or (free and free.get(size)):
                            break
                        offsets.append(top)
                        placed_sizes.append(size)
                        buffer[top : top + len(data)] = data
                        top = -(-(top + size) // ARG_ALIGNMENT) * ARG_ALIGNMENT
                        i += 1
                    placed = i - first
                    if placed:
                        out.append((index, buffer, offsets, placed_sizes))
                    self._top = top
                    self._allocations += placed
                    self._live += placed
                    self._writes += placed
            if i < count:  # the general case for this one item, then the fast path again
                slot = self.place(datas[i], sizes[i])
                out.append((slot.chunk, slot.buffer, (slot.offset,), (slot.size,)))
                i += 1
        return out

    def _place_uniform(self, datas: Sequence[bytes], sizes: Sequence[int]) -> ArgSpan | None:
        """:meth:`place_spans` for a run of one size and one data length (one kernel, usually)
        that fits in the newest chunk; None when the run is not that (nothing changed then).

        The slots are evenly spaced from the bump offset, so their offsets are a ``range`` and
        the data goes in as one write; what lies between two slots' data is their alignment
        padding, which nothing reads (it is written as zeros).
        """
        # One size and one length: a count each (equal ints, usually the same object, are
        # compared in C without a set built of every item).
        count = len(datas)
        if sizes.count(sizes[0]) != count:
            return None
        lengths = list(map(len, datas))
        length = lengths[0]
        if lengths.count(length) != count:
            return None
        size = sizes[0] or 1  # max(size, 1): sizes are never negative
        if length > size:
            return None  # place raises the error
        step = -(-size // ARG_ALIGNMENT) * ARG_ALIGNMENT  # the bump offset is always aligned
        with self._lock:
            top = self._top
            if (
                self._strict
                or self._closed
                or not self._chunks
                or top + step * (count - 1) + size > self._chunk_bytes
                or self._free.get(size)
            ):
                return None
            index = len(self._chunks) - 1
            buffer = self._chunks[index][1]
            _write_evenly(buffer, top, step, bytes(step - length), datas)
            self._top = top + count * step
            self._allocations += count
            self._live += count
            self._writes += count
        return (index, buffer, range(top, top + count * step, step), _Repeated(size, count))

    def flush(self) -> None:
        """Make every write so far visible to the device (the HDP flush)."""
        if self._unflushed:
            with self._lock:
                self._unflushed.clear()

    def is_flushed(self, slot: ArgSlot) -> bool:
        return (slot.chunk, slot.offset) not in self._unflushed

    def free(self, slot: ArgSlot) -> None:
        """Give a slot back for reuse (no launch may still read it)."""
        with self._lock:
            if self._closed:
                return
            self._free.setdefault(slot.size, []).append(slot)
            self._live -= 1
            self._unflushed.discard((slot.chunk, slot.offset))

    def close(self) -> None:
        """Return every chunk to the device allocator. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            chunks, self._chunks = self._chunks, []
            self._free.clear()
            self._unflushed.clear()
            self._live = 0
            _tally(self._device, -len(chunks), self._chunk_bytes)
        for ptr, _ in chunks:
            self._device.memory.free(ptr, runtime=True)

    @property
    def bytes_reserved(self) -> int:
        """Device memory the chunks take, in O(1) and without the lock (one ``len``): a trace
        samples it after every packet."""
        return len(self._chunks) * self._chunk_bytes

    def statistics(self) -> ArenaStatistics:
        with self._lock:
            return ArenaStatistics(
                chunks=len(self._chunks),
                chunk_bytes=self._chunk_bytes,
                bytes_reserved=self.bytes_reserved,
                live_slots=self._live,
                free_slots=sum(len(v) for v in self._free.values()),
                allocations=self._allocations,
                reuses=self._reuses,
                unflushed=len(self._unflushed),
            )

    def __repr__(self) -> str:
        return (
            f"<KernelArgArena device={self._device.ordinal} chunks={len(self._chunks)} "
            f"live={self._live} strict={self._strict}>"
        )
