"""Attacks on the whole-graph update of an executable held as columns.

Every attack compares three executables after ``update(new)``: one only ever launched (the
update made from its columns where it can be), one whose node records were made first (a
no-op ``set_node_enabled``: the general path), and one instantiated from ``new``. All three
must replay alike, dispatch alike (kernel bodies that record what they were given) and keep
alike what a setter or a later update reads.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import run_together
from cleanup import destroy

RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))
KA = ahg.KernelNodeAttribute
TICKS: list[tuple[int, int, int]] = []  # what each dispatch of ``tick`` saw of its launch
WIDTH = 4  # int64 cells per node in ``out``


def _shape(t: ahg.Threads) -> int:
    return t.grid.x * 1_000_000 + t.block.x * 1_000 + t.shared_mem


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index * WIDTH] = value
    out[index * WIDTH + 1] = _shape(t)


@ahg.kernel
def mixed(
    t: ahg.Threads,
    small: ahg.int8,
    real: ahg.float32,
    big: ahg.uint64,
    index: ahg.int32,
    out: ahg.Ptr[ahg.int64],
    other: ahg.Ptr[ahg.float64],
) -> None:
    out[index * WIDTH] = small
    out[index * WIDTH + 1] = _shape(t)
    out[index * WIDTH + 2] = big % (1 << 62)
    other[index] = real


@ahg.kernel
async def aput(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index * WIDTH] = -value
    out[index * WIDTH + 1] = _shape(t)


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    TICKS.append((t.grid.x, t.block.x, t.shared_mem))


KERNELS = {"put": put, "mixed": mixed, "aput": aput, "tick": tick}


@dataclass(frozen=True)
class Node:
    """One kernel node: which kernel, its launch shape and the value it writes."""

    kernel: str = "put"
    grid: Any = 1
    block: Any = 64
    shared_mem: int = 0
    value: int = 0
    priority: int = 0


@dataclass
class Buffers:
    out: ahg.DevicePtr
    other: ahg.DevicePtr
    count: int


def took_columns(graph_exec: ahg.GraphExec) -> bool:
    """Whether the executable's copy is still held as columns (its updates made from them).

    Under the environment's race check every executable has a race checker, and its updates
    take the general path: then any answer is taken as yes.
    """
    return RACE_CHECK or not graph_exec._graph.made


def args_of(node: Node, index: int, buffers: Buffers) -> tuple[Any, ...]:
    if node.kernel in ("put", "aput", "put_twice"):
        return (node.value, index, buffers.out)
    if node.kernel == "mixed":
        return (
            node.value % 128 - 64,
            node.value / 4,
            (1 << 63) + node.value,
            index,
            buffers.out,
            buffers.other,
        )
    return ()


def random_deps(count: int, seed: int) -> list[list[int]]:
    """A random DAG: each node depends on up to three earlier nodes (some on none)."""
    rng = random.Random(seed)
    deps: list[list[int]] = []
    for index in range(count):
        if index == 0:
            deps.append([])
            continue
        width = rng.choice((0, 1, 1, 1, 2, 3)) if index > 1 else 1
        deps.append(sorted(rng.sample(range(index), min(width, index))))
    return deps


def chain_deps(count: int) -> list[list[int]]:
    return [[] if index == 0 else [index - 1] for index in range(count)]


def build(
    nodes: Sequence[Node],
    deps: Sequence[Sequence[int]],
    buffers: Buffers,
    order: Sequence[int] | None = None,
) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    """A graph of ``nodes`` with dependencies ``deps`` (indices), added in ``order`` (any
    topological order of the indices; by index when not given)."""
    graph = ahg.Graph()
    made: dict[int, ahg.GraphNode] = {}
    for index in order if order is not None else range(len(nodes)):
        node = nodes[index]
        made[index] = graph.add_kernel_node(
            KERNELS[node.kernel],
            node.grid,
            node.block,
            args_of(node, index, buffers),
            shared_mem=node.shared_mem,
            priority=node.priority,
            deps=[made[dep] for dep in deps[index]],
        )
    return graph, [made[index] for index in range(len(nodes))]


COUNT = 6_000  # room for this many nodes in each Buffers


def make_buffers(device: ahg.Device) -> Buffers:
    return Buffers(device.malloc(8 * WIDTH * COUNT), device.malloc(8 * COUNT), COUNT)


@pytest.fixture
def buffers(device: ahg.Device) -> Iterator[Buffers]:
    made = make_buffers(device)
    yield made
    destroy(made.out, made.other)


@pytest.fixture
def others(device: ahg.Device) -> Iterator[Buffers]:
    """Another allocation of each buffer: a new graph's pointers."""
    made = make_buffers(device)
    yield made
    destroy(made.out, made.other)


async def replay(
    graph_exec: ahg.GraphExec, device: ahg.Device, outs: Sequence[Buffers]
) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
    """Every buffer's contents after one replay on zeroed memory, and what ``tick`` saw."""
    for each in outs:
        device.view(each.out, np.int64, WIDTH * each.count)[:] = 0
        device.view(each.other, np.float64, each.count)[:] = 0
    TICKS.clear()
    stream = device.create_stream()
    try:
        await (await graph_exec.launch(stream))
    finally:
        stream.destroy()
    seen = [device.view(each.out, np.int64, WIDTH * each.count).copy() for each in outs] + [
        device.view(each.other, np.float64, each.count).copy() for each in outs
    ]
    return seen, sorted(TICKS)


def assert_same(
    got: tuple[list[np.ndarray], list[Any]], want: tuple[list[np.ndarray], list[Any]]
) -> None:
    for have, expect in zip(got[0], want[0], strict=True):
        bad = np.flatnonzero(have != expect)
        assert bad.size == 0, f"{bad.size} cells differ, first at {bad[:5]}"
    assert got[1] == want[1]


async def check_update(
    device: ahg.Device,
    old_nodes: Sequence[Node],
    new_nodes: Sequence[Node],
    deps: Sequence[Sequence[int]],
    old_buffers: Buffers,
    new_buffers: Buffers,
    *,
    new_order: Sequence[int] | None = None,
    fast: bool = True,
    instantiate: dict[str, Any] | None = None,
) -> None:
    """Update an only-launched executable and a records-made one from ``old_nodes`` to
    ``new_nodes``; both must replay as a fresh instantiation of the new graph, and again after
    the update back to ``old_nodes``. ``fast``: whether the columns path must have been taken
    (the copy's records still not made)."""
    options = instantiate or {}
    outs = [old_buffers] if old_buffers is new_buffers else [old_buffers, new_buffers]
    graph, handles = build(old_nodes, deps, old_buffers)
    columns = graph.instantiate(**options)
    general = graph.instantiate(**options)
    general.set_node_enabled(handles[0], True)  # makes the records: the general path
    original = await replay(columns, device, outs)
    new, new_handles = build(new_nodes, deps, new_buffers, new_order)
    fresh = new.instantiate(**options)
    want = await replay(fresh, device, outs)
    for graph_exec in (columns, general):
        assert graph_exec.update(new).ok
    assert took_columns(columns) is (fast or RACE_CHECK)
    assert_same(await replay(columns, device, outs), want)
    assert_same(await replay(general, device, outs), want)
    assert columns.statistics().arena == general.statistics().arena
    assert columns.statistics().versions == general.statistics().versions
    # and back: the columns, the slots and the ops now hold the new graph's
    for graph_exec in (columns, general):
        assert graph_exec.update(graph).ok
    assert took_columns(columns) is (fast or RACE_CHECK)
    assert_same(await replay(columns, device, outs), original)
    assert_same(await replay(general, device, outs), original)
    stats = columns.statistics().arena, general.statistics().arena
    assert stats == (stats[1], stats[1])
    assert stats[0].live_slots == len(old_nodes)
    # and forth again; then what getters and setters read (they make the records)
    for graph_exec in (columns, general):
        assert graph_exec.update(new).ok
    for index in (0, len(handles) // 2, len(handles) - 1):
        assert columns.kernel_node_attribute(
            handles[index], KA.Priority
        ) == fresh.kernel_node_attribute(new_handles[index], KA.Priority)
    last = len(handles) - 1
    if new_nodes[last].kernel in ("put", "put_twice"):
        for graph_exec in (columns, general, fresh):
            on = new_handles[last] if graph_exec is fresh else handles[last]
            graph_exec.set_node_enabled(on, False)
        want = await replay(fresh, device, outs)
        assert_same(await replay(columns, device, outs), want)
        assert_same(await replay(general, device, outs), want)
    destroy(columns, general, fresh, graph, new)


async def check_refused(
    device: ahg.Device,
    old_nodes: Sequence[Node],
    new_nodes: Sequence[Node],
    deps: Sequence[Sequence[int]],
    buffers: Buffers,
    *,
    new_order: Sequence[int] | None = None,
    new_deps: Sequence[Sequence[int]] | None = None,
    instantiate: dict[str, Any] | None = None,
) -> ahg.UpdateResult:
    """Both paths refuse the update with the same kind, reason and node, and change nothing."""
    options = instantiate or {}
    graph, handles = build(old_nodes, deps, buffers)
    columns = graph.instantiate(**options)
    general = graph.instantiate(**options)
    general.set_node_enabled(handles[0], True)
    before = await replay(columns, device, [buffers])
    stats = columns.statistics()
    new, _ = build(new_nodes, new_deps or deps, buffers, new_order)
    results = []
    for graph_exec in (columns, general):
        with pytest.raises(ahg.GraphExecUpdateFailure) as info:
            graph_exec.update(new)
        results.append(info.value.result)  # type: ignore[attr-defined]
    assert results[0].kind is results[1].kind
    assert results[0].node is results[1].node
    assert results[0].reason == results[1].reason
    assert str(results[0]) == str(results[1])
    assert columns.statistics() == stats
    assert_same(await replay(columns, device, [buffers]), before)
    assert_same(await replay(general, device, [buffers]), before)
    destroy(columns, general, graph, new)
    result: ahg.UpdateResult = results[0]
    return result


def mixed_nodes(count: int, seed: int, value: int) -> list[Node]:
    rng = random.Random(seed)
    names = ["put", "mixed", "aput", "tick"]
    return [Node(rng.choice(names), value=value + index) for index in range(count)]


# -- the attacks -------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("count", [1, 2, 3, 31, 33, 300])
async def test_mixed_kernels_in_short_and_long_runs(
    device: ahg.Device, buffers: Buffers, count: int
) -> None:
    old = mixed_nodes(count, count, 10)
    new = [replace(node, value=node.value + 500) for node in old]
    await check_update(device, old, new, random_deps(count, count), buffers, buffers)


@pytest.mark.asyncio
async def test_runs_of_alternating_kernels_on_a_chain(device: ahg.Device, buffers: Buffers) -> None:
    names = ["put", "put", "mixed", "aput", "aput", "aput", "tick", "put"]
    old = [Node(names[index % len(names)], value=index) for index in range(400)]
    new = [replace(node, value=node.value * 3 + 1) for node in old]
    await check_update(device, old, new, chain_deps(400), buffers, buffers)


@pytest.mark.asyncio
@pytest.mark.parametrize("count", [1, 2, 40, 300])
async def test_pointers_moved_to_other_allocations(
    device: ahg.Device, buffers: Buffers, others: Buffers, count: int
) -> None:
    old = mixed_nodes(count, count + 1, 3)
    new = [replace(node, value=node.value + 7) for node in old]
    await check_update(device, old, new, random_deps(count, count), buffers, others)


def reshaped(nodes: Sequence[Node], seed: int) -> list[Node]:
    """Some nodes' grid, block or shared memory changed (ints, Dim3s, numpy ints)."""
    rng = random.Random(seed)
    out: list[Node] = []
    for node in nodes:
        roll = rng.random()
        if roll < 0.1:
            node = replace(node, block=rng.choice((32, 128, 256)))
        elif roll < 0.2:
            node = replace(node, grid=rng.choice((2, 3)))
        elif roll < 0.3:
            node = replace(node, shared_mem=rng.choice((16, 512)))
        elif roll < 0.35:
            node = replace(node, block=ahg.Dim3(128, 1, 1))  # a Dim3 of its own
        elif roll < 0.4:
            node = replace(node, block=np.int64(96))  # not a remembered shape
        out.append(replace(node, value=node.value + 1))
    return out


@pytest.mark.asyncio
@pytest.mark.parametrize("count", [1, 2, 33, 500])
async def test_launch_shapes_changed_on_some_nodes(
    device: ahg.Device, buffers: Buffers, count: int
) -> None:
    old = mixed_nodes(count, 7 * count, 0)
    new = reshaped(old, count)
    if count == 1:
        new = [replace(new[0], grid=2, shared_mem=8)]
    await check_update(device, old, new, random_deps(count, count + 3), buffers, buffers)


@pytest.mark.asyncio
async def test_old_nodes_of_unremembered_shapes_updated_to_plain_ones(
    device: ahg.Device, buffers: Buffers
) -> None:
    """Each old node has a launch shape of its own (a numpy block: no shared Threads)."""
    old = [Node("put", block=np.int32(64), value=index) for index in range(100)]
    new = [Node("put", block=64 if index % 2 else 32, value=index) for index in range(100)]
    await check_update(device, old, new, chain_deps(100), buffers, buffers)


@pytest.mark.asyncio
async def test_priorities_changed(device: ahg.Device, buffers: Buffers) -> None:
    old = mixed_nodes(60, 60, 0)
    new = [replace(node, priority=(index % 3) - 1) for index, node in enumerate(old)]
    await check_update(device, old, new, random_deps(60, 1), buffers, buffers)


@pytest.mark.asyncio
async def test_the_new_graph_added_in_another_topological_order(
    device: ahg.Device, buffers: Buffers
) -> None:
    count = 400
    deps = random_deps(count, 11)
    # a topological order other than the indices': deepest-first by a shuffled key
    rng = random.Random(5)
    key = [rng.random() for _ in range(count)]
    order: list[int] = []
    ready = [index for index in range(count) if not deps[index]]
    waiting = [len(each) for each in deps]
    dependents: list[list[int]] = [[] for _ in range(count)]
    for index, each in enumerate(deps):
        for dep in each:
            dependents[dep].append(index)
    while ready:
        ready.sort(key=key.__getitem__)
        index = ready.pop()
        order.append(index)
        for after in dependents[index]:
            waiting[after] -= 1
            if not waiting[after]:
                ready.append(after)
    old = [Node("put", value=index) for index in range(count)]
    new = [replace(node, value=node.value + 9) for node in old]
    # another order of the same edges is another copy (Kahn's order of the insertion order):
    # refused alike by both paths
    await check_refused(device, old, new, deps, buffers, new_order=order)


@pytest.mark.asyncio
async def test_an_update_to_the_graph_it_was_made_from(
    device: ahg.Device, buffers: Buffers
) -> None:
    old = mixed_nodes(200, 9, 0)
    await check_update(device, old, old, random_deps(200, 9), buffers, buffers)


@pytest.mark.asyncio
async def test_a_large_graph_of_mixed_kernels(
    device: ahg.Device, buffers: Buffers, others: Buffers
) -> None:
    count = 5_500
    old = mixed_nodes(count, 3, 0)
    new = reshaped(old, 4)
    await check_update(device, old, new, random_deps(count, 4), buffers, others)


@pytest.mark.asyncio
async def test_a_large_chain_of_one_kernel(device: ahg.Device, buffers: Buffers) -> None:
    count = 5_500
    old = [Node("put", value=index) for index in range(count)]
    new = [replace(node, value=node.value * 2) for node in old]
    new[4_000] = replace(new[4_000], block=128)
    await check_update(device, old, new, chain_deps(count), buffers, buffers)


@ahg.kernel
def put_twice(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index * WIDTH] = 2 * value
    out[index * WIDTH + 1] = _shape(t)


KERNELS["put_twice"] = put_twice


@pytest.mark.asyncio
@pytest.mark.parametrize("where", [0, 1, 20, 299])
async def test_a_node_given_another_kernel_takes_the_general_path(
    device: ahg.Device, buffers: Buffers, where: int
) -> None:
    old = [Node("put", value=index) for index in range(300)]
    new = [replace(node, value=node.value + 1) for node in old]
    new[where] = replace(new[where], kernel="put_twice")
    await check_update(device, old, new, random_deps(300, where), buffers, buffers, fast=False)


@pytest.mark.asyncio
@pytest.mark.parametrize("where", [0, 150, 299])
async def test_refusals_name_the_same_node_on_both_paths(
    device: ahg.Device, buffers: Buffers, where: int
) -> None:
    deps = random_deps(300, 1)
    old = [Node("put", value=index) for index in range(300)]
    to_async = [replace(node, value=1) for node in old]
    to_async[where] = replace(to_async[where], kernel="aput")
    result = await check_refused(device, old, to_async, deps, buffers)
    assert result.kind is ahg.UpdateResultKind.UnsupportedFunctionChange
    other_deps = [list(each) for each in deps]
    other_deps[where] = [] if other_deps[where] else ([0] if where else [])
    if other_deps != deps:
        result = await check_refused(device, old, old, deps, buffers, new_deps=other_deps)
        assert result.kind is ahg.UpdateResultKind.TopologyChanged


@pytest.mark.asyncio
async def test_a_shape_the_device_cannot_run_is_refused_on_a_second_device() -> None:
    """Several failing shapes: both paths name the first in the copy's order."""
    small = ahg.DeviceProperties(max_threads_per_block=256, max_shared_memory_per_block=1024)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    device = ahg.get_device(1)
    buffers = Buffers(device.malloc(8 * WIDTH * 400), device.malloc(8 * 400), 400)
    deps = random_deps(400, 8)
    old = mixed_nodes(400, 8, 0)
    for bad in ({390: Node("put", block=512)}, {5: Node("mixed", shared_mem=4096), 300: Node()}):
        new = list(old)
        for index, node in bad.items():
            new[index] = replace(node, kernel=old[index].kernel, block=node.block)
        if 300 in bad:
            new[300] = replace(old[300], block=1024)
        on = {"device": device}
        result = await check_refused(device, old, new, deps, buffers, instantiate=on)
        assert result.kind is ahg.UpdateResultKind.NotSupported
    ok = [replace(node, block=256, value=node.value + 1) for node in old]
    await check_update(device, old, ok, deps, buffers, buffers, instantiate=on)
    destroy(buffers.out, buffers.other)


@pytest.mark.asyncio
async def test_an_update_in_flight_then_one_with_none(device: ahg.Device, buffers: Buffers) -> None:
    count = 300
    deps = random_deps(count, 2)
    nodes = [mixed_nodes(count, 2, base) for base in (0, 1_000, 2_000)]
    graphs = [build(each, deps, buffers)[0] for each in nodes]
    fresh = [graph.instantiate() for graph in graphs]
    want = [await replay(graph_exec, device, [buffers]) for graph_exec in fresh]
    graph_exec = graphs[0].instantiate()
    stream = device.create_stream()
    for each in (buffers.out, buffers.other):
        await device.memset(each, 0, 8 * WIDTH * count if each is buffers.out else 8 * count)
    TICKS.clear()
    completion = await graph_exec.launch(stream)
    assert graph_exec.in_flight
    assert graph_exec.update(graphs[1]).ok  # in flight: the general path
    await completion
    assert_same(
        ([device.view(buffers.out, np.int64, WIDTH * COUNT).copy()], sorted(TICKS)),
        (want[0][0][:1], want[0][1]),
    )
    assert_same(await replay(graph_exec, device, [buffers]), want[1])
    assert graph_exec.update(graphs[2]).ok  # none in flight (records made by now)
    assert_same(await replay(graph_exec, device, [buffers]), want[2])
    assert graph_exec.update(graphs[0]).ok
    assert_same(await replay(graph_exec, device, [buffers]), want[0])
    destroy(graph_exec, *fresh, *graphs, stream)


@pytest.mark.asyncio
async def test_a_launch_enqueued_after_a_completed_one_and_before_the_update(
    device: ahg.Device, buffers: Buffers
) -> None:
    """A launch enqueued behind a blocked stream (not yet started) reads the old arguments."""
    count = 100
    deps = chain_deps(count)
    old, new = mixed_nodes(count, 0, 0), mixed_nodes(count, 0, 50)
    graph, _ = build(old, deps, buffers)
    graph_exec = graph.instantiate()
    want_old = await replay(graph_exec, device, [buffers])
    fresh_graph, _ = build(new, deps, buffers)
    stream = device.create_stream()
    event = device.create_event()
    blocker = device.create_stream()
    gate = asyncio.Event()

    @ahg.kernel
    async def wait_gate(t: ahg.Threads) -> None:
        await gate.wait()

    await blocker.launch_kernel(wait_gate, 1, 1, ())
    await event.record(blocker)
    await stream.wait_event(event)
    for each in (buffers.out, buffers.other):
        device.view(each, np.uint8, 8 * WIDTH * count if each is buffers.out else 8 * count)[:] = 0
    TICKS.clear()
    completion = await graph_exec.launch(stream)
    assert graph_exec.update(fresh_graph).ok
    gate.set()
    await completion
    got = ([device.view(buffers.out, np.int64, WIDTH * COUNT).copy()], sorted(TICKS))
    assert_same(got, (want_old[0][:1], want_old[1]))
    await blocker.synchronize()
    destroy(graph_exec, graph, fresh_graph, stream, blocker, event)


@pytest.mark.asyncio
async def test_updates_after_a_destroy_are_refused(device: ahg.Device, buffers: Buffers) -> None:
    old = mixed_nodes(50, 0, 0)
    graph, _ = build(old, chain_deps(50), buffers)
    new, _ = build(mixed_nodes(50, 0, 9), chain_deps(50), buffers)
    graph_exec = graph.instantiate()
    want = await replay(graph_exec, device, [buffers])
    new.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.update(new)
    assert_same(await replay(graph_exec, device, [buffers]), want)
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.update(graph)
    destroy(graph)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "instantiate",
    [
        {"check_races": True},
        {"strict_flush": True},
        {"flags": ahg.InstantiateFlags.USE_NODE_PRIORITY},
    ],
)
async def test_executables_made_with_options(
    device: ahg.Device, buffers: Buffers, instantiate: dict[str, Any]
) -> None:
    old = mixed_nodes(120, 5, 0)
    new = reshaped(old, 5)
    fast = "flags" in instantiate  # a race checker or a strict arena: the general path
    deps = chain_deps(120)  # (the race checker sees every node write all of ``out``)
    await check_update(device, old, new, deps, buffers, buffers, fast=fast, instantiate=instantiate)


@pytest.mark.asyncio
async def test_graphs_with_a_few_other_nodes_take_the_general_path(
    device: ahg.Device, buffers: Buffers
) -> None:
    seen: list[int] = []

    def made(base: int) -> tuple[ahg.Graph, Any]:
        graph, nodes = build(mixed_nodes(60, 1, base), random_deps(60, 1), buffers)
        empty = graph.add_empty_node(deps=[nodes[10]])
        graph.add_memset_node(buffers.other, base % 7, 8, deps=[empty])
        graph.add_host_node(seen.append, (base,), deps=[nodes[59]])
        graph.add_kernel_node(put, 1, 1, (base, 59, buffers.out), deps=[empty])
        return graph, nodes

    graph, _ = made(0)
    new, _ = made(100)
    graph_exec = graph.instantiate()
    await replay(graph_exec, device, [buffers])
    fresh = new.instantiate()
    want = await replay(fresh, device, [buffers])
    assert graph_exec.update(new).ok
    seen.clear()
    assert_same(await replay(graph_exec, device, [buffers]), want)
    assert seen == [100]
    destroy(graph_exec, fresh, graph, new)


@pytest.mark.asyncio
async def test_capture_made_graphs(device: ahg.Device, buffers: Buffers) -> None:
    async def captured(base: int) -> ahg.Graph:
        stream, side = device.create_stream(), device.create_stream()
        forked, joined = device.create_event(), device.create_event()
        stream.begin_capture()
        await stream.launch_kernel(put, 1, 64, (base, 0, buffers.out))
        await forked.record(stream)
        await side.wait_event(forked)
        for index in range(1, 40):
            on = stream if index % 2 else side
            kernel = (put, aput, tick)[index % 3]
            args = () if kernel is tick else (base + index, index, buffers.out)
            await on.launch_kernel(kernel, 1, 32 + index % 2 * 32, args)
        await joined.record(side)
        await stream.wait_event(joined)
        await stream.launch_kernel(put, 2, 64, (base, 40, buffers.out))
        graph = stream.end_capture()
        destroy(stream, side, forked, joined)
        return graph

    graph, new = await captured(0), await captured(500)
    graph_exec = graph.instantiate()
    await replay(graph_exec, device, [buffers])
    fresh = new.instantiate()
    want = await replay(fresh, device, [buffers])
    assert graph_exec.update(new).ok
    assert took_columns(graph_exec)
    assert_same(await replay(graph_exec, device, [buffers]), want)
    destroy(graph_exec, fresh, graph, new)


@pytest.mark.asyncio
async def test_graph_memory_nodes_take_the_general_path(
    device: ahg.Device, buffers: Buffers
) -> None:
    def made(base: int) -> ahg.Graph:
        graph = ahg.Graph()
        alloc = graph.add_mem_alloc_node(8 * WIDTH * 20)
        scratch = alloc.params.ptr
        previous = [alloc]
        for index in range(20):
            previous = [
                graph.add_kernel_node(put, 1, 64, (base + index, index, scratch), deps=previous)
            ]
        copy = graph.add_memcpy_node(buffers.out, scratch, 8 * WIDTH * 20, deps=previous)
        graph.add_mem_free_node(scratch, deps=[copy])
        return graph

    graph, new = made(0), made(30)
    graph_exec = graph.instantiate()
    fresh = new.instantiate()
    want = await replay(fresh, device, [buffers])
    assert graph_exec.update(new).ok
    assert_same(await replay(graph_exec, device, [buffers]), want)
    destroy(graph_exec, fresh, graph, new)


@ahg.kernel
def set_handle(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@pytest.mark.asyncio
async def test_kernels_taking_a_conditional_handle(device: ahg.Device, buffers: Buffers) -> None:
    """No conditional node: the handle's kernels are the executable's only trace of it."""
    old = [Node("put", value=index) for index in range(40)]
    graph, nodes = build(old, chain_deps(40), buffers)
    handle = graph.conditional_handle()
    setter = graph.add_kernel_node(set_handle, 1, 1, (1, handle), deps=[nodes[-1]])
    columns, general = graph.instantiate(), graph.instantiate()
    general.set_node_enabled(nodes[0], True)
    new = graph.clone()
    new.find_in_clone(setter).set_kernel_params(set_handle, 1, 1, (0, handle))
    for index in range(40):
        new.find_in_clone(nodes[index]).set_kernel_params(
            put, 1, 64, (index + 3, index, buffers.out)
        )
    fresh = new.instantiate()
    want = await replay(fresh, device, [buffers])
    for graph_exec in (columns, general):
        assert graph_exec.update(new).ok
        assert_same(await replay(graph_exec, device, [buffers]), want)
    # a handle made after instantiate: refused alike
    later = graph.conditional_handle()
    bad = graph.clone()
    bad.find_in_clone(setter).set_kernel_params(set_handle, 1, 1, (1, later))
    columns2 = graph.instantiate()
    results = []
    for graph_exec in (columns2, general):
        with pytest.raises(ahg.GraphExecUpdateFailure) as info:
            graph_exec.update(bad)
        results.append(info.value.result)  # type: ignore[attr-defined]
    assert results[0].kind is results[1].kind is ahg.UpdateResultKind.ParametersChanged
    assert results[0].node is results[1].node is bad.find_in_clone(setter)
    destroy(columns, columns2, general, fresh, graph, new, bad)


@pytest.mark.asyncio
async def test_a_fast_update_then_one_in_flight(device: ahg.Device, buffers: Buffers) -> None:
    """The general path after the columns path: a launch in flight keeps the first update's
    arguments, the next replay reads the second's."""
    count = 200
    deps = random_deps(count, 6)
    graphs = [build(mixed_nodes(count, 6, base), deps, buffers)[0] for base in (0, 40, 80)]
    fresh = [graph.instantiate() for graph in graphs]
    want = [await replay(graph_exec, device, [buffers]) for graph_exec in fresh]
    graph_exec = graphs[0].instantiate()
    assert graph_exec.update(graphs[1]).ok
    assert took_columns(graph_exec)
    stream = device.create_stream()
    device.view(buffers.out, np.int64, WIDTH * COUNT)[:] = 0
    TICKS.clear()
    completion = await graph_exec.launch(stream)
    assert graph_exec.update(graphs[2]).ok
    await completion
    got = ([device.view(buffers.out, np.int64, WIDTH * COUNT).copy()], sorted(TICKS))
    assert_same(got, (want[1][0][:1], want[1][1]))
    assert_same(await replay(graph_exec, device, [buffers]), want[2])
    destroy(graph_exec, *fresh, *graphs, stream)


@pytest.mark.skipif(RACE_CHECK, reason="updates race with launches by design")
def test_updates_from_a_thread_while_another_loop_launches(device: ahg.Device) -> None:
    """Each replay reads one graph's arguments whole, whatever the update thread does; the
    executable ends with the last update's."""
    buffers = make_buffers(device)
    count = 300
    deps = random_deps(count, 12)
    graphs = [build(mixed_nodes(count, 12, base), deps, buffers)[0] for base in range(0, 500, 100)]

    async def expected_outputs() -> list[tuple[list[np.ndarray], list[Any]]]:
        out = []
        for graph in graphs:
            with graph.instantiate() as graph_exec:
                out.append(await replay(graph_exec, device, [buffers]))
        return out

    want = asyncio.run(expected_outputs())
    keys = [(each[0][0].tobytes(), each[1]) for each in want]
    graph_exec = graphs[0].instantiate()
    done = threading.Event()
    errors: list[BaseException] = []

    def updates() -> None:
        try:
            for _ in range(4):
                for graph in graphs[1:]:
                    assert graph_exec.update(graph).ok
        except BaseException as error:
            errors.append(error)
        finally:
            done.set()

    async def launches() -> list[Any]:
        seen = []
        thread = threading.Thread(target=updates)
        thread.start()
        while True:
            finished = done.is_set()
            seen.append(await replay(graph_exec, device, [buffers]))
            if finished:
                break
        thread.join()
        return seen

    seen = asyncio.run(launches())
    assert errors == []
    for each in seen:
        assert (each[0][0].tobytes(), each[1]) in keys
    assert (seen[-1][0][0].tobytes(), seen[-1][1]) == keys[-1]
    destroy(graph_exec, *graphs, buffers.out, buffers.other)


@pytest.mark.asyncio
@pytest.mark.parametrize("count", [2, 5, 100])
async def test_a_kernel_whose_layout_grew_since_instantiate(
    device: ahg.Device, buffers: Buffers, count: int
) -> None:
    """The same kernel object, given a longer parameter list after instantiate: the new
    arguments do not fit the slots, and must not be written over the next node's."""

    @ahg.kernel
    def narrow(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
        out[index * WIDTH] = value

    @ahg.kernel
    def wide(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64],
             a: ahg.int64, b: ahg.int64, c: ahg.int64, d: ahg.int64) -> None:  # fmt: skip
        out[index * WIDTH] = value
        out[index * WIDTH + 1] = a + b + c + d

    def made(extra: int | None) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
        graph, previous, nodes = ahg.Graph(), [], []
        for index in range(count):
            args: tuple[Any, ...] = (index + 1, index, buffers.out)
            if extra is not None:
                args += (extra + index, extra, extra, extra)
            previous = [graph.add_kernel_node(narrow, 1, 1, args, deps=previous)]
            nodes += previous
        return graph, nodes

    graph, nodes = made(None)
    columns, general = graph.instantiate(), graph.instantiate()
    general.set_node_enabled(nodes[0], True)
    for graph_exec in (columns, general):
        await replay(graph_exec, device, [buffers])
    narrow.layout, narrow.body = wide.layout, wide.body
    new, _ = made(100)
    fresh = new.instantiate()
    want = await replay(fresh, device, [buffers])
    assert [int(v) for v in want[0][0][1 : WIDTH * count : WIDTH]] == [
        400 + index for index in range(count)
    ]
    for graph_exec in (columns, general):
        assert graph_exec.update(new).ok
        assert_same(await replay(graph_exec, device, [buffers]), want)
    assert columns.statistics().arena == general.statistics().arena
    destroy(columns, general, fresh, graph, new)


def fork_join_deps(branches: int, length: int) -> list[list[int]]:
    """A root, ``branches`` chains of ``length`` (added branch by branch) and a join."""
    deps: list[list[int]] = [[]]
    ends = []
    for _ in range(branches):
        for step in range(length):
            deps.append([0] if step == 0 else [len(deps) - 1])
        ends.append(len(deps) - 1)
    deps.append(ends)
    return deps


@pytest.mark.asyncio
@pytest.mark.parametrize("branches", [8, 33])
async def test_a_wide_fork_join_of_mixed_kernels_held_as_read(
    device: ahg.Device, buffers: Buffers, others: Buffers, branches: int
) -> None:
    """A wide graph read in insertion order keeps its parameters as read (by positions): the
    update reads both copies through the positions, with several kernels and launch shapes."""
    deps = fork_join_deps(branches, 4_000 // branches)
    count = len(deps)
    old = mixed_nodes(count, branches, 0)
    graph, _ = build(old, deps, buffers)
    with graph.instantiate() as graph_exec:
        assert graph_exec._graph.read_order() is not None  # what this test is about
    graph.destroy()
    await check_update(device, old, reshaped(old, branches), deps, buffers, others)


def other_call(
    graph_exec: ahg.GraphExec, other: str, node: ahg.GraphNode, index: int, buffers: Buffers,
    graph: ahg.Graph,
) -> Any:  # fmt: skip
    """The call that races with an update (see the test below)."""
    if other == "plan_dot":
        return graph_exec.plan_dot
    if other == "setter":
        return lambda: graph_exec.set_kernel_node_params(node, put, 1, 64, (77, index, buffers.out))
    if other == "disable":
        return lambda: graph_exec.set_node_enabled(node, False)
    return lambda: graph_exec.update(graph)


@pytest.mark.skipif(RACE_CHECK, reason="updates race with other calls by design")
@pytest.mark.parametrize("other", ["plan_dot", "setter", "disable", "update"])
def test_updates_racing_with_readers_and_setters_end_in_one_state(
    device: ahg.Device, other: str
) -> None:
    """An update from one thread, a reader or a setter from another: the executable ends as
    if they had run one after the other, in some order."""
    buffers = make_buffers(device)
    deps = fork_join_deps(8, 120)
    count = len(deps)
    nodes = mixed_nodes(count, 1, 0)
    graphs = [build(mixed_nodes(count, 1, base), deps, buffers)[0] for base in (0, 1_000)]
    at = next(index for index in range(count) if nodes[index].kernel == "put")

    async def outputs(graph_exec: ahg.GraphExec) -> tuple[list[np.ndarray], list[Any]]:
        return await replay(graph_exec, device, [buffers])

    for attempt in range(3):
        graph, handles = build(nodes, deps, buffers)
        graph_exec = graph.instantiate()
        call = other_call(graph_exec, other, handles[at], at, buffers, graphs[0])
        errors = run_together(lambda graph_exec=graph_exec: graph_exec.update(graphs[1]), call)
        assert errors == []
        seen = asyncio.run(outputs(graph_exec))
        possible = []  # what each order gives, made again in that order
        for first in (True, False):
            with graph.instantiate() as again:
                call = other_call(again, other, handles[at], at, buffers, graphs[0])
                if first:
                    assert again.update(graphs[1]).ok
                call()
                if not first:
                    assert again.update(graphs[1]).ok
                possible.append(asyncio.run(outputs(again)))
        assert any(
            all(np.array_equal(a, b) for a, b in zip(seen[0], each[0], strict=True))
            and seen[1] == each[1]
            for each in possible
        ), f"attempt {attempt}: a state no order gives"
        destroy(graph_exec, graph)
    destroy(*graphs, buffers.out, buffers.other)


@pytest.mark.skipif(RACE_CHECK, reason="updates race with a destroy by design")
def test_an_update_racing_with_a_destroy(device: ahg.Device) -> None:
    buffers = make_buffers(device)
    deps = fork_join_deps(8, 120)
    count = len(deps)
    new = build(mixed_nodes(count, 2, 5), deps, buffers)[0]
    before = device.memory.statistics()
    for _ in range(6):
        graph = build(mixed_nodes(count, 2, 0), deps, buffers)[0]
        graph_exec = graph.instantiate()
        errors = run_together(
            lambda graph_exec=graph_exec: graph_exec.update(new), graph_exec.destroy
        )
        assert all(isinstance(error, ahg.InvalidValue) for error in errors), errors
        graph.destroy()
    after = device.memory.statistics()
    assert (after.allocations, after.bytes_in_use) == (before.allocations, before.bytes_in_use)
    destroy(new, buffers.out, buffers.other)


@pytest.mark.asyncio
async def test_an_update_from_the_source_graph_edited_after_instantiate(
    device: ahg.Device, buffers: Buffers, others: Buffers
) -> None:
    """HIP's usual pattern: edit the graph's nodes, then update the executable from it."""
    deps = fork_join_deps(6, 50)
    count = len(deps)
    nodes = mixed_nodes(count, 4, 0)
    graph, handles = build(nodes, deps, buffers)
    graph_exec = graph.instantiate()
    await replay(graph_exec, device, [buffers, others])
    for index in range(0, count, 3):
        node = replace(nodes[index], value=nodes[index].value + 9, block=32 if index % 2 else 64)
        handles[index].set_kernel_params(
            KERNELS[node.kernel], node.grid, node.block, args_of(node, index, others)
        )
    fresh = graph.instantiate()
    want = await replay(fresh, device, [buffers, others])
    assert graph_exec.update(graph).ok
    assert took_columns(graph_exec)
    assert_same(await replay(graph_exec, device, [buffers, others]), want)
    destroy(graph_exec, fresh, graph)


@pytest.mark.skipif(RACE_CHECK, reason="a race checker's updates make the records")
def test_a_copy_held_as_read_names_its_nodes_by_index(device: ahg.Device, buffers: Buffers) -> None:
    """What the plan verifier names a node by (``id_of``) is its record's id, before and after
    an update made from the columns."""
    deps = fork_join_deps(8, 300)
    count = len(deps)
    graph, _ = build(mixed_nodes(count, 0, 0), deps, buffers)
    new, _ = build(mixed_nodes(count, 0, 3), deps, buffers)
    graph_exec = graph.instantiate()
    copy = graph_exec._graph
    assert copy.read_order() is not None
    before = [copy.id_of(index) for index in range(count)]
    assert graph_exec.update(new).ok
    assert copy.read_order() is not None
    assert not copy.made
    assert [copy.id_of(index) for index in range(count)] == before
    assert [node.id for node in copy.nodes] == before  # the records, made now
    destroy(graph_exec, graph, new)


@dataclass(frozen=True)
class InterruptingCost(ahg.CostModel):
    """A user's cost model whose estimate raises once armed: user code an update runs when it
    makes a new op (a node whose launch shape changed)."""

    armed: list[bool] = field(default_factory=lambda: [False])

    def kernel_ns(self, threads: int, compute_units: int, duration_ns: int | None) -> int:
        if self.armed[0]:
            raise KeyboardInterrupt
        return super().kernel_ns(threads, compute_units, duration_ns)


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["columns", "general", "in flight"])
async def test_an_interrupt_from_a_cost_model_during_an_update_changes_nothing(path: str) -> None:
    """Every op an update needs is made before anything changes: a user cost model raising
    for a node whose launch shape changed leaves the executable, its arena and its decoded
    arguments as they were, on either path (and gives back the new slots a launch in flight
    made the general path take)."""
    cost = InterruptingCost()
    ahg.configure_devices(1, [ahg.DeviceProperties(cost=cost)])
    device = ahg.get_device(0)
    buffers, others = make_buffers(device), make_buffers(device)
    nodes = [Node("put", value=index) for index in range(10)]
    graph, handles = build(nodes, chain_deps(10), buffers)
    graph_exec = graph.instantiate()
    if path == "general":
        graph_exec.set_node_enabled(handles[0], True)
    want = await replay(graph_exec, device, [buffers, others])
    new_nodes = [replace(node, value=node.value + 5) for node in nodes]
    new_nodes[7] = replace(new_nodes[7], block=32)
    new, _ = build(new_nodes, chain_deps(10), others)
    stream = device.create_stream()
    held = await graph_exec.launch(stream) if path == "in flight" else None
    arena = graph_exec.statistics().arena
    cost.armed[0] = True
    try:
        with pytest.raises(KeyboardInterrupt):
            graph_exec.update(new)
    finally:
        cost.armed[0] = False
    assert graph_exec.statistics().arena.live_slots == arena.live_slots
    if held is not None:
        await held
    device.free(device.malloc(8))  # any free: a replay decodes its pointer arguments again
    fresh = new.instantiate()
    try:
        assert_same(await replay(graph_exec, device, [buffers, others]), want)
        assert graph_exec.update(new).ok  # and it still takes the update
        assert_same(
            await replay(graph_exec, device, [buffers, others]),
            await replay(fresh, device, [buffers, others]),
        )
    finally:
        destroy(graph_exec, fresh, graph, new, stream, buffers.out, buffers.other, others.out)
        destroy(others.other)


@pytest.mark.asyncio
@pytest.mark.parametrize("setter", ["kernel params", "enable"])
async def test_an_interrupt_from_a_cost_model_in_a_setter_changes_nothing(setter: str) -> None:
    """A per-node setter goes the general path's way: the node's new op is made before the
    node takes anything, so a raising cost model leaves it with its old parameters (and, for
    ``set_node_enabled``, its old state)."""
    cost = InterruptingCost()
    ahg.configure_devices(1, [ahg.DeviceProperties(cost=cost)])
    device = ahg.get_device(0)
    buffers = make_buffers(device)
    nodes = [Node("put", value=index) for index in range(10)]
    graph, handles = build(nodes, chain_deps(10), buffers)
    graph_exec = graph.instantiate()
    if setter == "enable":
        graph_exec.set_node_enabled(handles[4], False)
    want = await replay(graph_exec, device, [buffers])
    args = (77, 4, buffers.out)
    change = (
        functools.partial(graph_exec.set_node_enabled, handles[4], True)
        if setter == "enable"
        else functools.partial(graph_exec.set_kernel_node_params, handles[4], put, 1, 32, args)
    )
    cost.armed[0] = True
    try:
        with pytest.raises(KeyboardInterrupt):
            change()
    finally:
        cost.armed[0] = False
    try:
        assert graph_exec.node_enabled(handles[4]) is (setter != "enable")
        device.free(device.malloc(8))  # any free: a replay decodes its pointer arguments again
        assert_same(await replay(graph_exec, device, [buffers]), want)
    finally:
        destroy(graph_exec, graph, buffers.out, buffers.other)
