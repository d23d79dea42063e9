"""A wide graph read in insertion order and put in Kahn's order by positions
(``exec/kahn_columns.py``) gives exactly the copy the node walk gives.

The column read is taken for large graphs whose nodes mostly link to the node beside them in
insertion order (a fork-join built a branch at a time); the node walk (``ordered_columns``)
for the rest. These tests force one way or the other (the thresholds are module globals read
when called) and hold them to each other on random graphs: wide and narrow, with many short
branches, with nodes removed (ids not dense), with edges added and removed afterwards, with
every node type and child graphs, and with cycles. They also compare the merged runs' gather
of the compile step with one slice per segment, and use the column read from two threads and
with the graph destroyed by another thread while it is read.
"""

from __future__ import annotations

import random
import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from ahipgraph.exec import kahn_columns as kc
from ahipgraph.exec import planner
from ahipgraph.exec import snapshot as snapshot_module
from ahipgraph.exec.compile import _take_segments
from ahipgraph.exec.plan_check import unenforced_edges
from ahipgraph.exec.planner import SegmentTable
from ahipgraph.exec.snapshot import ExecGraph, snapshot, snapshot_sources
from ahipgraph.graph.topology import ordered_columns
from cleanup import replayed_int64
from test_exec_random import dags

N = 64


@contextmanager
def _read(way: str) -> Iterator[None]:
    """Force the column read (``"columns"``) or the node walk (``"walk"``) for every graph."""
    saved = kc.MIN_NODES, kc.ODD_SHARE, kc.NODES_PER_ROUND
    if way == "columns":
        kc.MIN_NODES, kc.ODD_SHARE, kc.NODES_PER_ROUND = 1, 1, 1
    else:
        kc.MIN_NODES = 10**12
    try:
        yield
    finally:
        kc.MIN_NODES, kc.ODD_SHARE, kc.NODES_PER_ROUND = saved


def _forced(graph: ahg.Graph) -> kc.KahnColumns:
    with graph.lock:
        read = kc.kahn_columns(graph, min_nodes=1, max_odd=10**9, max_rounds=10**9)
    assert read is not None
    return read


def _as_walk(read: kc.KahnColumns) -> tuple[list[ahg.GraphNode], list[int], dict[Any, Any]]:
    return [read.nodes[i] for i in read.order.tolist()], list(read.first), read.multi


def _walk(graph: ahg.Graph) -> tuple[list[ahg.GraphNode], list[int], dict[Any, Any]]:
    order, first, multi = ordered_columns(graph)
    return order, list(first), multi


# -- graphs ------------------------------------------------------------------------------------


def _branches(rng: random.Random, *, interleave: bool = False) -> ahg.Graph:
    """Many short branches between forks and joins, built a branch at a time (or, with
    ``interleave``, a node of each branch in turn): rounds of every width."""
    graph = ahg.Graph()
    layer = [graph.add_empty_node() for _ in range(rng.randint(1, 3))]
    for _ in range(rng.randint(1, 4)):
        lengths = [
            rng.choice([0, 1, 2, 2, 5, rng.randint(0, 12)]) for _ in range(rng.randint(1, 60))
        ]
        tails: list[ahg.GraphNode] = []
        if interleave:
            ends = [rng.choice(layer) for _ in lengths]
            for step in range(max(lengths, default=0)):
                for b, length in enumerate(lengths):
                    if step < length:
                        ends[b] = graph.add_empty_node(deps=[ends[b]])
            tails = [end for end, length in zip(ends, lengths, strict=True) if length]
        else:
            for length in lengths:
                node = rng.choice(layer)
                for _ in range(length):
                    node = graph.add_empty_node(deps=[node])
                if length:
                    tails.append(node)
        tails = tails or layer
        if rng.random() < 0.3:
            tails.append(graph.add_empty_node())  # a root in the middle of the insertion order
        layer = [
            graph.add_empty_node(deps=rng.sample(tails, rng.randint(1, min(len(tails), 40))))
            for _ in range(rng.randint(1, 3))
        ]
    return graph


def _edited(rng: random.Random, graph: ahg.Graph) -> ahg.Graph:
    """Remove some nodes (so ids and registry rows are not dense) and add and remove edges
    (which leave one-element and empty edge lists behind)."""
    nodes = list(graph.nodes())
    for node in rng.sample(nodes, len(nodes) // 8):
        node.destroy()
    nodes = graph.nodes()  # a topological order: edges forward in it keep the graph acyclic
    for _ in range(len(nodes) // 6):
        if len(nodes) < 2:
            break
        src, dst = sorted(rng.sample(range(len(nodes)), 2))
        a, b = nodes[src], nodes[dst]
        if b in a.dependents():
            graph.remove_dependencies(a, b)
        else:
            graph.add_dependencies(a, b)
    return graph


def _random(rng: random.Random) -> ahg.Graph:
    kind = rng.randrange(4)
    if kind == 0:
        graph = _branches(rng)
    elif kind == 1:
        graph = _branches(rng, interleave=True)
    elif kind == 2:
        graph = _edited(rng, _branches(rng))
    else:  # a chain, then a fork-join: the walk along links, then wide rounds
        graph = ahg.Graph()
        node = graph.add_empty_node()
        for _ in range(rng.randint(0, 30)):
            node = graph.add_empty_node(deps=[node])
        tails = []
        for _ in range(rng.randint(1, 30)):
            tail = node
            for _ in range(rng.randint(1, 6)):
                tail = graph.add_empty_node(deps=[tail])
            tails.append(tail)
        graph.add_empty_node(deps=tails)
    return graph


# -- the order ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(80))
def test_the_column_read_is_the_node_walk_on_random_graphs(seed: int) -> None:
    graph = _random(random.Random(seed))
    try:
        assert _as_walk(_forced(graph)) == _walk(graph)
        assert _as_walk(_forced(graph))[0] == graph.nodes()
    finally:
        graph.destroy()


def test_a_fork_join_built_a_branch_at_a_time_is_read_by_columns() -> None:
    """The defaults: the bench's shape takes the column read; a small graph, and a graph whose
    nodes rarely link to the node beside them, take the walk."""
    graph = ahg.Graph()
    root = graph.add_empty_node()
    tails = []
    for _ in range(100):
        node = root
        for _ in range(5):
            node = graph.add_empty_node(deps=[node])
        tails.append(node)
    graph.add_empty_node(deps=tails)
    small = ahg.Graph()
    small.add_empty_node(deps=[small.add_empty_node()])
    scattered = ahg.Graph()  # each node depends on a random earlier one: few links
    rng = random.Random(3)
    made = [scattered.add_empty_node()]
    for _ in range(400):
        made.append(scattered.add_empty_node(deps=[rng.choice(made)]))
    try:
        with graph.lock:
            read = kc.kahn_columns(graph)
        assert read is not None
        assert _as_walk(read) == _walk(graph)
        with small.lock:
            assert kc.kahn_columns(small) is None
        with scattered.lock:
            assert kc.kahn_columns(scattered) is None
    finally:
        graph.destroy()
        small.destroy()
        scattered.destroy()


def test_too_many_rounds_give_the_walk_back() -> None:
    """Past its rounds the column read stops and says so (None), changing nothing."""
    graph = _branches(random.Random(5), interleave=True)
    try:
        with graph.lock:
            assert kc.kahn_columns(graph, min_nodes=1, max_odd=10**9, max_rounds=1) is None
            assert kc.kahn_columns(graph, min_nodes=1, max_odd=0) is None
        assert _as_walk(_forced(graph)) == _walk(graph)
    finally:
        graph.destroy()


@pytest.mark.parametrize("lone_cycle", [False, True])
def test_a_cycle_is_the_walks_invalid_value(lone_cycle: bool) -> None:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    ends = [graph.add_empty_node(deps=[graph.add_empty_node(deps=[root])]) for _ in range(5)]
    if lone_cycle:  # a ring of lone dependencies beside the fork-join: no root reaches it
        a = graph.add_empty_node()
        b = graph.add_empty_node(deps=[a])
        a_deps: Any = a
        graph.add_dependencies(b, a_deps)
    else:
        graph.add_dependencies(ends[2], root)  # root now waits for a node that waits for it
    try:
        with pytest.raises(ahg.InvalidValue) as walked:
            ordered_columns(graph)
        with pytest.raises(ahg.InvalidValue) as read:
            _forced(graph)
        assert str(read.value) == str(walked.value)
        assert "cycle" in str(read.value)
        with _read("columns"), pytest.raises(ahg.InvalidValue, match="cycle"):
            graph.instantiate()
    finally:
        graph.destroy()


# -- the copy ----------------------------------------------------------------------------------


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int64], i: ahg.int64, add: ahg.int64) -> None:
    """x[i] = x[i] * 3 + add: the order of the nodes writing one word shows in the result."""
    if t.ids.size:
        x[i] = x[i] * 3 + add


@pytest.fixture
def event(device: ahg.Device) -> Iterator[ahg.Event]:
    made = device.create_event()
    yield made
    made.destroy()


def _mixed(rng: random.Random, x: ahg.DevicePtr, event: ahg.Event) -> ahg.Graph:
    """Branches of kernels with a node of every other kind among them, and child graphs."""
    graph = ahg.Graph()
    child = ahg.Graph()
    inner = child.add_kernel_node(bump, 1, 1, (x, N - 2, 1))
    child.add_kernel_node(bump, 1, 1, (x, N - 2, 2), deps=[inner])
    root = graph.add_kernel_node(bump, 1, 1, (x, N - 1, 1))
    tails = []
    for branch in range(rng.randint(2, 30)):
        node = root
        for k in range(rng.randint(1, 6)):
            roll = rng.random()
            deps = [node]
            word = branch % (N - 3)
            if roll < 0.06:
                node = graph.add_memset_node(x + 8 * word, 0, 8, deps=deps)
            elif roll < 0.1:
                node = graph.add_empty_node(deps=deps)
            elif roll < 0.13:
                node = graph.add_host_node(lambda: None, deps=deps)
            elif roll < 0.16:
                node = graph.add_child_graph_node(child, deps=deps)
            elif roll < 0.18:
                node = graph.add_event_record_node(event, deps=deps)
            else:
                node = graph.add_kernel_node(bump, 1, 1, (x, word, k + 1), deps=deps)
        tails.append(node)
    graph.add_kernel_node(bump, 1, 1, (x, N - 1, 2), deps=tails)
    child.destroy()  # the graph holds its own copy
    return graph


def _copy_of(graph: ahg.Graph) -> tuple[Any, ...]:
    copy, originals = snapshot(graph)
    nodes = copy.nodes

    def columns(each: ExecGraph) -> tuple[Any, ...]:
        return (
            [(n.id, n.type, n.params, n.deps) for n in each.nodes],
            list(each.first_deps()[0]),
            each.first_deps()[1],
            len(each.user_objects),
        )

    children = [columns(n.child) for n in nodes if n.child is not None]
    return columns(copy), children, originals


@pytest.mark.parametrize("seed", range(20))
def test_both_reads_make_the_same_copy_plan_and_source_map(
    seed: int, device: ahg.Device, event: ahg.Event
) -> None:
    x = device.malloc(N * 8)
    rng = random.Random(seed)
    graph = _mixed(rng, x, event)
    if seed % 3 == 0:
        graph = _edited(rng, graph)
    try:
        with _read("walk"):
            walked = _copy_of(graph)
            walked_copy, walked_sources = snapshot_sources(graph)
        with _read("columns"):
            read = _copy_of(graph)
            read_copy, read_sources = snapshot_sources(graph)
        assert read == walked
        assert read_sources.in_order() == walked_sources.in_order() == graph.nodes()
        walked_map = walked_sources.source_map(walked_copy)
        read_map = read_sources.source_map(read_copy)
        assert len(read_map) == len(walked_map) == len(graph.nodes())
        index_of = {hid: node.index for hid, node in walked_map.items()}
        assert {hid: node.index for hid, node in read_map.items()} == index_of
        assert [read_map[node.hid].index for node in graph.nodes()] == list(range(len(index_of)))
        assert _plan(planner.plan_graph(read_copy)) == _plan(planner.plan_graph(walked_copy))
    finally:
        graph.destroy()
        device.free(x)


def _plan(plan: planner.Plan) -> tuple[Any, ...]:
    return (
        [
            (s.id, list(s.nodes), s.deps, s.level, s.strand, s.waits, s.signal)
            for s in plan.segments
        ],
        [list(ids) for ids in plan.strands],
        plan.num_signals,
        plan.final_waits,
    )


async def _run(device: ahg.Device, graph_exec: ahg.GraphExec, x: ahg.DevicePtr) -> np.ndarray:
    return await replayed_int64(device, graph_exec, x, N)


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(6))
async def test_an_executable_read_by_columns_runs_as_the_walked_one(
    seed: int, device: ahg.Device, event: ahg.Event
) -> None:
    """Results, edges, setters through the source map, and a graph edited after its first
    instantiate: the second executable has the edit, the first does not."""
    x = device.malloc(N * 8)
    rng = random.Random(seed)
    graph = _mixed(rng, x, event)
    made: list[ahg.GraphExec] = []
    try:
        with _read("walk"):
            made.append(graph.instantiate())
        with _read("columns"):
            made.append(graph.instantiate())
        walked, read = made
        assert unenforced_edges(read) == []
        before = await _run(device, walked, x)
        np.testing.assert_array_equal(await _run(device, read, x), before)
        kernel = next(n for n in graph.nodes() if n.type is ahg.NodeType.Kernel)
        for each in made:  # the source map finds the node in both
            each.set_kernel_node_params(kernel, bump, 1, 1, (x, N - 3, 7))
        np.testing.assert_array_equal(await _run(device, read, x), await _run(device, walked, x))
        # an edit after the first instantiate: a new branch from the root to the end
        root, end = graph.root_nodes()[0], graph.nodes()[-1]
        added = graph.add_kernel_node(bump, 1, 1, (x, N - 3, 5), deps=[root])
        graph.add_dependencies(added, end)
        with _read("walk"):
            made.append(graph.instantiate())
        with _read("columns"):
            made.append(graph.instantiate())
        edited = await _run(device, made[3], x)
        np.testing.assert_array_equal(edited, await _run(device, made[2], x))
        assert not np.array_equal(edited, await _run(device, read, x))
    finally:
        for each in made:
            each.destroy()
        graph.destroy()
        device.free(x)


def test_two_threads_instantiate_one_wide_graph_by_columns(
    device: ahg.Device, event: ahg.Event
) -> None:
    x = device.malloc(N * 8)
    graph = _mixed(random.Random(11), x, event)
    made: list[ahg.GraphExec] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def instantiate() -> None:
        try:
            start.wait()
            made.append(graph.instantiate())
        except BaseException as exc:  # reported below
            errors.append(exc)

    with _read("columns"):
        threads = [threading.Thread(target=instantiate) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    try:
        assert errors == []
        first, second = made
        assert _plan(first.plan) == _plan(second.plan)
        with _read("walk"):
            copy, _ = snapshot(graph)
        assert _plan(first.plan) == _plan(planner.plan_graph(copy))
    finally:
        for each in made:
            each.destroy()
        graph.destroy()
        device.free(x)


def test_a_graph_destroyed_by_another_thread_while_read(
    device: ahg.Device, event: ahg.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read holds the graph's lock: a destroy on another thread waits for it, and the
    instantiate either completes (its executable runs on its own copy) or fails with
    InvalidValue at its second check, giving back everything it made."""
    x = device.malloc(N * 8)
    graph = _mixed(random.Random(4), x, event)
    in_use = device.memory.bytes_in_use
    destroying = threading.Event()
    destroyer = threading.Thread(target=lambda: (destroying.set(), graph.destroy()))
    original = kc.kahn_columns

    def reading(graph_read: ahg.Graph, **limits: Any) -> Any:
        if not destroyer.is_alive() and not destroying.is_set():  # the top graph's read
            destroyer.start()  # it blocks on the graph's lock, which this read holds
            assert destroying.wait(timeout=30)
        return original(graph_read, **limits)

    monkeypatch.setattr(snapshot_module, "kahn_columns", reading)
    outcome: ahg.GraphExec | ahg.InvalidValue
    try:
        with _read("columns"):
            try:
                outcome = graph.instantiate()
            except ahg.InvalidValue as exc:
                outcome = exc
        destroyer.join()
        if isinstance(outcome, ahg.GraphExec):
            assert unenforced_edges(outcome) == []
            outcome.destroy()
        assert device.memory.bytes_in_use == in_use
        with pytest.raises(ahg.InvalidValue):
            graph.instantiate()
    finally:
        if destroyer.is_alive():
            destroyer.join()
        device.free(x)


# -- the compile step's gather -----------------------------------------------------------------


@pytest.mark.parametrize("seed", range(30))
def test_a_merged_runs_gather_is_one_slice_per_segment(seed: int) -> None:
    rng = random.Random(seed)
    table = SegmentTable()
    count = 0
    for _ in range(rng.randint(1, 40)):
        size = rng.choice([1, 2, 3, 5, rng.randint(1, 30)])
        step = rng.choice([1, 2, 7])
        if size >= 3 and rng.random() < 0.15:  # uneven: kept as a list
            nodes: Any = sorted(rng.sample(range(count, count + 4 * size), size))
        else:
            nodes = range(count, count + step * size, step)
        table.append(nodes, [])
        count = max(nodes) + 1
    column = [object() for _ in range(count)]
    for _ in range(5):
        ids = array("q", rng.sample(range(len(table)), rng.randint(1, len(table))))
        expected = [entry for sid in ids for entry in table.take(column, sid)]
        got = _take_segments(table, column, ids)
        assert len(got) == len(expected)
        assert all(a is b for a, b in zip(got, expected, strict=True))


# -- the plan's columns ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_the_column_plan_is_the_loops_plan(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Levels, strands, waits, signals and final waits of many segments, worked out with
    column operations (every level's group checked at once, or a step each), equal the
    loop's, on wide random graphs and on random exec graphs."""
    from test_fork_join_exec import _plan_of, _random_exec_graph

    rng = random.Random(seed)
    graph = _random(rng)
    try:
        copies = [snapshot(graph)[0], _random_exec_graph(rng, rng.randint(2, 400))]
    finally:
        graph.destroy()
    for copy in copies:
        for max_streams in (1, 2, 3, 4):
            with monkeypatch.context() as patch:
                patch.setattr(planner, "_COLUMN_PLAN_MIN", 0)
                patch.setattr(planner, "_COLUMN_GROUP_MIN", rng.choice([0, 1, 3, 16]))
                columns = planner.plan_graph(copy, max_streams=max_streams)
            with monkeypatch.context() as patch:
                patch.setattr(planner, "_COLUMN_PLAN_MIN", 10**9)
                loop = planner.plan_graph(copy, max_streams=max_streams)
            assert _plan_of(columns) == _plan_of(loop)


# -- every way at once, against eager results --------------------------------------------------


@contextmanager
def _columns_everywhere() -> Iterator[None]:
    """The column read, the column cut and the column plan for every graph, however small."""
    saved = planner._COLUMN_PLAN_MIN, planner._COLUMN_GROUP_MIN, planner._COLUMN_CUT_MIN
    planner._COLUMN_PLAN_MIN, planner._COLUMN_GROUP_MIN, planner._COLUMN_CUT_MIN = 0, 2, 0
    try:
        with _read("columns"):
            yield
    finally:
        planner._COLUMN_PLAN_MIN, planner._COLUMN_GROUP_MIN, planner._COLUMN_CUT_MIN = saved


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "name",
    [
        "diamond",
        "fork-join, six branches joined by a host node",
        "child graph in a diamond",
        "nested child graphs",
        "wide level over more parallel branches than streams",
        "two independent roots and two leaves",
    ],
)
async def test_fixed_shapes_by_columns_give_eager_results(name: str) -> None:
    from test_exec_random import SHAPES, check_graph_equals_eager

    with _columns_everywhere():
        await check_graph_equals_eager(SHAPES[name], queues=4)


@pytest.mark.asyncio
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=dags(max_nodes=20), seed=st.integers(0, 2**16), queues=st.sampled_from([2, 4]))
async def test_random_dags_by_columns_give_eager_results(
    specs: tuple[Any, ...], seed: int, queues: int
) -> None:
    from test_exec_random import check_graph_equals_eager

    with _columns_everywhere():
        await check_graph_equals_eager(specs, seed, queues)
