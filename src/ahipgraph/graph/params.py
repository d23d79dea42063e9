"""Node parameters: the runtime's validated descriptions, plus the graph-only kinds.

Kernel, memcpy, memset and host nodes hold the runtime's own parameter objects
(:mod:`ahipgraph.runtime.params`), built by the same ``make`` constructors streams use, so a bad
argument gets the same error whether it is launched eagerly or added to a graph. This module adds
the frozen parameter types that only graphs have (child graph, event, memory alloc and free) and
thin validators that put HIP's graph-specific checks in front of ``make``:

  * a null kernel is InvalidValue (HIP's null ``func``), as a null host function already is;
  * a destroyed event is InvalidValue, the answer HIP's graph calls give for a bad handle;
  * a pointer returned by a memory-alloc node is usable at once, although its reservation has no
    memory behind it until the executable runs. ``make`` resolves pointers against committed
    memory only, so when it rejects such a pointer the range is re-checked against the
    reservation instead (and every other endpoint check is redone, since ``make`` stopped at the
    first failure).

Every validator either returns a params object or raises; none has side effects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import InvalidDevicePointer, InvalidHandle, InvalidValue
from ..device.device import resolve_pointer
from ..device.kernel import DimLike, Kernel
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..runtime.event import Event
from ..runtime.params import (
    Endpoint,
    HostParams,
    KernelParams,
    MemcpyParams,
    MemsetParams,
    _host_array,
    _infer_kind,
)
from .memnodes import RESERVATIONS

if TYPE_CHECKING:
    from .graph import Graph

__all__ = [
    "ChildGraphParams",
    "EventParams",
    "MemAllocParams",
    "MemFreeParams",
    "NodeParams",
    "event_params",
    "host_params",
    "kernel_params",
    "memcpy_params",
    "memset_params",
    "revalidate",
]


@dataclass(frozen=True, slots=True)
class ChildGraphParams:
    """A child-graph node's embedded copy of a graph (owned by the node; editable in place)."""

    graph: Graph


@dataclass(frozen=True, slots=True)
class EventParams:
    """The event an event-record or event-wait node acts on at run time."""

    event: Event


@dataclass(frozen=True, slots=True)
class MemAllocParams:
    """A memory-alloc node: ``nbytes`` reserved at ``ptr`` on ``device``, committed at run time."""

    ptr: DevicePtr
    nbytes: int
    device: int


@dataclass(frozen=True, slots=True)
class MemFreeParams:
    """A memory-free node: the start of an alloc node's reservation."""

    ptr: DevicePtr


NodeParams = (
    KernelParams
    | MemcpyParams
    | MemsetParams
    | HostParams
    | ChildGraphParams
    | EventParams
    | MemAllocParams
    | MemFreeParams
    | None
)


def kernel_params(
    kernel: Kernel | None,
    grid: DimLike,
    block: DimLike,
    args: Sequence[Any] = (),
    *,
    shared_mem: int = 0,
) -> KernelParams:
    """Validate a kernel node. Raises InvalidValue for a null kernel, else as ``make``."""
    if kernel is None:
        raise InvalidValue("kernel is null")
    return KernelParams.make(kernel, grid, block, args, shared_mem=shared_mem)


def host_params(fn: Callable[..., Any] | None, args: Sequence[Any] = ()) -> HostParams:
    """Validate a host node (InvalidValue for a null function, TypeError if not callable)."""
    return HostParams.make(fn, args)


def event_params(event: Event | None) -> EventParams:
    """Validate an event node's event.

    Raises:
        InvalidValue: ``event`` is None or destroyed. TypeError: it is not an Event.
    """
    if event is None:
        raise InvalidValue("event is null")
    if not isinstance(event, Event):
        raise TypeError(f"expected an Event, got {event!r}")
    try:
        event.check_open()
    except InvalidHandle:
        raise InvalidValue(f"{event!r} was destroyed") from None
    return EventParams(event)


def memcpy_params(
    dst: Endpoint,
    src: Endpoint,
    nbytes: int | None = None,
    kind: CopyKind | int | None = None,
) -> MemcpyParams:
    """Validate a memcpy node as :meth:`MemcpyParams.make`, accepting alloc-node pointers."""
    try:
        return MemcpyParams.make(dst, src, nbytes, kind)
    except InvalidDevicePointer:
        if not any(_in_reservation(end) for end in (dst, src)):
            raise
    # Every check before the range checks passed; redo the range checks for both endpoints.
    if nbytes is None:
        nbytes = min(end.nbytes for end in (dst, src) if isinstance(end, np.ndarray))
    for end, role in ((dst, "dst"), (src, "src")):
        if isinstance(end, DevicePtr):
            _check_range(end, nbytes)
        else:
            _host_array(end, role, writable=role == "dst")
            if nbytes > end.nbytes:
                raise InvalidValue(f"{nbytes} bytes exceed the {end.nbytes}-byte {role} array")
    return MemcpyParams(dst, src, nbytes, _infer_kind(dst, src))


def memset_params(
    dst: DevicePtr,
    value: int,
    width: int,
    *,
    element_size: int = 1,
    height: int = 1,
    pitch: int | None = None,
) -> MemsetParams:
    """Validate a memset node as :meth:`MemsetParams.make`, accepting alloc-node pointers."""
    try:
        return MemsetParams.make(
            dst, value, width, element_size=element_size, height=height, pitch=pitch
        )
    except InvalidDevicePointer:
        if not _in_reservation(dst):
            raise
    # make() validated everything but the range (its last step); build the same object.
    row = width * element_size
    params = MemsetParams(
        dst,
        int(value) % (1 << (8 * element_size)),
        element_size,
        int(width),
        int(height),
        row if pitch is None else pitch,
    )
    _check_range(dst, params.extent)
    return params


def revalidate(params: Any) -> Any:
    """Validate a params object again (a caller may have built it by hand, or memory changed)."""
    if isinstance(params, KernelParams):
        return kernel_params(
            params.kernel, params.grid, params.block, params.args, shared_mem=params.shared_mem
        )
    if isinstance(params, MemcpyParams):
        return memcpy_params(params.dst, params.src, params.nbytes, params.kind)
    if isinstance(params, MemsetParams):
        return memset_params(
            params.dst,
            params.value,
            params.width,
            element_size=params.element_size,
            height=params.height,
            pitch=params.pitch,
        )
    if isinstance(params, HostParams):
        return host_params(params.fn, params.args)
    if isinstance(params, EventParams):
        return event_params(params.event)
    raise TypeError(f"cannot validate {params!r}")


def _in_reservation(end: object) -> bool:
    return isinstance(end, DevicePtr) and bool(end) and RESERVATIONS.find(end) is not None


def _check_range(ptr: DevicePtr, nbytes: int) -> None:
    """Bounds-check ``nbytes`` at ``ptr`` in committed memory or in an alloc-node reservation."""
    reservation = RESERVATIONS.find(ptr) if ptr else None
    if reservation is None:
        resolve_pointer(ptr, nbytes)
        return
    offset = ptr.address - reservation.ptr.address
    if offset + nbytes > reservation.nbytes:
        raise InvalidValue(
            f"{nbytes} bytes at {ptr!r} run past the end of a {reservation.nbytes}-byte "
            f"graph allocation (offset {offset})"
        )
