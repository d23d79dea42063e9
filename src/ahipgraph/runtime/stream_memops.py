"""Stream memory operations: ``hipStreamWaitValue32/64`` and ``hipStreamWriteValue32/64``.

A *wait* holds its stream until a 32- or 64-bit word of device memory meets a condition; a
*write* stores a word when the stream reaches it. The conditions are HIP's flags, with the
mask applied to the word in memory before it is compared:

=========  =====================================================
``GEQ``    ``(*ptr & mask) >= value``
``EQ``     ``(*ptr & mask) == value``
``AND``    ``((*ptr & mask) & value) != 0``
``NOR``    ``~((*ptr & mask) | (value & mask)) != 0`` (within the word's bits)
=========  =====================================================

A wait whose condition holds when the stream reaches it costs ``stream_memop_ns``; otherwise it
polls the word once per event-loop turn, as the GPU's command processor polls memory, so any
writer — another stream, a kernel, a host through ``device.view`` — releases it. A wait that is
never satisfied holds its stream forever (the user's bug, as in HIP); freeing the word under
it fails the wait with ``InvalidDevicePointer``.

On the simulated timeline a wait ends no earlier than the latest ``write_value_*`` of its word
(the device may have run that write, at a later simulated time, before the wait looked): the
work after the wait is ordered after the write, as on a GPU. Writes of other kinds carry no
time, so a wait they release ends as it finds them.

Capture: HIP's graphs have no node kind for these operations. A captured wait or write becomes
a **host node** whose function is the operation (a :class:`StreamMemOp`, whose ``repr`` names
it), which runs the same code when the graph replays: a write stores the word, a wait polls it.
This keeps the graph's node kinds HIP's own.

The race checker sees them: an eager one is enqueued through the stream's observed path, and a
write that stores its word or a wait that sees its condition hold tells the runtime observer
(``memop_done``), so a wait is ordered after the write that released it.

Check order: a null pointer, then the stream (HIP's: a destroyed stream with a null pointer is
``InvalidValue``), then the flags, then the value and mask, then the word itself (alignment to
its size, inside live memory).
"""

from __future__ import annotations

import asyncio
import enum
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import InvalidValue
from ..core.ints import as_int
from ..device.ops import StreamMemOpOp
from ..device.pointer import DevicePtr, require_int_address
from ..device.table import check_range, resolve_pointer
from . import observe
from .completion import Completion
from .enqueue import enqueue_pair
from .params import HostParams

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["StreamMemOp", "StreamMemOpsMixin", "StreamWaitFlag", "condition_met"]


class StreamWaitFlag(enum.IntEnum):
    """``hipStreamWaitValue*`` comparison flags, with HIP's numbers."""

    GEQ = 0  # hipStreamWaitValueGte
    EQ = 1  # hipStreamWaitValueEq
    AND = 2  # hipStreamWaitValueAnd
    NOR = 3  # hipStreamWaitValueNor


_DTYPES: dict[int, np.dtype[Any]] = {32: np.dtype(np.uint32), 64: np.dtype(np.uint64)}


def condition_met(word: int, value: int, flag: StreamWaitFlag, mask: int, bits: int) -> bool:
    """Whether a wait with ``flag``, ``value`` and ``mask`` is satisfied by ``word``."""
    masked = word & mask
    if flag is StreamWaitFlag.GEQ:
        return masked >= value
    if flag is StreamWaitFlag.EQ:
        return masked == value
    if flag is StreamWaitFlag.AND:
        return (masked & value) != 0
    full = (1 << bits) - 1
    return (~(masked | (value & mask)) & full) != 0


# The simulated time of the latest ``write_value_*`` of each word, by the buffer of the word's
# allocation (its id, with a weak reference that drops the entry with the buffer: no numpy
# array is hashable) and the word's offset in it.
_WRITTEN: dict[int, tuple[weakref.ref[Any], dict[int, int]]] = {}


def _forget_buffer(ref: weakref.ref[Any], key: int) -> None:
    entry = _WRITTEN.get(key)
    if entry is not None and entry[0] is ref:
        del _WRITTEN[key]


def _stamp_write(buffer: Any, offset: int, time: int) -> None:
    key = id(buffer)
    entry = _WRITTEN.get(key)
    if entry is None or entry[0]() is not buffer:
        entry = (weakref.ref(buffer, lambda ref: _forget_buffer(ref, key)), {})
        _WRITTEN[key] = entry
    entry[1][offset] = time


def _write_time(buffer: Any, offset: int) -> int | None:
    entry = _WRITTEN.get(id(buffer))
    if entry is None or entry[0]() is not buffer:
        return None
    return entry[1].get(offset)


def _word(value: Any, bits: int, name: str) -> int:
    word = as_int(value, name)
    if not 0 <= word < 1 << bits:
        raise ValueError(f"{name} {word} does not fit in an unsigned {bits}-bit word")
    return word


@dataclass(frozen=True, slots=True)
class StreamMemOp:
    """One wait or write on a device word; calling it does the operation (see module notes).

    Returns None when done, or a coroutine that finishes when a wait is satisfied.
    """

    ptr: DevicePtr
    value: int
    bits: int
    flag: StreamWaitFlag | None  # None: a write
    mask: int

    @classmethod
    def make(
        cls,
        ptr: DevicePtr,
        value: int,
        bits: int,
        *,
        flag: StreamWaitFlag | int | None = None,
        mask: int | None = None,
        write_flags: int = 0,
    ) -> StreamMemOp:
        """Validate a wait (``flag`` given) or a write (``flag`` None).

        Raises:
            InvalidValue: a null pointer, an unknown flag (or write flags other than 0), a
                word not aligned to its size or outside an allocation.
            InvalidDevicePointer: the word is not in live memory, or the pointer's address is
                not an int (a hand-made pointer).
            TypeError / ValueError: a value or mask that is not an unsigned word.
        """
        _check_not_null(ptr)
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {ptr!r}")
        checked_flag: StreamWaitFlag | None = None
        if flag is not None:
            number = as_int(flag, "flags", expected="a StreamWaitFlag")
            try:
                checked_flag = StreamWaitFlag(number)
            except ValueError:
                raise InvalidValue(f"{flag!r} is not a stream wait flag") from None
        else:
            write_flags = as_int(write_flags, "flags")
            if write_flags != 0:
                raise InvalidValue(f"stream write flags must be 0, got {write_flags}")
        word = _word(value, bits, "value")
        full = (1 << bits) - 1
        checked_mask = full if mask is None else _word(mask, bits, "mask")
        size = bits // 8
        require_int_address(ptr)  # a hand-made pointer's: ``%`` would give Python's error
        if ptr.address % size:
            raise InvalidValue(f"{ptr!r} is not aligned to its {size}-byte word")
        check_range(ptr, size)
        return cls(ptr, word, bits, checked_flag, checked_mask)

    def _read(self) -> int:
        buffer, offset = resolve_pointer(self.ptr, self.bits // 8)
        return int(buffer[offset : offset + self.bits // 8].view(_DTYPES[self.bits])[0])

    def satisfied(self) -> bool:
        assert self.flag is not None
        return condition_met(self._read(), self.value, self.flag, self.mask, self.bits)

    def __call__(self, program: Any = None) -> Coroutine[Any, Any, None] | None:
        """Do the operation; ``program`` is the packet running it (None for a captured one,
        a host node's, which keeps no time): a write stamps the word with the program's
        time, and a satisfied wait moves the program's time to that stamp."""
        if self.flag is None:
            buffer, offset = resolve_pointer(self.ptr, self.bits // 8)
            buffer[offset : offset + self.bits // 8].view(_DTYPES[self.bits])[0] = self.value
            if program is not None:
                _stamp_write(buffer, offset, program.time)
            if observe.observer is not None:  # the race checker: which write a wait reads
                observe.observer.memop_done(self)
            return None
        if self.satisfied():
            self._after_write(program)
            return None
        return self._poll(program)

    async def _poll(self, program: Any) -> None:
        # Polling is the model: a kernel or a host view writes memory without telling anyone,
        # as on a GPU, so no event could wake this. One look per loop turn.
        while not self.satisfied():  # noqa: ASYNC110
            await asyncio.sleep(0)
        self._after_write(program)

    def _after_write(self, program: Any) -> None:
        """A satisfied wait ends no earlier than the latest ``write_value`` of its word; the
        race checker learns which write released it."""
        if observe.observer is not None:
            observe.observer.memop_done(self)
        if program is None:
            return
        buffer, offset = resolve_pointer(self.ptr, self.bits // 8)
        written = _write_time(buffer, offset)
        if written is not None and written > program.time:
            program.time = written

    def __repr__(self) -> str:
        if self.flag is None:
            return f"StreamMemOp(write{self.bits} {self.ptr!r} = {self.value:#x})"
        return (
            f"StreamMemOp(wait{self.bits} {self.ptr!r} {self.flag.name} {self.value:#x} "
            f"mask={self.mask:#x})"
        )


def _check_not_null(ptr: object) -> None:
    if ptr is None or (isinstance(ptr, DevicePtr) and not ptr):
        raise InvalidValue("stream memory operation on a null pointer")


def _not_none(flags: Any, mask: Any) -> None:
    """A wait's flags and mask are words: None is Python misuse (and None flags would make
    the operation a write)."""
    if flags is None or mask is None:
        raise TypeError(f"a wait needs int flags and mask, got flags={flags!r}, mask={mask!r}")


class StreamMemOpsMixin:
    """``wait_value_32/64`` and ``write_value_32/64`` of :class:`~ahipgraph.Stream`."""

    __slots__ = ()

    def _memop(self, ptr: object, memop_factory: Any) -> Completion:
        stream: Stream = self  # type: ignore[assignment]
        # HIP's ``ihipStreamOperation`` refuses a null pointer before it looks at the stream:
        # on a destroyed stream it is InvalidValue, not ContextIsDestroyed.
        _check_not_null(ptr)
        stream._check_open()
        part = stream._capture  # read once: another thread may end the capture meanwhile
        if part is not None:
            return part.add("Host", lambda: HostParams.make(memop_factory(), ()))
        stream._check_takes_work()
        memop = memop_factory()
        cost = stream._device._properties.cost.stream_memop_ns
        return stream._observed(memop, StreamMemOpOp(memop, cost))

    def _wait_value_32(
        self,
        ptr: DevicePtr,
        value: int,
        flags: StreamWaitFlag | int = StreamWaitFlag.GEQ,
        mask: int = 0xFFFF_FFFF,
    ) -> Completion:
        """Hold later work until the 32-bit word at ``ptr`` meets ``flags``
        (``hipStreamWaitValue32``).

        Raises: see :meth:`StreamMemOp.make`; ContextIsDestroyed for a destroyed stream.
        """
        _not_none(flags, mask)
        return self._memop(ptr, lambda: StreamMemOp.make(ptr, value, 32, flag=flags, mask=mask))

    def _wait_32_op(
        self,
        ptr: DevicePtr,
        value: int,
        flags: StreamWaitFlag | int = StreamWaitFlag.GEQ,
        mask: int = 0xFFFF_FFFF,
    ) -> StreamMemOp:
        """``wait_value_32``'s checks and operation."""
        _not_none(flags, mask)
        return StreamMemOp.make(ptr, value, 32, flag=flags, mask=mask)

    wait_value_32, wait_value_32_nowait = enqueue_pair(
        _wait_value_32, check=_wait_32_op, owner="Stream"
    )

    def _wait_value_64(
        self,
        ptr: DevicePtr,
        value: int,
        flags: StreamWaitFlag | int = StreamWaitFlag.GEQ,
        mask: int = 0xFFFF_FFFF_FFFF_FFFF,
    ) -> Completion:
        """``hipStreamWaitValue64``: as :meth:`wait_value_32` on a 64-bit word."""
        _not_none(flags, mask)
        return self._memop(ptr, lambda: StreamMemOp.make(ptr, value, 64, flag=flags, mask=mask))

    def _wait_64_op(
        self,
        ptr: DevicePtr,
        value: int,
        flags: StreamWaitFlag | int = StreamWaitFlag.GEQ,
        mask: int = 0xFFFF_FFFF_FFFF_FFFF,
    ) -> StreamMemOp:
        """``wait_value_64``'s checks and operation."""
        _not_none(flags, mask)
        return StreamMemOp.make(ptr, value, 64, flag=flags, mask=mask)

    wait_value_64, wait_value_64_nowait = enqueue_pair(
        _wait_value_64, check=_wait_64_op, owner="Stream"
    )

    def _write_value_32(self, ptr: DevicePtr, value: int, flags: int = 0) -> Completion:
        """Store a 32-bit word at ``ptr`` when the stream gets there (``hipStreamWriteValue32``)."""
        return self._memop(ptr, lambda: StreamMemOp.make(ptr, value, 32, write_flags=flags))

    def _write_32_op(self, ptr: DevicePtr, value: int, flags: int = 0) -> StreamMemOp:
        """``write_value_32``'s checks and operation."""
        return StreamMemOp.make(ptr, value, 32, write_flags=flags)

    write_value_32, write_value_32_nowait = enqueue_pair(
        _write_value_32, check=_write_32_op, owner="Stream"
    )

    def _write_value_64(self, ptr: DevicePtr, value: int, flags: int = 0) -> Completion:
        """``hipStreamWriteValue64``: as :meth:`write_value_32` with a 64-bit word."""
        return self._memop(ptr, lambda: StreamMemOp.make(ptr, value, 64, write_flags=flags))

    def _write_64_op(self, ptr: DevicePtr, value: int, flags: int = 0) -> StreamMemOp:
        """``write_value_64``'s checks and operation."""
        return StreamMemOp.make(ptr, value, 64, write_flags=flags)

    write_value_64, write_value_64_nowait = enqueue_pair(
        _write_value_64, check=_write_64_op, owner="Stream"
    )
