"""``deps=`` given as an iterable that edits the graph while it is read.

An iterable (a generator, say) is user code, and it runs under the graph's lock in the adding
thread, which the lock lets back in. Its dependencies were checked one by one as they came, so
one that destroyed a node it had already given made an edge to the destroyed node (``nodes()``
then saw a cycle), and one that destroyed the graph got a node added to the destroyed graph,
left in the node registry. The iterable is now read whole before anything is checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from cleanup import destroy


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.float32]) -> None:
    x[t.ids] = 1


KINDS = ["kernel", "empty", "memset", "host", "child", "generic"]


def _adds(
    ptr: ahg.DevicePtr, child: ahg.Graph
) -> dict[str, Callable[[ahg.Graph, Any], ahg.GraphNode]]:
    return {
        "kernel": lambda g, deps: g.add_kernel_node(touch, 1, 4, (ptr,), deps=deps),
        "empty": lambda g, deps: g.add_empty_node(deps=deps),
        "memset": lambda g, deps: g.add_memset_node(ptr, 1, 8, deps=deps),
        "host": lambda g, deps: g.add_host_node(print, deps=deps),
        "child": lambda g, deps: g.add_child_graph_node(child, deps=deps),
        "generic": lambda g, deps: g.add_node(ahg.GraphNodeParams(ahg.NodeType.Empty), deps=deps),
    }


def _shape(graph: ahg.Graph) -> tuple[Any, ...]:
    return ([n.id for n in graph.nodes()], [(a.id, b.id) for a, b in graph.edges()])


@pytest.mark.parametrize("kind", KINDS)
def test_deps_that_destroy_a_node_they_gave_are_refused(device: ahg.Device, kind: str) -> None:
    ptr, child = device.malloc(64), ahg.Graph()
    graph = ahg.Graph()
    first, second = graph.add_empty_node(), graph.add_empty_node()

    def deps() -> Iterator[ahg.GraphNode]:
        yield first
        first.destroy()
        yield second

    before = _shape(graph)
    with pytest.raises(ahg.InvalidValue, match="was destroyed"):
        _adds(ptr, child)[kind](graph, deps())
    assert _shape(graph) != before  # ``first`` is gone, as the iterable asked
    assert graph.nodes() == [second]
    assert graph.edges() == []
    assert second.dependents() == []
    assert graph.statistics().edges == 0
    destroy(graph, child, ptr)


@pytest.mark.parametrize("kind", KINDS)
def test_deps_that_destroy_the_graph_add_nothing(device: ahg.Device, kind: str) -> None:
    ptr, child = device.malloc(64), ahg.Graph()
    graphs, nodes = GRAPHS.statistics().live, NODES.statistics().live
    graph = ahg.Graph()
    node = graph.add_empty_node()

    def deps() -> Iterator[ahg.GraphNode]:
        yield node
        graph.destroy()

    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        _adds(ptr, child)[kind](graph, deps())
    assert graph.destroyed
    assert GRAPHS.statistics().live == graphs
    assert NODES.statistics().live == nodes
    destroy(child, ptr)
