"""Graphs: nodes, edges, topological queries, clone, user objects and destroy.

A :class:`Graph` is pure data: nodes with validated parameters and ordered edges. Nothing runs
here; an executable takes a snapshot (under ``graph.lock``) and does the rest.

Design:
  * ``lock`` is one RLock per graph; every edit and every query takes it, so concurrent edits of
    one graph are serialised and queries see whole edits. Two graphs' locks are only ever held
    together parent-then-embedded-child (clone, DOT, an executable's snapshot) — a tree, so
    never in two orders. Adding or replacing a child graph copies the child *before* taking the
    parent's lock, so ``a.add_child_graph_node(b)`` racing ``b.add_child_graph_node(a)`` cannot
    deadlock.
  * Node order: ``_nodes`` keeps insertion order (HIP's ``vertices_``); each node keeps its
    edges in insertion order. ``nodes()`` is Kahn's algorithm with a FIFO seeded in insertion
    order, visiting successors in edge order, exactly as HIP does, so orders match HIP's.
  * Cycles can be made with ``add_dependencies`` (HIP does not check there); ordering a cyclic
    graph (``nodes()``, instantiation) is InvalidValue.
  * Every add and edge edit validates everything before it changes anything: a failed call
    leaves the graph as it was (HIP can leave a node or a partial edge list behind).
  * User objects: the graph keeps the set of objects it may own; the counts live in each object
    (``UserObject._adopt``/``disown``), the one code path graphs and executables share.
    Destructors never run while this graph's lock is held.

Validity: a graph is registered in :data:`GRAPHS` while it lives. ``destroy()`` unregisters it
first, which invalidates every node handle at once (a node checks its graph), then releases its
nodes, embedded child graphs, user-object references and unused memory-node reservations.
Destroying twice is IllegalState; any other call on a destroyed graph is InvalidValue.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence, ValuesView
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Unpack

from ..core import gcpause
from ..core.errors import InvalidValue, NotSupported
from ..core.ints import flag_or_none
from ..core.lifecycle import (
    DestroyOnExit,
    HandleRecord,
    HandleState,
    check_live,
    destroyed,
    owner_key,
    safe_repr,
)
from ..core.registry import HandleId, HandleRegistry
from ..device.pointer import replacements
from ..lifetime.user_object import UserObject, check_count, disown_all
from ..runtime import capture_state, observe
from ..runtime.params import common_kernel_params
from . import builder, copy_nodes, dot, topology
from .conditional import (
    ConditionalHandle,
    ConditionalKind,
    ConditionalNodeParams,
    check_conditional,
    make_handle,
)
from .memnodes import RESERVATIONS
from .node import _NODE_IDS, NODES, Edges, GraphNode, edge_nodes, live_node, with_edge, without_edge
from .node_registry import ROW_BITS
from .node_type import NodeType
from .params import ChildGraphParams, NodeParams, kernel_params

if TYPE_CHECKING:
    from ..device.kernel import DimLike, Kernel
    from ..device.pointer import DevicePtr
    from ..device.properties import CopyKind
    from ..device.symbols import SymbolLike
    from ..exec.graph_exec import GraphExec
    from ..exec.instantiate_options import InstantiateOptions
    from ..exec.race_reports import RaceReport
    from ..runtime.event import Event
    from ..runtime.params import Endpoint
    from ..runtime.pitched import PitchedPtr
    from .builder import Deps
    from .generic import GraphNodeParams

Triple = tuple[int, int, int]

__all__ = ["GRAPHS", "Graph", "GraphStatistics", "live_graph"]

GRAPHS: HandleRegistry[Graph] = HandleRegistry("graph")
_GRAPH_IDS = itertools.count()  # next() on a C iterator is atomic under the GIL

# Guards every graph record's ``original``, ``clones``, ``source_id`` and ``handles`` (see
# _link_clone; node.py and conditional.py read them under it too): a leaf lock, taken with
# no other lock acquired inside it, so any graph lock may be held around it. Re-entrant: the
# collector may run a ``__del__`` that destroys a graph while this thread holds it.
_LINEAGE = threading.RLock()
_new_object = object.__new__
_MEM_NODE_TYPES = (NodeType.MemAlloc, NodeType.MemFree)
# An enum member read through its class costs ten times a global's read on Python 3.11 (the
# metaclass looks it up): add_kernel_node reads this constant.
_KERNEL = NodeType.Kernel
_SLOT_GENERATIONS, _SLOT_OWNERS, _SLOT_IDS = NODES.columns()  # see _attach
# From this many nodes on, adding to a graph pauses the collector's automatic passes until the
# building task yields, or in a thread without a running loop until the build stops growing
# the graph (core.gcpause): each full pass would walk every node of the graph so far
# and could free none of them, and they come as often as the graph grows by a quarter. The
# young passes before the pause cost a 10,000-node build a tenth of its time; below this
# many, a build is too short for the pause's own cost (a callback on the loop) to pay.
BULK_BUILD_NODES = 1_000


def _node_count(graph: Graph) -> int:
    """How far a build has got: what the collector's passes ask a watched pause's graph
    (a bulk build in a thread without a running event loop; see core.gcpause)."""
    return len(graph._by_id)


@dataclass(frozen=True, slots=True)
class GraphStatistics:
    id: int
    nodes: int
    edges: int
    roots: int
    child_graphs: int
    user_objects: int
    user_object_references: int
    has_mem_nodes: bool
    instantiated: bool
    destroyed: bool


class _GraphRecord(HandleRecord):
    """What a forgotten graph gives back: its user-object references and alloc ranges; and
    the graph's place in the clone lineage.

    The graph owns user objects and reservations through this record (``owner_key``), so
    neither refers to the graph. Embedded copies (child-graph nodes, conditional bodies) are
    quiet: the runtime owns them, and they go with the node that holds them.

    The lineage (``original``, ``clones``, ``handles``, ``source_id``) is kept here, between
    records, not between graphs: a clone refers to its original's *record*, which refers to
    its graph only weakly, so a clone never keeps a forgotten original (its nodes, its
    user-object references) alive for as long as the clone lives. Once its graph is destroyed
    or collected, a record leaves the lineage (see _unlink), its clones moving on to the graph
    it came from. All read and changed under ``_LINEAGE``.
    """

    __slots__ = ("clones", "graph_id", "handles", "original", "source_id", "user_objects")

    releases = True

    def __init__(self, graph: Graph, user_objects: set[UserObject]) -> None:
        super().__init__(graph, f"graph #{graph.id}")
        self.user_objects = user_objects  # the graph's own set, shared
        self.graph_id = graph.id
        # The record of the graph this one was cloned from (see Graph.original).
        self.original: _GraphRecord | None = None
        # The records of the graphs cloned from this one, while they last.
        self.clones: weakref.WeakSet[_GraphRecord] | None = None
        # The conditional handles this graph's nodes may use although the walk up
        # ``original`` does not reach the graph that made them: its own, and those of graphs
        # it descends from that left the lineage (see _relink and conditional._owns). Held
        # weakly: a handle nobody holds any more can never be given to a node again, so it
        # drops out, and a chain of clones each replacing the last holds the handles still
        # alive, not one entry per graph gone. None until the graph makes or inherits one.
        self.handles: weakref.WeakSet[ConditionalHandle] | None = None
        # The id of the graph this one was cloned from (HIP's ``pOriginalGraph_``) once that
        # one left the lineage and ``original`` skips it (see _relink): a child-graph node's
        # setter still refuses that graph and no other (node.check_not_own_parent). None:
        # ``original`` is it.
        self.source_id: int | None = None

    def release(self) -> None:
        _unlink(self)  # first: a forgotten graph's clones move on whatever a destructor does
        RESERVATIONS.release_owner(self)
        objects = list(self.user_objects)
        self.user_objects.clear()
        disown_all(objects, self)  # every destructor runs, then the first error


class Graph(DestroyOnExit):
    """A graph of device work (``hipGraphCreate``). See the ``add_*_node`` methods.

    Attributes:
        id: HIP's graph id (DOT names clusters and nodes after it).
        hid: the graph's registry handle.
        lock: serialises every edit and query of this graph.
        original: the graph this one was cloned from, if any; once that graph is destroyed
            or collected, the graph it was cloned from in turn (a destroyed or forgotten graph
            is skipped, so a chain of clones each replacing the last keeps none of the old
            ones alive).
        owner_node: the child-graph or conditional node that embeds this graph, if any.
        has_mem_nodes: the graph holds memory-alloc or memory-free nodes.
        instantiated: an executable was made from it (set by the executable layer).
    """

    _copy_hint = "; graph.clone() makes a copy of its nodes"

    # Slots: a graph takes no attribute it does not declare (a typo such as
    # ``graph.destory = ...``, or a method shadowed on the instance, is refused with
    # AttributeError). ``__weakref__``: its registry, its finalizer (whose record is what a
    # clone's lineage keeps) and a forgotten capture's record hold it weakly.
    __slots__ = (
        "__weakref__",
        "_adding",
        "_by_id",
        "_edge_count",
        "_has_mem_nodes",
        "_hid",
        "_id",
        "_instantiated",
        "_last_launch",
        "_life",
        "_lock",
        "_node_registry_ref",
        "_open",
        "_owner_node",
        "_removals",
        "_replacements_seen",
        "_user_objects",
    )

    def __init__(self) -> None:
        # ``id``, ``lock`` and ``hid`` are read-only (properties below): another id would
        # rename the graph apart from its record (which its conditional handles are matched
        # against), another lock (a plain Lock) would hang its nested sections, another
        # handle would retire another graph's registration.
        self._id = next(_GRAPH_IDS)
        self._lock = threading.RLock()
        # Weak: an executable keeps the conditional bodies it was made from (its race reports
        # name their nodes), and a body must not keep its node, and through it the whole graph,
        # alive for as long (a forgotten graph never freed, its user objects held).
        self._owner_node: weakref.ref[GraphNode] | None = None
        self._has_mem_nodes = False
        self._instantiated = False
        # Devices replaced (configure_devices) before this graph was made, or before the
        # oldest graph it copies nodes from (clone): while the count is the same, no kernel
        # argument checked as its node was added is a replaced device's pointer (see
        # exec.instantiate's check_pointer_origins).
        self._replacements_seen = replacements()
        self._by_id: dict[int, GraphNode] = {}  # in insertion order: see _nodes
        self._edge_count = 0
        self._user_objects: set[UserObject] = set()
        self._node_registry_ref: Any = None  # made by NODES for the first node (node_registry)
        # The last kernel-node launch shape found (runtime.params.common_kernel_params' memo).
        self._last_launch: tuple[Any, ...] | None = None
        self._hid = GRAPHS.register(self)
        # What ``GRAPHS.get(self.hid) is self`` says, as a plain attribute: the registry
        # retires a graph's handle only in ``_teardown_locked`` (which clears this) or once
        # the graph was collected, when no one can ask. The per-node checks read it.
        self._open = True
        self._life = _GraphRecord(self, self._user_objects)
        # Destroys of this graph's nodes, and of the graph itself. An add converts its
        # arguments under the graph's lock, and a conversion may run user code (an argument's
        # ``__index__``) that destroys a dependency or the graph on this very thread: an add
        # that sees this move checks the graph and its dependencies again before it commits.
        self._removals = 0
        # The add in progress on this thread (its lock held): the removals it has seen and its
        # dependencies, for a builder to check again before it commits (see _still_addable).
        self._adding: tuple[int, Sequence[GraphNode]] | None = None

    # -- validity ----------------------------------------------------------------------------------

    @property
    def id(self) -> int:
        """HIP's graph id (DOT names clusters and nodes after it; read-only)."""
        return self._id

    @property
    def lock(self) -> threading.RLock:
        """Serialises every edit and query of this graph (read-only)."""
        return self._lock

    @property
    def hid(self) -> HandleId:
        """The graph's registry handle (read-only: its destroy retires exactly this one)."""
        return self._hid

    @property
    def original(self) -> Graph | None:
        """The graph this one was cloned from, if any (read-only: see the class notes).

        Held weakly, through its record: a graph dropped without ``destroy()`` is freed even
        while its clones live, and from then on is skipped, as a destroyed one is.
        """
        record = self._life.original
        while record is not None:
            graph: Graph | None = record.handle
            if graph is not None and graph._open:
                return graph
            record = record.original
        return None

    @property
    def has_mem_nodes(self) -> bool:
        """Whether a memory-alloc or memory-free node was ever added (read-only: it decides
        whether the graph may be cloned, embedded or instantiated more than once)."""
        return self._has_mem_nodes

    @property
    def instantiated(self) -> bool:
        """Whether an executable was made from this graph (read-only)."""
        return self._instantiated

    @property
    def owner_node(self) -> GraphNode | None:
        """The child-graph (or conditional) node that embeds this graph, if any (read-only:
        the node that made the copy sets it, and the copy goes with that node). None too once
        that node's graph was collected (the node is held weakly) while this copy lives on."""
        owner = self._owner_node
        return None if owner is None else owner()

    def _set_owner(self, node: GraphNode) -> None:
        self._owner_node = weakref.ref(node)
        self._life.quiet = True  # the node owns this copy: it goes with it

    @property
    def state(self) -> HandleState:
        return HandleState.OPEN if GRAPHS.get(self.hid) is self else HandleState.DESTROYED

    @property
    def destroyed(self) -> bool:
        return GRAPHS.get(self.hid) is not self

    @property
    def alive(self) -> bool:
        """False once the graph was destroyed."""
        return GRAPHS.get(self.hid) is self

    def _check_alive(self) -> None:
        """Raise InvalidValue if the graph was destroyed."""
        if not self._open:
            check_live(False, "graph", self)

    # -- building: the public adds call graph/builder.py and graph/copy_nodes.py -----------------

    def _add_node(
        self, node_type: NodeType, deps: Deps, build: Callable[[], NodeParams]
    ) -> GraphNode:
        """Check the graph and ``deps``, ``build`` the parameters, and attach the node.

        ``build`` converts the caller's arguments, which may run user code; one that reserves
        something (an alloc node's range, a conditional node's bodies) calls
        :meth:`_still_addable` first, and the dependencies are checked again after it when
        user code destroyed anything meanwhile.
        """
        with self.lock:
            self._check_alive()
            outer = self._adding
            self._adding = (self._removals, self._check_deps(deps))
            try:
                params = build()
                dep_list = self._still_addable()
            finally:
                self._adding = outer
            return self._attach(node_type, params, dep_list)

    def _still_addable(self) -> Sequence[GraphNode]:
        """The dependencies of the add in progress, checked again (with the graph) if user
        code run by its argument conversions destroyed a node or the graph since."""
        adding = self._adding
        assert adding is not None, "called outside an add"
        removals, dep_list = adding
        if self._removals != removals:
            self._check_alive()
            dep_list = self._check_deps(dep_list)
            self._adding = (self._removals, dep_list)
        return dep_list

    def _add_made(self, node_type: NodeType, deps: Deps, params: NodeParams) -> GraphNode:
        """:meth:`_add_node` for parameters validated already (what capture adds, per op).

        The graph and dependency checks are the same, without a closure made for ``params``.
        """
        lock = self.lock
        lock.acquire()  # not ``with``: its enter and exit calls cost twice the lock itself
        try:
            if not self._open:
                self._check_alive()  # raises
            return self._attach(node_type, params, self._check_deps(deps))
        finally:
            lock.release()

    def _add_child_graph(self, child: Graph, deps: Deps) -> GraphNode:
        with self.lock:
            self._check_alive()
            # Checked into a sequence, because the dependencies are checked again below (a node
            # may be destroyed while the child is copied): a generator reads only once.
            dep_list = self._check_deps(deps)
        copy = self._embed_copy(child)  # outside our lock: see the module notes
        try:
            with self.lock:
                self._check_alive()
                dep_list = self._check_deps(dep_list)
                node = self._attach(NodeType.Graph, ChildGraphParams(copy), dep_list)
                copy._set_owner(node)
                return node
        except BaseException:
            copy._dispose()
            raise

    def _embed_copy(self, child: Graph) -> Graph:
        child = live_graph(child, "child graph")
        with gcpause.paused():
            return child._clone()

    def _check_mem_node_allowed(self) -> None:
        owner = self.owner_node
        if owner is not None:  # the message names the node that embeds this graph
            if owner._type is NodeType.Conditional:
                raise NotSupported("a conditional node's body cannot hold memory nodes")
            raise NotSupported("a graph embedded in a child-graph node cannot hold memory nodes")

    def _attach(
        self,
        node_type: NodeType,
        params: NodeParams,
        deps: Sequence[GraphNode],
        node_id: int | None = None,
    ) -> GraphNode:
        """Make a node with edges from ``deps``; a list of two or more becomes the node's own.

        Every caller passes ``_check_deps``' result (a list made for this node when it has two
        or more entries) or ``()``.
        Each side of the edges takes the form :data:`~ahipgraph.graph.node.Edges` gives it:
        a lone neighbour is held as itself, no list made for it.
        """
        # The node, made from a bare instance with its slots filled (not the constructor, which
        # refuses callers other than the graph): once per node added, captured or cloned.
        node: GraphNode = _new_object(GraphNode)
        node._graph = self
        node._id = node_id = next(_NODE_IDS) if node_id is None else node_id
        node._type = node_type
        node._params = params
        node._dependents = ()
        # NODES.enter(node), inline (see NodeRegistry.columns): one of the graph's spare
        # slots; the id is stored before the owner, so a lock-free find never sees the owner
        # with another node's id.
        ref = self._node_registry_ref
        if ref is None or not (spare := ref.spare):
            ref = NODES.take_spare(self)
            spare = ref.spare
        slot = spare.pop()
        _SLOT_IDS[slot] = node_id
        _SLOT_OWNERS[slot] = ref
        generation = _SLOT_GENERATIONS[slot]  # node_handle(slot, generation), inline
        node._handle = slot | generation << ROW_BITS if generation else slot
        count = len(deps)
        if count == 1:
            dep = deps[0]
            node._deps = dep
            succ = dep._dependents
            if not succ:
                dep._dependents = node
            elif type(succ) is list:
                succ.append(node)
            else:
                dep._dependents = [succ, node]  # type: ignore[list-item]
            self._edge_count += 1
        elif count:
            own = deps if type(deps) is list else list(deps)
            node._deps = own
            for dep in own:  # what _link does for each dependency, without a call per edge
                dep._dependents = with_edge(dep._dependents, node)
            self._edge_count += count
        else:
            node._deps = ()
        by_id = self._by_id
        by_id[node_id] = node  # before anyone sees it: the registry finds it here
        if len(by_id) >= BULK_BUILD_NODES and not gcpause.pauses:
            gcpause.pause_until_yield(self, _node_count)  # a bulk build: see core.gcpause
        if observe.observer is not None:  # the race checker keeps the line that added it
            observe.observer.node_added(node)
        if node_type in _MEM_NODE_TYPES:
            self._has_mem_nodes = True
        return node

    def _check_deps(self, deps: Deps) -> Sequence[GraphNode]:
        """``deps``, checked: each a live node of this graph, given once.

        Two or more come back as a new list, which ``_attach`` may keep as the node's own; one
        or none come back as a sequence only to be read (the caller's own tuple, on the fast
        path, never a list the caller can still change).
        """
        # Fast path for what almost every add passes: no dependency, or one live node of this
        # (live) graph. Anything else, errors included, takes the full checks below.
        given: Any = deps
        kind = type(given)
        if kind is tuple or kind is list:
            if not given:
                return ()
            if len(given) == 1:
                dep: Any = given[0]
                # This graph vouches for its live nodes (the registry looks them up there too).
                if type(dep) is GraphNode and self._by_id.get(dep._id) is dep:
                    # A tuple is the caller's own; a list is copied, as user code run by the
                    # add's argument conversions could otherwise change it after this check.
                    return given if kind is tuple else (dep,)
        elif kind is GraphNode:
            node: GraphNode = given
            if self._by_id.get(node._id) is node:
                return (node,)
        if deps is None or isinstance(deps, GraphNode):
            deps = (deps,)  # None: a null node, refused below as add_dependencies refuses it
        elif not isinstance(deps, Iterable):  # a number, say: not a bare "not iterable"
            raise TypeError(f"deps must be a GraphNode or an iterable of them, got {deps!r}")
        elif type(deps) is not list and type(deps) is not tuple:
            # Any other iterable is user code, run under this thread's (reentrant) lock: it may
            # edit this graph as it is read, destroying a node it gave already or the graph
            # itself. It is read whole first, so every check below sees the graph as it is.
            deps = list(deps)
            self._check_alive()
        checked: list[GraphNode] = []
        seen: set[GraphNode] = set()
        for dep in deps:
            self._check_member(dep, "dependency")
            if dep in seen:
                raise InvalidValue(f"{dep!r} is listed twice as a dependency")
            seen.add(dep)
            checked.append(dep)
        return checked

    def _check_member(self, node: GraphNode | None, what: str) -> None:
        node = live_node(node, what)
        if node.graph is not self:
            raise InvalidValue(f"{what} {node!r} belongs to another graph")

    def _link(self, src: GraphNode, dst: GraphNode) -> None:
        src._dependents = with_edge(src._dependents, dst)
        dst._deps = with_edge(dst._deps, src)
        self._edge_count += 1

    def _unlink(self, src: GraphNode, dst: GraphNode) -> None:
        src._dependents = without_edge(src._dependents, dst)
        dst._deps = without_edge(dst._deps, src)
        self._edge_count -= 1

    # -- edges and queries (graph/topology.py) ----------------------------------------------------

    def add_dependencies(
        self, from_nodes: Sequence[GraphNode] | GraphNode, to_nodes: Sequence[GraphNode] | GraphNode
    ) -> None:
        """Add edges ``from_nodes[i] -> to_nodes[i]`` (``hipGraphAddDependencies``).

        Cycles are not checked here (as in HIP); ordering a cyclic graph fails later. Nothing
        is added unless every edge is valid.

        Raises:
            InvalidValue: destroyed graph; a null, destroyed or foreign node; a self-edge; an
                edge that exists already or is given twice.
            ValueError: the two lists differ in length.
        """
        topology.add_dependencies(self, from_nodes, to_nodes)

    def remove_dependencies(
        self, from_nodes: Sequence[GraphNode] | GraphNode, to_nodes: Sequence[GraphNode] | GraphNode
    ) -> None:
        """Remove edges ``from_nodes[i] -> to_nodes[i]`` (``hipGraphRemoveDependencies``).

        Raises:
            InvalidValue: destroyed graph; a null, destroyed or foreign node; an edge that does
                not exist (or is given twice). Nothing is removed then.
            ValueError: the two lists differ in length.
            NotSupported: the graph has memory-alloc or memory-free nodes (CUDA's rule; HIP
                itself removes the edge, which can reorder a free before its alloc).
        """
        topology.remove_dependencies(self, from_nodes, to_nodes)

    def nodes(self) -> list[GraphNode]:
        """All nodes in topological order (``hipGraphGetNodes``: Kahn, insertion-order FIFO).

        Raises:
            InvalidValue: destroyed graph, or the graph has a cycle.
        """
        return topology.nodes(self)

    def root_nodes(self) -> list[GraphNode]:
        """Nodes without dependencies, in insertion order (``hipGraphGetRootNodes``)."""
        return topology.root_nodes(self)

    def edges(self) -> list[tuple[GraphNode, GraphNode]]:
        """Every edge (from, to): nodes in insertion order, each node's edges in edge order."""
        return topology.edges(self)

    @property
    def _nodes(self) -> ValuesView[GraphNode]:
        """The nodes in insertion order (HIP's ``vertices_``; caller holds the lock).

        ``_by_id`` gains and loses its entries exactly when a node is added and removed, so
        its values are that order; a second dict of the nodes would only be an entry per node
        more to fill and to keep.
        """
        return self._by_id.values()

    def _ordered_nodes(self) -> list[GraphNode]:
        """Nodes in insertion order (caller holds the lock)."""
        return list(self._nodes)

    # -- the add_* methods (graph/builder.py, graph/copy_nodes.py) --------------------------------

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
        # What ``_add_node`` does, in this one frame (the most frequent add): the checks in the
        # same order (graph, then dependencies, then parameters), with common_kernel_params for
        # the usual launch shape (remembered per graph, see there) and kernel_params for every
        # other, errors included.
        lock = self.lock
        lock.acquire()  # not ``with``: its enter and exit calls cost twice the lock itself
        try:
            if not self._open:
                self._check_alive()  # raises
            dep: Any
            if (
                type(deps) is tuple
                and len(deps) == 1
                and type(dep := deps[0]) is GraphNode
                and self._by_id.get(dep._id) is dep
            ):
                dep_list: Sequence[GraphNode] = deps  # _check_deps' fast path: one live node
            else:
                dep_list = self._check_deps(deps)
            removals = self._removals  # packing may run user code: see __init__
            params = common_kernel_params(
                kernel, grid, block, args, shared_mem, priority, None, self
            )
            if params is None:
                params = kernel_params(
                    kernel, grid, block, args, shared_mem=shared_mem, priority=priority
                )
            if self._removals != removals:
                self._check_alive()
                dep_list = self._check_deps(dep_list)
            return self._attach(_KERNEL, params, dep_list)
        finally:
            lock.release()

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
        return builder.add_memcpy_node(self, dst, src, nbytes, kind, deps)

    def add_memset_node(
        self,
        dst: DevicePtr,
        value: int,
        width: int | None = None,
        *,
        nbytes: int | None = None,
        element_size: int = 1,
        height: int = 1,
        pitch: int | None = None,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a fill of ``height`` rows of ``width`` elements (``hipGraphAddMemsetNode``).

        ``nbytes=`` gives the size of a one-row fill in bytes instead of ``width``, as
        ``stream.memset`` and ``Device.memset`` take it (exactly one of the two); the node's
        ``width`` is then ``nbytes / element_size``.

        Raises:
            InvalidValue: destroyed graph, bad deps, null ``dst``, element size not 1/2/4,
                a width or height of 0 (as HIP), a region outside the allocation, a negative
                ``nbytes`` or one that is not a whole number of elements.
            TypeError: neither ``width`` nor ``nbytes`` given, or both, or ``nbytes`` with a
                ``height`` other than 1.
        """
        return builder.add_memset_node(
            self, dst, value, width, nbytes, element_size, height, pitch, deps
        )

    def add_host_node(
        self, fn: Callable[..., Any], args: Sequence[Any] = (), *, deps: Deps = ()
    ) -> GraphNode:
        """Add a host callback ``fn(*args)`` (``hipGraphAddHostNode``); it may be ``async``.

        Raises:
            InvalidValue: destroyed graph, bad deps, ``fn`` is None. TypeError: not callable.
        """
        return builder.add_host_node(self, fn, args, deps)

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
        return builder.add_event_record_node(self, event, deps)

    def add_event_wait_node(self, event: Event, *, deps: Deps = ()) -> GraphNode:
        """Wait for ``event`` when the node runs (``hipGraphAddEventWaitNode``).

        Raises:
            InvalidValue: destroyed graph, bad deps, ``event`` null or destroyed.
        """
        return builder.add_event_wait_node(self, event, deps)

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
        return builder.add_mem_alloc_node(self, nbytes, device, deps)

    def add_mem_free_node(self, ptr: DevicePtr, *, deps: Deps = ()) -> GraphNode:
        """Free a memory-alloc node's allocation when the node runs (``hipGraphAddMemFreeNode``).

        Raises:
            InvalidValue: destroyed graph, bad deps, ``ptr`` null, not the start of an
                allocation made by an alloc node of a live graph, or already freed by a node.
            NotSupported: this graph is embedded in a child-graph node.
        """
        return builder.add_mem_free_node(self, ptr, deps)

    def add_memcpy_3d_node(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: Triple,
        *,
        dst_pos: Triple = (0, 0, 0),
        src_pos: Triple = (0, 0, 0),
        kind: CopyKind | int | None = None,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a pitched copy of ``extent`` = (width bytes, height rows, depth slices)
        (``hipGraphAddMemcpyNode``); a 2D copy is a depth of 1.

        Raises:
            InvalidValue: destroyed graph, bad deps, a null endpoint, a pitch above the
                current device's ``max_pitch``, a region out of bounds.
            InvalidPitchValue: a pitch below the width. InvalidMemcpyDirection: a bad kind.
        """
        return copy_nodes.add_memcpy_3d_node(self, dst, src, extent, dst_pos, src_pos, kind, deps)

    def add_memcpy_node_to_symbol(
        self,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
        *,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a copy into ``symbol`` at ``offset`` (``hipGraphAddMemcpyNodeToSymbol``).

        Raises:
            InvalidSymbol: not a declared symbol. InvalidValue: destroyed graph, bad deps,
                ``offset + nbytes`` past the symbol. InvalidMemcpyDirection: a bad kind.
        """
        return copy_nodes.add_memcpy_node_to_symbol(self, symbol, src, nbytes, offset, kind, deps)

    def add_memcpy_node_from_symbol(
        self,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
        *,
        deps: Deps = (),
    ) -> GraphNode:
        """Add a copy out of ``symbol`` at ``offset`` (``hipGraphAddMemcpyNodeFromSymbol``).

        Raises: as :meth:`add_memcpy_node_to_symbol`.
        """
        return copy_nodes.add_memcpy_node_from_symbol(self, dst, symbol, nbytes, offset, kind, deps)

    # -- generic and conditional nodes (graph/generic.py, graph/conditional.py) -----------------

    def add_node(self, params: GraphNodeParams, *, deps: Deps = ()) -> GraphNode:
        """Add a node of any kind from its parameter record (``hipGraphAddNode``).

        Makes exactly the node the kind's own ``add_*_node`` would, with its checks.

        Raises:
            InvalidValue: a kind a graph cannot hold, or a record not of the kind named.
            Whatever the kind's own add raises.
        """
        from .generic import add_node

        return add_node(self, params, deps)

    def conditional_handle(
        self, default: int = 0, *, assign_default: bool = True
    ) -> ConditionalHandle:
        """A handle for conditional nodes of this graph (``hipGraphConditionalHandleCreate``).

        Args:
            default: the handle's value at the start of each launch (``assign_default``), or
                once when an executable is made.
            assign_default: HIP's ``hipGraphCondAssignDefault`` flag: a bool, or HIP's
                flags value 0 or 1.

        Raises:
            InvalidValue: destroyed graph, a default outside 0..2**32-1, a flags value other
                than 0 or 1. TypeError: bad types.
        """
        with self.lock:
            return make_handle(self, default, assign_default)

    def add_conditional_node(
        self,
        handle: ConditionalHandle,
        kind: ConditionalKind | int,
        size: int = 1,
        *,
        deps: Deps = (),
    ) -> tuple[GraphNode, list[Graph]]:
        """Add an IF, WHILE or SWITCH node (``hipGraphAddConditionalNode``).

        Returns:
            The node and its ``size`` body graphs, empty, to be filled by the caller.

        Raises:
            InvalidValue: destroyed graph, bad deps, null or foreign handle, bad kind or size.
        """

        def build() -> ConditionalNodeParams:
            checked = check_conditional(self, handle, kind, size)
            self._still_addable()  # before the bodies are made: a refused add makes none
            return ConditionalNodeParams(*checked, bodies=tuple(Graph() for _ in range(checked[2])))

        # The bodies are marked as the node's before the lock is let go: from then on another
        # thread can reach them (``nodes()``, ``params``), and a body not yet marked could be
        # destroyed or given memory nodes, which an embedded graph refuses.
        with self.lock:
            node = self._add_node(NodeType.Conditional, deps, build)
            bodies = list(node._params.bodies)  # type: ignore[union-attr]
            for body in bodies:
                body._set_owner(node)
        return node, bodies

    # -- clone -------------------------------------------------------------------------------------

    def clone(self) -> Graph:
        """An independent deep copy (``hipGraphClone``); its nodes keep their ids.

        The copy owns one reference to each user object this graph owns, as in HIP. Cloning a
        graph with a cycle works; ordering the copy will fail as it would for this graph.

        Raises:
            InvalidValue: destroyed graph. NotSupported: the graph has memory nodes.
        """
        with gcpause.paused():  # a bulk build that makes no garbage: see core.gcpause
            return self._clone()

    def _clone(self) -> Graph:
        """Copy this graph and its child graphs, however deep, with an explicit work list.

        Every source graph's lock is held until the whole copy is made (parent before child,
        as everywhere). A failure half way disposes of every copy made so far.
        """
        made: list[Graph] = []
        try:
            with contextlib.ExitStack() as locks:
                locks.enter_context(self.lock)
                self._check_alive()
                if self.has_mem_nodes:
                    raise NotSupported(f"{self!r} has memory nodes and cannot be copied")
                top = Graph()
                top._replacements_seen = self._replacements_seen  # its nodes' pointers are old
                _link_clone(top, self)
                made.append(top)
                work: list[tuple[Graph, Graph]] = [(self, top)]
                while work:
                    source, copy = work.pop()
                    if source is not self:
                        locks.enter_context(source.lock)
                    originals = list(source._nodes)
                    twins: list[GraphNode] = []
                    for node in originals:
                        params = node._params
                        child: Graph | None = None
                        if isinstance(params, ChildGraphParams):
                            child = Graph()
                            _link_clone(child, params.graph)
                            made.append(child)
                            work.append((params.graph, child))
                            params = ChildGraphParams(child)
                        bodies: list[Graph] = []
                        if isinstance(params, ConditionalNodeParams):
                            for body in params.bodies:
                                bodies.append(Graph())
                                _link_clone(bodies[-1], body)
                                made.append(bodies[-1])
                                work.append((body, bodies[-1]))
                            params = replace(params, bodies=tuple(bodies))
                        twin = copy._attach(node._type, params, (), node.id)
                        if child is not None:
                            child._set_owner(twin)
                        for body in bodies:
                            body._set_owner(twin)
                        twins.append(twin)
                    by_id = copy._by_id
                    for node, twin in zip(originals, twins, strict=True):
                        twin._deps = _twin_edges(node._deps, by_id)
                        twin._dependents = _twin_edges(node._dependents, by_id)
                    copy._edge_count = source._edge_count
                    for obj in source._user_objects:
                        if obj._owned_by(source) and obj._adopt(copy, 1):
                            copy._user_objects.add(obj)
                return top
        except BaseException:
            # Every source lock is released first: _dispose takes the capture lock, which is
            # never waited for while a graph's lock is held.
            for copy in reversed(made):
                copy._dispose()
            raise

    def find_in_clone(self, node: GraphNode) -> GraphNode:
        """``node``'s counterpart in this graph, one of a clone pair with ``node``'s graph.

        Called on the clone, as ``hipGraphNodeFindInClone(clone, original_node)``: this clone's
        copy of ``node``. Called on the original with a node of its clone: the node that one
        was copied from (the way back, which HIP leaves to the caller's own map). Either graph
        may be any number of clones away (a clone of a clone); a copy keeps its original's id.

        Raises:
            InvalidValue: destroyed graph or node; neither graph is a clone of the other; the
                node has no counterpart here (added after cloning, or since destroyed).
        """
        with self.lock:
            self._check_alive()
            node = live_node(node)
            if _descends_from(self, node.graph):
                missing = f"{node!r} has no copy in {self!r}"
            elif _descends_from(node.graph, self):
                missing = f"{node!r} was not copied from a node of {self!r}"
            else:
                raise InvalidValue(f"{self!r} and {node.graph!r} are not clones of one another")
            twin = self._by_id.get(node.id)
            if twin is None:
                raise InvalidValue(missing)
            return twin

    # -- user objects ------------------------------------------------------------------------------

    def retain_user_object(self, obj: UserObject, count: int = 1, move: bool = False) -> None:
        """Make this graph own ``count`` references to ``obj`` (``hipGraphRetainUserObject``).

        With ``move`` the graph takes over ``count`` of the caller's references instead of
        adding new ones. A dead object is left alone, as HIP does.

        As in HIP, a moved ``count`` is not checked against the references the caller holds.

        Raises:
            InvalidValue: destroyed graph, ``obj`` is None, ``count`` outside 1..INT_MAX, or the
                object's count (with new references) or this graph's share would pass INT_MAX.
        """
        # HIP's flags value: False/True, or 0 / hipGraphUserObjectMove (1)
        flag = flag_or_none(move)
        if flag is None:
            raise TypeError(f"move must be a bool, got {move!r}")
        if flag not in (0, 1):
            raise InvalidValue(f"flags must be 0 or 1 (move), got {flag}")
        move = bool(flag)
        with self.lock:
            count = self._check_user_object(obj, count)
            if obj._adopt(self, count, move=move, bounded=True):
                self._user_objects.add(obj)

    def release_user_object(self, obj: UserObject, count: int = 1) -> None:
        """Give back ``count`` of this graph's references (``hipGraphReleaseUserObject``).

        Releasing from a graph that does not own ``obj``, or more than it owns, does nothing.
        The destructor runs here if this drops the last reference.

        Raises:
            InvalidValue: destroyed graph, ``obj`` is None, ``count`` outside 1..INT_MAX.
        """
        with self.lock:
            count = self._check_user_object(obj, count)
        try:
            obj._disown(self, count)  # outside the lock: the destructor may run
        finally:  # and may raise, once the references are given back
            with self.lock:
                if obj in self._user_objects and not obj._owned_by(self):
                    self._user_objects.discard(obj)

    def _check_user_object(self, obj: UserObject, count: int) -> int:
        """The checks of a retain or release, in HIP's order; returns ``count`` as an int."""
        self._check_alive()
        if obj is None:
            raise InvalidValue("user object is null")
        if not isinstance(obj, UserObject):
            raise TypeError(f"expected a UserObject, got {obj!r}")
        checked = check_count(count)
        # A count of the user's own type converts through its ``__index__``: user code, run in
        # this thread under our (reentrant) lock, which may have destroyed this graph. A graph
        # destroyed now would keep the references it took for ever.
        self._check_alive()
        return checked

    def user_objects(self) -> dict[UserObject, int]:
        """A snapshot of the user objects this graph owns and how many references of each."""
        with self.lock:
            self._check_alive()
            owned = {obj: obj._owned_by(self) for obj in self._user_objects}
            return {obj: count for obj, count in owned.items() if count}

    # -- lifecycle ---------------------------------------------------------------------------------

    def _mark_instantiated(self, alloc_ptrs: list[DevicePtr] | None = None) -> None:
        """Record that an executable was made from this graph and owns the ranges of the
        alloc nodes it copied, ``alloc_ptrs`` (default: every alloc node's now). An internal
        hook: only ``exec/instantiate.py`` calls it. Alloc nodes added later keep their ranges
        with the graph."""
        with self.lock:
            self._check_alive()
            if alloc_ptrs is None:
                alloc_ptrs = [
                    n._params.ptr  # type: ignore[union-attr]
                    for n in self._nodes
                    if n._type is NodeType.MemAlloc
                ]
            self._instantiated = True
            RESERVATIONS.hand_over(alloc_ptrs)

    def instantiate(self, flags: int = 0, **options: Unpack[InstantiateOptions]) -> GraphExec:
        """Make an executable from this graph (``hipGraphInstantiateWithFlags``).

        Everything a replay needs is prepared here; later edits to this graph do not affect the
        executable. See :class:`ahipgraph.GraphExec`.

        Args:
            flags: one :class:`ahipgraph.InstantiateFlags` value (HIP rejects combinations).
            options: (:class:`ahipgraph.InstantiateOptions` types them for a type checker)
                ``device`` (a :class:`Device`; default the calling task's current device),
                ``signal_sets`` or ``num_sets`` (sets prepopulated, 16),
                ``signal_set_policy`` (what a launch does when every set is in use:
                ``"wait"``, the default, parks it until a completion returns one; ``"grow"``
                adds a set, HIP's counted miss), ``wait_for_signal_sets`` (the older bool
                spelling of that choice: True is ``"wait"``),
                ``arena_headroom`` (bytes for later argument updates, 128 KiB),
                ``strict_flush`` (fail dispatches that would read unflushed arguments),
                ``upload_stream`` (with ``UPLOAD``: the stream to upload on; default the null
                stream), ``check_races`` (refuse a graph holding an unordered conflicting
                pair, as :meth:`check_races` finds them; the executable's setters and
                ``update`` then recheck the nodes they change against the rest, conditional
                bodies included, and refuse a race, so it never holds one. An update cannot
                change a conditional node's bodies at all, so their check stands).

        Raises:
            InvalidValue: the graph was destroyed, has a cycle, or bad flags.
            NotSupported: a graph with memory nodes instantiated a second time, or
                ``DEVICE_LAUNCH`` (not simulated).
            InvalidConfiguration: a kernel node exceeds ``device``'s limits.
            InvalidDevicePointer: a kernel node holds a pointer of a device
                ``configure_devices`` replaced since the node was added.
            RaceError: ``check_races`` found unordered conflicting nodes.
            InvalidDevice: ``device`` was replaced by ``configure_devices``.
            TypeError / ValueError: an unknown option, or an option of the wrong type; a
                ``signal_set_policy`` other than ``"wait"`` or ``"grow"``, or one that
                ``wait_for_signal_sets`` contradicts.
        """
        from ..exec.graph_exec import GraphExec  # the exec layer sits above the graph layer

        return GraphExec._instantiate(self, flags, **options)

    def check_races(self) -> list[RaceReport]:
        """Unordered conflicting node pairs the declared edges allow (no device work needed).

        Returns a list of :class:`ahipgraph.RaceReport`, empty when every pair of nodes that
        touch the same bytes (one writing) is ordered by a path of edges. Child graphs are
        checked inline; a conditional node touches what its bodies (however nested) touch,
        at its own place, as ``instantiate(check_races=True)`` counts them, since whether a
        body runs is decided on the device. See :mod:`ahipgraph.exec.races`.

        Raises:
            InvalidValue: the graph was destroyed or has a cycle.
        """
        from ..exec.races import check_graph  # the exec layer sits above the graph layer

        return check_graph(self)

    def destroy(self) -> None:
        """Destroy the graph (``hipGraphDestroy``); executables made from it are unaffected.

        Releases the user-object references the graph owns (destructors may run here, after the
        graph is gone; the first exception one raises is re-raised once all are released).

        Raises:
            IllegalState: the graph was already destroyed.
            InvalidValue: the graph is a child-graph node's embedded copy (destroy the node).
        """
        with capture_state.LOCK, self.lock:  # the capture lock first: see _teardown_locked
            if GRAPHS.get(self.hid) is not self:
                if self._life.freed:  # collected: destroyed from a cycle-mate's __del__
                    return
                raise destroyed("graph", self, "destroy", "was already destroyed")
            if self.owner_node is not None:
                raise InvalidValue(f"{self!r} belongs to {self.owner_node!r}; destroy that node")
            children, objects = self._teardown_locked()
        self._release(children, objects)

    def _dispose(self) -> None:
        """Destroy an embedded copy (or a copy that failed half-way); idempotent.

        Takes the capture lock (see :meth:`_teardown_locked`): never call it holding a graph's
        lock.
        """
        with capture_state.LOCK, self.lock:
            if GRAPHS.get(self.hid) is not self:
                return
            children, objects = self._teardown_locked()
        self._release(children, objects)

    def _teardown_locked(self) -> tuple[list[Graph], list[UserObject]]:
        """Retire the graph and its nodes; return what :meth:`_release` gives back.

        The caller holds the capture lock, then this graph's lock (the order capture takes
        them in): a stream may be capturing into any graph a user can reach (an embedded copy
        included), and that capture is invalidated here, atomically with the graph's end.
        """
        GRAPHS.unregister(self.hid)  # from here every node handle is invalid too
        self._open = False
        _unlink(self._life)
        self._removals += 1
        capture_state.target_destroyed(self)
        self._life.detach()
        children: list[Graph] = []
        NODES.unregister_graph(self)  # every node at once, under one lock
        for node in self._nodes:
            # A node and its neighbours refer to each other: cleared, a destroyed graph's nodes
            # are freed by reference counting when dropped, not left to the collector.
            node._deps = node._dependents = ()
            if isinstance(node._params, ChildGraphParams):
                children.append(node._params.graph)
            elif isinstance(node._params, ConditionalNodeParams):
                children.extend(node._params.bodies)
        self._by_id = {}
        self._edge_count = 0
        objects = list(self._user_objects)
        self._user_objects.clear()
        if self.has_mem_nodes:
            # Ranges an executable took are its own to give back (see memnodes.py).
            RESERVATIONS.release_owner(owner_key(self))
        return children, objects

    def _release(self, children: list[Graph], objects: list[UserObject]) -> None:
        """Dispose of the embedded child graphs (however deep), then give back user objects.

        An explicit work list, not recursion, so nesting depth cannot overflow the stack. Each
        graph's user objects are released after its children's (depth first, children in node
        order); every release runs even if one raises, and the first exception is re-raised.
        """
        errors: list[BaseException] = []
        # (graph, its user objects, its children not yet disposed of)
        stack: list[tuple[Graph, list[UserObject], list[Graph]]] = [(self, objects, children[::-1])]
        while stack:
            graph, owned, pending = stack[-1]
            if pending:
                child = pending.pop()
                with capture_state.LOCK, child.lock:
                    if GRAPHS.get(child.hid) is not child:
                        continue
                    grandchildren, child_objects = child._teardown_locked()
                stack.append((child, child_objects, grandchildren[::-1]))
                continue
            stack.pop()
            for obj in owned:
                try:
                    obj._disown(graph)
                except BaseException as error:  # a Ctrl-C in one destructor: the rest still run
                    errors.append(error)
        if errors:
            try:
                raise errors[0]
            finally:
                errors.clear()  # no cycle through this frame: see lifetime/user_object.py

    def _destroy_node(self, node: GraphNode) -> None:
        # The capture lock first (see _teardown_locked): a capture that made or needs the node
        # is invalidated atomically with its removal (capture_state.node_destroyed).
        with capture_state.LOCK, self.lock:
            if self._life.freed:  # collected: destroyed from a cycle-mate's __del__
                return
            node._check_alive()
            if node._type in _MEM_NODE_TYPES:
                raise NotSupported(f"{node._type.name} nodes cannot be destroyed")
            capture_state.node_destroyed(self, node)
            for dep in list(edge_nodes(node._deps)):
                self._unlink(dep, node)
            for succ in list(edge_nodes(node._dependents)):
                self._unlink(node, succ)
            NODES.unregister(node.hid)  # first: the registry finds the node through _by_id
            del self._by_id[node.id]
            self._removals += 1
            params = node._params
        # The node's embedded graphs go as a destroyed graph's do: each one, even when a
        # user-object destructor of an earlier one raises (then the first error is raised).
        if isinstance(params, ChildGraphParams):
            self._release([params.graph], [])
        elif isinstance(params, ConditionalNodeParams):
            self._release(list(params.bodies), [])

    # -- DOT ---------------------------------------------------------------------------------------

    def to_dot(self, flags: int = 0, races: Sequence[RaceReport] | None = None) -> str:
        """The graph as Graphviz DOT, shaped like ``hipGraphDebugDotPrint`` (see ``DotFlags``).

        ``races``: reports of :meth:`check_races`, drawn over the graph with their fixes.
        """
        return dot.to_dot(self, flags, races)

    def debug_dot_print(self, path: str | os.PathLike[str], flags: int = 0) -> None:
        """Write :meth:`to_dot` to ``path`` (``hipGraphDebugDotPrint``).

        Raises:
            InvalidValue: destroyed graph or a null path. OperatingSystem: cannot write ``path``.
        """
        dot.write_dot(self, path, flags)

    def render(self, path: str | os.PathLike[str], format: str = "svg", flags: int = 0) -> None:
        """Draw the graph with Graphviz's ``dot`` into ``path`` (``format``: svg, png, pdf...).

        Raises:
            NotSupported: Graphviz is not installed. OperatingSystem: ``dot`` failed.
        """
        dot.render(self, path, format, flags)

    # -- reporting ---------------------------------------------------------------------------------

    def statistics(self) -> GraphStatistics:
        """Counts of this graph: nodes, edges, roots, child graphs, the user objects it owns
        and its references to them, whether it has memory nodes, was instantiated or destroyed."""
        with self.lock:
            owned = {obj: obj._owned_by(self) for obj in self._user_objects}
            return GraphStatistics(
                id=self.id,
                nodes=len(self._nodes),
                edges=self._edge_count,
                roots=sum(1 for node in self._nodes if not node._deps),
                child_graphs=sum(1 for node in self._nodes if node._type is NodeType.Graph),
                user_objects=sum(1 for count in owned.values() if count),
                user_object_references=sum(owned.values()),
                has_mem_nodes=self.has_mem_nodes,
                instantiated=self.instantiated,
                destroyed=self.destroyed,
            )

    @safe_repr
    def __repr__(self) -> str:
        if self.destroyed:
            return f"<Graph id={self.id} destroyed>"
        return (
            f"<Graph id={self.id} nodes={len(self._nodes)} edges={self._edge_count} "
            f"user_objects={len(self._user_objects)}>"
        )


def _twin_edges(edges: Edges, twins_by_id: dict[int, GraphNode]) -> Edges:
    """A clone's copy of one side of a node's edges, in the same form.

    The copies are found by id in the clone's own index (a clone keeps its nodes' ids), not in
    a map keyed by the original nodes: ints in sequence hash to neighbouring buckets, while a
    map keyed by objects spreads a million-node clone's lookups over memory (at 1,000,000
    nodes that map made a clone's per-node cost almost double its cost at 10,000).
    """
    if type(edges) is GraphNode:
        return twins_by_id[edges._id]
    if edges:
        return [twins_by_id[end._id] for end in edge_nodes(edges)]
    return ()


def live_graph(graph: object, what: str = "graph") -> Graph:
    """The checks every call taking a graph handle makes, in HIP's order.

    Raises:
        InvalidValue: ``graph`` is None or destroyed. TypeError: it is not a Graph.
    """
    if graph is None:
        raise InvalidValue(f"{what} is null")
    if not isinstance(graph, Graph):
        raise TypeError(f"{what} must be a Graph, got {graph!r}")
    graph._check_alive()
    return graph


def _descends_from(graph: Graph, ancestor: Graph) -> bool:
    """Whether ``graph`` was cloned, directly or through other clones, from ``ancestor``.

    The walk holds the lineage lock, so it reads the lineage as one while other threads
    destroy graphs in it and move their clones on (_unlink): unlocked, a walk that stepped
    onto a graph being destroyed could stop short of graphs ``graph`` descends from.
    """
    with _LINEAGE:
        target = ancestor._life
        record = graph._life.original
        while record is not None and record is not target:
            record = record.original
        return record is not None


def _link_clone(copy: Graph, source: Graph) -> None:
    """Record ``copy`` as cloned from ``source``: its ``original``, and in ``source``'s clones."""
    with _LINEAGE:
        _attach_clone(copy._life, source._life)


def _attach_clone(copy: _GraphRecord, source: _GraphRecord) -> None:
    """``copy.original = source``, with ``copy`` in ``source``'s clones (lineage lock held)."""
    copy.original = source
    if source.clones is None:
        source.clones = weakref.WeakSet()
    source.clones.add(copy)


def _in_lineage(record: _GraphRecord) -> bool:
    """The record's graph is alive and open: its clones link to it."""
    graph: Graph | None = record.handle
    return graph is not None and graph._open


def _unlink(record: _GraphRecord) -> None:
    """Take a destroyed (or collected) graph's record out of its clones' lineage: each now
    descends from the graph's own original. Nothing live refers to the record then, so a
    program that clones a graph, drops or destroys the old one and keeps the copy, again and
    again, holds one graph, not a chain of every old one. Its nodes are gone, so none of them
    can be looked up through it (``find_in_clone``); the conditional handles it made (or could
    use) stay usable in its clones, as they were before it went, through their ``handles``.

    A destroyed graph keeps its own ``original``: a clone still linked to it (see _relink)
    reaches the live graphs beyond it through that.
    """
    with _LINEAGE:
        clones, record.clones = record.clones, None
        if not clones:
            return
        for copy in list(clones):
            _relink(copy)


def _relink(copy: _GraphRecord) -> None:
    """Point ``copy`` at the nearest open graph it descends from, taking over the conditional
    handles of the graphs it skips. The caller holds the lineage lock.

    Adding ``copy`` to that graph's clones allocates, so the collector may run a ``__del__``
    that destroys that very graph (the lock is re-entrant): its own unlinking may then miss
    ``copy``, which is linked again, past it, until the graph it was linked to is open.
    """
    if copy.source_id is None and copy.original is not None:  # its first move: remember
        copy.source_id = copy.original.graph_id
    while True:
        target = copy.original
        while target is not None and not _in_lineage(target):
            if target.handles:  # its handles (and those it inherited) stay usable
                if copy.handles is None:
                    copy.handles = weakref.WeakSet()
                copy.handles |= target.handles
            target = target.original
        if target is None:
            copy.original = None
            return
        _attach_clone(copy, target)
        if _in_lineage(target):
            return
