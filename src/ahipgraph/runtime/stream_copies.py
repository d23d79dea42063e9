"""Pitched and symbol copies on a stream (``hipMemcpy2DAsync``, ``hipMemcpy3DAsync``,
``hipMemcpyToSymbolAsync``, ``hipMemcpyFromSymbolAsync``), a mixin of ``Stream``.

The parameter builders here are shared with graph nodes and executable setters, so a bad
argument gets the same error everywhere. A symbol copy is a linear copy to or from the symbol's
storage on the device that runs it: it becomes a plain :class:`MemcpyParams` (HIP's symbol
nodes report ``Memcpy`` too). While the stream captures, every copy here becomes a memcpy
node.

Symbol check order (HIP's): the symbol (``InvalidSymbol``), then ``offset + nbytes`` inside it
(``InvalidValue``), then the copy itself (null endpoint, direction, range).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import InvalidMemcpyDirection, InvalidValue
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..device.symbols import SymbolLike, check_symbol_range, lookup_symbol
from ..device.table import check_range, configured
from .completion import Completion
from .device import Device
from .enqueue import enqueue_pair
from .params import (
    Endpoint,
    MemcpyParams,
    _check_endpoint,
    _host_array,
    _infer_kind,
    check_kind,
    memcpy_kind,
)
from .pitched import PitchedCopyParams, PitchedPtr

if TYPE_CHECKING:
    from .stream import Stream

__all__ = [
    "StreamCopyMixin",
    "empty_size",
    "from_symbol_params",
    "peer_params",
    "pitched_2d_params",
    "to_symbol_params",
]

_TO_SYMBOL = (CopyKind.HostToDevice, CopyKind.DeviceToDevice, CopyKind.Default)
_FROM_SYMBOL = (CopyKind.DeviceToHost, CopyKind.DeviceToDevice, CopyKind.Default)


def _symbol_kind(kind: CopyKind | int | None, allowed: tuple[CopyKind, ...], what: str) -> None:
    if kind is None:
        return
    given = memcpy_kind(kind)
    if given not in allowed:
        raise InvalidMemcpyDirection(f"a copy {what} a symbol cannot be {given.name}")


def _symbol_nbytes(nbytes: int | None, host: Endpoint, room: int) -> int:
    if nbytes is not None:
        return nbytes
    if isinstance(host, np.ndarray):
        return int(host.nbytes)
    raise InvalidValue("nbytes is required unless the other endpoint is a host array")


def _check_other_end(end: Endpoint, role: str, nbytes: int, kind: Any, device: Device) -> None:
    """Every check of the copy that does not need the symbol's storage, so that a failed call
    never loads a symbol on a device (loading is the one change a symbol copy makes)."""
    _check_endpoint(end, role)
    placeholder = DevicePtr(device.ordinal, 1)  # kind inference looks at types only
    pair = (placeholder, end) if role == "src" else (end, placeholder)
    check_kind(kind, _infer_kind(*pair))
    if isinstance(end, DevicePtr):
        if nbytes:  # 0 bytes touch nothing: not looked at, as a stream copy's (see below)
            check_range(end, nbytes)
    else:
        _host_array(end, role, writable=role == "dst")
        if nbytes > end.nbytes:
            raise InvalidValue(f"{nbytes} bytes exceed the {end.nbytes}-byte {role} array")


def to_symbol_params(
    symbol: Any,
    src: Endpoint,
    nbytes: int | None = None,
    offset: int = 0,
    kind: CopyKind | int | None = None,
    *,
    device: Device,
) -> MemcpyParams:
    """A copy of ``nbytes`` from ``src`` into ``symbol`` at ``offset``, on ``device``."""
    sym = lookup_symbol(symbol)
    count = _symbol_nbytes(nbytes, src, sym._nbytes)
    count, offset = check_symbol_range(sym, count, offset)
    _symbol_kind(kind, _TO_SYMBOL, "to")
    _check_other_end(src, "src", count, kind, device)
    # 0 bytes at the symbol's end (an offset of its size) are a copy of nothing, as
    # ``hipMemcpyToSymbol`` returns success for them after its range check: the pointers are
    # not looked at, as for ``memcpy`` (a graph node refuses a count of 0 on its own).
    return MemcpyParams.make(sym.address(device) + offset, src, count, kind, empty_unchecked=True)


def from_symbol_params(
    dst: Endpoint,
    symbol: Any,
    nbytes: int | None = None,
    offset: int = 0,
    kind: CopyKind | int | None = None,
    *,
    device: Device,
) -> MemcpyParams:
    """A copy of ``nbytes`` from ``symbol`` at ``offset`` into ``dst``, on ``device``."""
    sym = lookup_symbol(symbol)
    count = _symbol_nbytes(nbytes, dst, sym._nbytes)
    count, offset = check_symbol_range(sym, count, offset)
    _symbol_kind(kind, _FROM_SYMBOL, "from")
    _check_other_end(dst, "dst", count, kind, device)
    # 0 bytes: see to_symbol_params.
    return MemcpyParams.make(dst, sym.address(device) + offset, count, kind, empty_unchecked=True)


def pitched_2d_params(
    dst: Endpoint,
    dst_pitch: int,
    src: Endpoint,
    src_pitch: int,
    width: int,
    height: int,
    kind: CopyKind | int | None = None,
    *,
    device: Device,
) -> PitchedCopyParams:
    """``hipMemcpy2D``'s arguments as a one-slice pitched copy."""
    return PitchedCopyParams.make_pitched(
        PitchedPtr(dst, dst_pitch), PitchedPtr(src, src_pitch), (width, height, 1),
        kind=kind, device=device,
    )  # fmt: skip


def peer_params(
    dst: DevicePtr, dst_device: Any, src: DevicePtr, src_device: Any, nbytes: int
) -> MemcpyParams:
    """``hipMemcpyPeer``'s arguments: each pointer must belong to the device named with it."""
    for ptr, device, role in ((dst, dst_device, "dst"), (src, src_device, "src")):
        ordinal = configured(device, f"{role}_device").ordinal
        _check_endpoint(ptr, role)
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"{role} of a peer copy must be a DevicePtr, got {ptr!r}")
        if ptr and ptr.device != ordinal:
            raise InvalidValue(f"{role} {ptr!r} is not on device {ordinal}")
    if nbytes is None:
        raise InvalidValue("nbytes is required for a peer copy")
    # hipMemcpyPeer copies as hipMemcpy does: 0 bytes return before the pointers are looked at.
    return MemcpyParams.make(dst, src, nbytes, CopyKind.DeviceToDevice, empty_unchecked=True)


def empty_size(size: object) -> bool:
    """Whether a copy or fill's size argument is the int 0: such a call adds no packet (it
    enqueues nothing once its checks pass; see ``Stream._nothing_enqueued``), so it needs no
    room in a full ring and never waits for it. Only an int is looked at: a size of another
    type is converted by the call's checks, which run user code (an ``__index__``), so such a
    call waits for room as any other, and its body checks it then."""
    return type(size) is int and size == 0


def _extent_empty(extent: object) -> bool:
    return type(extent) is tuple and any(empty_size(side) for side in extent)


class StreamCopyMixin:
    """``memcpy_2d``, ``memcpy_3d``, ``memcpy_to_symbol`` and ``memcpy_from_symbol``."""

    __slots__ = ()

    def _enqueue_copy(self, build: Any) -> Completion:
        stream: Stream = self  # type: ignore[assignment]
        stream._check_open()
        part = stream._capture  # read once: another thread may end the capture meanwhile
        if part is not None:
            return part.add("Memcpy", build)
        stream._check_takes_work()
        params = build()
        if not params.nbytes:  # an empty region: nothing to enqueue (see _nothing_enqueued)
            return stream._nothing_enqueued()
        # Through the observer, as every eager op: the race checker sees the copy's rows.
        return stream._observed(params, params.op(stream._device))

    def _memcpy_2d(
        self,
        dst: Endpoint,
        dst_pitch: int,
        src: Endpoint,
        src_pitch: int,
        width: int,
        height: int,
        kind: CopyKind | int | None = None,
    ) -> Completion:
        """Copy ``height`` rows of ``width`` bytes, rows ``*_pitch`` bytes apart
        (``hipMemcpy2DAsync``).

        Raises:
            ContextIsDestroyed: the stream was destroyed. InvalidValue: a null endpoint, a
                pitch above the device's ``max_pitch``, a region out of bounds.
            InvalidPitchValue: a pitch below ``width``. InvalidMemcpyDirection: a bad kind.
        """
        return self._enqueue_copy(
            lambda: self._memcpy_2d_params(dst, dst_pitch, src, src_pitch, width, height, kind)
        )

    def _memcpy_2d_params(
        self,
        dst: Endpoint,
        dst_pitch: int,
        src: Endpoint,
        src_pitch: int,
        width: int,
        height: int,
        kind: CopyKind | int | None = None,
    ) -> Any:
        """``memcpy_2d``'s checks and parameters (for a call that must wait for room)."""
        device = self._stream_device()
        return pitched_2d_params(dst, dst_pitch, src, src_pitch, width, height, kind, device=device)

    def _memcpy_2d_packetless(
        self,
        dst: Endpoint,
        dst_pitch: int,
        src: Endpoint,
        src_pitch: int,
        width: int,
        height: int,
        kind: CopyKind | int | None = None,
    ) -> bool:
        """Whether ``memcpy_2d`` adds no packet, by its region alone (see :func:`empty_size`)."""
        return empty_size(width) or empty_size(height)

    memcpy_2d, memcpy_2d_nowait = enqueue_pair(
        _memcpy_2d, check=_memcpy_2d_params, packetless=_memcpy_2d_packetless, owner="Stream"
    )

    def _memcpy_3d(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: tuple[int, int, int],
        *,
        dst_pos: tuple[int, int, int] = (0, 0, 0),
        src_pos: tuple[int, int, int] = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> Completion:
        """Copy a ``(width bytes, height rows, depth slices)`` region (``hipMemcpy3DAsync``).

        Raises: as :meth:`memcpy_2d`, and InvalidValue for a slice height below the height.
        """
        return self._enqueue_copy(
            lambda: self._memcpy_3d_params(
                dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind
            )
        )

    def _memcpy_3d_params(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: tuple[int, int, int],
        *,
        dst_pos: tuple[int, int, int] = (0, 0, 0),
        src_pos: tuple[int, int, int] = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> PitchedCopyParams:
        """``memcpy_3d``'s checks and parameters (for a call that must wait for room)."""
        return PitchedCopyParams.make_pitched(
            dst,
            src,
            extent,
            dst_pos=dst_pos,
            src_pos=src_pos,
            kind=kind,
            device=self._stream_device(),
        )

    def _memcpy_3d_packetless(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: tuple[int, int, int],
        *,
        dst_pos: tuple[int, int, int] = (0, 0, 0),
        src_pos: tuple[int, int, int] = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> bool:
        """Whether ``memcpy_3d`` adds no packet, by its extent alone (see :func:`empty_size`)."""
        return _extent_empty(extent)

    memcpy_3d, memcpy_3d_nowait = enqueue_pair(
        _memcpy_3d, check=_memcpy_3d_params, packetless=_memcpy_3d_packetless, owner="Stream"
    )

    def _memcpy_to_symbol(
        self,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> Completion:
        """Copy into a device symbol on this stream's device (``hipMemcpyToSymbolAsync``).

        Raises:
            InvalidSymbol: ``symbol`` is not a declared symbol (or its name).
            InvalidValue: ``offset + nbytes`` past the symbol, a null ``src``.
            InvalidMemcpyDirection: a kind other than HostToDevice, DeviceToDevice or Default,
                or one that contradicts ``src``.
        """
        device = self._stream_device()
        return self._enqueue_copy(
            lambda: to_symbol_params(symbol, src, nbytes, offset, kind, device=device)
        )

    def _to_symbol_params(
        self,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> Any:
        """``memcpy_to_symbol``'s checks and parameters (for a call that must wait for room)."""
        return to_symbol_params(symbol, src, nbytes, offset, kind, device=self._stream_device())

    def _to_symbol_packetless(
        self,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> bool:
        """Whether ``memcpy_to_symbol`` adds no packet, by its size alone (see
        :func:`empty_size`)."""
        return empty_size(nbytes)

    memcpy_to_symbol, memcpy_to_symbol_nowait = enqueue_pair(
        _memcpy_to_symbol,
        check=_to_symbol_params,
        packetless=_to_symbol_packetless,
        owner="Stream",
    )

    def _memcpy_from_symbol(
        self,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> Completion:
        """Copy out of a device symbol on this stream's device (``hipMemcpyFromSymbolAsync``).

        Raises: as :meth:`memcpy_to_symbol` (DeviceToHost instead of HostToDevice).
        """
        device = self._stream_device()
        return self._enqueue_copy(
            lambda: from_symbol_params(dst, symbol, nbytes, offset, kind, device=device)
        )

    def _from_symbol_params(
        self,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> Any:
        """``memcpy_from_symbol``'s checks and parameters (for a call that must wait for room)."""
        return from_symbol_params(dst, symbol, nbytes, offset, kind, device=self._stream_device())

    def _from_symbol_packetless(
        self,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> bool:
        """Whether ``memcpy_from_symbol`` adds no packet, by its size alone (see
        :func:`empty_size`)."""
        return empty_size(nbytes)

    memcpy_from_symbol, memcpy_from_symbol_nowait = enqueue_pair(
        _memcpy_from_symbol,
        check=_from_symbol_params,
        packetless=_from_symbol_packetless,
        owner="Stream",
    )

    def _memcpy_peer(
        self,
        dst: DevicePtr,
        dst_device: Device | int,
        src: DevicePtr,
        src_device: Device | int,
        nbytes: int,
    ) -> Completion:
        """Copy ``nbytes`` between two devices (``hipMemcpyPeerAsync``); no peer access is
        needed, and the copy costs a peer transfer when the devices differ.

        Raises:
            InvalidDevice: ``dst_device`` or ``src_device`` is not a device.
            InvalidValue: a pointer that does not belong to its device, null, or out of range.
        """
        return self._enqueue_copy(lambda: peer_params(dst, dst_device, src, src_device, nbytes))

    def _peer_params(
        self,
        dst: DevicePtr,
        dst_device: Device | int,
        src: DevicePtr,
        src_device: Device | int,
        nbytes: int,
    ) -> Any:
        """``memcpy_peer``'s checks for a call that must wait for room."""
        return peer_params(dst, dst_device, src, src_device, nbytes)

    def _peer_packetless(
        self,
        dst: DevicePtr,
        dst_device: Device | int,
        src: DevicePtr,
        src_device: Device | int,
        nbytes: int,
    ) -> bool:
        """Whether ``memcpy_peer`` adds no packet, by its size alone (see :func:`empty_size`)."""
        return empty_size(nbytes)

    memcpy_peer, memcpy_peer_nowait = enqueue_pair(
        _memcpy_peer, check=_peer_params, packetless=_peer_packetless, owner="Stream"
    )

    def _stream_device(self) -> Device:
        stream: Stream = self  # type: ignore[assignment]
        return stream._device
