"""A whole-graph update of an executable only ever launched: columns in, columns out.

An executable of kernel nodes that no setter or update has touched keeps its nodes as
columns and its kernels as runs. ``exec.update(graph)`` of a graph of the same shape, whose
nodes have the executable's kernels and attributes, rewrites the argument slots in place and
keeps the new parameters as a column, with no launch in flight; anything else takes the
general path. Either way the executable must then behave exactly as one instantiated from the
new graph: every node's new arguments read, a changed launch shape dispatched with its new
block, a setter or a later update seeing the new parameters, launches enqueued before the
update reading the old ones, and nothing per node kept in memory.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import run_together
from cleanup import destroy, replayed_int64

SIZE = 2_002  # a fork-join's root, join and 8 branches of 250
BRANCHES = 8
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value * 1000 + t.block.x


def build(
    shape: str,
    out: ahg.DevicePtr,
    base: int,
    blocks: dict[int, int] | None = None,
    *,
    insertion: str = "by branch",
) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    """``SIZE`` nodes, node ``i`` writing ``(base + i) * 1000 + block`` to ``out[i]``: a chain,
    or a fork-join of ``BRANCHES`` chains added branch by branch (or, with ``insertion``
    "by level", one node of each branch in turn: the same topology, another insertion order).
    ``blocks`` gives some nodes (by number) another block than 64."""
    blocks = blocks or {}
    graph = ahg.Graph()
    nodes: dict[int, ahg.GraphNode] = {}

    def add(number: int, deps: list[ahg.GraphNode]) -> ahg.GraphNode:
        args = (base + number, number, out)
        block = blocks.get(number, 64)
        node = nodes[number] = graph.add_kernel_node(put, 1, block, args, deps=deps)
        return node

    if shape == "chain":
        previous: list[ahg.GraphNode] = []
        for number in range(SIZE):
            previous = [add(number, previous)]
        return graph, [nodes[number] for number in range(SIZE)]
    root = add(0, [])
    length = (SIZE - 2) // BRANCHES
    numbers = [[1 + branch * length + step for step in range(length)] for branch in range(BRANCHES)]
    if insertion == "by branch":
        for branch in numbers:
            for position, number in enumerate(branch):
                add(number, [root] if position == 0 else [nodes[number - 1]])
    else:
        for position in range(length):
            for branch in numbers:
                number = branch[position]
                add(number, [root] if position == 0 else [nodes[number - 1]])
    add(SIZE - 1, [nodes[branch[-1]] for branch in numbers])
    return graph, [nodes[number] for number in range(SIZE)]


def expected(base: int, blocks: dict[int, int] | None = None) -> list[int]:
    blocks = blocks or {}
    return [(base + i) * 1000 + blocks.get(i, 64) for i in range(SIZE)]


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
async def test_updates_in_a_row_replay_each_new_graph_in_the_same_slots(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    graph, _ = build(shape, out, 0)
    graph_exec = graph.instantiate()
    assert await replayed(graph_exec, device, out) == expected(0)
    before = graph_exec.statistics()
    for base in (10_000, 20_000, 20_000, 30_000):
        new, _ = build(shape, out, base)
        assert graph_exec.update(new).ok
        destroy(new)  # the executable keeps what it took, not the graph
        assert await replayed(graph_exec, device, out) == expected(base)
    after = graph_exec.statistics()
    # every slot rewritten where it was: no slot allocated, reused or retired, one version
    assert after.arena.live_slots == before.arena.live_slots == SIZE
    assert after.arena.allocations == before.arena.allocations
    assert after.arena.reuses == before.arena.reuses
    assert after.versions == before.versions
    destroy(graph_exec, graph)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
async def test_a_node_whose_launch_shape_changes_is_dispatched_with_its_new_block(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    graph, _ = build(shape, out, 0, {5: 32})
    graph_exec = graph.instantiate()
    changed = {5: 64, 6: 128, SIZE // 2: 16, SIZE - 1: 256}
    new, _ = build(shape, out, 7, changed)
    assert graph_exec.update(new).ok
    assert await replayed(graph_exec, device, out) == expected(7, changed)
    again, _ = build(shape, out, 8)  # and back: each changed node's op made again
    assert graph_exec.update(again).ok
    assert await replayed(graph_exec, device, out) == expected(8)
    destroy(graph_exec, graph, new, again)


@pytest.mark.asyncio
async def test_an_update_to_another_allocation_is_read_by_the_next_replay(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """Pointer arguments a replay decoded once are decoded again after the rewrite."""
    other = device.malloc(8 * SIZE)
    graph, _ = build("chain", out, 0)
    graph_exec = graph.instantiate()
    assert await replayed(graph_exec, device, out) == expected(0)
    new, _ = build("chain", other, 3)
    assert graph_exec.update(new).ok
    device.view(other, np.int64, SIZE)[:] = 0
    assert await replayed(graph_exec, device, out) == [0] * SIZE
    assert [int(v) for v in device.view(other, np.int64, SIZE)] == expected(3)
    destroy(graph_exec, graph, new, other)


@pytest.mark.asyncio
async def test_the_same_topology_inserted_in_another_order_is_updated_node_for_node(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """The copies agree node for node in Kahn's order, not in the order the nodes were added:
    a graph added level by level updates one added branch by branch."""
    graph, _ = build("fork_join", out, 0)
    graph_exec = graph.instantiate()
    new, _ = build("fork_join", out, 5, insertion="by level")
    assert graph_exec.update(new).ok
    assert await replayed(graph_exec, device, out) == expected(5)
    back, _ = build("fork_join", out, 6)
    assert graph_exec.update(back).ok
    assert await replayed(graph_exec, device, out) == expected(6)
    destroy(graph_exec, graph, new, back)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
async def test_setters_and_later_updates_see_the_updated_parameters(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    graph, nodes = build(shape, out, 0)
    graph_exec = graph.instantiate()
    new, _ = build(shape, out, 4)
    assert graph_exec.update(new).ok
    # a setter on one node: the others keep the update's values
    graph_exec.set_kernel_node_params(nodes[3], put, 1, 64, (99, 3, out))
    want = expected(4)
    want[3] = 99 * 1000 + 64
    assert await replayed(graph_exec, device, out) == want
    graph_exec.set_node_enabled(nodes[9], False)
    want[9] = 0
    assert await replayed(graph_exec, device, out) == want
    # the update after a setter: every node the new graph's, the disabled one still disabled
    later, _ = build(shape, out, 6)
    assert graph_exec.update(later).ok
    want = expected(6)
    want[9] = 0
    assert await replayed(graph_exec, device, out) == want
    destroy(graph_exec, graph, new, later)


@pytest.mark.asyncio
async def test_a_launch_enqueued_before_the_update_reads_the_old_arguments(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    graph, _ = build("chain", out, 0)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    completion = await graph_exec.launch(stream)
    assert graph_exec.in_flight
    new, _ = build("chain", out, 2)
    assert graph_exec.update(new).ok  # in flight: new slots, the old ones kept until done
    await completion
    assert [int(v) for v in device.view(out, np.int64, SIZE)] == expected(0)
    assert await replayed(graph_exec, device, out) == expected(2)
    destroy(graph_exec, graph, new, stream)


@pytest.mark.asyncio
async def test_a_refused_update_changes_nothing() -> None:
    """A launch shape the executable's device cannot run (valid on the device the new graph
    was built for), met while the columns are compared, is reported with its node as the
    general path reports it; the executable keeps its parameters and takes the next update."""
    small = ahg.DeviceProperties(max_threads_per_block=256)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    device = ahg.get_device(1)
    out = device.malloc(8 * SIZE)
    graph, _ = build("chain", out, 0)
    graph_exec = graph.instantiate(device=device)
    bad, bad_nodes = build("chain", out, 9, {SIZE - 3: 512})
    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        graph_exec.update(bad)
    result = info.value.result  # type: ignore[attr-defined]
    assert result.kind is ahg.UpdateResultKind.NotSupported
    assert result.node is bad_nodes[SIZE - 3]
    assert await replayed(graph_exec, device, out) == expected(0)
    good, _ = build("chain", out, 1, {SIZE - 3: 256})
    assert graph_exec.update(good).ok
    assert await replayed(graph_exec, device, out) == expected(1, {SIZE - 3: 256})
    destroy(graph_exec, graph, bad, good, out)


@pytest.mark.skipif(RACE_CHECK, reason="the race checker keeps its own record per node")
def test_an_update_keeps_no_object_per_node(device: ahg.Device, out: ahg.DevicePtr) -> None:
    """The executable holds the new parameters (the new graph's own objects) in one column and
    nothing per node besides: no record, location or slot object made by the update (the
    general path keeps some four hundred bytes a node)."""
    graph, _ = build("fork_join", out, 0)
    graph_exec = graph.instantiate()
    new, _ = build("fork_join", out, 2)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert graph_exec.update(new).ok
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert kept < 40 * SIZE, f"{kept / SIZE:.0f} bytes a node kept"
    destroy(graph_exec, graph, new)


def test_updates_racing_with_a_thread_that_reads_the_nodes_end_in_one_state(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """One thread updates while another makes the executable's node records (a setter's
    lookup): whichever comes first, the executable ends with the last update's parameters."""
    graphs = [build("fork_join", out, base)[0] for base in (1, 2, 3)]
    for attempt in range(6):
        graph, nodes = build("fork_join", out, 0)
        graph_exec = graph.instantiate()
        errors = run_together(
            lambda graph_exec=graph_exec: [graph_exec.update(new) for new in graphs],
            # makes the records, changes nothing
            lambda graph_exec=graph_exec, node=nodes[attempt]: graph_exec.set_node_enabled(
                node, True
            ),
        )
        assert errors == []
        assert asyncio.run(replayed(graph_exec, device, out)) == expected(3)
        destroy(graph_exec, graph)
    destroy(*graphs)
