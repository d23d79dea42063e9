"""The wide fork-join's executable: the plan's segments held as columns, merged kernel runs held
as segment ids, and Kahn's order taken a round at a time.

A wide graph has a segment per branch, which the executable keeps for its life. These tests
hold the column plan to what the segment records said (every field, on random graphs and on
both cuts), the executable's results to eager results, every edge to the plan verifier, and
the fork-join's executable memory to the chain's (``tracemalloc``).
"""

from __future__ import annotations

import gc
import random
import threading
import tracemalloc
from array import array
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec import planner
from ahipgraph.exec.plan_check import unenforced_edges
from ahipgraph.exec.planner import SegmentNodes, SegmentTable
from ahipgraph.exec.snapshot import ExecGraph, ExecNode, snapshot
from ahipgraph.graph.node_type import NodeType
from ahipgraph.graph.topology import ordered_columns
from cleanup import replayed_int64

N = 256


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int64], i: ahg.int64, add: ahg.int64) -> None:
    """x[i] = x[i] * 2 + add: the order of a branch's nodes shows in the result."""
    if t.ids.size:
        x[i] = x[i] * 2 + add


@ahg.kernel
def noop(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    """Does nothing: the memory measured is the runtime's."""


def _fork_join(
    x: ahg.DevicePtr, lengths: list[int], *, empty_root: bool = False, priority: int = 0
) -> ahg.Graph:
    """One root, a branch per entry of ``lengths`` (each node bumping its branch's word), one
    join. Branch ``b`` writes word ``b``; the root and the join write the last word."""
    graph = ahg.Graph()
    if empty_root:
        root = graph.add_empty_node()
    else:
        root = graph.add_kernel_node(bump, 1, 1, (x, N - 1, 3))
    tails = []
    for branch, length in enumerate(lengths):
        node = root
        for k in range(length):
            urgent = priority if k == 0 and branch % 3 == 1 else 0
            node = graph.add_kernel_node(
                bump, 1, 1, (x, branch, k + 1), priority=urgent, deps=[node]
            )
        tails.append(node)
    graph.add_kernel_node(bump, 1, 1, (x, N - 1, 5), deps=list(dict.fromkeys(tails)))
    return graph


async def _eager(device: ahg.Device, graph: ahg.Graph, x: ahg.DevicePtr) -> np.ndarray:
    """The graph's kernels run one by one on a stream, in the graph's topological order."""
    stream = device.create_stream()
    try:
        await device.memset(x, 0, N * 8)
        for node in graph.nodes():
            params = node.params
            if node.type is ahg.NodeType.Kernel:
                await stream.launch_kernel(params.kernel, params.grid, params.block, params.args)
        await stream.synchronize()
        return device.view(x, np.int64, N).copy()
    finally:
        stream.destroy()


async def _replayed(device: ahg.Device, graph_exec: ahg.GraphExec, x: ahg.DevicePtr) -> np.ndarray:
    return await replayed_int64(device, graph_exec, x, N)


LENGTHS = [
    [3] * 40,  # even branches: each a range
    [1] * 9,  # one-node branches
    [2, 5, 1, 7, 3, 3, 0, 4],  # uneven, and a branch of none (the root joined directly)
    [12],  # a lone branch: a chain
]


@pytest.mark.asyncio
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize(
    "options",
    [{}, {"strict_flush": True}, {"flags": ahg.InstantiateFlags.USE_NODE_PRIORITY}],
    ids=["plain", "strict", "priority"],
)
async def test_fork_join_replays_equal_eager_results(
    device: ahg.Device, lengths: list[int], options: dict[str, Any]
) -> None:
    x = device.malloc(N * 8)
    graph = _fork_join(x, lengths, priority=-1)
    flags = options.pop("flags", ahg.InstantiateFlags.NONE)
    graph_exec = graph.instantiate(flags, **options)
    try:
        assert unenforced_edges(graph_exec) == []
        expected = await _eager(device, graph, x)
        np.testing.assert_array_equal(await _replayed(device, graph_exec, x), expected)
        # the statistics count the segments: the root, one per branch of nodes, the join
        branches = sum(1 for length in lengths if length)
        assert graph_exec.statistics().segments == (branches + 2 if len(lengths) > 1 else 1)
    finally:
        graph_exec.destroy()
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_a_disabled_branch_node_and_an_update_keep_every_edge(device: ahg.Device) -> None:
    """A setter makes the node records; the next update then compiles nothing new but must
    still find every node of the merged runs."""
    x = device.malloc(N * 8)
    lengths = [4] * 30
    graph = _fork_join(x, lengths)
    graph_exec = graph.instantiate()
    nodes = graph.nodes()
    try:
        victim = nodes[1 + 30 * 2 + 7]  # the third node of branch 7 (Kahn's order)
        graph_exec.set_node_enabled(victim, False)
        assert unenforced_edges(graph_exec) == []
        replayed = await _replayed(device, graph_exec, x)
        # branch 7 lost its third bump: adds 1, 2, (3), 4 -> (1*2+2)*2+4
        assert replayed[7] == (1 * 2 + 2) * 2 + 4
        graph_exec.set_node_enabled(victim, True)
        again = _fork_join(x, lengths)
        graph_exec.update(again)
        again.destroy()
        np.testing.assert_array_equal(
            await _replayed(device, graph_exec, x), await _eager(device, graph, x)
        )
    finally:
        graph_exec.destroy()
        graph.destroy()
        device.free(x)


def _exec_bytes(device: ahg.Device, graph: ahg.Graph) -> int:
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        graph_exec = graph.instantiate()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    graph_exec.destroy()
    return held


def test_a_wide_fork_joins_executable_holds_about_what_a_chains_does(device: ahg.Device) -> None:
    """1,000 branches of 5 nodes: the plan's 1,002 segments and the merged runs cost a few
    ints each, not a record, lists, a range and an index per node (formerly 1.45x the chain's
    executable; 1.1x now)."""
    x = device.malloc(4096)
    size = 5002
    chain = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(size):
        previous = [chain.add_kernel_node(noop, 1, 1, (x, i), deps=previous)]
    wide = ahg.Graph()
    root = wide.add_kernel_node(noop, 1, 1, (x, 0))
    tails = []
    for branch in range(1000):
        node = root
        for k in range(5):
            node = wide.add_kernel_node(noop, 1, 1, (x, branch * 5 + k), deps=[node])
        tails.append(node)
    wide.add_kernel_node(noop, 1, 1, (x, 1), deps=tails)
    try:
        chain_bytes = _exec_bytes(device, chain)
        wide_bytes = _exec_bytes(device, wide)
        assert wide_bytes <= 1.2 * chain_bytes, (wide_bytes / size, chain_bytes / size)
        graph_exec = wide.instantiate()
        stats = graph_exec.statistics()
        assert (stats.segments, stats.nodes) == (1002, size)
        graph_exec.destroy()
    finally:
        chain.destroy()
        wide.destroy()
        device.free(x)


# -- the plan's columns --------------------------------------------------------------------------


def _records(segments: Any) -> list[tuple[Any, ...]]:
    return [
        (
            s.id,
            list(s.nodes),
            type(s.nodes),
            s.deps,
            s.level,
            s.strand,
            s.position,
            s.priority,
            s.waits,
            s.signal,
        )
        for s in segments
    ]


def _plan_of(plan: planner.Plan) -> tuple[Any, ...]:
    return (
        _records(plan.segments),
        [list(ids) for ids in plan.strands],
        plan.num_signals,
        plan.start_signal,
        plan.final_waits,
        plan.levels,
    )


class _Priority:
    def __init__(self, priority: int) -> None:
        self.priority = priority


def _random_exec_graph(rng: random.Random, size: int) -> ExecGraph:
    nodes = []
    for i in range(size):
        roll = rng.random()
        if i == 0 or roll < 0.08:
            deps: tuple[int, ...] = ()
        elif roll < 0.55:
            deps = (i - 1,)
        elif roll < 0.75:
            deps = (rng.randrange(i),)
        else:
            deps = tuple(sorted(rng.sample(range(i), min(i, rng.randint(2, 4)))))
        priority = _Priority(rng.choice([0, 0, -1, -2]))
        nodes.append(ExecNode(i, i, NodeType.Kernel, priority, deps))
    return ExecGraph(0, nodes)


@pytest.mark.parametrize("seed", range(25))
def test_the_column_cut_and_the_loop_cut_plan_alike(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large flat graphs are cut in numpy, the others node by node: every field of every
    segment, the strands, the signals and the final waits agree."""
    rng = random.Random(seed)
    graph = _random_exec_graph(rng, rng.randint(planner._COLUMN_CUT_MIN, 400))
    for max_streams in (1, 2, 4):
        for use_priority in (False, True):
            columns = planner.plan_graph(graph, max_streams=max_streams, use_priority=use_priority)
            with monkeypatch.context() as patch:
                patch.setattr(planner, "_COLUMN_CUT_MIN", 10**9)
                loop = planner.plan_graph(graph, max_streams=max_streams, use_priority=use_priority)
            assert _plan_of(columns) == _plan_of(loop)


def test_a_segment_table_reads_like_a_list_of_segments() -> None:
    nodes = [ExecNode(0, 0, NodeType.Empty, None, ())]
    for k in range(4):  # 3 branches of 4 (side by side, as in Kahn's order), then a join
        for _ in range(3):
            index = len(nodes)
            nodes.append(
                ExecNode(index, index, NodeType.Empty, None, (0 if k == 0 else index - 3,))
            )
    nodes.append(ExecNode(13, 13, NodeType.Empty, None, (10, 11, 12)))
    plan = planner.plan_graph(ExecGraph(0, nodes))
    table = plan.segments
    assert isinstance(table, SegmentTable)
    assert len(table) == 5
    assert [list(s.nodes) for s in table] == [
        [0],
        [1, 4, 7, 10],
        [2, 5, 8, 11],
        [3, 6, 9, 12],
        [13],
    ]
    assert table[-1].id == 4
    assert table[-1].deps == [1, 2, 3]
    assert [s.id for s in table[1:3]] == [1, 2]
    assert table[1] is not table[1]  # made when read, from the columns
    with pytest.raises(IndexError):
        table[5]
    with pytest.raises(IndexError):
        table[-6]
    assert "segments=5" in repr(table)
    runs = SegmentNodes(table, array("q", [3, 1]))
    assert list(runs) == [3, 6, 9, 12, 1, 4, 7, 10]
    assert len(runs) == 8
    assert [runs[i] for i in range(-8, 8)] == list(runs) * 2
    assert runs[2:5] == [9, 12, 1]
    with pytest.raises(IndexError):
        runs[8]
    assert repr(runs) == "<SegmentNodes segments=2 nodes=8>"


def test_uneven_segments_keep_their_node_lists() -> None:
    """A segment whose nodes are not evenly spaced in Kahn's order is kept as a list."""
    table = SegmentTable()
    table.append([2, 3, 7], [])
    table.append(range(4, 13, 4), [0])
    table.append([5, 9], [1, 0])
    assert table.nodes(0) == [2, 3, 7]
    assert table.nodes(1) == range(4, 13, 4)
    assert table.nodes(2) == [5, 9]
    assert table.deps(2) == [1, 0]
    assert table.take(list(range(100, 120)), 0) == [102, 103, 107]
    assert table.take(list(range(100, 120)), 1) == [104, 108, 112]


# -- Kahn's order by rounds ----------------------------------------------------------------------


def _columns_from_order(
    order: list[ahg.GraphNode],
) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    position = {node: index for index, node in enumerate(order)}
    first: list[int] = []
    multi: dict[int, tuple[int, ...]] = {}
    for index, node in enumerate(order):
        deps = node.dependencies()
        if len(deps) == 1 and type(node._deps) is ahg.GraphNode:
            first.append(position[deps[0]])
        else:
            first.append(-1)
            multi[index] = tuple(position[dep] for dep in deps)
    return first, multi


def _wide(rng: random.Random) -> ahg.Graph:
    """Layers of side-by-side chains that fork, join and start anew: rounds of every kind."""
    graph = ahg.Graph()
    layer = [graph.add_empty_node() for _ in range(rng.randint(1, 4))]
    for _ in range(rng.randint(1, 4)):
        heads = []
        for _ in range(rng.randint(1, 12)):
            heads.append(graph.add_empty_node(deps=[rng.choice(layer)]))
        tails = []
        for head in heads:
            node = head
            for _ in range(rng.choice([0, 3, 3, rng.randint(0, 9)])):
                node = graph.add_empty_node(deps=[node])
            tails.append(node)
        if rng.random() < 0.3:
            tails.append(graph.add_empty_node())  # a root in the middle of the insertion order
        joins = rng.randint(1, 3)
        layer = [
            graph.add_empty_node(deps=rng.sample(tails, rng.randint(1, len(tails))))
            for _ in range(joins)
        ]
    return graph


@pytest.mark.parametrize("seed", range(40))
def test_ordered_columns_are_kahns_order_on_wide_graphs(seed: int) -> None:
    graph = _wide(random.Random(seed))
    try:
        order, first, multi = ordered_columns(graph)
        assert order == graph.nodes()
        assert (list(first), multi) == _columns_from_order(order)
    finally:
        graph.destroy()


def test_a_cycle_behind_a_wide_round_is_invalid_value() -> None:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    ends = [graph.add_empty_node(deps=[graph.add_empty_node(deps=[root])]) for _ in range(5)]
    graph.add_dependencies(ends[2], root)  # root now waits for a node that waits for it
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        ordered_columns(graph)
    graph.destroy()


def test_plans_made_on_two_threads_at_once_are_equal(device: ahg.Device) -> None:
    """Planning is pure: two threads instantiating one wide graph get the same plan."""
    x = device.malloc(N * 8)
    graph = _fork_join(x, [3] * 50)
    made: list[ahg.GraphExec] = []
    errors: list[BaseException] = []

    def instantiate() -> None:
        try:
            made.append(graph.instantiate())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=instantiate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        first, second = made
        assert _plan_of(first.plan) == _plan_of(second.plan)
        copy, _ = snapshot(graph)
        assert _plan_of(first.plan) == _plan_of(planner.plan_graph(copy))
    finally:
        for graph_exec in made:
            graph_exec.destroy()
        graph.destroy()
        device.free(x)


# -- misuse --------------------------------------------------------------------------------------


class Boom(Exception):
    pass


@ahg.kernel
def explode_at(t: ahg.Threads, x: ahg.Ptr[ahg.int64], i: ahg.int64, add: ahg.int64) -> None:
    """Raises when it would bump word 13: one node in the middle of a merged run."""
    if i == 13:
        raise Boom("a node of branch 13")
    if t.ids.size:
        x[i] = x[i] * 2 + add


@pytest.mark.asyncio
async def test_a_kernel_raising_inside_a_merged_run_stops_nothing_else(
    device: ahg.Device,
) -> None:
    """The branches of a strand are one run; a raising node fails the launch, and every other
    node of the run (and of the graph) still runs, as eager streams would run them."""
    x = device.malloc(N * 8)
    graph = ahg.Graph()
    root = graph.add_kernel_node(bump, 1, 1, (x, N - 1, 3))
    tails = []
    for branch in range(40):
        node = root
        for k in range(3):
            kernel = explode_at if k == 1 else bump
            node = graph.add_kernel_node(kernel, 1, 1, (x, branch, k + 1), deps=[node])
        tails.append(node)
    graph.add_kernel_node(bump, 1, 1, (x, N - 1, 5), deps=tails)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    try:
        await device.memset(x, 0, N * 8)
        handle = await graph_exec.launch(stream)
        with pytest.raises(ahg.LaunchFailure, match="explode_at") as info:
            await handle
        assert isinstance(info.value.__cause__, Boom)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()  # reported to the launch stream once
        words = device.view(x, np.int64, N)
        assert words[13] == 1 * 2 + 3  # its own branch ran around the failed node
        assert all(words[b] == (1 * 2 + 2) * 2 + 3 for b in range(40) if b != 13)
        assert words[N - 1] == 3 * 2 + 5  # the join ran after every branch
        stats = graph_exec.statistics()
        assert (stats.in_flight, stats.signal_pool.in_use) == (0, 0)
    finally:
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_a_wide_executable_destroyed_in_flight_gives_everything_back(
    device: ahg.Device,
) -> None:
    """Three launches of a 1,000-branch fork-join in flight, then destroy: they complete, and
    the arena, the signal sets and the internal streams go back."""
    x = device.malloc(4096)
    bytes_before = device.memory.bytes_in_use
    graph = ahg.Graph()
    root = graph.add_kernel_node(noop, 1, 1, (x, 0))
    tails = []
    for branch in range(1000):
        node = graph.add_kernel_node(noop, 1, 1, (x, branch), deps=[root])
        tails.append(graph.add_kernel_node(noop, 1, 1, (x, branch), deps=[node]))
    graph.add_kernel_node(noop, 1, 1, (x, 1), deps=tails)
    streams_before = len(device.streams)
    graph_exec = graph.instantiate()
    assert len(device.streams) == streams_before + graph_exec.statistics().strands - 1
    stream = device.create_stream()
    try:
        handles = [await graph_exec.launch(stream) for _ in range(3)]
        assert graph_exec.statistics().in_flight == 3
        graph_exec.destroy()
        assert graph_exec.statistics().state == "closing"
        for handle in handles:
            await handle
            assert handle.exception() is None
        stats = graph_exec.statistics()
        assert stats.state == "closed"
        assert (stats.in_flight, stats.completed, stats.signal_pool.in_use) == (0, 3, 0)
        assert device.memory.bytes_in_use == bytes_before  # the arena went back
        assert len(device.streams) == streams_before + 1  # its internal streams too: ours left
    finally:
        graph.destroy()
        stream.destroy()
        device.free(x)
