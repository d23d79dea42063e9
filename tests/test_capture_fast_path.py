"""The shortcuts of capture and instantiate give exactly what the general paths give.

Capturing a chain of kernel launches and instantiating it takes shortcuts: a chain's columns
are read in insertion order without the topological walk, a graph without child graphs or
conditional nodes looks for conditional-handle arguments in the kernel list instantiate makes
anyway, and a captured launch makes its node in one call. Each test holds a shortcut to the
general path's answer (columns, handles, node parameters, errors and their messages, DOT,
replay results), including the cases where the shortcut must step aside.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import compress, repeat
from operator import is_
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.conditional import prepare, prepare_plain
from ahipgraph.exec.snapshot import _chain_columns, snapshot
from ahipgraph.graph.node_type import NodeType
from ahipgraph.graph.topology import _ordered_columns
from capture_helpers import NBYTES, N, affine, host_view, no_capture_left


@ahg.kernel
def set_handle(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    """Sets a conditional handle from a plain kernel node."""
    ahg.set_conditional(h, value)


def _columns(graph: ahg.Graph) -> tuple[list[Any], list[int], dict[int, tuple[int, ...]]]:
    order, first, multi = _ordered_columns(graph)
    return order, list(first), multi


def _chain(graph: ahg.Graph) -> tuple[list[Any], list[int], dict[int, tuple[int, ...]]] | None:
    with graph.lock:
        found = _chain_columns(graph)
    if found is None:
        return None
    order, first, multi = found
    return order, list(first), multi


def _shape(graph: ahg.Graph) -> list[tuple[Any, ...]]:
    order = graph.nodes()
    return [
        (node.type, node.params, [order.index(dep) for dep in node.dependencies()])
        for node in order
    ]


@pytest.fixture
def buf(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(NBYTES)
    yield ptr
    device.free(ptr)


def _dot(graph: ahg.Graph, flags: int) -> str:
    """The graph's DOT without what differs between two graphs: its id, its nodes' ids and
    handles (each node is named by its position instead)."""
    position = {str(node.id): str(index) for index, node in enumerate(graph.nodes())}
    text = graph.to_dot(flags).replace(f"graph_{graph.id}", "graph_G")
    text = text.replace(f"cluster_{graph.id}", "cluster_G")
    text = re.sub(r"node_(\d+)", lambda m: f"node_#{position[m[1]]}", text)
    return re.sub(r"\{(\d+) \| \d+\.\d+\}", lambda m: f"{{#{position[m[1]]} | handle}}", text)


def _kernel_chain(buf: ahg.DevicePtr, count: int) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for i in range(count):
        nodes.append(graph.add_kernel_node(affine, N, 1, (N, 1, i, buf, buf), deps=nodes[-1:]))
    return graph, nodes


# -- a chain's columns --------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 50])
def test_chain_columns_are_the_walks(buf: ahg.DevicePtr, count: int) -> None:
    graph, _ = _kernel_chain(buf, count)
    assert _chain(graph) == _columns(graph)
    assert _chain(graph) is not None
    graph.destroy()


def test_empty_graph_takes_the_walk() -> None:
    graph = ahg.Graph()
    assert _chain(graph) is None
    assert _columns(graph) == ([], [], {})
    exec_ = graph.instantiate()  # an empty graph still instantiates
    exec_.destroy()
    graph.destroy()


def _fork(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.add_empty_node(deps=[nodes[0]])  # a second dependent of the root: a fork


def _second_root(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.add_empty_node()


def _join(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.add_dependencies(nodes[0], nodes[2])  # node 2 now has two dependencies


def _backwards(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    # A chain, but not in insertion order: the new root is added last.
    root = graph.add_empty_node()
    graph.add_dependencies(root, nodes[0])


def _cut(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.remove_dependencies(nodes[1], nodes[2])  # two chains: node 2 is a root again


def _destroyed_middle(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    nodes[1].destroy()


@pytest.mark.parametrize(
    "change", [_fork, _second_root, _join, _backwards, _cut, _destroyed_middle]
)
def test_not_a_chain_takes_the_walk(buf: ahg.DevicePtr, change: Any) -> None:
    graph, nodes = _kernel_chain(buf, 4)
    change(graph, nodes)
    assert _chain(graph) is None
    before = _columns(graph)
    exec_ = graph.instantiate()  # through the walk: the same order as before the change
    assert [node.id for node in before[0]] == [node.id for node in exec_._graph.nodes]
    exec_.destroy()
    graph.destroy()


def test_a_cycle_is_still_refused(buf: ahg.DevicePtr) -> None:
    graph, nodes = _kernel_chain(buf, 3)
    graph.add_dependencies(nodes[2], nodes[0])  # the root now depends on the last node
    assert _chain(graph) is None
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    graph.destroy()


# -- handle arguments of a plain graph ----------------------------------------------------------


def _handles_both_ways(graph: ahg.Graph) -> tuple[Any, Any]:
    with graph.lock:
        copy, _ = snapshot(graph)
    general = prepare(copy)
    kernels = list(compress(copy.params_column(), map(is_, copy.types(), repeat(NodeType.Kernel))))
    distinct = {id(params.kernel): params.kernel for params in kernels}
    plain = prepare_plain(kernels, distinct.values())
    return general, plain


def test_plain_graph_finds_the_same_handle_arguments() -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    other = graph.conditional_handle(default=2)
    first = graph.add_kernel_node(set_handle, 1, 1, (5, handle))
    graph.add_kernel_node(set_handle, 1, 1, (6, other), deps=[first])
    general, plain = _handles_both_ways(graph)
    assert general is not None
    assert plain is not None
    assert plain.handles == general.handles
    assert list(plain.handles) == [handle.token, other.token]
    exec_ = graph.instantiate()  # a plain graph whose kernels take handles: cells are made
    exec_.destroy()
    graph.destroy()


def test_plain_graph_without_handles_has_no_conditionals(buf: ahg.DevicePtr) -> None:
    graph, _ = _kernel_chain(buf, 3)
    assert _handles_both_ways(graph) == (None, None)
    graph.destroy()


# -- a captured chain, end to end ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_captured_chain_replays_as_built_and_eager(device: ahg.Device) -> None:
    src = device.malloc(NBYTES)
    dst = device.malloc(NBYTES)
    stream = device.create_stream()
    await stream.memcpy(src, np.arange(N, dtype=np.int64))
    calls = [(N, i % 3, i, src, dst) for i in range(40)]

    async def eager() -> np.ndarray:
        await stream.memset(dst, 0, NBYTES)
        for args in calls:
            await stream.launch_kernel(affine, N, 1, args)
        await stream.synchronize()
        return host_view(device, dst).copy()

    expected = await eager()
    stream.begin_capture()
    for args in calls:
        await stream.launch_kernel(affine, N, 1, args)
    captured = stream.end_capture()
    built = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for args in calls:
        previous = [built.add_kernel_node(affine, N, 1, args, deps=previous)]
    assert _shape(captured) == _shape(built)
    verbose = ahg.DotFlags.Verbose | ahg.DotFlags.KernelNodeParams
    assert _dot(captured, verbose) == _dot(built, verbose)
    results = []
    for graph in (captured, built):
        await stream.memset(dst, 0, NBYTES)
        exec_ = graph.instantiate()
        await exec_.launch(stream)
        await stream.synchronize()
        results.append(host_view(device, dst).copy())
        exec_.destroy()
        graph.destroy()
    np.testing.assert_array_equal(results[0], expected)
    np.testing.assert_array_equal(results[1], expected)
    stream.destroy()
    device.free(src)
    device.free(dst)
    no_capture_left()
