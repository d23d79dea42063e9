"""Graph nodes: a typed parameter object in a graph, with ordered edges both ways.

A :class:`GraphNode` is created only by its graph's ``add_*_node`` methods (or by clone). It
keeps HIP's shape: ``id`` from a process-wide counter, kept by clones so a node can be found in
a clone of its graph; ``_deps`` (predecessors) and ``_dependents`` (successors) in insertion order,
because HIP's query results and topological order follow insertion order.

Edges: each side is held in one of three forms (:data:`Edges`): ``()`` for none, the neighbour
itself for exactly one, and a list for two or more. Most nodes of a large graph have one
dependency and one dependent, and a container per side would be two more objects per node for
the cyclic collector to walk on every full pass (a list is always tracked, and so is a tuple
holding a node). :func:`edge_nodes` gives any form as a sequence; :func:`with_edge` and
:func:`without_edge` edit one.

Validity: a node is registered in :data:`NODES` while it lives. It dies when destroyed on its
own or when its graph is destroyed; either way every call on the handle gives InvalidValue, and
the handle's generation means a recycled registry slot can never revive it.

Locking: all reads and edits go through the owning graph's ``lock`` (an RLock), so concurrent
edits of one graph are serialised and a query never sees a half-made edge. Replacing a child
graph clones the new graph *before* taking this graph's lock (two graph locks are never held in
an order a user could reverse), then swaps it in under the lock.

Parameter setters follow HIP's check order: handle, then node type (wrong type is InvalidValue),
then the parameter values, validated by the same constructors the add methods use. A memcpy
node's direction is fixed when it is added.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from ..core.errors import InvalidValue, NotSupported, Unknown
from ..core.lifecycle import DestroyOnExit, FactoryOnly, HandleState, check_live, safe_repr
from ..core.registry import HandleId
from ..core.surface import own_mixin_methods
from ..device.kernel import DimLike, Kernel
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..runtime.event import Event
from ..runtime.launch_attributes import (
    AccessPolicyWindow,
    AttributeValue,
    KernelNodeAttribute,
)
from ..runtime.params import Endpoint, HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.pitched import PitchedCopyParams
from .conditional import ConditionalNodeParams
from .copy_nodes import NodeCopySetters
from .node_registry import ROW_BITS, ROW_MASK, NodeRegistry
from .node_type import NodeType
from .params import (
    ChildGraphParams,
    EventParams,
    MemAllocParams,
    MemFreeParams,
    NodeParams,
    event_params,
    host_params,
    kernel_params,
    memcpy_1d_set_params,
    memset_params,
    memset_width,
    revalidate,
)

if TYPE_CHECKING:
    from .graph import Graph

__all__ = [
    "NODES",
    "PARAMS_TYPES",
    "Edges",
    "GraphNode",
    "check_not_own_parent",
    "edge_nodes",
    "live_node",
]

NODES = NodeRegistry("graph node")
_FACTORY = FactoryOnly("graph nodes are created with Graph.add_*_node()")
_NODE_IDS = itertools.count()  # next() on a C iterator is atomic under the GIL
_new_tuple = tuple.__new__

PARAMS_TYPES: dict[NodeType, type[Any] | None] = {
    NodeType.Kernel: KernelParams,
    NodeType.Memcpy: MemcpyParams,
    NodeType.Memset: MemsetParams,
    NodeType.Host: HostParams,
    NodeType.Graph: ChildGraphParams,
    NodeType.Empty: None,
    NodeType.WaitEvent: EventParams,
    NodeType.EventRecord: EventParams,
    NodeType.MemAlloc: MemAllocParams,
    NodeType.MemFree: MemFreeParams,
    NodeType.Conditional: ConditionalNodeParams,
}
"""The parameter class each creatable node type holds (None: the node has no parameters)."""


@own_mixin_methods
class GraphNode(NodeCopySetters, DestroyOnExit):
    """One node of a :class:`Graph`. Created by the graph's ``add_*_node`` methods.

    Attributes:
        id: HIP's node id (shared with the node's copies in clones of the graph).
        graph: the graph the node belongs to.
        hid: the node's registry handle.
    """

    # The handle is kept as one int (``node_registry.node_handle``: the registry row in the low
    # bits, its generation above them; the row itself while the generation is 0), not as a
    # HandleId: a HandleId is a tuple subclass, which the garbage collector tracks for as long
    # as it lives (it only untracks exact tuples of atomic values), so holding one per node
    # would add an object per node to every full collection's walk, and two fields would be a
    # pointer more per node. ``hid`` makes the HandleId when asked.
    #
    # CPython lays slots out in the order of their sorted names, so the edge fields
    # (``_dependents`` then ``_deps``) sit right after the object's header, in the cache line
    # its reference count is in whatever the object's alignment. A walk in Kahn's order over a
    # wide graph (the branches of a fork-join, side by side) reaches each node from far away
    # in memory: one line fetched per node, not two. Keep both names sorting before the others.
    __slots__ = (
        "__weakref__",
        "_dependents",
        "_deps",
        "_graph",
        "_handle",
        "_id",
        "_params",
        "_type",
    )

    # Filled by ``Graph._attach`` on a bare instance (the constructor refuses every call).
    # ``graph`` and ``id`` are read-only (properties below): a node moved to another graph, or
    # given another node's id, would corrupt both graphs' edges and id indexes.
    _graph: Graph
    _id: int
    _type: NodeType
    _params: NodeParams
    _deps: Edges
    _dependents: Edges
    _handle: int  # the node's registry row and its generation (NODES.enter sets it)

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: the graph makes its nodes (``Graph._attach`` fills
        a bare instance's slots)."""
        _FACTORY.refuse()

    @property
    def graph(self) -> Graph:
        """The graph the node belongs to (read-only)."""
        return self._graph

    @property
    def id(self) -> int:
        """HIP's node id, shared with the node's copies in clones of the graph (read-only)."""
        return self._id

    @property
    def hid(self) -> HandleId:
        """The node's registry handle (made on each read; equal reads compare equal)."""
        handle = self._handle
        return _new_tuple(HandleId, (handle & ROW_MASK, handle >> ROW_BITS))

    # -- validity ----------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        handle = self._handle
        return NODES.find(handle & ROW_MASK, handle >> ROW_BITS) is self and self._graph._open

    @property
    def state(self) -> HandleState:
        """DESTROYED once the node or its graph was destroyed (a node dies with its graph)."""
        return HandleState.OPEN if self.alive else HandleState.DESTROYED

    def _check_alive(self) -> None:
        """Raise InvalidValue if the node or its graph was destroyed."""
        handle = self._handle
        if NODES.find(handle & ROW_MASK, handle >> ROW_BITS) is not self or not self._graph._open:
            check_live(False, "graph node", self)

    # -- queries -----------------------------------------------------------------------------------

    @property
    def type(self) -> NodeType:
        """The node's :class:`NodeType` (``hipGraphNodeGetType``)."""
        self._check_alive()
        return self._type

    @property
    def params(self) -> Any:
        """The node's parameters, of the class :data:`PARAMS_TYPES` gives for its type.

        Typed ``Any`` because callers dispatch on :attr:`type`; None for an empty node.
        """
        with self.graph.lock:
            self._check_alive()
            return self._params

    @params.setter
    def params(self, params: Any) -> None:
        """``node.params = record`` is :meth:`set_params`, with every one of its checks."""
        self.set_params(params)

    def dependencies(self) -> list[GraphNode]:
        """The nodes this one depends on, in the order the edges were added."""
        with self.graph.lock:
            self._check_alive()
            return list(edge_nodes(self._deps))

    def dependents(self) -> list[GraphNode]:
        """The nodes that depend on this one, in the order the edges were added."""
        with self.graph.lock:
            self._check_alive()
            return list(edge_nodes(self._dependents))

    # -- parameter setters -------------------------------------------------------------------------

    def set_params(self, params: Any) -> None:
        """Replace the parameters with ``params`` (validated again), of this node's type.

        A child-graph node takes a copy of ``params.graph``, as when it was added.

        Raises:
            InvalidValue: destroyed node; an empty node, or ``params`` of another node type;
                a memcpy whose direction differs from the node's.
            NotSupported: a memory-alloc or memory-free node.
            Whatever the parameter's validator raises.
        """
        from .generic import GraphNodeParams, node_record, unwrap

        if isinstance(params, GraphNodeParams):  # hipGraphNodeSetParams' tagged record
            kind, record = unwrap(params)
            params = node_record(kind, record)
            with self.graph.lock:
                self._check_alive()
                if kind is not self._type:
                    raise InvalidValue(f"{self!r} is not a {kind.name} node")
        with self.graph.lock:
            self._check_alive()
            if self._type in (NodeType.MemAlloc, NodeType.MemFree):
                raise NotSupported(f"{self._type.name} node parameters cannot be changed")
            if self._type is NodeType.Conditional:
                raise InvalidValue("a conditional node's handle, kind and bodies are fixed")
            expected = PARAMS_TYPES[self._type]
            if expected is None or not isinstance(params, expected):
                raise InvalidValue(f"{params!r} are not {self._type.name} node parameters")
            if self._type is NodeType.Graph:
                child = params.graph
            else:
                validated = revalidate(params)
                self._check_alive()  # the checks may run user code, which may destroy the node
                self._store(validated)
                return
        self.set_child_graph(child)

    def set_kernel_params(
        self,
        kernel: Kernel,
        grid: DimLike,
        block: DimLike,
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
        priority: int = 0,
    ) -> None:
        """``hipGraphKernelNodeSetParams``: validated as by ``add_kernel_node``.

        The node keeps its cooperative and access-policy attributes.
        """

        def build() -> KernelParams:
            params = kernel_params(
                kernel, grid, block, args, shared_mem=shared_mem, priority=priority
            )
            return replace(params, attributes=self._params.attributes)  # type: ignore[union-attr]

        self._set((NodeType.Kernel,), build)

    def set_memcpy_params(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphMemcpyNodeSetParams1D``; the direction must stay the node's own."""
        self._set((NodeType.Memcpy,), lambda: memcpy_1d_set_params(dst, src, nbytes, kind))

    def set_memset_params(
        self,
        dst: DevicePtr,
        value: int,
        width: int | None = None,
        *,
        nbytes: int | None = None,
        element_size: int = 1,
        height: int = 1,
        pitch: int | None = None,
    ) -> None:
        """``hipGraphMemsetNodeSetParams``: taken and validated as by ``add_memset_node``
        (``width`` or ``nbytes=``)."""
        self._set(
            (NodeType.Memset,),
            lambda: memset_params(
                dst,
                value,
                memset_width(width, nbytes, element_size, height, "GraphNode.set_memset_params()"),
                element_size=element_size,
                height=height,
                pitch=pitch,
            ),
        )

    def set_host_params(self, fn: Callable[..., Any], args: Sequence[Any] = ()) -> None:
        """``hipGraphHostNodeSetParams``."""
        self._set((NodeType.Host,), lambda: host_params(fn, args))

    def set_event(self, event: Event) -> None:
        """``hipGraphEventRecordNodeSetEvent`` / ``hipGraphEventWaitNodeSetEvent``."""
        self._set((NodeType.EventRecord, NodeType.WaitEvent), lambda: event_params(event))

    def set_child_graph(self, graph: Graph) -> None:
        """Embed a fresh copy of ``graph`` instead of the current one (which is destroyed).

        Raises:
            InvalidValue: destroyed node, not a child-graph node, or ``graph`` null/destroyed.
            Unknown: ``graph`` is this node's own graph, or the graph that one was cloned from
                (HIP's ``validateChildGraphNodeSetParams``, for ``hipGraphNodeSetParams``).
            NotSupported: ``graph`` has memory nodes.
        """
        with self.graph.lock:
            self._check_alive()
            if self._type is not NodeType.Graph:
                raise InvalidValue(f"{self!r} is not a child-graph node")
        from .graph import live_graph

        check_not_own_parent(self, live_graph(graph, "child graph"))  # HIP: null, dead, then own
        copy = self.graph._embed_copy(graph)
        try:
            with self.graph.lock:
                self._check_alive()
                assert isinstance(self._params, ChildGraphParams)
                old = self._params.graph
                copy._set_owner(self)
                self._params = ChildGraphParams(copy)
        except InvalidValue:
            copy._dispose()  # outside the lock: _dispose takes the capture lock first
            raise
        old._dispose()

    def _set(self, types: tuple[NodeType, ...], build: Callable[[], NodeParams]) -> None:
        with self.graph.lock:
            self._check_type(types)
            params = build()
            # Converting the arguments may run user code (an ``__index__``), which may have
            # destroyed this node or its graph: a dead node's setter reports it, as any other.
            self._check_alive()
            self._store(params)

    def _check_type(self, types: tuple[NodeType, ...]) -> None:
        """HIP's typed node calls: the handle, then the node's type (InvalidValue); lock held."""
        self._check_alive()
        if self._type not in types:
            raise InvalidValue(f"{self!r} is not a {' or '.join(t.name for t in types)} node")

    # -- typed getters (HIP's hipGraph*NodeGetParams): the handle, then the type -----------------
    # ``params`` answers for any node; these answer only for their own node type, as HIP's
    # typed getters do (where HIP reads a node of another type as if it were of its own, as
    # its memcpy, memset and host getters do, these refuse it: InvalidValue).

    def _get(self, *types: NodeType) -> Any:
        with self.graph.lock:
            self._check_type(types)
            return self._params

    def get_kernel_params(self) -> KernelParams:
        """``hipGraphKernelNodeGetParams``: the kernel, launch shape, arguments and attributes.

        Raises:
            InvalidValue: the node (or its graph) was destroyed, or it is not a kernel node.
        """
        params: KernelParams = self._get(NodeType.Kernel)
        return params

    def get_memcpy_params(self) -> MemcpyParams | PitchedCopyParams:
        """``hipGraphMemcpyNodeGetParams``: a linear or a pitched copy (symbol copies are
        linear copies to or from the symbol's storage). Raises: as :meth:`get_kernel_params`."""
        params: MemcpyParams | PitchedCopyParams = self._get(NodeType.Memcpy)
        return params

    def get_memset_params(self) -> MemsetParams:
        """``hipGraphMemsetNodeGetParams``. Raises: as :meth:`get_kernel_params`."""
        params: MemsetParams = self._get(NodeType.Memset)
        return params

    def get_host_params(self) -> HostParams:
        """``hipGraphHostNodeGetParams``. Raises: as :meth:`get_kernel_params`."""
        params: HostParams = self._get(NodeType.Host)
        return params

    def get_event(self) -> Event:
        """``hipGraphEventRecordNodeGetEvent`` / ``hipGraphEventWaitNodeGetEvent``.

        Raises: as :meth:`get_kernel_params` (an event-record or event-wait node).
        """
        params: EventParams = self._get(NodeType.EventRecord, NodeType.WaitEvent)
        return params.event

    def get_child_graph(self) -> Graph:
        """``hipGraphChildGraphNodeGetGraph``: the embedded copy, not the graph the node was
        made from; editing it edits this node. Raises: as :meth:`get_kernel_params`."""
        params: ChildGraphParams = self._get(NodeType.Graph)
        return params.graph

    def get_mem_alloc_params(self) -> MemAllocParams:
        """``hipGraphMemAllocNodeGetParams``: the reserved address, size and device.

        Raises: as :meth:`get_kernel_params`.
        """
        params: MemAllocParams = self._get(NodeType.MemAlloc)
        return params

    def get_mem_free_params(self) -> MemFreeParams:
        """``hipGraphMemFreeNodeGetParams``: the address the node frees.

        Raises: as :meth:`get_kernel_params`.
        """
        params: MemFreeParams = self._get(NodeType.MemFree)
        return params

    def _store(self, params: NodeParams) -> None:
        """Install validated parameters (graph lock held)."""
        if isinstance(params, MemcpyParams):
            assert isinstance(self._params, MemcpyParams)
            if params.kind is not self._params.kind:
                raise InvalidValue(
                    f"a memcpy node's direction is fixed: {self._params.kind.name}, "
                    f"not {params.kind.name}"
                )
        self._params = params

    # -- kernel-node attributes (see graph/attributes.py) ------------------------------------------

    # Each attribute takes a value of its own type (see get_attribute).
    @overload
    def set_attribute(self, attr: Literal[KernelNodeAttribute.Priority], value: int) -> None: ...
    @overload
    def set_attribute(
        self, attr: Literal[KernelNodeAttribute.Cooperative], value: bool | int
    ) -> None: ...
    @overload
    def set_attribute(
        self, attr: Literal[KernelNodeAttribute.AccessPolicyWindow], value: AccessPolicyWindow
    ) -> None: ...
    @overload
    def set_attribute(self, attr: KernelNodeAttribute | int, value: AttributeValue) -> None: ...
    def set_attribute(self, attr: KernelNodeAttribute | int, value: AttributeValue) -> None:
        """``hipGraphKernelNodeSetAttribute``: priority, cooperative or access-policy window.

        Raises:
            InvalidValue: destroyed node, not a kernel node, an unknown attribute, a null
                value, a priority outside :func:`ahipgraph.stream_priority_range`, or a window
                HIP rejects (hit ratio outside [0, 1], Persisting miss property, too large).
            TypeError: a value of the wrong type.
        """
        from . import attributes

        attributes.set_attribute(self, attr, value)

    # Each attribute's value has its own type: the priority an int, cooperative a bool.
    @overload
    def get_attribute(self, attr: Literal[KernelNodeAttribute.Priority]) -> int: ...
    @overload
    def get_attribute(self, attr: Literal[KernelNodeAttribute.Cooperative]) -> bool: ...
    @overload
    def get_attribute(
        self, attr: Literal[KernelNodeAttribute.AccessPolicyWindow]
    ) -> AccessPolicyWindow: ...
    @overload
    def get_attribute(self, attr: KernelNodeAttribute | int) -> AttributeValue: ...
    def get_attribute(self, attr: KernelNodeAttribute | int) -> AttributeValue:
        """``hipGraphKernelNodeGetAttribute``. Raises InvalidValue as :meth:`set_attribute`."""
        from . import attributes

        return attributes.get_attribute(self, attr)

    def copy_attributes_from(self, other: GraphNode) -> None:
        """``hipGraphKernelNodeCopyAttributes(other, self)``: both kernel nodes, of any graphs.

        Raises:
            InvalidValue: either node null, destroyed or not a kernel node.
        """
        from . import attributes

        attributes.copy_attributes(self, other)

    # -- destroy -----------------------------------------------------------------------------------

    def destroy(self) -> None:
        """Remove the node and its edges from the graph (``hipGraphDestroyNode``).

        Destroying a child-graph node destroys its embedded graph, releasing that graph's
        user-object references. A stream capture in progress that added the node, or whose
        next captured node would depend on it, is invalidated (its ``end_capture`` raises
        ``StreamCaptureInvalidated``): HIP's capture would go on with a dangling node.

        Raises:
            InvalidValue: the node or its graph was already destroyed.
            NotSupported: a memory-alloc or memory-free node.
        """
        self.graph._destroy_node(self)

    @safe_repr
    def __repr__(self) -> str:
        if not self.alive:
            return f"<GraphNode {self._type.name} id={self.id} destroyed>"
        return (
            f"<GraphNode {self._type.name} id={self.id} graph={self.graph.id} "
            f"deps={len(edge_nodes(self._deps))} dependents={len(edge_nodes(self._dependents))}>"
        )


Edges: TypeAlias = "GraphNode | list[GraphNode] | tuple[()]"
"""One side of a node's edges: ``()`` (none), the one neighbour itself, or a list of two or more."""


def edge_nodes(edges: Edges) -> Sequence[GraphNode]:
    """``edges`` (one side of a node's edges, in any form of :data:`Edges`) as a sequence."""
    if type(edges) is GraphNode:
        return (edges,)
    return edges  # type: ignore[return-value]


def with_edge(edges: Edges, node: GraphNode) -> Edges:
    """``edges`` with ``node`` appended (the caller stores the result back)."""
    if not edges:
        return node
    if type(edges) is list:
        edges.append(node)
        return edges
    return [edges, node]  # type: ignore[list-item]


def without_edge(edges: Edges, node: GraphNode) -> Edges:
    """``edges`` with the first ``node`` removed (the caller stores the result back).

    ValueError if ``node`` is not among them, as ``list.remove``.
    """
    if type(edges) is GraphNode:
        if edges is not node:
            raise ValueError(f"{node!r} is not an edge end here")
        return ()
    if type(edges) is not list:
        raise ValueError(f"{node!r} is not an edge end here")
    edges.remove(node)
    return edges[0] if len(edges) == 1 else edges


def check_not_own_parent(node: GraphNode, child: object) -> None:
    """HIP's rule for a child-graph node's new graph, node and executable setters alike: not
    the graph the node belongs to, nor the graph that one was cloned from (``Unknown``).

    (Adding a graph as its own child is allowed: the copy is taken before the node exists.)
    """
    parent = node.graph
    # Once its original is destroyed ``parent.original`` is the graph that one came from,
    # which HIP's check (on ``pOriginalGraph_``, the direct original) does not refuse: the
    # direct original is known by its id then.
    from .graph import _LINEAGE  # graph.py imports this module

    with _LINEAGE:  # both read as one: a move of ``original`` sets ``source_id`` first
        record = parent._life
        source, direct = record.source_id, record.original
    if source is None:  # the direct original, if it is still alive (never moved past)
        own = direct is not None and child is direct.handle
    else:
        own = getattr(child, "id", None) == source
    if child is parent or own:
        raise Unknown("a child graph node cannot take its own parent graph")


def live_node(node: object, what: str = "node") -> GraphNode:
    """The checks every call taking a node handle makes, in HIP's order.

    Raises:
        InvalidValue: ``node`` is None, destroyed, or its graph was destroyed.
        TypeError: ``node`` is not a GraphNode.
    """
    if node is None:
        raise InvalidValue(f"{what} is null")
    if not isinstance(node, GraphNode):
        raise TypeError(f"{what} must be a GraphNode, got {node!r}")
    node._check_alive()
    return node
