"""Edges and topological queries of :class:`~ahipgraph.graph.graph.Graph`.

* Edges follow HIP's rules: both ends live nodes of this graph, no self-edges, no duplicates.
  Every pair is checked before any edge changes, so a failed call changes nothing (HIP can
  leave a partial edge list). Cycles are not checked when edges are added (HIP does not either);
  ordering a cyclic graph is InvalidValue.
* ``nodes()`` is Kahn's algorithm with a FIFO seeded in insertion order, visiting successors in
  edge order, exactly as HIP does, so the orders match HIP's.

Every method takes the graph's lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence

from ..core import gcpause
from ..core.errors import InvalidValue, NotSupported
from .node import GraphNode

__all__ = ["GraphTopology"]


class GraphTopology:
    """Mixin: edges and ordered queries."""

    __slots__ = ()

    lock: threading.RLock
    has_mem_nodes: bool
    _nodes: dict[GraphNode, None]  # insertion order

    def check_alive(self) -> None:
        raise NotImplementedError

    def _check_member(self, node: GraphNode | None, what: str) -> None:
        raise NotImplementedError

    def _link(self, src: GraphNode, dst: GraphNode) -> None:
        raise NotImplementedError

    def _unlink(self, src: GraphNode, dst: GraphNode) -> None:
        raise NotImplementedError

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
        pairs = _pairs(from_nodes, to_nodes)
        with self.lock:
            self._check_pairs(pairs)
            seen: set[tuple[GraphNode, GraphNode]] = set()
            for src, dst in pairs:
                if dst in src._succ or (src, dst) in seen:
                    raise InvalidValue(f"the edge {src!r} -> {dst!r} already exists")
                seen.add((src, dst))
            for src, dst in pairs:
                self._link(src, dst)

    def remove_dependencies(
        self, from_nodes: Sequence[GraphNode] | GraphNode, to_nodes: Sequence[GraphNode] | GraphNode
    ) -> None:
        """Remove edges ``from_nodes[i] -> to_nodes[i]`` (``hipGraphRemoveDependencies``).

        Raises:
            InvalidValue: destroyed graph; a null, destroyed or foreign node; an edge that does
                not exist (or is given twice). Nothing is removed then.
            ValueError: the two lists differ in length.
            NotSupported: the graph has memory-alloc or memory-free nodes (HIP's answer).
        """
        pairs = _pairs(from_nodes, to_nodes)
        with self.lock:
            self._check_pairs(pairs)
            if self.has_mem_nodes:  # HIP: the memory nodes' ordering is part of their contract
                raise NotSupported("edges cannot be removed from a graph with memory nodes")
            if len(set(pairs)) != len(pairs):
                raise InvalidValue("an edge is listed twice")
            for src, dst in pairs:
                if dst not in src._succ:
                    raise InvalidValue(f"there is no edge {src!r} -> {dst!r}")
            for src, dst in pairs:
                self._unlink(src, dst)

    def _check_pairs(self, pairs: list[tuple[GraphNode, GraphNode]]) -> None:
        self.check_alive()
        for src, dst in pairs:
            self._check_member(src, "from node")
            self._check_member(dst, "to node")
            if src is dst:
                raise InvalidValue(f"{src!r} cannot depend on itself")

    # -- queries -----------------------------------------------------------------------------------

    def nodes(self) -> list[GraphNode]:
        """All nodes in topological order (``hipGraphGetNodes``: Kahn, insertion-order FIFO).

        Raises:
            InvalidValue: destroyed graph, or the graph has a cycle.
        """
        with self.lock, gcpause.paused():  # a bulk build that makes no garbage
            self.check_alive()
            return self._topological_order()

    def _topological_order(self) -> list[GraphNode]:
        indegree = {node: len(node._deps) for node in self._nodes}
        ready = deque(node for node, degree in indegree.items() if not degree)
        order: list[GraphNode] = []
        while ready:
            node = ready.popleft()
            order.append(node)
            for succ in node._succ:
                indegree[succ] -= 1
                if not indegree[succ]:
                    ready.append(succ)
        if len(order) != len(indegree):
            raise InvalidValue(f"{self!r} has a cycle")
        return order

    def root_nodes(self) -> list[GraphNode]:
        """Nodes without dependencies, in insertion order (``hipGraphGetRootNodes``)."""
        with self.lock:
            self.check_alive()
            return [node for node in self._nodes if not node._deps]

    def edges(self) -> list[tuple[GraphNode, GraphNode]]:
        """Every edge (from, to): nodes in insertion order, each node's edges in edge order."""
        with self.lock, gcpause.paused():  # one tuple per edge, none of them garbage
            self.check_alive()
            return [(node, succ) for node in self._nodes for succ in node._succ]

    def _ordered_nodes(self) -> list[GraphNode]:
        """Nodes in insertion order (caller holds the lock)."""
        return list(self._nodes)


def _pairs(
    from_nodes: Sequence[GraphNode] | GraphNode | None,
    to_nodes: Sequence[GraphNode] | GraphNode | None,
) -> list[tuple[GraphNode, GraphNode]]:
    froms = [from_nodes] if from_nodes is None or isinstance(from_nodes, GraphNode) else from_nodes
    tos = [to_nodes] if to_nodes is None or isinstance(to_nodes, GraphNode) else to_nodes
    if len(froms) != len(tos):
        raise ValueError(f"{len(froms)} from-nodes but {len(tos)} to-nodes")
    return list(zip(froms, tos, strict=True))  # type: ignore[arg-type]
