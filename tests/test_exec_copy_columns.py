"""What an executable's copy of its graph holds per node while it lives.

An executable keeps its copy's columns and its source map's handle rows for its whole life, and
most executables are only launched. A copy of one node type keeps the type once (``types()``
makes the list for each reader), and the source map keeps registry rows and generations as
arrays of the narrowest machine type, not a list of pointers each. These tests hold those
columns to a few bytes per node (``tracemalloc`` on the copy's module) and the source map to
finding every node, whatever its row and generation, in both of the copy's reading orders. The
rows and generations come from the graph nodes' handles, one int each: the node's size and the
split are tested here too.
"""

from __future__ import annotations

import gc
import tracemalloc
from array import array
from itertools import repeat

import pytest

import ahipgraph as ahg
from ahipgraph.exec.snapshot import _narrow, snapshot
from ahipgraph.graph.node_type import NodeType
from cleanup import replayed_int64

SIZE = 5_000


@ahg.kernel
def put(t: ahg.Threads, x: ahg.Ptr[ahg.int64], i: ahg.int64, value: ahg.int64) -> None:
    if t.ids.size:
        x[i] = value


def _chain(x: ahg.DevicePtr, size: int) -> ahg.Graph:
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for i in range(size):
        previous = (graph.add_kernel_node(put, 1, 1, (x, i % 64, i), deps=previous),)
    return graph


def _fork_join(x: ahg.DevicePtr, branches: int, length: int) -> ahg.Graph:
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (x, 0, 0))
    tails = []
    for branch in range(branches):
        node = root
        for step in range(length):
            node = graph.add_kernel_node(put, 1, 1, (x, branch % 64, step), deps=[node])
        tails.append(node)
    graph.add_kernel_node(put, 1, 1, (x, 0, 0), deps=tails)
    return graph


def _mixed_generations() -> None:
    """Destroy a graph, so the next graph's nodes take some reused registry rows (a newer
    generation) and some fresh ones: a source map then keeps a generation per node."""
    old = ahg.Graph()
    for _ in range(SIZE // 2):
        old.add_empty_node()
    old.destroy()


@pytest.mark.parametrize("shape", ["chain", "fork_join"])
def test_a_copy_of_one_node_type_keeps_a_few_bytes_a_node_in_its_columns(
    device: ahg.Device, shape: str
) -> None:
    """Per node, the copy holds its ids and parameters (a pointer each), its dependency
    column (a C int) and the source map its rows and generations (narrow arrays); the
    fork-join's copy also its positions (a C int) and Kahn's dependency column. No list of
    types, rows or generations (a list is 8 bytes a node), no 64-bit dependency column."""
    x = device.malloc(64 * 8)
    _mixed_generations()
    graph = _chain(x, SIZE) if shape == "chain" else _fork_join(x, 100, SIZE // 100 - 1)
    size = len(graph.nodes())
    copy_modules = [
        tracemalloc.Filter(True, "*/ahipgraph/exec/snapshot.py"),
        tracemalloc.Filter(True, "*/ahipgraph/exec/kahn_columns.py"),
    ]
    gc.collect()
    tracemalloc.start()
    try:
        # Without the suite's plan check (see conftest), which makes the copy's node records:
        # this is the copy a launched-only executable holds.
        graph_exec = ahg.GraphExec._instantiate(graph)
        held = tracemalloc.take_snapshot().filter_traces(copy_modules)
    finally:
        tracemalloc.stop()
    try:
        per_node = sum(stat.size for stat in held.statistics("filename")) / size
        assert per_node < (27 if shape == "chain" else 32), per_node
    finally:
        graph_exec.destroy()
        graph.destroy()
        device.free(x)


def _wide(x: ahg.DevicePtr, size: int) -> ahg.Graph:
    """A root, ``size - 2`` nodes side by side after it, and a join."""
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (x, 0, 0))
    side = [graph.add_kernel_node(put, 1, 1, (x, i % 64, i), deps=[root]) for i in range(size - 2)]
    graph.add_kernel_node(put, 1, 1, (x, 0, 0), deps=side)
    return graph


def _roots(x: ahg.DevicePtr, size: int) -> ahg.Graph:
    graph = ahg.Graph()
    for i in range(size):
        graph.add_kernel_node(put, 1, 1, (x, i % 64, i))
    return graph


SHAPES = {
    "chain": lambda x: _chain(x, 3_000),  # copied without a walk
    "fork_join": lambda x: _fork_join(x, 30, 99),  # read in insertion order, by positions
    "wide": lambda x: _wide(x, 3_000),  # walked (graph.topology.ordered_columns)
    "roots": lambda x: _roots(x, 3_000),
    "one": lambda x: _chain(x, 1),
    "empty": lambda x: ahg.Graph(),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_copys_dependency_column_is_c_ints(device: ahg.Device, shape: str) -> None:
    """Whichever way the copy was made (the chain shortcut, positions, or the node walk), its
    dependency column is C ints holding each node's dependencies as the graph has them. The
    walk's column was 64-bit: 8 bytes a node for the executable's life."""
    x = device.malloc(64 * 8)
    graph = SHAPES[shape](x)
    try:
        with graph.lock:
            copy, nodes = snapshot(graph)
        column, _ = copy.first_deps()
        assert column.typecode == "i"
        assert len(column) == len(copy) == len(graph.nodes())
        position = {node.id: index for index, node in enumerate(nodes)}
        for index, node in enumerate(nodes):
            expected = sorted(position[dep.id] for dep in node.dependencies())
            assert sorted(copy.deps_of(index)) == expected
    finally:
        graph.destroy()
        device.free(x)


def test_types_of_a_copy_of_one_type_are_a_new_list_each_time(device: ahg.Device) -> None:
    """The copy's types, made for each reader: one list of the one type per call, so a reader
    that changed its list could never change the copy."""
    x = device.malloc(64 * 8)
    graph = _chain(x, 10)
    try:
        with graph.lock:
            copy, _ = snapshot(graph)
        first = copy.types()
        assert first == [NodeType.Kernel] * 10
        first[0] = NodeType.Empty
        assert copy.types() == [NodeType.Kernel] * 10
        assert len(copy) == 10
        assert [node.type for node in copy.nodes] == [NodeType.Kernel] * 10
    finally:
        graph.destroy()
        device.free(x)


def test_a_copy_of_several_types_keeps_each_nodes_type(device: ahg.Device) -> None:
    x = device.malloc(64 * 8)
    graph = ahg.Graph()
    try:
        first = graph.add_kernel_node(put, 1, 1, (x, 0, 1))
        graph.add_empty_node(deps=[first])
        with graph.lock:
            copy, _ = snapshot(graph)
        assert copy.types() == [NodeType.Kernel, NodeType.Empty]
        assert len(copy) == 2
    finally:
        graph.destroy()
        device.free(x)


@pytest.mark.parametrize(
    "values",
    [[], [0], [0, 255], [256, 3], [65535], [65536, 0], [2**32 - 1], [2**32, 1], [2**40]],
)
def test_narrow_columns_hold_every_value_in_the_narrowest_type(values: list[int]) -> None:
    import numpy as np

    held = _narrow(np.array(values, dtype=np.uint64))
    assert isinstance(held, array)
    assert held.tolist() == values
    top = max(values, default=0)
    assert held.itemsize == (1 if top < 256 else 2 if top < 65536 else 4 if top < 2**32 else 8)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain", "fork_join"])
async def test_the_source_map_finds_nodes_whose_generation_is_past_a_byte(
    device: ahg.Device, shape: str
) -> None:
    """Rows reused more than 255 times have a generation a byte cannot hold: the map keeps
    them in a wider array and still finds each node (and refuses a stale handle)."""
    x = device.malloc(64 * 8)
    for _ in range(300):  # the same few rows, destroyed and reused: their generations move on
        old = ahg.Graph()
        old.add_empty_node()
        old.destroy()
    graph = _chain(x, 40) if shape == "chain" else _fork_join(x, 4, 9)
    stale = ahg.Graph()
    gone = stale.add_kernel_node(put, 1, 1, (x, 0, 0))
    stale.destroy()
    assert max(node.hid.generation for node in graph.nodes()) > 255
    graph_exec = graph.instantiate()
    try:
        nodes = graph.nodes()
        for node in nodes:  # every node now stores 7 at its own word
            graph_exec.set_kernel_node_params(node, put, 1, 1, (x, node.params.args[1], 7))
        with pytest.raises(ahg.InvalidValue):
            graph_exec.set_kernel_node_params(gone, put, 1, 1, (x, 0, 0))
        words = await replayed_int64(device, graph_exec, x, 64)
        written = {node.params.args[1] for node in nodes}
        assert [words[i] for i in sorted(written)] == list(repeat(7, len(written)))
    finally:
        graph_exec.destroy()
        graph.destroy()
        device.free(x)


@pytest.mark.parametrize("shape", ["chain", "fork_join"])
def test_the_dependency_column_holds_c_ints_and_reads_as_the_walk_does(
    device: ahg.Device, shape: str
) -> None:
    """The copy's dependency column as read (a chain counted up, a fork-join in Kahn's
    order) is 4 bytes a node, with the values of the node-by-node walk's column (C ints too);
    the chain test and the planner's column cut read it as the walk's."""
    from ahipgraph.exec import planner
    from ahipgraph.graph.topology import ordered_columns

    x = device.malloc(64 * 8)
    graph = _chain(x, 600) if shape == "chain" else _fork_join(x, 50, 11)
    try:
        with graph.lock:
            copy, _ = snapshot(graph)
            _, walked, walked_multi = ordered_columns(graph)
        first, multi = copy.first_deps()
        assert first.itemsize == 4
        assert walked.itemsize == 4
        assert list(first) == list(walked)
        assert multi == walked_multi
        assert copy.is_chain() is (shape == "chain")
        cut = planner._cut_segments_columns(copy)
        assert [list(segment.nodes) for segment in cut] == [
            list(segment.nodes) for segment in planner._cut_segments_nodes(copy)
        ]
    finally:
        graph.destroy()
        device.free(x)


def test_index_columns_keep_every_index() -> None:
    import numpy as np

    from ahipgraph.exec.kahn_columns import index_column

    values = np.array([-1, 0, 5, 2**31 - 1], dtype=np.int64)
    column = index_column(values)
    assert column.typecode == "i"
    assert column.tolist() == values.tolist()
    assert np.frombuffer(column, dtype=column.typecode).tolist() == values.tolist()


def test_rows_and_generations_split_from_node_handles_however_large() -> None:
    """A node keeps its row and generation as one int (the row alone while the generation is
    0); the source map splits them, in numpy, or in Python for a generation past 32 bits."""
    from types import SimpleNamespace
    from typing import Any

    from ahipgraph.exec.snapshot import _rows_and_generations
    from ahipgraph.graph.node_registry import node_handle

    def nodes(pairs: list[tuple[int, int]]) -> Any:
        return [SimpleNamespace(_handle=node_handle(row, gen)) for row, gen in pairs]

    assert node_handle(7, 0) == 7
    rows, generation = _rows_and_generations(nodes([(5, 3), (70_000, 3)]))
    assert (rows.tolist(), generation) == ([5, 70_000], 3)
    assert rows.itemsize == 4
    rows, generations = _rows_and_generations(nodes([(5, 0), (6, 300)]))
    assert isinstance(generations, array)
    assert (rows.tolist(), generations.tolist(), generations.itemsize) == ([5, 6], [0, 300], 2)
    huge = 2**40 + 1
    rows, generations = _rows_and_generations(nodes([(2**32 - 1, huge), (0, 1)]))
    assert isinstance(generations, array)
    assert (rows.tolist(), generations.tolist()) == ([2**32 - 1, 0], [huge, 1])
    rows, _ = _rows_and_generations([])
    assert rows.tolist() == []


def test_every_node_handle_reads_back_as_its_registry_row_and_generation() -> None:
    """Rows reused (a newer generation) give each node a handle whose ``hid`` the registry
    finds, and a destroyed node's no longer validates."""
    from ahipgraph.graph.node import NODES

    old = ahg.Graph()
    for _ in range(40):
        old.add_empty_node()
    old.destroy()
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(80)]
    try:
        assert max(node.hid.generation for node in nodes) > 0  # the old graph's rows
        assert all(NODES.get(node.hid) is node and node.alive for node in nodes)
        assert len({node.hid.slot for node in nodes}) == len(nodes)
        gone = nodes.pop()
        gone.destroy()
        assert not gone.alive
        assert NODES.get(gone.hid) is None
    finally:
        graph.destroy()


def test_a_graph_node_holds_eight_pointers() -> None:
    """A node's handle is one field (its row and generation in one int): the node is the size
    of any object of eight pointer fields, its weak-reference list one of them."""
    import sys

    eight = type("Eight", (), {"__slots__": ("__weakref__", *(f"f{i}" for i in range(7)))})
    graph = ahg.Graph()
    try:
        node = graph.add_empty_node()
        assert sys.getsizeof(node) == sys.getsizeof(eight())
    finally:
        graph.destroy()
