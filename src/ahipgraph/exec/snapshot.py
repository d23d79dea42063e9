"""The executable's private copy of a graph.

Instantiation copies the graph, under its lock, into plain :class:`ExecNode` records in
topological order. Parameters are immutable objects, so the copy shares them; setters on the
executable replace them in the copy only, and later edits to the source graph never reach it.
Child graphs are copied recursively.

``sources`` maps each original node's handle to its copy: the exec-side setters find nodes
through it, so a node of another graph, a node added after instantiation or a node of a clone
is unknown (``InvalidValue``), as in HIP.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ..core.registry import HandleId
from ..graph.node import GraphNode
from ..graph.node_type import NodeType

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..lifetime.user_object import UserObject

__all__ = ["ExecGraph", "ExecNode", "SourceMap", "snapshot", "source_map"]

_new_object = object.__new__
_hid = attrgetter("hid")
_handle_row = attrgetter("_slot")  # a graph node's registry row (its hid.slot)
_handle_generation = attrgetter("_generation")


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


@dataclass(slots=True, eq=False)
class ExecGraph:
    """A graph copied for execution: nodes in topological order, dependencies by index."""

    graph_id: int
    nodes: list[ExecNode]
    # User objects owned by the graph or any child graph's copy, each once: the executable
    # holds a reference to each, as HIP's clone does.
    user_objects: list[UserObject] = field(default_factory=list)
    _dependents: list[list[int]] | None = field(default=None, repr=False)

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
            found: list[list[int] | None] = [None] * len(self.nodes)
            for node in self.nodes:
                index = node.index
                for dep in node.deps:
                    have = found[dep]
                    if have is None:
                        found[dep] = [index]
                    else:
                        have.append(index)
            dependents = self._dependents = [[] if have is None else have for have in found]
        return dependents

    def dependent_counts(self) -> list[int]:
        """How many dependents each node has (small ints: no object per node)."""
        counts = [0] * len(self.nodes)
        for node in self.nodes:
            deps = node.deps
            if len(deps) == 1:
                counts[deps[0]] += 1
            else:
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


def snapshot(graph: Graph) -> tuple[ExecGraph, list[GraphNode]]:
    """Copy ``graph`` for execution; also return its nodes in the copy's order.

    Child graphs are copied with a work list, not recursion, and every graph's lock is held
    until the whole copy is made (parent before child).

    Raises:
        InvalidValue: the graph was destroyed or has a cycle (in it or in a child graph).
    """
    with contextlib.ExitStack() as locks:
        locks.enter_context(graph.lock)
        graph._check_alive()
        top_order: list[GraphNode] = []
        copies: list[tuple[ExecGraph, list[ExecGraph]]] = []  # each copy and its children
        top = _copy_one(graph, top_order)
        pending = [top]
        while pending:
            copy, source_children = pending.pop()
            children: list[ExecGraph] = []
            for node, child_graph in source_children:
                locks.enter_context(child_graph.lock)
                child = _copy_one(child_graph, [])
                node.child = child[0]
                children.append(child[0])
                pending.append(child)
            copies.append((copy, children))
        # Each copy owns its children's user objects too: fold them in, deepest first.
        for copy, children in reversed(copies):
            owned = dict.fromkeys(copy.user_objects)
            for child_copy in children:
                owned.update(dict.fromkeys(child_copy.user_objects))
            copy.user_objects = list(owned)
        return top[0], top_order


def _copy_one(
    graph: Graph, order_out: list[GraphNode]
) -> tuple[ExecGraph, list[tuple[ExecNode, Graph]]]:
    """Copy one graph's nodes (its lock held); child-graph nodes are left for the caller."""
    order: list[GraphNode] = graph.nodes()  # InvalidValue on a cycle
    order_out.extend(order)
    # Each index is one int object, shared by the node's copy and its dependents' tuples.
    position = dict(zip(order, range(len(order)), strict=True))
    nodes: list[ExecNode] = []
    children: list[tuple[ExecNode, Graph]] = []
    # Under the graph's lock, with the graph alive, every node is alive too: read the fields
    # directly instead of through the accessors' per-call handle checks.
    for node, i in position.items():  # in order
        node_type, params, sources = node._type, node._params, node._deps
        if isinstance(sources, GraphNode):  # a chain's link, held as the node itself
            deps: tuple[int, ...] = (position[sources],)
        else:
            deps = tuple([position[dep] for dep in sources])
        # ExecNode(i, node.id, node_type, params, deps), its fields stored without the call
        exec_node = _new_object(ExecNode)
        exec_node.index = i
        exec_node.id = node.id
        exec_node.type = node_type
        exec_node.params = params
        exec_node.deps = deps
        exec_node.child = None
        exec_node.enabled = True
        if node_type is NodeType.Graph:
            params_any: Any = params
            children.append((exec_node, params_any.graph))
        nodes.append(exec_node)
    return ExecGraph(graph.id, nodes, list(graph.user_objects())), children


def source_map(originals: list[GraphNode], copy: ExecGraph) -> dict[HandleId, ExecNode]:
    """Original node handle → its copy (what the exec-side setters look nodes up by)."""
    return dict(zip(map(_hid, originals), copy.nodes, strict=True))


class SourceMap(Mapping[HandleId, ExecNode]):
    """:func:`source_map` made on first lookup (what an executable keeps as its ``sources``).

    Only the exec-side setters look nodes up, and most executables never call one: until then
    this holds the handle ids in the copy's order (a pointer per node), not a map entry per
    node. The lengths are checked at once, as ``source_map`` checks them.

    Raises:
        ValueError: ``originals`` and the copy's nodes differ in length.
    """

    __slots__ = ("_state",)

    def __init__(self, originals: list[GraphNode], copy: ExecGraph) -> None:
        if len(originals) != len(copy.nodes):
            raise ValueError(
                f"zip() arguments differ in length: {len(originals)} nodes, "
                f"{len(copy.nodes)} copies"
            )
        # The handle ids (as their registry rows and generations: ints the nodes already hold, where
        # HandleId tuples would each be an object the garbage collector tracks) and the copies,
        # until the map replaces them: one field, so a reader always sees one or the other whole.
        self._state: tuple[list[int], list[int], list[ExecNode]] | dict[HandleId, ExecNode] = (
            list(map(_handle_row, originals)),
            list(map(_handle_generation, originals)),
            copy.nodes,
        )

    def _made(self) -> dict[HandleId, ExecNode]:
        state = self._state
        if isinstance(state, dict):
            return state
        hids = map(HandleId._make, zip(state[0], state[1], strict=True))
        made = dict(zip(hids, state[2], strict=True))  # two first users: equal maps
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
