"""A wide graph's copy keeps its ids and parameters as read, with Kahn's order as positions.

A graph read in insertion order and put in Kahn's order by positions (``exec/kahn_columns.py``,
a fork-join built a branch at a time) holds its ids and parameters as read until something
asks for them in the copy's order (``ExecGraph.read_order``); instantiate's compiler gathers
each run's parameters through the positions, a slice per stretch of consecutive ones. These
tests hold that path to the node walk's copy and to eager results: replays, order inside each
branch, setters and ``update`` through the source map (which permutes on first use),
disabled nodes, two launch shapes (whose check reads the copy's order), two threads making
the columns at once, and destroying an executable in flight.
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from itertools import compress, repeat
from operator import is_
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.compile import _gather
from ahipgraph.exec.conditional import prepare_plain
from ahipgraph.exec.instantiate import _per_kernel
from ahipgraph.exec.plan_check import unenforced_edges
from ahipgraph.exec.snapshot import ExecGraph, snapshot
from ahipgraph.graph.node_type import NodeType
from cleanup import replayed_int64
from test_kahn_columns import _read

N = 512
# Under ``make race`` the checker reads every launch's node records, which permutes them.
RACE_CHECKED = bool(os.environ.get("AHIPGRAPH_RACE_CHECK", "").strip("0 "))
# With LENGTH nodes a branch: past kahn_columns.MIN_NODES, and few enough odd nodes (a branch's
# first, the root and the join) to be read by columns.
BRANCHES = 50
LENGTH = 6


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int64], i: ahg.int64, add: ahg.int64) -> None:
    """x[i] = x[i] * 2 + add: the order of a branch's nodes shows in the result."""
    if t.ids.size:
        x[i] = x[i] * 2 + add


@ahg.kernel
def set_handle(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    """Sets a conditional handle from a plain kernel node."""
    ahg.set_conditional(h, value)


def _wide(x: ahg.DevicePtr, length: int = LENGTH, *, block: int = 1, add: int = 1) -> ahg.Graph:
    """One root, ``BRANCHES`` branches of ``length`` bumps built one after the other (branch
    ``b``'s ``k``-th bumps word ``b`` by ``k + add``; every fifth branch with ``block``
    threads), one join."""
    graph = ahg.Graph()
    root = graph.add_kernel_node(bump, 1, 1, (x, N - 1, 3))
    tails = []
    for branch in range(BRANCHES):
        node = root
        threads = block if branch % 5 == 0 else 1
        for k in range(length):
            node = graph.add_kernel_node(bump, 1, threads, (x, branch, k + add), deps=[node])
        tails.append(node)
    graph.add_kernel_node(bump, 1, 1, (x, N - 1, 5), deps=tails)
    return graph


def _unverified(graph: ahg.Graph) -> ahg.GraphExec:
    """``graph.instantiate()`` without the suite's plan check (see conftest), which makes the
    copy's node records: these tests look at the copy as a launched-only executable holds it,
    and run the check themselves afterwards."""
    return ahg.GraphExec._instantiate(graph)


def _walked_and_as_read(graph: ahg.Graph) -> tuple[ahg.GraphExec, ahg.GraphExec]:
    """Two executables of ``graph``: one whose copy was walked, one whose copy is as read."""
    with _read("walk"):
        walked = graph.instantiate()
    return walked, _unverified(graph)


def _copy_of(graph_exec: ahg.GraphExec) -> ExecGraph:
    copy: ExecGraph = graph_exec._graph  # the executable's copy, as instantiate made it
    return copy


def _expected(length: int = LENGTH, add: int = 1) -> int:
    """A branch's word after one replay from 0."""
    value = 0
    for k in range(length):
        value = value * 2 + k + add
    return value


@pytest.mark.asyncio
async def test_a_wide_executable_replays_with_its_parameters_still_as_read(
    device: ahg.Device,
) -> None:
    x = device.malloc(N * 8)
    graph = _wide(x)
    walked, graph_exec = _walked_and_as_read(graph)
    try:
        assert _copy_of(walked).read_order() is None
        assert _copy_of(graph_exec).read_order() is not None  # taken: nothing permuted
        words = await replayed_int64(device, graph_exec, x, N)
        if not RACE_CHECKED:
            assert _copy_of(graph_exec).read_order() is not None  # a replay permutes nothing
        assert unenforced_edges(graph_exec) == []
        if not RACE_CHECKED:  # it reads the columns by index: no record made, none permuted
            assert _copy_of(graph_exec).read_order() is not None
            assert not _copy_of(graph_exec).made
        assert words[:BRANCHES].tolist() == [_expected()] * BRANCHES  # each branch in order
        assert words[N - 1] == 3 * 2 + 5  # the join after every branch
        np.testing.assert_array_equal(words, await replayed_int64(device, walked, x, N))
        stats = graph_exec.statistics()
        assert (stats.nodes, stats.segments) == (BRANCHES * LENGTH + 2, BRANCHES + 2)
    finally:
        walked.destroy()
        graph_exec.destroy()
        graph.destroy()
        device.free(x)


def test_the_columns_permuted_on_first_use_are_the_walks() -> None:
    x = ahg.get_device(0).malloc(N * 8)
    graph = _wide(x, length=8)
    try:
        with graph.lock:
            with _read("walk"):
                walked, _ = snapshot(graph)
            read, _ = snapshot(graph)
        assert read.read_order() is not None
        order, as_read = read.read_order()  # type: ignore[misc]
        in_order = read.params_column()
        assert read.read_order() is None  # permuted once, and kept
        assert read.params_column() is in_order
        assert all(map(is_, in_order, walked.params_column()))
        assert [as_read[i] for i in order.tolist()] == in_order
        assert [(n.id, n.params, n.deps) for n in read.nodes] == [
            (n.id, n.params, n.deps) for n in walked.nodes
        ]
    finally:
        graph.destroy()
        ahg.get_device(0).free(x)


def _first_use(copy: ExecGraph, start: threading.Barrier, got: list[Any]) -> None:
    start.wait()
    records = [(n.id, n.params) for n in copy.nodes]
    got.append((records, copy.params_column()))  # one append: the threads' pairs stay whole


def test_two_threads_permuting_one_copy_get_equal_columns(fast_switching: None) -> None:
    x = ahg.get_device(0).malloc(N * 8)
    graph = _wide(x)
    try:
        for _ in range(5):
            with graph.lock:
                read, _ = snapshot(graph)
            assert read.read_order() is not None
            got: list[Any] = []
            start = threading.Barrier(2)
            threads = [
                threading.Thread(target=_first_use, args=(read, start, got)) for _ in range(2)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            (records, params), (other_records, other_params) = got
            assert records == other_records
            assert params == other_params == [record[1] for record in records]
    finally:
        graph.destroy()
        ahg.get_device(0).free(x)


@pytest.mark.asyncio
async def test_setters_update_and_disabled_nodes_reach_a_copy_still_as_read(
    device: ahg.Device,
) -> None:
    """The first setter makes the source map (permuting the rows as read) and the records."""
    x = device.malloc(N * 8)
    graph = _wide(x)
    walked, graph_exec = _walked_and_as_read(graph)
    made = [walked, graph_exec]
    nodes = graph.nodes()  # Kahn's order: the root, the first node of every branch, ...
    try:
        assert _copy_of(graph_exec).read_order() is not None
        second_of_7 = nodes[1 + BRANCHES + 7]
        for each in made:
            each.set_kernel_node_params(second_of_7, bump, 1, 1, (x, 7, 40))
            each.set_node_enabled(nodes[1 + 9], False)  # the first node of branch 9
        words = await replayed_int64(device, graph_exec, x, N)
        np.testing.assert_array_equal(words, await replayed_int64(device, walked, x, N))
        rest = _expected(LENGTH - 2, add=3)  # what the nodes after the second add
        assert words[7] == ((1 * 2 + 40) << (LENGTH - 2)) + rest
        assert words[9] == _expected() - (1 << (LENGTH - 1))  # without its first node's 1
        changed = _wide(x, add=11)  # update: every node adds ten more
        for each in made:
            each.update(changed)
            each.set_node_enabled(nodes[1 + 9], True)
        changed.destroy()
        words = await replayed_int64(device, graph_exec, x, N)
        np.testing.assert_array_equal(words, await replayed_int64(device, walked, x, N))
        assert words[:BRANCHES].tolist() == [_expected(add=11)] * BRANCHES
        assert unenforced_edges(graph_exec) == []
    finally:
        for each in made:
            each.destroy()
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_two_launch_shapes_read_the_copy_in_its_order(device: ahg.Device) -> None:
    """Nodes of several launch shapes are checked in the copy's order: that permutes the
    parameters before compiling, which then reads them as any copy's."""
    x = device.malloc(N * 8)
    graph = _wide(x, block=64)
    try:
        graph_exec = _unverified(graph)
        assert _copy_of(graph_exec).read_order() is None  # asked for, so permuted
        with _read("walk"):
            walked = graph.instantiate()
        words = await replayed_int64(device, graph_exec, x, N)
        np.testing.assert_array_equal(words, await replayed_int64(device, walked, x, N))
        assert words[:BRANCHES].tolist() == [_expected()] * BRANCHES
        graph_exec.destroy()
        walked.destroy()
    finally:
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_a_wide_executable_still_as_read_destroyed_in_flight_gives_everything_back(
    device: ahg.Device,
) -> None:
    x = device.malloc(N * 8)
    graph = _wide(x, length=7)
    stream = device.create_stream()
    await device.memset(x, 0, N * 8)
    bytes_before = device.memory.bytes_in_use
    streams_before = len(device.streams)
    try:
        graph_exec = _unverified(graph)
        assert _copy_of(graph_exec).read_order() is not None
        handles = [await graph_exec.launch(stream) for _ in range(3)]
        assert graph_exec.statistics().in_flight == 3
        graph_exec.destroy()
        for handle in handles:
            await handle
            assert handle.exception() is None
        stats = graph_exec.statistics()
        assert (stats.state, stats.in_flight, stats.completed) == ("closed", 0, 3)
        assert stats.signal_pool.in_use == 0
        assert device.memory.bytes_in_use == bytes_before  # the arena went back
        assert len(device.streams) == streams_before  # its internal streams went back
        once = _expected(7)  # a replay takes a branch's word from v to v * 128 + once
        words = device.view(x, np.int64, N)
        assert words[:BRANCHES].tolist() == [(once * 129) * 128 + once] * BRANCHES
    finally:
        stream.destroy()
        graph.destroy()
        device.free(x)


# -- the pieces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_the_gather_by_stretches_is_the_gather_by_entries(seed: int) -> None:
    rng = random.Random(seed)
    column = [object() for _ in range(rng.randint(1, 300))]
    parts: list[int] = []
    for _ in range(rng.randint(1, 30)):
        start = rng.randrange(len(column))
        length = rng.choice([1, 2, 5, rng.randint(1, 40)])
        parts.extend(range(start, min(start + length, len(column))))
    if rng.random() < 0.3:
        parts = rng.sample(range(len(column)), rng.randint(1, len(column)))
    at = np.array(parts, dtype=np.int64)
    got = _gather(column, at)
    assert len(got) == len(parts)
    assert all(map(is_, got, [column[i] for i in parts]))


def test_gathering_nothing_and_one_entry() -> None:
    column = ["a", "b", "c"]
    assert _gather(column, np.empty(0, dtype=np.int64)) == []
    assert _gather(column, np.array([2], dtype=np.int64)) == ["c"]
    assert _gather(column, np.array([1, 2], dtype=np.int64)) == ["b", "c"]


def test_kernels_are_counted_alike_one_or_several() -> None:
    x = ahg.get_device(0).malloc(N * 8)
    graph = ahg.Graph()
    try:
        one = [graph.add_kernel_node(bump, 1, 1, (x, i, 1)).params for i in range(5)]
        assert _per_kernel(one) == {bump: 5}
        handle = graph.conditional_handle(default=1)
        mixed = [*one, graph.add_kernel_node(set_handle, 1, 1, (5, handle)).params, one[0]]
        assert _per_kernel(mixed) == Counter({bump: 6, set_handle: 1})
        assert _per_kernel([]) == {}
    finally:
        graph.destroy()
        ahg.get_device(0).free(x)


def test_the_kernel_list_is_made_only_for_a_kernel_taking_a_handle() -> None:
    x = ahg.get_device(0).malloc(N * 8)
    graph = _wide(x)
    try:
        with graph.lock:
            copy, _ = snapshot(graph)

        def never() -> list[Any]:
            raise AssertionError("no kernel takes a handle: the list is not needed")

        assert prepare_plain(never, [bump]) is None
        handle = graph.conditional_handle(default=1)
        other = graph.conditional_handle(default=2)
        first = graph.add_kernel_node(set_handle, 1, 1, (5, other), deps=graph.nodes()[-1:])
        graph.add_kernel_node(set_handle, 1, 1, (6, handle), deps=[first])
        with graph.lock:
            copy, _ = snapshot(graph)
        assert copy.read_order() is not None
        kinds = copy.types()
        kernels = list(compress(copy.params_column(), map(is_, kinds, repeat(NodeType.Kernel))))
        with graph.lock:
            copy, _ = snapshot(graph)
        found = prepare_plain(copy.params_column, [bump, set_handle])
        listed = prepare_plain(kernels, [bump, set_handle])
        assert found is not None
        assert listed is not None
        assert list(found.handles) == list(listed.handles) == [other.token, handle.token]
    finally:
        graph.destroy()
        ahg.get_device(0).free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize("reuse", [False, True], ids=["one generation", "mixed generations"])
async def test_the_source_map_finds_every_node_whatever_its_generation(
    device: ahg.Device, reuse: bool
) -> None:
    """Registry rows of a destroyed graph come back with the next generation: a graph made
    after it mixes generations (kept one per node), a fresh one has one (kept as one int)."""
    x = device.malloc(N * 8)
    if reuse:
        old = ahg.Graph()
        for i in range(BRANCHES * 3):
            old.add_kernel_node(bump, 1, 1, (x, i % N, 1))
        old.destroy()
    graph = _wide(x)
    stale = ahg.Graph()
    gone = stale.add_kernel_node(bump, 1, 1, (x, 0, 1))
    stale.destroy()
    graph_exec = _unverified(graph)
    try:
        for node in graph.nodes()[1 : 1 + BRANCHES]:  # every branch's first node adds 2
            graph_exec.set_kernel_node_params(node, bump, 1, 1, (x, node.params.args[1], 2))
        with pytest.raises(ahg.InvalidValue):
            graph_exec.set_kernel_node_params(gone, bump, 1, 1, (x, 0, 2))
        words = await replayed_int64(device, graph_exec, x, N)
        assert words[:BRANCHES].tolist() == [_expected() + (1 << (LENGTH - 1))] * BRANCHES
    finally:
        graph_exec.destroy()
        graph.destroy()
        device.free(x)
