"""An add whose argument conversions run user code that destroys a dependency or the graph.

An add converts its arguments under the graph's lock, and converting an object with an
``__index__`` (a kernel argument, a memset value, an alloc node's size, a conditional node's
body count) runs user code on the adding thread, which the lock lets back in. Code that
destroyed a dependency made the new node depend on a destroyed node (an edge the graph no
longer lists, and ``nodes()`` then sees a cycle); code that destroyed the graph added a node to
a destroyed graph, left in the node registry, and an alloc node's range stayed reserved for
good. Each add now checks the graph and its dependencies again, when anything was destroyed
while it converted, before it commits anything.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from cleanup import destroy
from reentrant import Converting


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    pass


KINDS = ["kernel", "memset", "alloc", "conditional"]


def _add(kind: str, graph: ahg.Graph, ptr: ahg.DevicePtr, value: Any, deps: Any) -> Any:
    if kind == "kernel":
        return graph.add_kernel_node(touch, 1, 1, (ptr, value), deps=deps)
    if kind == "memset":
        return graph.add_memset_node(ptr, value, 8, deps=deps)
    if kind == "alloc":
        return graph.add_mem_alloc_node(value, deps=deps)
    handle = graph.conditional_handle()
    return graph.add_conditional_node(handle, ahg.ConditionalKind.If, value, deps=deps)


@pytest.mark.parametrize("kind", KINDS)
def test_a_conversion_that_destroys_a_dependency_is_refused(device: ahg.Device, kind: str) -> None:
    ptr = device.malloc(64)
    graphs = GRAPHS.statistics().live
    graph = ahg.Graph()
    first = graph.add_empty_node()
    second = graph.add_empty_node(deps=[first])
    free_before = device.memory_info()[0]
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        _add(kind, graph, ptr, Converting(1, second.destroy), [second])
    assert graph.nodes() == [first]
    assert graph.edges() == []
    assert first.dependents() == []
    assert graph.statistics().edges == 0
    assert GRAPHS.statistics().live == graphs + 1  # no conditional body was made
    graph.destroy()
    assert device.memory_info()[0] == free_before  # no range stays reserved
    destroy(ptr)


@pytest.mark.parametrize("kind", KINDS)
def test_a_conversion_that_destroys_the_graph_adds_nothing(device: ahg.Device, kind: str) -> None:
    ptr = device.malloc(64)
    graphs, nodes = GRAPHS.statistics().live, NODES.statistics().live
    free_before = device.memory_info()[0]
    graph = ahg.Graph()
    root = graph.add_empty_node()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing made here is left to a finalizer
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            _add(kind, graph, ptr, Converting(1, graph.destroy), [root])
    assert graph.destroyed
    assert GRAPHS.statistics().live == graphs
    assert NODES.statistics().live == nodes
    assert device.memory_info()[0] == free_before
    destroy(ptr)


@pytest.mark.parametrize("kind", KINDS)
def test_a_conversion_that_destroys_another_node_still_adds(device: ahg.Device, kind: str) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    root, other = graph.add_empty_node(), graph.add_empty_node()
    added = _add(kind, graph, ptr, Converting(1, other.destroy), [root])
    node = added[0] if isinstance(added, tuple) else added
    assert graph.nodes() == [root, node]
    assert node.dependencies() == [root]
    graph.destroy()
    destroy(ptr)


def test_a_free_node_refused_after_its_pointer_destroyed_a_dependency_claims_nothing() -> None:
    # A pointer's truth test is user code too (a DevicePtr subclass): the refused free node
    # left its range marked as freed, so the real free node was refused as a second one.
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    ptr = alloc.params.ptr
    middle = graph.add_empty_node(deps=[alloc])

    class Destroying(ahg.DevicePtr):
        __slots__ = ()

        def __bool__(self) -> bool:
            middle.destroy()
            return True

    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.add_mem_free_node(Destroying(ptr.device, ptr.address), deps=[middle])
    assert graph.nodes() == [alloc]
    free = graph.add_mem_free_node(ptr, deps=[alloc])
    assert free.dependencies() == [alloc]
    graph.destroy()
