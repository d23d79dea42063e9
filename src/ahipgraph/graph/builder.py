"""The ``add_*_node`` methods of :class:`~ahipgraph.graph.graph.Graph`.

Each method only says which node type it makes and how its parameters are validated; the
graph's ``_add_node`` does the rest in HIP's check order — the graph is alive, then every
dependency is a live node of this graph given once, then the parameters — all under the graph's
lock, so a failed add leaves the graph exactly as it was (HIP appends the node before checking
the dependencies and leaves it there on failure).

``deps`` is keyword-only everywhere: a sequence of nodes (or a single node).
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
from ..runtime.params import Endpoint
from .memnodes import RESERVATIONS
from .node import GraphNode
from .node_type import NodeType
from .params import (
    MemAllocParams,
    MemFreeParams,
    NodeParams,
    event_params,
    host_params,
    kernel_params,
    memcpy_params,
    memset_params,
)

if TYPE_CHECKING:
    from .graph import Graph

Deps: TypeAlias = Sequence[GraphNode] | GraphNode

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """Mixin: one method per creatable node type."""

    __slots__ = ()

    def _add_node(
        self, node_type: NodeType, deps: Deps, build: Callable[[], NodeParams]
    ) -> GraphNode:
        raise NotImplementedError

    def _add_child_graph(self, child: Graph, deps: Deps) -> GraphNode:
        raise NotImplementedError

    def _check_mem_node_allowed(self) -> None:
        raise NotImplementedError

    def add_kernel_node(
        self,
        kernel: Kernel,
        grid: DimLike,
        block: DimLike,
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
        priority: int = 0,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a kernel launch (``hipGraphAddKernelNode``): grid in blocks, block in threads.

        ``priority`` is the node's launch priority attribute (lower is more urgent, as stream
        priorities); with ``InstantiateFlags.USE_NODE_PRIORITY`` the most urgent parallel
        branch runs on the launch stream.

        Raises:
            InvalidValue: destroyed graph, bad deps, a null kernel, too much shared memory.
            InvalidConfiguration: bad grid or block. TypeError/ValueError: bad arguments.
        """
        return self._add_node(
            NodeType.Kernel,
            deps,
            lambda: kernel_params(
                kernel, grid, block, args, shared_mem=shared_mem, priority=priority
            ),
        )

    def add_memcpy_node(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
        *,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a linear copy (``hipGraphAddMemcpyNode1D``); its direction is fixed from now on.

        The direction comes from the endpoints (device pointers or host numpy arrays); ``kind``,
        if given, must agree. ``nbytes`` defaults to the host array's size.

        Raises:
            InvalidValue: destroyed graph, bad deps, null endpoint, a range outside an allocation.
            InvalidDevicePointer: a pointer outside live memory. InvalidMemcpyDirection: bad kind.
        """
        return self._add_node(NodeType.Memcpy, deps, lambda: memcpy_params(dst, src, nbytes, kind))

    def add_memset_node(
        self,
        dst: DevicePtr,
        value: int,
        width: int,
        *,
        element_size: int = 1,
        height: int = 1,
        pitch: int | None = None,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a fill of ``height`` rows of ``width`` elements (``hipGraphAddMemsetNode``).

        Raises:
            InvalidValue: destroyed graph, bad deps, null ``dst``, element size not 1/2/4,
                a width or height of 0 (as HIP), a region outside the allocation.
        """
        return self._add_node(
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
        self, fn: Callable[..., Any], args: Sequence[Any] = (), *, deps: Deps = ()
    ) -> GraphNode:
        """Add a host callback ``fn(*args)`` (``hipGraphAddHostNode``); it may be ``async``.

        Raises:
            InvalidValue: destroyed graph, bad deps, ``fn`` is None. TypeError: not callable.
        """
        return self._add_node(NodeType.Host, deps, lambda: host_params(fn, args))

    def add_child_graph_node(self, child: Graph, *, deps: Deps = ()) -> GraphNode:
        """Embed a copy of ``child``, taken now (``hipGraphAddChildGraphNode``).

        Later edits to ``child`` do not reach the copy; edit the copy through
        ``node.params.graph``. A graph may be added as its own child.

        Raises:
            InvalidValue: destroyed graph, bad deps, ``child`` null or destroyed.
            NotSupported: ``child`` has memory-alloc or memory-free nodes.
        """
        return self._add_child_graph(child, deps)

    def add_empty_node(self, *, deps: Deps = ()) -> GraphNode:
        """Add a node that does nothing, for ordering (``hipGraphAddEmptyNode``)."""
        return self._add_node(NodeType.Empty, deps, lambda: None)

    def add_event_record_node(self, event: Event, *, deps: Deps = ()) -> GraphNode:
        """Record ``event`` when the node runs (``hipGraphAddEventRecordNode``).

        Raises:
            InvalidValue: destroyed graph, bad deps, ``event`` null or destroyed.
        """
        return self._add_node(NodeType.EventRecord, deps, lambda: event_params(event))

    def add_event_wait_node(self, event: Event, *, deps: Deps = ()) -> GraphNode:
        """Wait for ``event`` when the node runs (``hipGraphAddEventWaitNode``).

        Raises:
            InvalidValue: destroyed graph, bad deps, ``event`` null or destroyed.
        """
        return self._add_node(NodeType.WaitEvent, deps, lambda: event_params(event))

    def add_mem_alloc_node(
        self, nbytes: int, *, device: int | None = None, deps: Deps = ()
    ) -> GraphNode:
        """Allocate ``nbytes`` on ``device`` when the node runs (``hipGraphAddMemAllocNode``).

        ``device`` defaults to the calling task's current device (``ahg.set_device``).

        The address is reserved now, so later nodes can use ``node.params.ptr`` at once; the
        memory behind it is committed by the executable when the node runs.

        Raises:
            InvalidValue: destroyed graph, bad deps, a size below 1, no such device.
            OutOfMemory: the device's address range has no room left for ``nbytes``.
            NotSupported: this graph is embedded in a child-graph node.
            TypeError: ``nbytes`` is not an int.
        """

        def build() -> MemAllocParams:
            if isinstance(nbytes, bool) or not isinstance(nbytes, int):
                raise TypeError(f"nbytes must be an int, got {nbytes!r}")
            if nbytes < 1:
                raise InvalidValue(f"a memory-alloc node needs at least 1 byte, got {nbytes}")
            self._check_mem_node_allowed()
            try:
                ordinal = get_device().ordinal if device is None else device
                reservation = RESERVATIONS.reserve(nbytes, ordinal, owner=owner_key(self))
            except InvalidDevice as error:
                raise InvalidValue(str(error)) from None
            return MemAllocParams(reservation.ptr, reservation.nbytes, reservation.device)

        return self._add_node(NodeType.MemAlloc, deps, build)

    def add_mem_free_node(self, ptr: DevicePtr, *, deps: Deps = ()) -> GraphNode:
        """Free a memory-alloc node's allocation when the node runs (``hipGraphAddMemFreeNode``).

        Raises:
            InvalidValue: destroyed graph, bad deps, ``ptr`` null, not the start of an
                allocation made by an alloc node of a live graph, or already freed by a node.
            NotSupported: this graph is embedded in a child-graph node.
        """

        def build() -> MemFreeParams:
            if ptr is None or (isinstance(ptr, DevicePtr) and not ptr):
                raise InvalidValue("memory-free node pointer is null")
            if not isinstance(ptr, DevicePtr):
                raise TypeError(f"expected a DevicePtr, got {ptr!r}")
            self._check_mem_node_allowed()
            RESERVATIONS.claim_free(ptr, owner=owner_key(self))
            return MemFreeParams(ptr)

        return self._add_node(NodeType.MemFree, deps, build)
