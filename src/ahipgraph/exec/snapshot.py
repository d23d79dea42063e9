"""The executable's private copy of a graph.

Instantiation copies the graph, under its lock, into plain :class:`ExecNode` records in
topological order. Parameters are immutable objects, so the copy shares them; setters on the
executable replace them in the copy only, and later edits to the source graph never reach it.
Child graphs are copied recursively.

``sources`` maps each original node's handle to its copy: the exec-side setters find nodes
through it, so a node of another graph, a node added after instantiation or a node of a clone
is unknown (``InvalidValue``), as in HIP.

**Reading order.** A chain in insertion order is its own topological order and is read as it
is. A larger graph of another shape (a wide fork-join) is read in insertion order, one pass
per field, and its columns are permuted into Kahn's order by positions
(:mod:`~ahipgraph.exec.kahn_columns`): walking the nodes themselves in Kahn's order would visit
one node of every branch per round, far apart in memory. Small graphs, graphs whose nodes
rarely link to the node beside them, and graphs of many narrow rounds are walked node by node
(``ordered_columns``). All three ways give the same copy.
"""

from __future__ import annotations

import contextlib
import threading
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import gcpause
from ..core.int_array import IntArray
from ..core.registry import HandleId
from ..graph.node import GraphNode
from ..graph.node_registry import ROW_BITS, ROW_MASK
from ..graph.node_type import NodeType
from ..graph.topology import ordered_columns
from .kahn_columns import index_column, index_typecode, kahn_columns

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..lifetime.user_object import UserObject

__all__ = [
    "ExecGraph",
    "ExecNode",
    "Originals",
    "Positions",
    "SourceMap",
    "find_source",
    "snapshot",
    "snapshot_sources",
    "source_map",
]

_new_object = object.__new__
_hid = attrgetter("hid")
_handle_of = attrgetter("_handle")  # a graph node's registry row and generation, as one int
_type_of = attrgetter("_type")
_params_of = attrgetter("_params")
_deps_of = attrgetter("_deps")
_id_of = attrgetter("_id")


@dataclass(slots=True, eq=False)
class ExecNode:
    """One node of the executable's copy."""

    index: int
    id: int
    type: NodeType
    params: Any
    deps: tuple[int, ...]
    child: ExecGraph | None = None
    enabled: bool = True


_INT32_END = 1 << 31
_MADE_LOCK = threading.Lock()  # two first readers of a graph's nodes: one makes them
# A copy's columns as read (see ExecGraph.read_order): positions, ids, parameters.
# Positions: int32 where the count allows (4 bytes a node, kept as long as the copy is).
Positions = np.ndarray[Any, np.dtype[np.integer[Any]]]
_ReadOrder = tuple[Positions, list[int], list[Any]]
_SEE_MULTI = -1  # in a graph's first-dependency column: 0 or several dependencies
_CHAIN_MULTI: dict[int, tuple[int, ...]] = {0: ()}  # a chain's multi: its root, no dependency


class ExecGraph:
    """A graph copied for execution: nodes in topological order, dependencies by index.

    A copy of a large graph holds its nodes as columns: one list each of ids, types (or the
    one type, see below) and parameters, and each node's dependency as one machine int (an
    ``array``), the few nodes with no or several dependencies keeping a tuple aside.
    Instantiate reads the columns (:meth:`types`, :meth:`params_column`, :meth:`deps_of`,
    ...), so an executable that is only launched never holds an object per node for them.
    :attr:`nodes` makes the :class:`ExecNode` records on first use (a setter, an update, a
    plan check, DOT output), once; from then on they are the copy (a setter changes a
    record's parameters).

    A copy read in insertion order and put in Kahn's order by positions (see the module
    notes) keeps its ids and parameters as read, with the positions (:meth:`read_order`),
    until something asks for them in the copy's order: instantiate's compiler reads each
    run's parameters through the positions, so a launched-only executable never permutes them.

    A copy whose nodes are all of one type (a graph of kernels, usually) keeps that type, not
    a list of it: :meth:`types` makes the list for each reader (instantiate and update read
    it, a launch never does), so a live executable holds no pointer per node for it.
    """

    __slots__ = (
        "_dep",
        "_dependents",
        "_ids",
        "_kinds",
        "_length",
        "_made",
        "_multi",
        "_params",
        "_read",
        "_types",
        "graph_id",
        "user_objects",
    )

    def __init__(
        self,
        graph_id: int,
        nodes: list[ExecNode],
        user_objects: list[UserObject] | None = None,
    ) -> None:
        self.graph_id = graph_id
        # User objects owned by the graph or any child graph's copy, each once: the
        # executable holds a reference to each, as HIP's clone does.
        self.user_objects: list[UserObject] = [] if user_objects is None else user_objects
        self._dependents: list[list[int]] | None = None
        self._ids = [node.id for node in nodes]
        self._types: list[NodeType] | NodeType = [node.type for node in nodes]
        self._kinds = frozenset(map(id, self._types))
        self._length = len(nodes)
        self._params: list[Any] | None = None  # the records hold them
        self._read: _ReadOrder | None = None
        self._dep, self._multi = _dep_columns([node.deps for node in nodes])
        self._made: list[ExecNode] | None = nodes

    @classmethod
    def _from_columns(
        cls,
        graph_id: int,
        ids: list[int],
        types: list[NodeType],
        params: list[Any],
        dep: IntArray,
        multi: dict[int, tuple[int, ...]],
        user_objects: list[UserObject],
        order: Positions | None = None,
    ) -> ExecGraph:
        """The copy of columns in its order; with ``order``, ``ids`` and ``params`` are as
        read, and ``order[k]`` is the read index of the node at position ``k`` (``types`` is
        in the copy's order either way)."""
        copy = _new_object(cls)
        copy.graph_id = graph_id
        copy.user_objects = user_objects
        copy._dependents = None
        if order is None:
            copy._ids, copy._params, copy._read = ids, params, None
        else:  # permuted on first use (see _columns)
            copy._ids, copy._params, copy._read = [], None, (order, ids, params)
        copy._length = len(types)
        if types and types.count(types[0]) == len(types):  # one type: no set built per node
            copy._types = types[0]  # (see the class notes)
            copy._kinds = frozenset((id(types[0]),))
        else:
            copy._types = types
            copy._kinds = frozenset(map(id, types))  # ids: an enum member's hash is Python code
        copy._dep, copy._multi = dep, multi
        copy._made = None
        return copy

    def _columns(self) -> tuple[list[int], list[Any] | None]:
        """The ids and parameters columns in the copy's order, permuted on first use.

        Two first readers may both permute: they make equal lists. The columns are stored
        before the read order is dropped, so a reader that finds it gone finds them.
        """
        read = self._read
        if read is None:
            return self._ids, self._params
        order, read_ids, read_params = read
        at = order.tolist()
        ids = list(map(read_ids.__getitem__, at))
        params = list(map(read_params.__getitem__, at))
        self._ids, self._params = ids, params
        self._read = None
        return ids, params

    def read_order(self) -> tuple[Positions, list[Any]] | None:
        """``(order, params)`` while the parameters are held as read (see the class notes):
        the node at position ``k`` has ``params[order[k]]``. None once they are in the copy's
        order, or when they always were; then :meth:`params_column` is the column."""
        read = self._read
        return None if read is None else (read[0], read[2])

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        made = "made" if self._made is not None else "columns"
        return f"<ExecGraph of graph {self.graph_id}: {len(self)} nodes ({made})>"

    @property
    def nodes(self) -> list[ExecNode]:
        """The node records, in topological order: made on first use and kept."""
        made = self._made
        if made is None:
            # A record per node, none of them garbage: see core.gcpause. The pause is entered
            # before the lock and left after it, so the pass its end may run (and any
            # finalizer that pass calls) never runs with the lock held.
            with gcpause.paused(), _MADE_LOCK:
                made = self._made
                if made is None:
                    # The parameters column stays as it was (a reader that found no records a
                    # moment ago may still read it): from here on the records are the copy.
                    made = self._made = self._make_nodes()
        return made

    def _make_nodes(self) -> list[ExecNode]:
        ids, params = self._columns()
        assert params is not None
        multi = self._multi
        out: list[ExecNode] = []
        append = out.append
        for index, (node_id, node_type, node_params, dep) in enumerate(
            zip(ids, self.types(), params, self._dep, strict=True)
        ):
            # ExecNode(...), its fields stored without the call
            exec_node = _new_object(ExecNode)
            exec_node.index = index
            exec_node.id = node_id
            exec_node.type = node_type
            exec_node.params = node_params
            # a dependency's index is the int its own record holds: one int object per index
            exec_node.deps = (out[dep].index,) if dep >= 0 else multi[index]
            exec_node.child = None  # a copy with child graphs has its records from the start
            exec_node.enabled = True
            append(exec_node)
        return out

    @property
    def made(self) -> bool:
        """Whether the node records exist (see :attr:`nodes`)."""
        return self._made is not None

    def types(self) -> list[NodeType]:
        """Each node's type, by index (a column: no record made; a new list when the copy
        holds one type for all its nodes, see the class notes)."""
        types = self._types
        return types if isinstance(types, list) else [types] * self._length

    def params_column(self) -> list[Any]:
        """Each node's current parameters, by index (no record made)."""
        made = self._made
        if made is not None:
            return [node.params for node in made]
        params = self._columns()[1]
        assert params is not None
        return params

    def replace_params(self, column: list[Any], *, as_read: bool = False) -> bool:
        """Make ``column`` the parameters of the nodes while no record is made: by index, or
        with ``as_read`` in the order they are held as read (see :meth:`read_order`).

        A whole-graph update of a copy held as columns gives every node its new parameters at
        once (see :meth:`~.updater.Updater.update_columns`). Refused (False, nothing changed)
        once the records are made: they are the copy then, and a record made a moment ago
        already holds the column's old values; and ``as_read`` is refused once a reader has
        put the columns in the copy's order. Check and change are one step under the lock
        the records are made under, so the records are made from the new column or the
        column is not changed.
        """
        if len(column) != self._length:
            raise ValueError(f"{len(column)} parameters for {self._length} nodes")
        with _MADE_LOCK:
            if self._made is not None:
                return False
            if as_read:
                read = self._read
                if read is None:
                    return False
                self._read = (read[0], read[1], column)
                return True
            self._columns()  # the ids in the copy's order first: the column replaces the rest
            self._params = column
            return True

    def all_enabled(self, indices: Iterable[int]) -> bool:
        """Whether the nodes at ``indices`` are all enabled (no record made: a copy's nodes are
        enabled until a setter, which makes the records, disables one)."""
        made = self._made
        return made is None or all(made[index].enabled for index in indices)

    def id_of(self, index: int) -> int:
        """The id of the node at ``index`` (no record made, no column put in order)."""
        made = self._made
        if made is not None:
            return made[index].id
        read = self._read
        if read is None:
            return self._ids[index]
        return read[1][int(read[0][index])]

    def deps_of(self, index: int) -> tuple[int, ...]:
        """The dependencies of the node at ``index`` (no record made)."""
        dep = self._dep[index]
        return (dep,) if dep >= 0 else self._multi[index]

    def first_deps(self) -> tuple[IntArray, dict[int, tuple[int, ...]]]:
        """Each node's only dependency, or -1 where ``multi[index]`` holds its 0 or several."""
        return self._dep, self._multi

    def is_chain(self) -> bool:
        """Whether the copy is a chain: one root, each other node's dependency the node before
        it (its dependency column counts up from -1; compared in numpy)."""
        if self._multi != _CHAIN_MULTI:
            return False
        deps = np.frombuffer(self._dep, dtype=self._dep.typecode)  # "i" or "q": see index_column
        return bool((deps == np.arange(-1, len(deps) - 1, dtype=np.int64)).all())

    @property
    def flat(self) -> bool:
        """Whether no node is a child graph (every node's op is on its own segment's strand)."""
        return id(NodeType.Graph) not in self._kinds

    def only(self, node_type: NodeType) -> bool:
        """Whether every node (child graphs' aside) is of ``node_type`` (and there is one)."""
        return self._kinds == {id(node_type)}

    def has_type(self, node_type: NodeType) -> bool:
        """Whether any node (child graphs' aside) is of ``node_type``."""
        return id(node_type) in self._kinds

    @property
    def dependents(self) -> list[list[int]]:
        """Each node's dependents (indices, in order), made on first use and kept.

        Instantiate needs only how many dependents each node has (:meth:`dependent_counts`);
        the lists cost a list per node, so only the tools that walk edges forward make them.
        """
        dependents = self._dependents
        if dependents is None:
            # A node's first dependent makes a one-element list (an append to an empty list
            # reserves four): most nodes of a large graph have exactly one dependent.
            found: list[list[int] | None] = [None] * len(self)
            multi = self._multi
            for index, first in enumerate(self._dep):
                for dep in (first,) if first >= 0 else multi[index]:
                    have = found[dep]
                    if have is None:
                        found[dep] = [index]
                    else:
                        have.append(index)
            dependents = self._dependents = [[] if have is None else have for have in found]
        return dependents

    def dependent_counts(self) -> list[int]:
        """How many dependents each node has (small ints: no object per node)."""
        counts = [0] * len(self)
        for first in self._dep:
            if first >= 0:
                counts[first] += 1
        for deps in self._multi.values():
            for dep in deps:
                counts[dep] += 1
        return counts

    def walk(self) -> list[ExecNode]:
        """Every node, child graphs' nodes included (depth first, topological within a graph).

        An explicit stack, not recursion: child graphs may nest deeper than Python's stack.
        """
        out: list[ExecNode] = []
        append = out.append
        stack = [iter(self.nodes)]
        while stack:
            for node in stack[-1]:  # resumes where the iterator stopped
                append(node)
                if node.child is not None:
                    stack.append(iter(node.child.nodes))
                    break
            else:
                stack.pop()
        return out


def _dep_columns(
    deps: Iterable[tuple[int, ...]],
) -> tuple[IntArray, dict[int, tuple[int, ...]]]:
    first: list[int] = []
    multi: dict[int, tuple[int, ...]] = {}
    for index, each in enumerate(deps):
        if len(each) == 1:
            first.append(each[0])
        else:
            first.append(_SEE_MULTI)
            multi[index] = tuple(each)
    return array(index_typecode(len(first)), first), multi


def snapshot(graph: Graph) -> tuple[ExecGraph, list[GraphNode]]:
    """Copy ``graph`` for execution; also return its nodes in the copy's order.

    Child graphs are copied with a work list, not recursion, and every graph's lock is held
    until the whole copy is made (parent before child).

    Raises:
        InvalidValue: the graph was destroyed or has a cycle (in it or in a child graph).
    """
    copy, originals = snapshot_sources(graph)
    return copy, originals.in_order()


def snapshot_sources(graph: Graph) -> tuple[ExecGraph, Originals]:
    """:func:`snapshot`, with the original nodes as :class:`Originals` (what instantiate keeps
    as its source map), not a list in the copy's order.

    Raises:
        InvalidValue: the graph was destroyed or has a cycle (in it or in a child graph).
    """
    with graph.lock:
        graph._check_alive()
        top_copy, top_children, top_originals = _copy_one(graph)
        if not top_children:  # no child graph (most graphs): no other lock to hold
            return top_copy, top_originals
        with contextlib.ExitStack() as locks:  # the children's locks, until the copy is made
            _copy_children(locks, top_copy, top_children)
        return top_copy, top_originals


def _copy_children(
    locks: contextlib.ExitStack,
    top_copy: ExecGraph,
    top_children: list[tuple[ExecNode, Graph]],
) -> None:
    """Copy the child graphs of ``top_copy`` (every level), each child's lock entered in
    ``locks``, and fold each copy's children's user objects into it."""
    copies: list[tuple[ExecGraph, list[ExecGraph]]] = []  # each copy and its children
    pending = [(top_copy, top_children)]
    while pending:
        copy, source_children = pending.pop()
        children: list[ExecGraph] = []
        for node, child_graph in source_children:
            locks.enter_context(child_graph.lock)
            child_copy, grandchildren, _ = _copy_one(child_graph)
            node.child = child_copy
            children.append(child_copy)
            pending.append((child_copy, grandchildren))
        copies.append((copy, children))
    # Each copy owns its children's user objects too: fold them in, deepest first.
    for copy, children in reversed(copies):
        owned = dict.fromkeys(copy.user_objects)
        for child_copy in children:
            owned.update(dict.fromkeys(child_copy.user_objects))
        copy.user_objects = list(owned)


class Originals:
    """The nodes a copy was made from, in the copy's order (read on first use).

    A graph read in insertion order keeps its nodes in that order with the copy's order as
    positions (see :mod:`~ahipgraph.exec.kahn_columns`); the list in the copy's order is made
    only when something asks for it (the race check, ``snapshot``). :meth:`source_map` reads
    the handle ids in insertion order and permutes the integers, not the nodes.
    """

    __slots__ = ("_at", "_nodes", "params")

    def __init__(self, nodes: list[GraphNode], at: Positions | None = None) -> None:
        self._nodes = nodes  # in the copy's order, or in insertion order with ``at``
        self._at = at  # the copy's position -> index in ``nodes``
        # The nodes' parameters in the order of ``nodes`` (as read: in memory order), for
        # what does not depend on the order (counts, whether all share one kernel).
        self.params: list[Any] = []

    def __len__(self) -> int:
        return len(self._nodes)

    def in_order(self) -> list[GraphNode]:
        """The nodes in the copy's order."""
        at = self._at
        return self._nodes if at is None else list(map(self._nodes.__getitem__, at.tolist()))

    def source_map(self, copy: ExecGraph) -> SourceMap:
        """The :class:`SourceMap` of ``copy`` (made from these nodes)."""
        at = self._at
        if at is None:
            return SourceMap(self._nodes, copy)
        # The rows and generations as read: the map permutes them when it is made.
        return SourceMap._of_rows(*_rows_and_generations(self._nodes), copy, at)


def _copy_one(graph: Graph) -> tuple[ExecGraph, list[tuple[ExecNode, Graph]], Originals]:
    """Copy one graph's nodes (its lock held); child-graph nodes are left for the caller."""
    # A chain in insertion order (what one capturing stream makes) is its own topological
    # order: its columns are known without the walk. A larger graph of another shape is read
    # in insertion order and permuted by positions (see the module notes); the rest are
    # walked. Anything else: InvalidValue on a cycle.
    columns = _chain_columns(graph)
    read = kahn_columns(graph) if columns is None else None
    if read is None:
        order, first, multi = ordered_columns(graph) if columns is None else columns
        originals = Originals(order)
    else:
        order, first, multi = read.nodes, read.first, read.multi
        positions = read.order
        if len(positions) < _INT32_END:  # held by the copy and the source map: half the bytes
            positions = positions.astype(np.int32)
        originals = Originals(order, positions)
    # Under the graph's lock, with the graph alive, every node is alive too: read the fields
    # directly instead of through the accessors' per-call handle checks.
    types = list(map(_type_of, order))
    params = list(map(_params_of, order))
    ids = list(map(_id_of, order))
    originals.params = params
    # Read in insertion order: the ids and parameters are permuted when used (see
    # ExecGraph.read_order), the types now unless there is one (kernels, usually: any order).
    if read is not None and types.count(types[0]) != len(types):
        types = list(map(types.__getitem__, positions.tolist()))
    copy = ExecGraph._from_columns(
        graph.id,
        ids,
        types,
        params,
        first,
        multi,
        list(graph.user_objects()),
        None if read is None else positions,
    )
    children: list[tuple[ExecNode, Graph]] = []
    if not copy.flat:  # child graphs: the records now, each holding its child's copy
        for exec_node in copy.nodes:
            if exec_node.type is NodeType.Graph:
                params_any: Any = exec_node.params
                children.append((exec_node, params_any.graph))
                # The record's copy of the child is ``child`` (the caller makes it), not the
                # node's embedded graph: that one is the source node's own, and through its
                # owner node it would keep the source graph alive (a forgotten one never
                # freed, its user-object references held) for as long as the executable.
                exec_node.params = None
        copy._params = None  # nor the column the records were made from: they are the copy
    return copy, children, originals


def _chain_columns(
    graph: Graph,
) -> tuple[list[GraphNode], IntArray, dict[int, tuple[int, ...]]] | None:
    """:func:`~ahipgraph.graph.topology.ordered_columns` for a graph whose nodes, in insertion
    order, form one chain (each node's only dependency is the node added before it), or None.

    A chain has one topological order, so this is exactly what the walk returns, found with
    three passes in C (no Python code per node) instead of a walk that follows each node's
    dependents. The caller holds the graph's lock, with the graph alive.
    """
    order = list(graph._nodes)
    count = len(order)
    if not count:
        return None
    root: Any = order[0]._deps
    if type(root) is GraphNode or root:
        return None
    if not all(map(is_, map(_deps_of, islice(order, 1, None)), order)):
        return None
    column = _counting_up(count)  # node i's dependency is node i - 1
    return order, column, dict(_CHAIN_MULTI)


def _counting_up(count: int) -> IntArray:
    """``range(-1, count - 1)`` as a dependency column (:func:`index_column`), made in numpy
    (an array takes an append per int from a ``range``)."""
    return index_column(np.arange(-1, count - 1, dtype=np.int64))


def source_map(originals: list[GraphNode], copy: ExecGraph) -> dict[HandleId, ExecNode]:
    """Original node handle → its copy (what the exec-side setters look nodes up by)."""
    return dict(zip(map(_hid, originals), copy.nodes, strict=True))


# A source map before it is made: registry rows, generations, the copy, and the copy's
# position -> index in the rows (None: the rows are in the copy's order).
_SourceRows = tuple[IntArray, IntArray | int, ExecGraph, Positions | None]

# The narrowest unsigned machine type holding every value up to each bound (see _narrow).
_NARROW_TYPES = ((1 << 8, "B", np.uint8), (1 << 16, "H", np.uint16), (1 << 32, "I", np.uint32))


def _narrow(values: np.ndarray[Any, np.dtype[Any]]) -> IntArray:
    """Non-negative ``values`` as an array of the narrowest machine type that holds them all.

    What a source map holds until its first lookup, for as long as the executable lives
    (most never look one up): a list is a pointer per node, and registry rows and generations
    are small numbers (a generation moves on only when its slot is reused).
    """
    top = int(values.max()) if len(values) else 0
    for bound, code, dtype in _NARROW_TYPES:
        if top < bound:
            return array(code, values.astype(dtype).tobytes())
    return array("q", values.astype(np.int64).tobytes())


def _rows_and_generations(nodes: list[GraphNode]) -> tuple[IntArray, IntArray | int]:
    """The nodes' registry rows, and their generations: one int when they share it (most
    graphs: a column of the same int would be held for as long as the executable lives),
    else a column. Both columns narrow (see :func:`_narrow`), split from the nodes' handles
    (see ``GraphNode``) in numpy."""
    handles: list[int] = list(map(_handle_of, nodes))
    try:
        packed = np.array(handles, dtype=np.uint64)
        rows, generations = packed & ROW_MASK, packed >> ROW_BITS
    except OverflowError:  # a row reused 2**32 times: its generation needs more bits
        rows = np.array([handle & ROW_MASK for handle in handles], dtype=np.uint64)
        generations = np.array([handle >> ROW_BITS for handle in handles], dtype=np.uint64)
    if len(generations) and generations.min() == generations.max():
        return _narrow(rows), int(generations[0])
    return _narrow(rows), _narrow(generations)


# How many lookups a SourceMap answers by searching its rows before it makes its map.
_SEARCHES = 8


def find_source(sources: Mapping[HandleId, ExecNode], hid: HandleId) -> ExecNode | None:
    """``sources.get(hid)``, searched rather than made when ``sources`` is a
    :class:`SourceMap` not made yet (see :meth:`SourceMap.find`)."""
    if isinstance(sources, SourceMap):
        return sources.find(hid)
    return sources.get(hid)


class SourceMap(Mapping[HandleId, ExecNode]):
    """:func:`source_map` made on first lookup (what an executable keeps as its ``sources``).

    Only the exec-side setters look nodes up, and most executables never call one: until then
    this holds the handle ids in the copy's order (a pointer per node), not a map entry per
    node. The lengths are checked at once, as ``source_map`` checks them.

    Raises:
        ValueError: ``originals`` and the copy's nodes differ in length.
    """

    __slots__ = ("_searches", "_state")

    def __init__(self, originals: list[GraphNode], copy: ExecGraph) -> None:
        if len(originals) != len(copy):
            raise ValueError(
                f"zip() arguments differ in length: {len(originals)} nodes, {len(copy)} copies"
            )
        # The handle ids (as their registry rows and generations: ints the nodes already hold, where
        # HandleId tuples would each be an object the garbage collector tracks) and the copies,
        # until the map replaces them: one field, so a reader always sees one or the other whole.
        # The copy is kept whole: its records are made when the map is (see ExecGraph.nodes).
        self._state: _SourceRows | dict[HandleId, ExecNode] = (
            *_rows_and_generations(originals),
            copy,
            None,
        )
        self._searches = 0

    @classmethod
    def _of_rows(
        cls,
        rows: IntArray,
        generations: IntArray | int,
        copy: ExecGraph,
        at: Positions | None = None,
    ) -> SourceMap:
        """The map of ``copy`` from its originals' registry rows and generations, in the
        copy's order (what the constructor reads from the nodes themselves), or as read with
        ``at`` (the copy's position -> index in ``rows``; permuted when the map is made)."""
        made = _new_object(cls)
        made._state = (rows, generations, copy, at)
        made._searches = 0
        return made

    def find(self, hid: HandleId) -> ExecNode | None:
        """The copy of the node ``hid`` names, or None.

        The first few lookups search the rows (in numpy) rather than make the map: a setter
        or two on a large executable then costs no handle id and no entry per node. From
        ``_SEARCHES`` lookups on the map is made, and each lookup is one entry's.
        """
        state = self._state
        if isinstance(state, dict) or self._searches >= _SEARCHES:
            return self._made().get(hid)
        self._searches += 1
        rows, generations, copy, at = state
        row, generation = hid  # the handle's registry row: what the rows column holds
        column = np.frombuffer(rows, dtype=rows.typecode)
        if not 0 <= row <= np.iinfo(column.dtype).max:
            return None
        for index in np.flatnonzero(column == row).tolist():
            held = generations if isinstance(generations, int) else generations[index]
            if held == generation:
                position = index if at is None else int(np.flatnonzero(at == index)[0])
                return copy.nodes[position]
        return None

    def _made(self) -> dict[HandleId, ExecNode]:
        state = self._state
        if isinstance(state, dict):
            return state
        rows_held, generations_held, copy, at = state
        order = None if at is None else at.tolist()
        rows = rows_held.tolist() if order is None else list(map(rows_held.__getitem__, order))
        generations: list[int]
        if isinstance(generations_held, int):  # one for every node
            generations = [generations_held] * len(rows)
        elif order is None:
            generations = generations_held.tolist()
        else:
            generations = list(map(generations_held.__getitem__, order))
        hids = map(HandleId._make, zip(rows, generations, strict=True))
        with gcpause.paused():  # a handle id and an entry per node, none of them garbage
            made = dict(zip(hids, copy.nodes, strict=True))  # two first users: equal maps
        self._state = made
        return made

    def __getitem__(self, hid: HandleId) -> ExecNode:
        return self._made()[hid]

    def __iter__(self) -> Iterator[HandleId]:
        return iter(self._made())

    def __len__(self) -> int:
        state = self._state
        return len(state) if isinstance(state, dict) else len(state[0])

    def __repr__(self) -> str:
        made = "made" if isinstance(self._state, dict) else "not made yet"
        return f"<SourceMap {len(self)} nodes, {made}>"
