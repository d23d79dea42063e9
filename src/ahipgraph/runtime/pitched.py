"""Pitched (2D and 3D) copies: ``hipMemcpy2D``/``hipMemcpy3D`` and memcpy nodes built from them.

A pitched copy moves ``depth`` slices of ``height`` rows of ``width`` bytes. On each side a row
starts ``pitch`` bytes after the previous one and a slice ``slice_height`` rows after the
previous one; ``pos`` (x in bytes, y in rows, z in slices) says where the region starts. Host
endpoints are C-contiguous numpy arrays seen as bytes, device endpoints are pointers.

:func:`check_pitched_copy` is the one place HIP's checks live, a pure function shared by
streams, graph nodes and executable setters, in HIP's order:

1. a null endpoint → ``InvalidValue``;
2. a pitch below the row width → ``InvalidPitchValue``;
3. a pitch above the device's ``max_pitch`` → ``InvalidValue``;
4. a kind that is not a copy kind or contradicts the endpoints → ``InvalidMemcpyDirection``;
5. a negative slice height (even for one slice: with a z position it would place the region
   before its pointer, in another allocation or outside a host array), a slice height below
   the copied height, a negative size or position, or a region that leaves its allocation or
   array → ``InvalidValue`` (``InvalidDevicePointer`` for a pointer outside live memory).

An empty region (a width, height or depth of 0) is valid and copies nothing, as in HIP: only
the null-pointer, pitch and kind checks apply to it.
:class:`PitchedCopyParams` is a :class:`MemcpyParams` (a memcpy node's parameters), so every
rule about memcpy nodes (direction fixed, relocation by ``exec.update``, DOT) holds for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from ..core.errors import InvalidPitchValue, InvalidValue
from ..core.ints import as_int
from ..device.ops import CopyOp, host_bytes
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..device.table import check_range, resolve_pointer
from .device import get_device
from .params import (
    Endpoint,
    MemcpyParams,
    _check_endpoint,
    _host_array,
    _infer_kind,
    check_kind,
    records_equal,
)

if TYPE_CHECKING:
    from ..device.program import Program
    from .device import Device

__all__ = ["PitchedCopyOp", "PitchedCopyParams", "PitchedPtr", "check_pitched_copy"]

Triple = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class PitchedPtr:
    """``hipPitchedPtr``: an endpoint, its row pitch in bytes and its rows per slice.

    ``slice_height`` (HIP's ``ysize``) defaults to the copied height.
    """

    ptr: Endpoint
    pitch: int
    slice_height: int | None = None

    __eq__ = records_equal  # the endpoint may be a host array


def _int(value: Any, name: str) -> int:
    return as_int(value, name)


def _triple(value: Any, name: str) -> Triple:
    if isinstance(value, str | bytes) or not hasattr(value, "__len__") or len(value) != 3:
        raise TypeError(f"{name} must be three ints (x, y, z), got {value!r}")
    x, y, z = (_int(v, name) for v in value)
    return x, y, z


@dataclass(frozen=True, slots=True)
class _Side:
    ptr: Endpoint
    pitch: int
    slice_height: int
    offset: int  # bytes from ptr to the region's first byte
    span: int  # bytes from the first to the last byte of the region

    __eq__ = records_equal  # the endpoint may be a host array


def _side(
    end: PitchedPtr, pos: Triple, height: int, extent: Triple, role: str
) -> tuple[Endpoint, int, int | None, Triple]:
    if not isinstance(end, PitchedPtr):
        raise TypeError(f"{role} must be an ahg.PitchedPtr, got {type(end).__name__}")
    _check_endpoint(end.ptr, role)
    if isinstance(end.ptr, DevicePtr) and not end.ptr:
        raise InvalidValue(f"{role} is null")
    pitch = _int(end.pitch, f"{role} pitch")
    slice_height = None if end.slice_height is None else _int(end.slice_height, f"{role} height")
    return end.ptr, pitch, slice_height, _triple(pos, f"{role}_pos")


def check_pitched_copy(
    dst: PitchedPtr,
    src: PitchedPtr,
    extent: Any,
    *,
    dst_pos: Any = (0, 0, 0),
    src_pos: Any = (0, 0, 0),
    kind: CopyKind | int | None = None,
    max_pitch: int,
) -> PitchedCopyParams:
    """Validate a pitched copy (see the module notes for the order); changes nothing.

    Args:
        extent: (width in bytes, height in rows, depth in slices).

    Raises:
        InvalidValue, InvalidPitchValue, InvalidMemcpyDirection, InvalidDevicePointer: HIP's.
        TypeError / ValueError: arguments of the wrong Python type, non-contiguous arrays.
    """
    width, height, depth = _triple(extent, "extent")
    dptr, dpitch, dslice, dpos = _side(dst, dst_pos, height, (width, height, depth), "dst")
    sptr, spitch, sslice, spos = _side(src, src_pos, height, (width, height, depth), "src")
    if min(width, height, depth) < 0:
        raise InvalidValue(f"negative extent {(width, height, depth)}")
    if dpitch < width or spitch < width:
        raise InvalidPitchValue(f"pitch (dst {dpitch}, src {spitch}) below the width {width}")
    if dpitch > max_pitch or spitch > max_pitch:
        raise InvalidValue(f"pitch (dst {dpitch}, src {spitch}) above the maximum {max_pitch}")
    inferred = _infer_kind(dptr, sptr)
    check_kind(kind, inferred)
    sides = []
    for ptr, pitch, given, pos, role in (
        (dptr, dpitch, dslice, dpos, "dst"),
        (sptr, spitch, sslice, spos, "src"),
    ):
        slice_height = height if given is None else given
        if slice_height < 0:  # a copy of one slice never uses it, but a z position does
            raise InvalidValue(f"negative {role} slice height {slice_height}")
        if slice_height < height and depth > 1:
            raise InvalidValue(f"{role} slice height {slice_height} below the height {height}")
        if min(pos) < 0:
            raise InvalidValue(f"negative {role} position {pos}")
        x, y, z = pos
        offset = (z * slice_height + y) * pitch + x
        empty = not (width and height and depth)
        span = 0 if empty else ((depth - 1) * slice_height + height - 1) * pitch + width
        if isinstance(ptr, DevicePtr):
            if not empty:  # an empty copy touches nothing, wherever it points (HIP: success)
                # From the pointer given, not from the region's first byte: a position past
                # the end of the pointer's allocation must not land in a neighbouring one.
                check_range(ptr, offset + span)
        else:
            _host_array(ptr, role, writable=role == "dst")
            if not empty and offset + span > ptr.nbytes:
                raise InvalidValue(
                    f"the {role} region ({offset + span} bytes) runs past its "
                    f"{ptr.nbytes}-byte array"
                )
        sides.append(_Side(ptr, pitch, slice_height, offset, span))
    d, s = sides
    return PitchedCopyParams(
        dptr, sptr, width * height * depth, inferred,
        d.pitch, s.pitch, d.slice_height, s.slice_height, d.offset, s.offset,
        width, height, depth,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class PitchedCopyParams(MemcpyParams):
    """A memcpy node's parameters for a pitched copy (``hipMemcpy3DParms``, resolved)."""

    dst_pitch: int
    src_pitch: int
    dst_slice_height: int
    src_slice_height: int
    dst_offset: int
    src_offset: int
    width: int
    height: int
    depth: int

    __eq__ = records_equal  # endpoints may be host arrays (a dataclass makes its own)

    @classmethod
    def make_pitched(
        cls,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: Any,
        *,
        dst_pos: Any = (0, 0, 0),
        src_pos: Any = (0, 0, 0),
        kind: CopyKind | int | None = None,
        device: Device | None = None,
    ) -> PitchedCopyParams:
        """:func:`check_pitched_copy` against ``device``'s limits (the current device)."""
        max_pitch = (device or get_device()).properties.max_pitch
        return check_pitched_copy(
            dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind, max_pitch=max_pitch
        )

    def revalidated(self, device: Device | None = None) -> PitchedCopyParams:
        """The same copy checked again (memory may have changed since it was made), against
        ``device``'s limits (the current device's by default)."""
        return check_pitched_copy(
            PitchedPtr(self.dst, self.dst_pitch, self.dst_slice_height),
            PitchedPtr(self.src, self.src_pitch, self.src_slice_height),
            (self.width, self.height, self.depth),
            dst_pos=self._pos(self.dst_offset, self.dst_pitch, self.dst_slice_height),
            src_pos=self._pos(self.src_offset, self.src_pitch, self.src_slice_height),
            kind=self.kind,
            max_pitch=(device or get_device()).properties.max_pitch,
        )

    @staticmethod
    def _pos(offset: int, pitch: int, slice_height: int) -> Triple:
        # Any (x, y, z) with the same byte offset is the same region: keep it in x.
        del pitch, slice_height
        return (offset, 0, 0)

    def op(self, device: Device) -> PitchedCopyOp:
        return PitchedCopyOp(self, self.cost_ns(device))


class PitchedCopyOp(CopyOp):
    """Run a pitched copy: one strided numpy assignment per side, whole region at once."""

    __slots__ = ("params",)

    def __init__(self, params: PitchedCopyParams, cost_ns: int) -> None:
        super().__init__(
            params.dst, params.src, params.nbytes, params.kind, resolve_pointer, cost_ns
        )
        self.params = params

    def _region(
        self, end: Endpoint, offset: int, pitch: int, slice_height: int
    ) -> npt.NDArray[np.uint8]:
        p = self.params
        span = ((p.depth - 1) * slice_height + p.height - 1) * pitch + p.width
        if isinstance(end, DevicePtr):
            buffer, start = resolve_pointer(end, offset + span)  # inside end's allocation
            flat = buffer[start + offset : start + offset + span]
        else:
            flat = host_bytes(end, end.nbytes)[offset : offset + span]
        strides = (slice_height * pitch, pitch, 1)
        return as_strided(flat, shape=(p.depth, p.height, p.width), strides=strides)

    def run(self, program: Program) -> None:
        p = self.params
        if p.width and p.height and p.depth:
            dst = self._region(p.dst, p.dst_offset, p.dst_pitch, p.dst_slice_height)
            src = self._region(p.src, p.src_offset, p.src_pitch, p.src_slice_height)
            dst[...] = src.copy() if np.shares_memory(dst, src) else src
        program.time += self.cost_ns

    def __repr__(self) -> str:
        p = self.params
        return f"<PitchedCopyOp {p.kind.name} {p.width}x{p.height}x{p.depth}>"
