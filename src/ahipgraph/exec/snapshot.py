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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.registry import HandleId
from ..graph.node_type import NodeType

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from ..lifetime.user_object import UserObject

__all__ = ["ExecGraph", "ExecNode", "snapshot", "source_map"]


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
    dependents: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.dependents:
            self.dependents = [[] for _ in self.nodes]
            for node in self.nodes:
                for dep in node.deps:
                    self.dependents[dep].append(node.index)

    def walk(self) -> list[ExecNode]:
        """Every node, child graphs' nodes included (depth first, topological within a graph)."""
        out: list[ExecNode] = []
        for node in self.nodes:
            out.append(node)
            if node.child is not None:
                out.extend(node.child.walk())
        return out


def snapshot(graph: Graph) -> tuple[ExecGraph, list[GraphNode]]:
    """Copy ``graph`` for execution; also return its nodes in the copy's order.

    Raises:
        InvalidValue: the graph was destroyed or has a cycle (in it or in a child graph).
    """
    with graph.lock:
        graph.check_alive()
        order: list[GraphNode] = graph.nodes()  # InvalidValue on a cycle
        position = {node: i for i, node in enumerate(order)}
        nodes: list[ExecNode] = []
        user_objects = dict.fromkeys(graph.user_objects())
        # Under the graph's lock, with the graph alive, every node is alive too: read the
        # fields directly instead of through the accessors' per-call handle checks.
        for i, node in enumerate(order):
            node_type, params = node._type, node._params
            params_any: Any = params
            child = snapshot(params_any.graph)[0] if node_type is NodeType.Graph else None
            if child is not None:
                user_objects.update(dict.fromkeys(child.user_objects))
            deps = tuple([position[dep] for dep in node._deps])
            nodes.append(ExecNode(i, node.id, node_type, params, deps, child))
        return ExecGraph(graph.id, nodes, list(user_objects)), order


def source_map(originals: list[GraphNode], copy: ExecGraph) -> dict[HandleId, ExecNode]:
    """Original node handle → its copy (what the exec-side setters look nodes up by)."""
    return {node.hid: exec_node for node, exec_node in zip(originals, copy.nodes, strict=True)}
