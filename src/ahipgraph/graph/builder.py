"""The node builders behind the ``add_*_node`` methods of :class:`~ahipgraph.graph.graph.Graph`.

Module functions over the graph they are given; the graph's public methods are thin calls to
these and carry the user documentation (all but ``add_kernel_node``, the most frequent add,
which does the same in its own frame). Each function only says which node type it makes and
how its parameters are validated; the graph's ``_add_node`` does the rest in HIP's check order
— the graph is alive, then every dependency is a live node of this graph given once, then the
parameters — all under the graph's lock, so a failed add leaves the graph exactly as it was
(HIP appends the node before checking the dependencies and leaves it there on failure).

``deps`` is keyword-only in every public add: a sequence of nodes (or a single node).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ..core.errors import InvalidDevice, InvalidValue
from ..core.ints import as_int
from ..core.lifecycle import owner_key
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..runtime.device import get_device
from ..runtime.event import Event
from ..runtime.params import Endpoint, MemsetParams
from .memnodes import RESERVATIONS
from .node import GraphNode
from .node_type import NodeType
from .params import (
    MemAllocParams,
    MemFreeParams,
    event_params,
    host_params,
    memcpy_params,
    memset_params,
    memset_width,
)

if TYPE_CHECKING:
    from .graph import Graph

Deps: TypeAlias = Sequence[GraphNode] | GraphNode

__all__ = [
    "Deps",
    "add_event_record_node",
    "add_event_wait_node",
    "add_host_node",
    "add_mem_alloc_node",
    "add_mem_free_node",
    "add_memcpy_node",
    "add_memset_node",
]


def add_memcpy_node(
    graph: Graph,
    dst: Endpoint,
    src: Endpoint,
    nbytes: int | None,
    kind: CopyKind | int | None,
    deps: Deps,
) -> GraphNode:
    """A linear copy node (``hipGraphAddMemcpyNode1D``); a count of 0 is refused, as HIP.

    (Only a capture skips an empty copy; a node added by hand must copy something.)
    """
    return graph._add_node(
        NodeType.Memcpy,
        deps,
        lambda: memcpy_params(dst, src, nbytes, kind, allow_empty=False),
    )


def add_memset_node(
    graph: Graph,
    dst: DevicePtr,
    value: int,
    width: int | None,
    nbytes: int | None,
    element_size: int,
    height: int,
    pitch: int | None,
    deps: Deps,
) -> GraphNode:
    """A fill node (``hipGraphAddMemsetNode``); a width or height of 0 is refused, as HIP.

    The size is ``width`` (elements) or ``nbytes=``, read as ``stream.memset`` reads its
    count or ``nbytes=`` (one shared check), after the graph and ``deps``.
    """

    def build() -> MemsetParams:
        count = memset_width(width, nbytes, element_size, height, "Graph.add_memset_node()")
        return memset_params(
            dst,
            value,
            count,
            element_size=element_size,
            height=height,
            pitch=pitch,
            allow_empty=False,
        )

    return graph._add_node(NodeType.Memset, deps, build)


def add_host_node(
    graph: Graph, fn: Callable[..., Any], args: Sequence[Any], deps: Deps
) -> GraphNode:
    """A host-callback node (``hipGraphAddHostNode``)."""
    return graph._add_node(NodeType.Host, deps, lambda: host_params(fn, args))


def add_event_record_node(graph: Graph, event: Event, deps: Deps) -> GraphNode:
    """An event-record node (``hipGraphAddEventRecordNode``)."""
    return graph._add_node(NodeType.EventRecord, deps, lambda: event_params(event))


def add_event_wait_node(graph: Graph, event: Event, deps: Deps) -> GraphNode:
    """An event-wait node (``hipGraphAddEventWaitNode``)."""
    return graph._add_node(NodeType.WaitEvent, deps, lambda: event_params(event))


def add_mem_alloc_node(graph: Graph, nbytes: int, device: int | None, deps: Deps) -> GraphNode:
    """A memory-alloc node (``hipGraphAddMemAllocNode``): the address is reserved now."""

    def build() -> MemAllocParams:
        size = as_int(nbytes, "nbytes")
        if size < 1:
            raise InvalidValue(f"a memory-alloc node needs at least 1 byte, got {size}")
        graph._check_mem_node_allowed()
        try:
            ordinal = get_device(device).ordinal  # None: the current device; a plain int
            graph._still_addable()  # before the range is reserved: a refused add holds none
            reservation = RESERVATIONS.reserve(size, ordinal, owner=owner_key(graph))
        except InvalidDevice as error:
            raise InvalidValue(error.message) from None  # HIP: a bad location id
        return MemAllocParams(reservation.ptr, reservation.nbytes, reservation.device)

    return graph._add_node(NodeType.MemAlloc, deps, build)


def add_mem_free_node(graph: Graph, ptr: DevicePtr, deps: Deps) -> GraphNode:
    """A memory-free node (``hipGraphAddMemFreeNode``) for an alloc node's allocation."""

    def build() -> MemFreeParams:
        if ptr is None or (isinstance(ptr, DevicePtr) and not ptr):
            raise InvalidValue("memory-free node pointer is null")
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {ptr!r}")
        graph._check_mem_node_allowed()
        graph._still_addable()  # before the range is claimed: a refused add claims nothing
        RESERVATIONS.claim_free(ptr, owner=owner_key(graph))
        return MemFreeParams(ptr)

    return graph._add_node(NodeType.MemFree, deps, build)
