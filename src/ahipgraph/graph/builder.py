"""The node builders behind the ``add_*_node`` methods of :class:`~ahipgraph.graph.graph.Graph`.

Module functions over the graph they are given; the graph's public methods are thin calls to
these and carry the user documentation. Each function only says which node type it makes and
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
from ..core.lifecycle import owner_key
from ..device.kernel import DimLike, Kernel
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..runtime.device import get_device
from ..runtime.event import Event
from ..runtime.params import Endpoint, common_kernel_params
from .memnodes import RESERVATIONS
from .node import GraphNode
from .node_type import NodeType
from .params import (
    MemAllocParams,
    MemFreeParams,
    event_params,
    host_params,
    kernel_params,
    memcpy_params,
    memset_params,
)

if TYPE_CHECKING:
    from .graph import Graph

Deps: TypeAlias = Sequence[GraphNode] | GraphNode

# An enum member read through its class costs ten times a global's read on Python 3.11 (the
# metaclass looks it up): the per-node paths read module constants.
_KERNEL = NodeType.Kernel

__all__ = [
    "Deps",
    "add_event_record_node",
    "add_event_wait_node",
    "add_host_node",
    "add_kernel_node",
    "add_mem_alloc_node",
    "add_mem_free_node",
    "add_memcpy_node",
    "add_memset_node",
]


def add_kernel_node(
    graph: Graph,
    kernel: Kernel,
    grid: DimLike,
    block: DimLike,
    args: Sequence[Any],
    shared_mem: int,
    priority: int,
    deps: Deps,
) -> GraphNode:
    """A kernel node (``hipGraphAddKernelNode``).

    What ``graph._add_node`` does, in one frame: the checks in the same order (graph, then
    dependencies, then parameters), with :func:`common_kernel_params` for the usual launch
    shape and :func:`kernel_params` for every other, errors included.
    """
    lock = graph.lock
    lock.acquire()  # not ``with``: its enter and exit calls cost twice the lock itself
    try:
        if not graph._open:
            graph._check_alive()  # raises
        dep_list = graph._check_deps(deps)
        params = common_kernel_params(kernel, grid, block, args, shared_mem, priority)
        if params is None:
            params = kernel_params(
                kernel, grid, block, args, shared_mem=shared_mem, priority=priority
            )
        return graph._attach(_KERNEL, params, dep_list)
    finally:
        lock.release()


def add_memcpy_node(
    graph: Graph,
    dst: Endpoint,
    src: Endpoint,
    nbytes: int | None,
    kind: CopyKind | int | None,
    deps: Deps,
) -> GraphNode:
    """A linear copy node (``hipGraphAddMemcpyNode1D``)."""
    return graph._add_node(NodeType.Memcpy, deps, lambda: memcpy_params(dst, src, nbytes, kind))


def add_memset_node(
    graph: Graph,
    dst: DevicePtr,
    value: int,
    width: int,
    element_size: int,
    height: int,
    pitch: int | None,
    deps: Deps,
) -> GraphNode:
    """A fill node (``hipGraphAddMemsetNode``); a width or height of 0 is refused, as HIP."""
    return graph._add_node(
        NodeType.Memset,
        deps,
        lambda: memset_params(
            dst,
            value,
            width,
            element_size=element_size,
            height=height,
            pitch=pitch,
            allow_empty=False,
        ),
    )


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
        if isinstance(nbytes, bool) or not isinstance(nbytes, int):
            raise TypeError(f"nbytes must be an int, got {nbytes!r}")
        if nbytes < 1:
            raise InvalidValue(f"a memory-alloc node needs at least 1 byte, got {nbytes}")
        graph._check_mem_node_allowed()
        try:
            ordinal = get_device().ordinal if device is None else device
            reservation = RESERVATIONS.reserve(nbytes, ordinal, owner=owner_key(graph))
        except InvalidDevice as error:
            raise InvalidValue(str(error)) from None
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
        RESERVATIONS.claim_free(ptr, owner=owner_key(graph))
        return MemFreeParams(ptr)

    return graph._add_node(NodeType.MemFree, deps, build)
