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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidSymbol, InvalidValue
from ..core.ints import as_int
from ..core.lifecycle import check_live
from ..device.kernel import DimLike, Kernel
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..runtime.event import Event
from ..runtime.launch_attributes import check_attributes, check_priority
from ..runtime.params import (
    Endpoint,
    HostParams,
    KernelParams,
    MemcpyParams,
    MemsetParams,
    fill_count,
)
from ..runtime.pitched import PitchedCopyParams
from .conditional import ConditionalNodeParams

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
    "memcpy_1d_set_params",
    "memcpy_params",
    "memset_params",
    "memset_width",
    "null_symbol",
    "revalidate",
    "symbol_node_params",
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
    | ConditionalNodeParams
    | None
)


def kernel_params(
    kernel: Kernel | None,
    grid: DimLike,
    block: DimLike,
    args: Sequence[Any] = (),
    *,
    shared_mem: int = 0,
    priority: int = 0,
) -> KernelParams:
    """Validate a kernel node. Raises InvalidValue for a null kernel, else as ``make``."""
    if kernel is None:
        raise InvalidValue("kernel is null")
    params = KernelParams.make(kernel, grid, block, args, shared_mem=shared_mem, priority=priority)
    if priority:  # make checked it is an int; 0 is the default priority, always in range
        check_priority(priority)  # a node's priority attribute lies in the device's range
    return params


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
    check_live(event.alive, "event", event, "graph node")
    return EventParams(event)


def memcpy_params(
    dst: Endpoint,
    src: Endpoint,
    nbytes: int | None = None,
    kind: CopyKind | int | None = None,
    *,
    allow_empty: bool = True,
) -> MemcpyParams:
    """Validate a memcpy node (alloc-node pointers are valid: their addresses are reserved).

    HIP's node and executable setters refuse a copy of 0 bytes (InvalidValue); they pass
    ``allow_empty=False``.
    """
    params = MemcpyParams.make(dst, src, nbytes, kind)
    if not allow_empty and not params.nbytes:
        raise InvalidValue("a memcpy node's count must not be 0")
    return params


def symbol_node_params(
    end: object, role: str, nbytes: int | None, make: Callable[[], MemcpyParams]
) -> MemcpyParams:
    """A symbol copy node's parameters, from ``make`` (the stream copy's builder).

    A graph node is checked as HIP checks ``hipGraphAddMemcpyNode{To,From}Symbol`` and their
    node and executable setters, which, unlike a stream copy, refuse a count of 0
    (InvalidValue), and check the caller's endpoint (``role``: ``src`` into a symbol, ``dst``
    out of one) and the count before they look the symbol up: a null endpoint or a count
    given as 0 is InvalidValue whatever the symbol; a count taken from an empty host array
    is refused once it is known.
    """
    if end is None:
        raise InvalidValue(f"{role} is null")
    if nbytes is not None and not as_int(nbytes, "nbytes"):
        raise InvalidValue("a memcpy node's count must not be 0")
    params = make()
    if not params.nbytes:
        raise InvalidValue("a memcpy node's count must not be 0")
    return params


def null_symbol(symbol: object) -> None:
    """HIP's symbol setters check for a null symbol before anything else, the executable and
    the node included (``InvalidSymbol``); a symbol that is not null is looked up later, after
    the handles, with the copy's other parameters."""
    if symbol is None:
        raise InvalidSymbol("None is not a device symbol")  # lookup_symbol's words


def memcpy_1d_set_params(
    dst: Endpoint, src: Endpoint, nbytes: int | None, kind: CopyKind | int | None
) -> MemcpyParams:
    """Validate new parameters for an existing linear copy node, as HIP's node and executable
    setters (``hipGraph[Exec]MemcpyNodeSetParams1D``) do: besides a count of 0, a copy whose
    source and destination are the same address is refused (InvalidValue)."""
    params = memcpy_params(dst, src, nbytes, kind, allow_empty=False)
    if _address(params.dst) == _address(params.src):
        raise InvalidValue(f"a memcpy node's source and destination are the same: {dst!r}")
    return params


def _address(end: Endpoint) -> tuple[int, int]:
    """Where an endpoint starts: (device, address) of a pointer, (-1, data address) of an array."""
    if isinstance(end, DevicePtr):
        return end.device, end.address
    return -1, int(end.__array_interface__["data"][0])


def memset_width(
    width: int | None, nbytes: int | None, element_size: int, height: int, call: str
) -> int:
    """A memset node's ``width`` from ``width`` or ``nbytes=`` (exactly one of them), read by
    ``stream.memset``'s own check, for the add and both setters (``call`` names the one).

    ``nbytes=`` is for a fill of one row, as ``hipMemsetAsync``'s ``sizeBytes``: a 2D fill's
    row is its ``width`` (``MemsetParams.nbytes`` is the whole fill, rows included).

    Raises:
        TypeError: neither or both given; ``nbytes=`` with a height other than 1; a bad type.
        InvalidValue: ``nbytes`` negative, or not a whole number of 2- or 4-byte elements.
    """
    if nbytes is not None and as_int(height, "height") != 1:
        raise TypeError(
            f"{call} takes nbytes= for a fill of one row; "
            f"a fill of height {height!r} takes width (elements per row)"
        )
    return fill_count(width, nbytes, element_size, call=call, count_name="width")


def memset_params(
    dst: DevicePtr,
    value: int,
    width: int,
    *,
    element_size: int = 1,
    height: int = 1,
    pitch: int | None = None,
    allow_empty: bool = True,
) -> MemsetParams:
    """Validate a memset node (alloc-node pointers are valid: their addresses are reserved).

    HIP refuses a memset node of width or height 0 when it is added (InvalidValue); the add
    passes ``allow_empty=False``.
    """
    params = MemsetParams.make(
        dst, value, width, element_size=element_size, height=height, pitch=pitch
    )
    if not allow_empty and not (params.width and params.height):
        raise InvalidValue(f"a memset node of {params.width}x{params.height} elements is empty")
    return params


def revalidate(params: Any) -> Any:
    """Validate a params object again (a caller may have built it by hand, or memory changed)."""
    if isinstance(params, KernelParams):
        checked = kernel_params(
            params.kernel,
            params.grid,
            params.block,
            params.args,
            shared_mem=params.shared_mem,
            priority=params.priority,
        )
        return replace(checked, attributes=check_attributes(params.attributes))
    if isinstance(params, PitchedCopyParams):
        return params.revalidated()
    if isinstance(params, MemcpyParams):
        return memcpy_params(params.dst, params.src, params.nbytes, params.kind, allow_empty=False)
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
