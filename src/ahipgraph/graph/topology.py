"""Edges and topological queries of a :class:`~ahipgraph.graph.graph.Graph`.

Module functions over the graph they are given (its lock, its node store, its edge count); the
graph's public methods are thin calls to these and carry the user documentation.

* Edges follow HIP's rules: both ends live nodes of this graph, no self-edges, no duplicates.
  Every pair is checked before any edge changes, so a failed call changes nothing (HIP can
  leave a partial edge list). Cycles are not checked when edges are added (HIP does not either);
  ordering a cyclic graph is InvalidValue.
* ``nodes()`` is Kahn's algorithm with a FIFO seeded in insertion order, visiting successors in
  edge order, exactly as HIP does, so the orders match HIP's.

Every function takes the graph's lock.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import TYPE_CHECKING, Any

from ..core import gcpause
from ..core.errors import InvalidValue, NotSupported
from .node import Edges, GraphNode, edge_nodes

if TYPE_CHECKING:
    from .graph import Graph

__all__ = [
    "add_dependencies",
    "edges",
    "nodes",
    "ordered_columns",
    "remove_dependencies",
    "root_nodes",
    "topological_order",
]

Ends = Sequence[GraphNode] | GraphNode


def add_dependencies(graph: Graph, from_nodes: Ends, to_nodes: Ends) -> None:
    """Add edges ``from_nodes[i] -> to_nodes[i]``; nothing unless every edge is valid."""
    pairs = _pairs(from_nodes, to_nodes)
    with graph.lock:
        _check_pairs(graph, pairs)
        seen: set[tuple[GraphNode, GraphNode]] = set()
        for src, dst in pairs:
            if dst in edge_nodes(src._dependents) or (src, dst) in seen:
                raise InvalidValue(f"the edge {src!r} -> {dst!r} already exists")
            seen.add((src, dst))
        for src, dst in pairs:
            graph._link(src, dst)


def remove_dependencies(graph: Graph, from_nodes: Ends, to_nodes: Ends) -> None:
    """Remove edges ``from_nodes[i] -> to_nodes[i]``; nothing unless every edge exists."""
    pairs = _pairs(from_nodes, to_nodes)
    with graph.lock:
        _check_pairs(graph, pairs)
        if len(set(pairs)) != len(pairs):
            raise InvalidValue("an edge is listed twice")
        for src, dst in pairs:
            if dst not in edge_nodes(src._dependents):
                raise InvalidValue(f"there is no edge {src!r} -> {dst!r}")
        # CUDA's rule (HIP removes the edge): keeps alloc before free. After HIP's own checks,
        # so an edge that does not exist is still HIP's InvalidValue.
        if graph.has_mem_nodes:
            raise NotSupported("edges cannot be removed from a graph with memory nodes")
        for src, dst in pairs:
            graph._unlink(src, dst)


def _check_pairs(graph: Graph, pairs: list[tuple[GraphNode, GraphNode]]) -> None:
    graph._check_alive()
    for src, dst in pairs:
        graph._check_member(src, "from node")
        graph._check_member(dst, "to node")
        if src is dst:
            raise InvalidValue(f"{src!r} cannot depend on itself")


# -- queries ---------------------------------------------------------------------------------------


def nodes(graph: Graph) -> list[GraphNode]:
    """All nodes in topological order (Kahn, insertion-order FIFO)."""
    with graph.lock, gcpause.paused():  # a bulk build that makes no garbage
        graph._check_alive()
        return topological_order(graph)


def topological_order(graph: Graph) -> list[GraphNode]:
    """Kahn's order of ``graph``'s nodes (caller holds the lock). InvalidValue on a cycle.

    A node holding its lone dependency as the node itself (see graph/node.py; almost every
    node) becomes ready the moment that dependency is ordered: only the others (roots, joins)
    are counted, so the walk keeps no entry per node. While nothing else is ready, a node's
    lone successor with a lone dependency is ordered at once: the FIFO would pop it next
    anyway, so a chain is walked without a queue operation per node and the order is Kahn's.

    A successor is told counted or not by looking it up among the counted nodes (a node
    hashes by identity), not by reading its dependencies: queuing it then only writes its
    reference count, which does not hold the walk up, and its memory has long arrived when it
    is popped. In a wide graph (a fork-join's branches, side by side) the queue holds a node
    of every branch, far apart in memory, and reading each on the way in would wait for it.
    """
    roots, indegree, total = _roots_and_joins(graph)
    ready = deque(roots)
    popleft, push = ready.popleft, ready.append
    order: list[GraphNode] = []
    append = order.append
    node_type = GraphNode
    while ready:
        node = popleft()
        append(node)
        succs: Any = node._dependents
        # The chain walk: a lone successor whose lone dependency is this node, nothing queued.
        while type(succs) is node_type and not ready and succs not in indegree:
            node = succs
            append(node)
            succs = node._dependents
        if type(succs) is node_type:
            if succs not in indegree:
                push(succs)
                continue
            succs = (succs,)
        for succ in succs:
            left = indegree.get(succ)
            if left is None:
                push(succ)
            else:
                left -= 1
                indegree[succ] = left
                if not left:
                    push(succ)
    if len(order) != total:
        raise InvalidValue(f"{graph!r} has a cycle")
    return order


def ordered_columns(
    graph: Graph,
) -> tuple[list[GraphNode], array[int], dict[int, tuple[int, ...]]]:
    """:func:`nodes`, with each node's dependencies as positions in that order.

    What an executable's snapshot needs: the column ``first`` holds a node's lone dependency
    (held as the node itself, see graph/node.py) by position, or -1 where ``multi`` holds its
    0 or several. The walk records them as it orders the nodes, so no map of positions is
    made and no node is looked up again afterwards (a wide graph's Kahn order visits nodes
    far apart in memory).
    """
    with graph.lock, gcpause.paused():
        graph._check_alive()
        return _ordered_columns(graph)


def _ordered_columns(
    graph: Graph,
) -> tuple[list[GraphNode], array[int], dict[int, tuple[int, ...]]]:
    """Kahn's order by rounds: what the FIFO of :func:`topological_order` holds at once.

    The FIFO holds one round at a time: the nodes made ready by the previous round's nodes,
    in the order they were made ready, behind which the next round gathers. A round whose
    every node has one successor, whose lone dependency it is (the branches of a wide
    fork-join, side by side), is ordered by a few passes in C; others node by node. A round
    of one node walks its chain, as :func:`topological_order` does.
    """
    roots, indegree, total = _roots_and_joins(graph)
    order: list[GraphNode] = []
    append = order.append
    first: list[int] = []
    first_append = first.append
    counted: list[tuple[int, GraphNode]] = []  # roots and joins, with their positions
    seen_by: dict[GraphNode, dict[GraphNode, int]] = {}  # a join's dependencies' positions
    node_type = GraphNode
    current: list[GraphNode] = roots
    came: Sequence[int] = [-1] * len(roots)  # each node's lone dependency's position, or -1
    while current:
        base = len(order)
        if len(current) == 1:  # the chain walk
            node = current[0]
            dep = came[0]
            append(node)
            first_append(dep)
            if dep < 0:
                counted.append((base, node))
            succs: Any = node._dependents
            while type(succs) is node_type and type(succs._deps) is node_type:
                node = succs
                append(node)
                first_append(base)
                base += 1
                succs = node._dependents
            ends: Sequence[GraphNode] = (node,)
            every_succs: list[Any] = [succs]
        else:
            order.extend(current)
            first.extend(came)
            if -1 in came:
                counted.extend((base + i, current[i]) for i, d in enumerate(came) if d < 0)
            ends = current
            every_succs = list(map(_dependents_of, current))
            if set(map(type, every_succs)) == {node_type} and set(
                map(type, map(_deps_of, every_succs))
            ) == {node_type}:  # each node's one successor, whose lone dependency it is
                current = every_succs
                came = range(base, base + len(current))
                continue
        ready: list[GraphNode] = []
        ready_came: list[int] = []
        for position, (node, succs) in enumerate(zip(ends, every_succs, strict=True), base):
            if type(succs) is node_type:
                succs = (succs,)
            for succ in succs:
                if type(succ._deps) is node_type:
                    ready.append(succ)
                    ready_came.append(position)
                else:
                    seen = seen_by.get(succ)
                    if seen is None:
                        seen = seen_by[succ] = {}
                    seen[node] = position
                    left = indegree[succ] - 1
                    indegree[succ] = left
                    if not left:
                        ready.append(succ)
                        ready_came.append(-1)
        current, came = ready, ready_came
    if len(order) != total:
        raise InvalidValue(f"{graph!r} has a cycle")
    multi: dict[int, tuple[int, ...]] = {}
    for position, node in counted:
        sources: Any = node._deps
        multi[position] = tuple(map(seen_by[node].__getitem__, sources)) if sources else ()
    # C ints, as the copies made without this walk hold theirs (exec.kahn_columns.index_column):
    # an executable keeps the column as long as it lives. 64-bit only past 2**31 nodes.
    return order, array("i" if total < 1 << 31 else "q", first), multi


def _roots_and_joins(graph: Graph) -> tuple[list[GraphNode], dict[GraphNode, int], int]:
    """What both Kahn walks start from: the roots, each join's count of dependencies, and the
    number of nodes. A node holding its lone dependency as the node itself (almost every
    node) is neither, and gets no entry."""
    every = graph._nodes
    # One pass in C, keeping no list of a million dependencies (fresh pages for nothing).
    others = list(compress(every, map(is_not, repeat(GraphNode), map(type, map(_deps_of, every)))))
    indegree: dict[GraphNode, int] = {}
    roots: list[GraphNode] = []
    for node in others:
        count = len(node._deps)  # type: ignore[arg-type]
        if count:
            indegree[node] = count
        else:
            roots.append(node)
    return roots, indegree, len(every)


_deps_of: Callable[[GraphNode], Edges] = attrgetter("_deps")  # in C: no Python call per node
_dependents_of: Callable[[GraphNode], Edges] = attrgetter("_dependents")


def root_nodes(graph: Graph) -> list[GraphNode]:
    """Nodes without dependencies, in insertion order."""
    with graph.lock:
        graph._check_alive()
        return [node for node in graph._nodes if not node._deps]


def edges(graph: Graph) -> list[tuple[GraphNode, GraphNode]]:
    """Every edge (from, to): nodes in insertion order, each node's edges in edge order."""
    with graph.lock, gcpause.paused():  # one tuple per edge, none of them garbage
        graph._check_alive()
        # A node's lone successor is held as the node itself (see graph/node.py): its edge is
        # made here without a call or a one-item sequence per node.
        out: list[tuple[GraphNode, GraphNode]] = []
        append = out.append
        node_type = GraphNode
        for node in graph._nodes:
            succs: Any = node._dependents
            if type(succs) is node_type:
                append((node, succs))
            elif succs:
                out += [(node, succ) for succ in succs]
        return out


def _pairs(
    from_nodes: Sequence[GraphNode] | GraphNode | None,
    to_nodes: Sequence[GraphNode] | GraphNode | None,
) -> list[tuple[GraphNode, GraphNode]]:
    froms = _ends(from_nodes, "from_nodes")
    tos = _ends(to_nodes, "to_nodes")
    if len(froms) != len(tos):
        raise ValueError(f"{len(froms)} from-nodes but {len(tos)} to-nodes")
    return list(zip(froms, tos, strict=True))  # type: ignore[arg-type]


def _ends(nodes: object, what: str) -> Sequence[object]:
    """One side of an edge list: a node (or None, refused later as a null node), a list or
    tuple, or any other iterable of nodes (read once, as ``deps=`` reads one)."""
    if nodes is None or isinstance(nodes, GraphNode):
        return [nodes]
    if isinstance(nodes, list | tuple):
        return nodes
    if not isinstance(nodes, Iterable):
        raise TypeError(f"{what} must be a GraphNode or an iterable of them, got {nodes!r}")
    return list(nodes)
