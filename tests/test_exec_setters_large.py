"""Per-node setters on a large executable change one node, and make one node's entries.

An executable that has only been launched holds its kernel runs as spans and its source map as
registry rows. A setter finds its node by searching those rows (its first few lookups) and
makes that node's location and argument slot alone from the runs, by the node's index: the
right node must change, and only it, in a chain and in a wide fork-join (whose copy is held in
the order it was read), however many setters follow, whatever a later update or a launch in
flight does with the same nodes.
"""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from cleanup import destroy, replayed_int64

SIZE = 3_002  # a fork-join's root, join and 10 branches of 300
BRANCHES = 10
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value * 1000 + t.block.x


def build(shape: str, out: ahg.DevicePtr, base: int) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    """``SIZE`` nodes, node ``i`` writing ``(base + i) * 1000 + 64`` to ``out[i]``; a chain, or
    a fork-join of ``BRANCHES`` chains added a branch at a time. Returns the nodes by number."""
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []

    def add(deps: list[ahg.GraphNode]) -> ahg.GraphNode:
        number = len(nodes)
        nodes.append(graph.add_kernel_node(put, 1, 64, (base + number, number, out), deps=deps))
        return nodes[-1]

    if shape == "chain":
        previous: list[ahg.GraphNode] = []
        for _ in range(SIZE):
            previous = [add(previous)]
        return graph, nodes
    root = add([])
    tails = []
    for _ in range(BRANCHES):
        previous = [root]
        for _ in range((SIZE - 2) // BRANCHES):
            previous = [add(previous)]
        tails.append(previous[0])
    add(tails)
    return graph, nodes


@pytest.fixture
def out(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(8 * SIZE)
    yield ptr
    device.free(ptr)


async def replayed(graph_exec: ahg.GraphExec, device: ahg.Device, out: ahg.DevicePtr) -> list[int]:
    values: list[int] = (await replayed_int64(device, graph_exec, out, SIZE)).tolist()
    return values


SHAPES = ["chain", "fork_join"]


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
async def test_setters_one_node_at_a_time_change_that_node_only(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """More setters than the source rows are searched for (the map is made on the way), on
    nodes of every branch, first and last nodes of runs included."""
    graph, nodes = build(shape, out, 0)
    graph_exec = graph.instantiate()
    want = [i * 1000 + 64 for i in range(SIZE)]
    picks = [SIZE // 2, 0, SIZE - 1, 1, 300, 301, 1500, 2999, 17, 2700, 600, 1234]
    for turn, number in enumerate(picks):
        block = 32 if turn % 2 else 64  # every other one a new launch shape: a new op
        value = 50_000 + turn
        graph_exec.set_kernel_node_params(nodes[number], put, 1, block, (value, number, out))
        want[number] = value * 1000 + block
        assert await replayed(graph_exec, device, out) == want
    graph_exec.set_node_enabled(nodes[301], False)
    want[301] = 0
    assert await replayed(graph_exec, device, out) == want
    destroy(graph_exec, graph)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
async def test_a_slot_a_setter_moved_is_kept_by_a_later_whole_update(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """A setter while a launch is in flight gives its node a new slot; an update of every
    node afterwards enters the other nodes' slots at once and must keep that one."""
    graph, nodes = build(shape, out, 0)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    held = await graph_exec.launch(stream)
    moved = SIZE // 3
    graph_exec.set_kernel_node_params(nodes[moved], put, 1, 64, (7, moved, out))
    await held
    new, _ = build(shape, out, 100)
    assert graph_exec.update(new).ok
    assert await replayed(graph_exec, device, out) == [(100 + i) * 1000 + 64 for i in range(SIZE)]
    graph_exec.set_kernel_node_params(nodes[moved], put, 1, 64, (9, moved, out))
    want = [(100 + i) * 1000 + 64 for i in range(SIZE)]
    want[moved] = 9 * 1000 + 64
    assert await replayed(graph_exec, device, out) == want
    # Another node's new slot, with a launch in flight again, takes a slot given back since
    # (the moved node's first): it must not be one the moved node still reads.
    held = await graph_exec.launch(stream)
    graph_exec.set_kernel_node_params(nodes[moved + 1], put, 1, 64, (11, moved + 1, out))
    await held
    want[moved + 1] = 11 * 1000 + 64
    assert await replayed(graph_exec, device, out) == want
    destroy(graph_exec, graph, new, stream)


def test_a_node_of_another_graph_or_destroyed_is_refused_searched_or_mapped(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    graph, nodes = build("fork_join", out, 0)
    other, other_nodes = build("fork_join", out, 0)
    graph_exec = graph.instantiate()
    for _ in range(12):  # searched, then from the map
        with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
            graph_exec.set_kernel_node_params(other_nodes[5], put, 1, 64, (1, 5, out))
        graph_exec.set_kernel_node_params(nodes[5], put, 1, 64, (1, 5, out))
    removed = nodes[7]
    removed.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_params(removed, put, 1, 64, (1, 7, out))
    destroy(graph_exec, graph, other)


@pytest.mark.skipif(RACE_CHECK, reason="the race checker keeps its own record per node")
def test_the_first_setter_makes_no_location_slot_or_map_entry_per_node(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """What the first setter keeps is the records (the copy's nodes, made whole), not an entry
    of the source map, a location and a slot for every node (some 550 bytes a node in all,
    on top of the executable's own hundred)."""
    graph, nodes = build("fork_join", out, 0)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        graph_exec = graph.instantiate()
        graph_exec.set_kernel_node_params(nodes[10], put, 1, 64, (3, 10, out))
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert kept < 450 * SIZE, f"{kept / SIZE:.0f} bytes a node kept"
    destroy(graph_exec, graph)
