"""Attacks on the per-node setters of an executable that has only been launched.

Such an executable finds a setter's node by searching its source rows (the first few lookups)
and makes one node's location and argument slot from its kernel runs. Each attack compares the
executable after its setters with one instantiated fresh from a graph built with the same
changes (or with the values expected), across the shapes whose copies are held differently:
chains, fork-joins held in read order, small graphs and short runs, graphs of several kernels
and launch shapes, of other node types and child graphs, race-checked executables, clones,
graphs whose registry rows were reused, and setters racing each other from threads.
"""

from __future__ import annotations

import os
import random
import sys
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.plan_check import unenforced_edges
from ahipgraph.testing import run_together
from cleanup import destroy, run_once
from conditional_kernels import runs_the_body, set_handle, store

RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))
CELLS = 1_100  # int64 cells of ``out``: one per node at most


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value * 1000 + t.block.x


@ahg.kernel
def put_wide(
    t: ahg.Threads,
    value: ahg.int64,
    extra: ahg.int64,
    more: ahg.int64,
    index: ahg.int32,
    out: ahg.Ptr[ahg.int64],
) -> None:
    out[index] = (value + extra + more) * 1000 + t.block.x + 500


Spec = dict[int, tuple[int, int, bool]]  # node number -> (value, block, wide kernel)


def _args(number: int, value: int, wide: bool, out: ahg.DevicePtr) -> tuple[object, ...]:
    return (value, 0, 0, number, out) if wide else (value, number, out)


def build(
    shape: str, out: ahg.DevicePtr, spec: Spec | None = None
) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    """Kernel node ``i`` writes ``value * 1000 + block`` to ``out[i]`` (by default value ``i``,
    block 64, or every third node of ``"mixed"`` wide with block 32: runs of several kernels and
    launch shapes). Shapes: ``chainN`` (a chain of N), ``fork_join`` (40 branches of 8: read in
    insertion order, held in read order), ``wideN`` (a fork-join of N branches of 1, walked).
    """
    spec = spec or {}
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []

    def add(deps: list[ahg.GraphNode]) -> ahg.GraphNode:
        number = len(nodes)
        default = (
            (number, 32, True) if shape == "mixed" and number % 3 == 1 else (number, 64, False)
        )
        value, block, wide = spec.get(number, default)
        kernel = put_wide if wide else put
        nodes.append(
            graph.add_kernel_node(kernel, 1, block, _args(number, value, wide, out), deps=deps)
        )
        return nodes[-1]

    if shape.startswith("chain") or shape == "mixed":
        count = 90 if shape == "mixed" else int(shape[5:])
        previous: list[ahg.GraphNode] = []
        for _ in range(count):
            previous = [add(previous)]
        return graph, nodes
    branches, length = (40, 8) if shape == "fork_join" else (int(shape[4:]), 1)
    root = add([])
    tails = []
    for _ in range(branches):
        previous = [root]
        for _ in range(length):
            previous = [add(previous)]
        tails.append(previous[0])
    add(tails)
    return graph, nodes


def expected(count: int, shape: str, spec: Spec) -> list[int]:
    want = []
    for number in range(count):
        default = (
            (number, 32, True) if shape == "mixed" and number % 3 == 1 else (number, 64, False)
        )
        value, block, wide = spec.get(number, default)
        want.append(value * 1000 + block + (500 if wide else 0))
    return want


@pytest.fixture
def out(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(8 * CELLS)
    yield ptr
    device.free(ptr)


async def replayed(
    graph_exec: ahg.GraphExec, device: ahg.Device, out: ahg.DevicePtr, count: int
) -> list[int]:
    device.view(out, np.int64, CELLS)[:] = 0
    await run_once(graph_exec, device)
    return [int(v) for v in device.view(out, np.int64, count)]


async def fresh(
    shape: str, device: ahg.Device, out: ahg.DevicePtr, spec: Spec, **options: object
) -> tuple[list[int], ahg.ArenaStatistics]:
    """What an executable instantiated from a graph with ``spec`` replays, and its arena."""
    graph, nodes = build(shape, out, spec)
    graph_exec = graph.instantiate(**options)
    try:
        return await replayed(graph_exec, device, out, len(nodes)), graph_exec.statistics().arena
    finally:
        destroy(graph_exec, graph)


def set_one(
    graph_exec: ahg.GraphExec,
    node: ahg.GraphNode,
    number: int,
    change: tuple[int, int, bool],
    out: ahg.DevicePtr,
) -> None:
    value, block, wide = change
    kernel = put_wide if wide else put
    graph_exec.set_kernel_node_params(node, kernel, 1, block, _args(number, value, wide, out))


SHAPES = ["chain1", "chain2", "chain3", "chain20", "chain40", "fork_join", "wide3", "mixed"]


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("count", [7, 8, 9, 17])
async def test_setters_across_the_search_limit_match_a_fresh_instantiate(
    device: ahg.Device, out: ahg.DevicePtr, shape: str, count: int
) -> None:
    """``count`` setters (new values, new launch shapes, the other kernel), each lookup of a
    setter, a read or a refused node counted by the source map, then a replay: the same as an
    executable instantiated from a graph with the same changes."""
    graph, nodes = build(shape, out)
    other, other_nodes = build(shape, out)
    graph_exec = graph.instantiate()
    await replayed(graph_exec, device, out, len(nodes))  # launched only, before any setter
    rng = random.Random(f"{shape}{count}")
    spec: Spec = {}
    for turn in range(count):
        number = rng.randrange(len(nodes))
        change = (10_000 + turn, rng.choice([32, 64, 128]), rng.random() < 0.3)
        if turn % 3 == 2:  # a lookup that finds nothing, between ones that do
            with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
                set_one(graph_exec, other_nodes[number], number, change, out)
        set_one(graph_exec, nodes[number], number, change, out)
        spec[number] = change
        assert graph_exec.node_enabled(nodes[number])
    want, arena = await fresh(shape, device, out, spec)
    assert want == expected(len(nodes), shape, spec)
    assert await replayed(graph_exec, device, out, len(nodes)) == want
    assert graph_exec.statistics().arena.live_slots == arena.live_slots == len(nodes)
    destroy(graph_exec, graph, other)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain3", "chain40", "fork_join", "mixed"])
async def test_setters_with_a_launch_in_flight_leave_it_the_old_arguments(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """Each setter with a launch enqueued and not yet run: that launch reads what was there
    before, every slot superseded is given back once it completes, nothing more."""
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    spec: Spec = {}
    rng = random.Random(shape)
    for turn in range(12):
        before = expected(len(nodes), shape, spec)
        device.view(out, np.int64, CELLS)[:] = 0
        held = await graph_exec.launch(stream)
        number = rng.randrange(len(nodes))
        change = (20_000 + turn, rng.choice([32, 64]), turn % 2 == 0)
        set_one(graph_exec, nodes[number], number, change, out)
        spec[number] = change
        await held
        assert [int(v) for v in device.view(out, np.int64, len(nodes))] == before
    assert await replayed(graph_exec, device, out, len(nodes)) == expected(len(nodes), shape, spec)
    await stream.synchronize()
    assert graph_exec.statistics().arena.live_slots == len(nodes)
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("searched", [0, 8])
async def test_reused_registry_rows_find_their_own_node_and_refuse_the_others(
    device: ahg.Device, out: ahg.DevicePtr, searched: int
) -> None:
    """Nodes destroyed before instantiate give their registry rows to later nodes (another
    generation of the row); after instantiate a destroyed node's row goes to a node added
    since. Each node must find its own copy and no other, searched or from the map."""
    scrap = ahg.Graph()
    for _ in range(30):
        scrap.add_empty_node()
    scrap.destroy()  # its rows are free: the next nodes take them, a generation on
    graph, nodes = build("fork_join", out)
    doomed = [graph.add_empty_node() for _ in range(5)]
    for node in doomed:
        node.destroy()
    tail = [
        graph.add_kernel_node(put, 1, 64, (7_000 + i, len(nodes) + i, out), deps=[nodes[-1]])
        for i in range(3)
    ]
    assert len({node.hid.generation for node in nodes + tail}) > 1  # the rows differ in age
    graph_exec = graph.instantiate()
    other, other_nodes = build("fork_join", out)
    for _ in range(searched):  # lookups that use up the searches: the map answers from here on
        assert graph_exec.node_enabled(nodes[0])
    late = nodes[5]
    graph.add_empty_node(deps=[late])  # unrelated: the copy does not see it
    late_row = late.hid.slot
    late.destroy()
    reborn = [graph.add_empty_node() for _ in range(40)]
    assert late_row in {node.hid.slot for node in reborn}  # a row of the copy, newer generation
    for node in reborn:
        with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
            graph_exec.node_enabled(node)
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_params(late, put, 1, 64, (1, 5, out))
    spec: Spec = {}
    for number in [0, 321, 17, 100, 3, 250, 1, 320, 6]:
        with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
            graph_exec.node_enabled(other_nodes[number])
        spec[number] = (30_000 + number, 128, False)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    graph_exec.set_kernel_node_params(tail[1], put, 1, 32, (8, len(nodes) + 1, out))
    want = [*expected(len(nodes), "fork_join", spec), 7_000_064, 8_032, 7_002_064]
    assert await replayed(graph_exec, device, out, len(nodes) + 3) == want
    destroy(graph_exec, graph, other)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join"])
async def test_setters_on_a_clone_s_executable_change_the_clone_s_nodes(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """A clone's nodes keep their ids but not their handles: the clone's executable takes
    its own nodes (find_in_clone) and refuses the original's, and the reverse."""
    graph, nodes = build(shape, out)
    clone = graph.clone()
    clone_exec = clone.instantiate()
    graph_exec = graph.instantiate()
    spec: Spec = {}
    for turn, number in enumerate([3, len(nodes) - 1, 0, 11, 12, 30, 2, 25, 9, 1]):
        with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
            clone_exec.node_enabled(nodes[number])
        mine = clone.find_in_clone(nodes[number])
        with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
            graph_exec.node_enabled(mine)
        spec[number] = (40_000 + turn, 32, turn % 2 == 1)
        set_one(clone_exec, mine, number, spec[number], out)
    want, _ = await fresh(shape, device, out, spec)
    assert await replayed(clone_exec, device, out, len(nodes)) == want
    assert await replayed(graph_exec, device, out, len(nodes)) == expected(len(nodes), shape, {})
    destroy(clone_exec, graph_exec, clone, graph)


@pytest.mark.asyncio
@pytest.mark.skipif(RACE_CHECK, reason="instantiates with and without the checker itself")
@pytest.mark.parametrize("shape", ["chain3", "chain40", "mixed"])
async def test_setters_on_a_race_checked_executable(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """The checker rechecks each changed node (its record made with the rest): a chain, whose
    nodes all write one allocation in order (a fork-join's would race, conservatively)."""
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate(check_races=True)
    spec: Spec = {}
    for turn in range(10):
        number = (turn * 7) % len(nodes)
        spec[number] = (50_000 + turn, 64 if turn % 2 else 32, turn % 3 == 0)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    want, _ = await fresh(shape, device, out, spec, check_races=True)
    assert await replayed(graph_exec, device, out, len(nodes)) == want
    destroy(graph_exec, graph)


HOST_CALLS: list[int] = []


def _note(value: int) -> None:
    HOST_CALLS.append(value)


def build_kinds(
    out: ahg.DevicePtr,
    events: tuple[ahg.Event, ahg.Event],
    change: dict[str, object],
    flat: bool = False,
) -> tuple[ahg.Graph, dict[str, ahg.GraphNode]]:
    """One chain of every kind of node a setter takes (and a graph memory node pair), ending in
    40 kernels (one run); ``change`` gives some of them other parameters, as a setter would."""
    graph = ahg.Graph()
    named: dict[str, ahg.GraphNode] = {}
    last: list[ahg.GraphNode] = []

    def then(name: str, node: ahg.GraphNode) -> None:
        named[name] = node
        last[:] = [node]

    then("kernel", graph.add_kernel_node(put, 1, 64, (change.get("kernel", 1), 0, out)))
    memset_value = int(change.get("memset", 3))  # type: ignore[call-overload]
    then("memset", graph.add_memset_node(out + 8, memset_value, 8, deps=last))
    then("host", graph.add_host_node(_note, (change.get("host", 5),), deps=last))
    record = events[int(change.get("event", 0))]  # type: ignore[call-overload]
    then("record", graph.add_event_record_node(record, deps=last))
    then("wait", graph.add_event_wait_node(record, deps=last))
    child = ahg.Graph()
    inner: list[ahg.GraphNode] = []
    for cell in (2, 3, 4):
        value = int(change.get("child", 7)) + cell  # type: ignore[call-overload]
        inner = [
            (graph if flat else child).add_kernel_node(
                put, 1, 32, (value, cell, out), deps=inner or (last if flat else [])
            )
        ]
        if flat:  # the same kernels, in the graph itself: no record made at instantiate
            last[:] = inner
    if not flat:
        then("child", graph.add_child_graph_node(child, deps=last))
    child.destroy()  # the node holds its own copy
    alloc = graph.add_mem_alloc_node(64, deps=last)
    then("alloc", alloc)
    then(
        "fill",
        graph.add_kernel_node(put, 1, 64, (change.get("fill", 9), 0, alloc.params.ptr), deps=last),
    )
    cell = int(change.get("memcpy", 5))  # type: ignore[call-overload]
    then("memcpy", graph.add_memcpy_node(out + 8 * cell, alloc.params.ptr, 8, deps=last))
    then("free", graph.add_mem_free_node(alloc.params.ptr, deps=last))
    for number in range(40):
        value = change.get(f"run{number}", 100 + number)
        then(
            f"run{number}", graph.add_kernel_node(put, 1, 64, (value, 10 + number, out), deps=last)
        )
    return graph, named


KINDS_CELLS = 50


@pytest.mark.asyncio
@pytest.mark.skipif(RACE_CHECK, reason="a host node's calls are counted per launch")
@pytest.mark.parametrize("flat", [False, True])
async def test_setters_of_every_kind_of_node_match_a_fresh_instantiate(
    device: ahg.Device, out: ahg.DevicePtr, flat: bool
) -> None:
    """Every setter, each refusal (another graph's node, the child's own node, the wrong kind,
    a memory node) answered the same way whether the lookup searched or used the map."""
    events = (device.create_event(), device.create_event())
    graph, named = build_kinds(out, events, {}, flat)
    other, other_named = build_kinds(out, events, {}, flat)
    graph_exec = graph.instantiate()
    await replayed(graph_exec, device, out, KINDS_CELLS)

    def refusals() -> list[str]:
        said = []
        attempts = [
            lambda: graph_exec.set_kernel_node_params(
                other_named["kernel"], put, 1, 64, (1, 0, out)
            ),
            lambda: graph_exec.set_kernel_node_params(named["memset"], put, 1, 64, (1, 0, out)),
            lambda: graph_exec.set_memset_node_params(named["kernel"], out, 1, 8),
            lambda: graph_exec.set_host_node_params(named["record"], _note, (1,)),
            lambda: graph_exec.set_event_wait_node_event(named["record"], events[1]),
            lambda: graph_exec.set_node_enabled(named["host"], False),
            lambda: graph_exec.node_enabled(named["alloc"]),
            lambda: graph_exec.set_node_params(
                named["alloc"], ahg.GraphNodeParams(ahg.NodeType.Kernel, named["kernel"].params)
            ),
        ]
        for attempt in attempts:
            with pytest.raises(ahg.HipError) as raised:
                attempt()
            said.append(f"{type(raised.value).__name__}: {raised.value}")
        return said

    searched = refusals()  # eight lookups refused: the map is made by the next one
    change: dict[str, object] = {"kernel": 11, "memset": 6, "host": 12, "event": 1, "child": 20}
    change.update({"fill": 13, "memcpy": 8, "run0": 14, "run39": 15, "run17": 16})
    graph_exec.set_kernel_node_params(named["kernel"], put, 1, 64, (11, 0, out))
    graph_exec.set_memset_node_params(named["memset"], out + 8, 6, 8)
    graph_exec.set_host_node_params(named["host"], _note, (12,))
    graph_exec.set_event_record_node_event(named["record"], events[1])
    graph_exec.set_event_wait_node_event(named["wait"], events[1])
    replacement, replaced = build_kinds(out, events, change, flat)
    if not flat:
        graph_exec.set_child_graph_node_params(named["child"], replaced["child"].get_child_graph())
    else:
        change.pop("child")  # no child graph: the same kernels are left as they were
        replacement.destroy()
        replacement, _ = build_kinds(out, events, change, flat)
    graph_exec.set_kernel_node_params(named["fill"], put, 1, 64, (13, 0, named["alloc"].params.ptr))
    graph_exec.set_memcpy_node_params(named["memcpy"], out + 8 * 8, named["alloc"].params.ptr, 8)
    for number in (0, 39, 17):
        node = named[f"run{number}"]
        record = ahg.GraphNodeParams(ahg.NodeType.Kernel, node.params)
        graph_exec.set_node_params(node, record)  # the same parameters: nothing changes
        graph_exec.set_kernel_node_params(
            node, put, 1, 64, (change[f"run{number}"], 10 + number, out)
        )
    assert refusals() == searched
    HOST_CALLS.clear()
    got = await replayed(graph_exec, device, out, KINDS_CELLS)
    assert HOST_CALLS == [12]
    fresh_exec = replacement.instantiate()
    HOST_CALLS.clear()
    assert await replayed(fresh_exec, device, out, KINDS_CELLS) == got
    assert HOST_CALLS == [12]
    assert (got[0], got[8], got[10], got[49]) == (11_064, 13_064, 14_064, 15_064)
    destroy(fresh_exec, graph_exec, replacement, graph, other, *events)


def _in_threads(*jobs: Callable[[], object]) -> list[BaseException]:
    """Run ``jobs`` at once, each on its own thread, switching often; what they raised."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        return run_together(*jobs)
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join", "mixed"])
async def test_setters_from_threads_with_a_plan_check_and_reads(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """Four threads' setters on nodes of their own (five each: the search runs out among
    them), a plan check entering every location at once and a reader, all at the same time."""
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate()
    await replayed(graph_exec, device, out, len(nodes))
    spec: Spec = {}
    jobs: list[Callable[[], object]] = []
    step = max(1, len(nodes) // 20)
    for worker in range(4):
        mine = {  # each worker's nodes its own: their numbers differ modulo 4
            worker + 4 * k * step: (60_000 + worker * 10 + k, 32 + 32 * k, k % 2 == 1)
            for k in range(5)
        }
        assert not mine.keys() & spec.keys()
        spec.update(mine)

        def setters(mine: Spec = mine) -> None:
            for number, change in mine.items():
                set_one(graph_exec, nodes[number], number, change, out)

        jobs.append(setters)
    jobs.append(lambda: unenforced_edges(graph_exec))
    jobs.append(lambda: [graph_exec.node_enabled(nodes[k]) for k in range(0, len(nodes), 9)])
    assert _in_threads(*jobs) == []
    assert unenforced_edges(graph_exec) == []
    want, arena = await fresh(shape, device, out, spec)
    assert await replayed(graph_exec, device, out, len(nodes)) == want
    assert graph_exec.statistics().arena.live_slots == arena.live_slots
    destroy(graph_exec, graph)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join"])
async def test_setters_from_threads_racing_a_whole_update(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """An update of every node racing setters: each node ends with its setter's parameters or
    the update's, whichever came last, and the executable replays what its nodes now hold."""
    graph, nodes = build(shape, out)
    new, _ = build(shape, out, {n: (70_000 + n, 128, False) for n in range(len(nodes))})
    graph_exec = graph.instantiate()
    chosen = list(range(0, len(nodes), max(1, len(nodes) // 12)))
    spec: Spec = {n: (80_000 + n, 32, n % 2 == 0) for n in chosen}

    def setters(part: list[int]) -> None:
        for number in part:
            set_one(graph_exec, nodes[number], number, spec[number], out)

    halves = chosen[::2], chosen[1::2]
    assert (
        _in_threads(
            lambda: setters(halves[0]), lambda: setters(halves[1]), lambda: graph_exec.update(new)
        )
        == []
    )
    got = await replayed(graph_exec, device, out, len(nodes))
    setter_wins = {n for n in chosen if got[n] == expected(len(nodes), shape, spec)[n]}
    final: Spec = {n: (70_000 + n, 128, False) for n in range(len(nodes))}
    final.update({n: spec[n] for n in setter_wins})
    assert got == expected(len(nodes), shape, final)
    assert graph_exec.statistics().arena.live_slots == len(nodes)
    # and the setters after it all find their nodes
    for number in chosen[:3]:
        set_one(graph_exec, nodes[number], number, (90_000 + number, 64, False), out)
        final[number] = (90_000 + number, 64, False)
    assert await replayed(graph_exec, device, out, len(nodes)) == expected(len(nodes), shape, final)
    destroy(graph_exec, graph, new)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join"])
async def test_setters_from_threads_racing_destroy(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """Setters racing the executable's destroy: each is made or refused (InvalidValue); no
    other error, and nothing is left allocated (the fixture checks the device)."""
    graph, nodes = build(shape, out)
    for attempt in range(3):
        graph_exec = graph.instantiate()
        if attempt:
            stream = device.create_stream()
            await graph_exec.launch(stream)  # one in flight: setters take new slots
        else:
            stream = None

        def setters(offset: int, graph_exec: ahg.GraphExec = graph_exec) -> None:
            for k in range(12):
                number = (offset + 5 * k) % len(nodes)
                try:
                    set_one(graph_exec, nodes[number], number, (k, 32, k % 2 == 0), out)
                except ahg.InvalidValue:
                    return

        raised = _in_threads(lambda: setters(0), lambda: setters(2), graph_exec.destroy)
        assert raised == []
        assert not graph_exec.alive
        if stream is not None:
            await stream.synchronize()
            stream.destroy()
    destroy(graph)


OPTIONS: list[tuple[int, dict[str, object]]] = [
    (0, {"strict_flush": True}),
    (0, {"arena_headroom": 0}),
    (int(ahg.InstantiateFlags.USE_NODE_PRIORITY), {}),
]


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join", "mixed"])
@pytest.mark.parametrize(("flags", "options"), OPTIONS)
async def test_setters_on_executables_made_with_other_options(
    device: ahg.Device,
    out: ahg.DevicePtr,
    shape: str,
    flags: int,
    options: dict[str, object],
) -> None:
    """A strict arena (each node placed alone), an arena with no room to spare (every new
    slot a new chunk) and node priorities (another plan), with a launch in flight for half
    the setters; priorities read and set through the attribute setters."""
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate(flags, **options)
    stream = device.create_stream()
    spec: Spec = {}
    priority = ahg.KernelNodeAttribute.Priority
    for turn in range(11):
        number = (turn * 37 + 5) % len(nodes)
        held = await graph_exec.launch(stream) if turn % 2 else None
        spec[number] = (95_000 + turn, 32 * (1 + turn % 3), turn % 4 == 1)
        set_one(graph_exec, nodes[number], number, spec[number], out)
        graph_exec.set_kernel_node_attribute(nodes[number], priority, -1)
        assert graph_exec.kernel_node_attribute(nodes[number], priority) == -1
        if held is not None:
            await held
    want, arena = await fresh(shape, device, out, spec, **options)
    assert await replayed(graph_exec, device, out, len(nodes)) == want
    assert graph_exec.statistics().arena.live_slots == arena.live_slots
    assert graph_exec.kernel_node_attribute(nodes[(5 + 37) % len(nodes)], priority) == -1
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join", "mixed"])
async def test_setters_between_updates_made_from_columns_and_records(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """An update made from the columns (nothing made per node), then setters (the records,
    one node's location and slot), then an update that must take the general path, then
    setters again: each step as a fresh executable of the same graph replays."""
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate()
    spec: Spec = {n: (100_000 + n, 64, shape == "mixed" and n % 3 == 1) for n in range(len(nodes))}
    if shape == "mixed":
        spec = {n: (100_000 + n, 32 if n % 3 == 1 else 64, n % 3 == 1) for n in range(len(nodes))}
    first, _ = build(shape, out, spec)
    assert graph_exec.update(first).ok
    assert await replayed(graph_exec, device, out, len(nodes)) == expected(len(nodes), shape, spec)
    for number in (1, len(nodes) - 2, 7):
        spec[number] = (110_000 + number, 128, number % 2 == 0)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    assert await replayed(graph_exec, device, out, len(nodes)) == expected(len(nodes), shape, spec)
    second_spec = {n: (120_000 + n, 32, n % 5 == 0) for n in range(len(nodes))}
    second, _ = build(shape, out, second_spec)
    assert graph_exec.update(second).ok
    spec = dict(second_spec)
    for number in (0, 2, 9, len(nodes) - 1, 3, 4, 5, 6, 8, 10):
        spec[number] = (130_000 + number, 64, number % 3 == 0)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    want, arena = await fresh(shape, device, out, spec)
    assert await replayed(graph_exec, device, out, len(nodes)) == want
    assert graph_exec.statistics().arena.live_slots == arena.live_slots
    destroy(graph_exec, graph, first, second)


@pytest.mark.asyncio
async def test_setters_on_runs_of_more_launch_shapes_than_shared_classes(
    device: ahg.Device,
) -> None:
    """70 branches of 32 nodes, each branch its own launch shape: past the executable's
    shared op classes, so later runs' ops hold their fields. A setter of the same shape is
    written in place (its op kept), one of another shape gets a new op."""
    branches, length = 70, 32
    count = branches * length + 2
    out = device.malloc(8 * count)

    def make(spec: Spec) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
        graph = ahg.Graph()
        nodes = [graph.add_kernel_node(put, 1, 64, (0, 0, out))]
        tails = []
        for branch in range(branches):
            previous = nodes[0]
            for _ in range(length):
                number = len(nodes)
                value, block, _ = spec.get(number, (number, 1 + branch, False))
                previous = graph.add_kernel_node(
                    put, 1, block, (value, number, out), deps=[previous]
                )
                nodes.append(previous)
            tails.append(previous)
        nodes.append(graph.add_kernel_node(put, 1, 64, (count - 1, count - 1, out), deps=tails))
        return graph, nodes

    async def run(graph_exec: ahg.GraphExec) -> list[int]:
        device.view(out, np.int64, count)[:] = 0
        await run_once(graph_exec, device)
        return [int(v) for v in device.view(out, np.int64, count)]

    graph, nodes = make({})
    graph_exec = graph.instantiate()
    spec: Spec = {}
    for turn, number in enumerate(
        [1, 33, 2 * 32 + 5, 65 * 32 + 7, 69 * 32 + 32, 40, 2000, 3, 1500, 7]
    ):
        branch = (number - 1) // length
        block = 1 + branch if turn % 2 else 100 + turn  # its own shape, or a new one
        spec[number] = (140_000 + turn, block, False)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    fresh_graph, _ = make(spec)
    fresh_exec = fresh_graph.instantiate()
    assert await run(graph_exec) == await run(fresh_exec)
    assert (await run(graph_exec))[33] == 140_001 * 1000 + 2
    destroy(fresh_exec, graph_exec, fresh_graph, graph, out)


@pytest.mark.asyncio
@pytest.mark.parametrize("searched", [0, 8])
async def test_setters_on_a_graph_with_a_conditional_node(
    device: ahg.Device, out: ahg.DevicePtr, searched: int
) -> None:
    """A chain of kernels around an IF node whose value a kernel sets: the setter of that
    kernel turns the body on; the chain's kernels change one at a time."""
    x = device.malloc(4)

    def make(spec: Spec, on: int) -> tuple[ahg.Graph, list[ahg.GraphNode], ahg.GraphNode]:
        graph, nodes = build("chain40", out, spec)
        handle = graph.conditional_handle(default=0)
        decide = graph.add_kernel_node(set_handle, 1, 1, (on, handle), deps=[nodes[-1]])
        conditional, (body,) = graph.add_conditional_node(
            handle, ahg.ConditionalKind.If, deps=[decide]
        )
        body.add_kernel_node(store, 1, 1, (42, x))
        graph.add_kernel_node(put, 1, 64, (7, 0, out), deps=[conditional])  # after the body
        return graph, nodes, decide

    graph, nodes, decide = make({}, 0)
    graph_exec = graph.instantiate()
    assert not await runs_the_body(device, graph_exec, x)
    for _ in range(searched):
        assert graph_exec.node_enabled(nodes[1])
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_enabled(graph.add_empty_node(), False)
    handle = decide.params.args[1]  # the graph's handle, the one the executable has cells for
    graph_exec.set_kernel_node_params(decide, set_handle, 1, 1, (1, handle))
    spec: Spec = {}
    for number in (0, 39, 20, 5, 6, 7, 8, 9, 10):
        spec[number] = (150_000 + number, 32, number % 2 == 1)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    assert await runs_the_body(device, graph_exec, x)
    fresh_graph, _, _ = make(spec, 1)
    fresh_exec = fresh_graph.instantiate()
    got = await replayed(graph_exec, device, out, 40)
    assert got == await replayed(fresh_exec, device, out, 40)
    assert (got[0], got[39]) == (7_064, expected(40, "chain40", spec)[39])
    destroy(fresh_exec, graph_exec, fresh_graph, graph, x)


@pytest.mark.asyncio
@pytest.mark.parametrize("length", [999, 1_000, 1_001])
async def test_an_update_either_side_of_the_bulk_threshold_keeps_what_setters_made(
    device: ahg.Device, out: ahg.DevicePtr, length: int
) -> None:
    """Setters with a launch in flight move their nodes' slots, one node is disabled, and some
    entries are made alone; then an update changing ``length`` nodes (one side or the other of
    where apply enters every entry at once) and more setters."""
    shape = f"chain{length}"
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    held = await graph_exec.launch(stream)
    moved = [3, 500, length - 1, 31, 32, 33]
    spec: Spec = {}
    for number in moved:
        spec[number] = (160_000 + number, 64, number % 2 == 0)  # the wide kernel: a new slot
        set_one(graph_exec, nodes[number], number, spec[number], out)
    graph_exec.set_node_enabled(nodes[700], False)
    assert not graph_exec.node_enabled(nodes[700])
    await held
    new_spec: Spec = {n: (170_000 + n, 128, n % 7 == 0) for n in range(length)}
    new, _ = build(shape, out, new_spec)
    assert graph_exec.update(new).ok
    assert not graph_exec.node_enabled(nodes[700])  # an update keeps a node's enabled state
    graph_exec.set_node_enabled(nodes[700], True)
    spec = dict(new_spec)
    for number in [*moved, 1, 2]:
        spec[number] = (180_000 + number, 32, number % 3 == 0)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    # New slots of the plain kernel's size while a launch is in flight: they take slots given
    # back so far, which must be none that a node still reads.
    held = await graph_exec.launch(stream)
    for number in range(100, 140):
        spec[number] = (190_000 + number, 64, False)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    await held
    want, arena = await fresh(shape, device, out, spec)
    assert await replayed(graph_exec, device, out, length) == want
    await stream.synchronize()
    assert graph_exec.statistics().arena.live_slots == arena.live_slots == length
    destroy(graph_exec, graph, new, stream)


@pytest.mark.asyncio
async def test_setters_on_a_captured_chain(device: ahg.Device, out: ahg.DevicePtr) -> None:
    """A stream's capture of 60 launches (a chain whose nodes take the registry's rows a block
    at a time): each setter changes its own captured node."""
    stream = device.create_stream()
    for capture in range(2):  # the second capture's nodes take rows the first gave back
        stream.begin_capture()
        for number in range(60):
            await stream.launch_kernel(put, 1, 64, (number, number, out))
        graph = stream.end_capture()
        if capture == 0:
            graph.destroy()
    nodes = graph.nodes()
    graph_exec = graph.instantiate()
    spec: Spec = {}
    for turn, number in enumerate([59, 0, 30, 31, 32, 33, 1, 58, 10, 11, 12]):
        spec[number] = (200_000 + turn, 32, turn % 2 == 0)
        set_one(graph_exec, nodes[number], number, spec[number], out)
    want, _ = await fresh("chain60", device, out, spec)
    assert await replayed(graph_exec, device, out, 60) == want
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_refusals_say_the_same_searched_or_mapped(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """A destroyed node, another graph's node, a node of the wrong kind: the same error and
    message from a searching executable, a mapping one and one that made its map first; and
    a destroyed executable is named before any of them."""
    graph, nodes = build("fork_join", out)
    other, other_nodes = build("fork_join", out)
    doomed = graph.add_kernel_node(put, 1, 64, (0, 399, out))
    memset = graph.add_memset_node(out, 0, 8)
    searching, mapping, mapped = graph.instantiate(), graph.instantiate(), graph.instantiate()
    doomed.destroy()
    for _ in range(8):
        mapping.node_enabled(nodes[1])
    list(mapped._updater.sources)  # the whole map, made at once

    def said(graph_exec: ahg.GraphExec) -> list[str]:
        out_said = []
        for attempt in (
            lambda: set_one(graph_exec, doomed, 399, (1, 64, False), out),
            lambda: set_one(graph_exec, other_nodes[7], 7, (1, 64, False), out),
            lambda: set_one(graph_exec, memset, 0, (1, 64, False), out),
            lambda: graph_exec.set_memset_node_params(nodes[7], out, 1, 8),
        ):
            with pytest.raises(ahg.HipError) as raised:
                attempt()
            out_said.append(f"{type(raised.value).__name__}: {raised.value}")
        return out_said

    first = said(searching)
    assert first == said(mapping) == said(mapped) == said(searching)
    assert all(each.startswith("InvalidValue") for each in first)
    for graph_exec in (searching, mapping, mapped):
        graph_exec.destroy()
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            set_one(graph_exec, other_nodes[7], 7, (1, 64, False), out)
    destroy(graph, other)


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(int(os.environ.get("FUZZ_SEEDS", 6))))
async def test_random_setters_launches_and_updates_replay_as_the_model(
    device: ahg.Device, out: ahg.DevicePtr, seed: int
) -> None:
    """Random turns of setters, enables, launches left in flight, updates of a few nodes or
    all of them and plan checks; every launch replays what the nodes held when it was
    enqueued, and the arena ends with one slot a node."""
    rng = random.Random(seed)
    shape = rng.choice(["chain2", "chain20", "chain40", "fork_join", "wide3", "mixed"])
    graph, nodes = build(shape, out)
    count = len(nodes)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    spec: Spec = {}
    enabled = [True] * count
    made: list[ahg.Graph] = []

    def model() -> list[int]:
        values = expected(count, shape, spec)
        return [value if on else 0 for value, on in zip(values, enabled, strict=True)]

    held: list[tuple[ahg.Completion, list[int]]] = []
    for turn in range(40):
        roll = rng.random()
        number = rng.randrange(count)
        if roll < 0.45:
            spec[number] = (rng.randrange(1, 10**6), rng.choice([32, 64, 96]), rng.random() < 0.3)
            set_one(graph_exec, nodes[number], number, spec[number], out)
        elif roll < 0.55:
            enabled[number] = not enabled[number]
            graph_exec.set_node_enabled(nodes[number], enabled[number])
        elif roll < 0.7 and not held:
            device.view(out, np.int64, CELLS)[:] = 0
            held.append((await graph_exec.launch(stream), model()))
        elif roll < 0.8:
            if rng.random() < 0.5:
                changed = {n: spec.get(n, expected_default(shape, n)) for n in range(count)}
                for n in rng.sample(range(count), min(count, 3)):
                    changed[n] = (turn * 1000 + n, 64, False)
            else:
                changed = {n: (turn * 1000 + n, rng.choice([32, 64]), False) for n in range(count)}
            new, _ = build(shape, out, changed)
            made.append(new)
            assert graph_exec.update(new).ok
            spec = changed
        elif roll < 0.85:
            assert unenforced_edges(graph_exec) == []
        if held and (rng.random() < 0.5 or turn == 39):
            completion, want = held.pop()
            await completion
            assert [int(v) for v in device.view(out, np.int64, count)] == want, turn
    assert await replayed(graph_exec, device, out, count) == model()
    await stream.synchronize()
    assert graph_exec.statistics().arena.live_slots == count
    destroy(graph_exec, graph, stream, *made)


def expected_default(shape: str, number: int) -> tuple[int, int, bool]:
    return (number, 32, True) if shape == "mixed" and number % 3 == 1 else (number, 64, False)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain40", "fork_join", "mixed"])
async def test_setters_from_threads_while_the_loop_launches(
    device: ahg.Device, out: ahg.DevicePtr, shape: str
) -> None:
    """Threads' setters (new slots while launches are in flight, old ones given back as they
    complete) while the event loop launches and awaits: the last setter of each node wins and
    no slot is lost or freed twice."""
    graph, nodes = build(shape, out)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    spec: Spec = {}
    step = max(1, len(nodes) // 24)
    plans: list[Spec] = []
    for worker in range(3):
        mine: Spec = {}
        for k in range(8):
            number = worker + 3 * k * step
            for again in range(3):  # the same node three times: the last one stays
                mine[number] = (
                    210_000 + worker * 100 + k * 10 + again,
                    32 * (1 + again),
                    again == 1,
                )
        plans.append(mine)
        spec.update(mine)
    done = threading.Event()

    def setters(plan: Spec) -> None:
        for number, (value, _, _) in plan.items():
            for again in range(3):
                set_one(
                    graph_exec,
                    nodes[number],
                    number,
                    (value - 2 + again, 32 * (1 + again), again == 1),
                    out,
                )

    def work() -> None:
        try:
            assert _in_threads(*(lambda plan=plan: setters(plan) for plan in plans)) == []
        finally:
            done.set()

    worker_thread = threading.Thread(target=work)
    worker_thread.start()
    launches = 0
    while not done.is_set() or launches < 3:
        await (await graph_exec.launch(stream))
        launches += 1
    worker_thread.join()
    await stream.synchronize()
    want, arena = await fresh(shape, device, out, spec)
    assert await replayed(graph_exec, device, out, len(nodes)) == want
    assert graph_exec.statistics().arena.live_slots == arena.live_slots == len(nodes)
    destroy(graph_exec, graph, stream)


TABLE = ahg.device_symbol("exec_setters_large_attacks.table", 64)


@pytest.mark.asyncio
async def test_symbol_setters_among_a_run_of_kernels(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """Copies to and from a symbol after a run of 40 kernels: their setters, before and after
    the source map is made, change the copies and leave the kernels alone."""
    sources = [device.malloc(64) for _ in range(3)]
    for number, src in enumerate(sources):
        device.view(src, np.int64, 8)[:] = 1_000 + number
    graph, nodes = build("chain40", out)
    to = graph.add_memcpy_node_to_symbol(TABLE, sources[0], 64, deps=[nodes[-1]])
    back = graph.add_memcpy_node_from_symbol(out + 8 * 40, TABLE, 64, deps=[to])
    graph_exec = graph.instantiate()
    spec: Spec = {}
    for turn, src in enumerate([sources[1], sources[2], sources[1]] * 4):
        graph_exec.set_memcpy_node_to_symbol(to, TABLE, src, 64)
        if turn == 5:
            graph_exec.set_memcpy_node_from_symbol(back, out + 8 * 41, TABLE, 64)
        spec[turn] = (220_000 + turn, 32, False)
        set_one(graph_exec, nodes[turn], turn, spec[turn], out)
    got = await replayed(graph_exec, device, out, 49)
    assert got[:40] == expected(40, "chain40", spec)
    assert got[40:49] == [0] + [1_001] * 8  # the copy back moved on by a cell
    destroy(graph_exec, graph, *sources)


@ahg.kernel
def nothing(t: ahg.Threads) -> None:
    return None


@pytest.mark.asyncio
@pytest.mark.parametrize("count", [3, 40, 322])
async def test_kernels_without_arguments_given_arguments_by_setters(
    device: ahg.Device, out: ahg.DevicePtr, count: int
) -> None:
    """A run of kernels with no arguments (a one-byte slot each): setters giving some of them
    a kernel with arguments take new slots, and give them back again."""
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for _ in range(count):
        nodes.append(graph.add_kernel_node(nothing, 1, 64, (), deps=nodes[-1:]))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    picks = sorted({0, count - 1, count // 2, 1 % count, (count * 2) // 3})
    for turn in range(10):
        number = picks[turn % len(picks)]
        held = await graph_exec.launch(stream) if turn % 3 == 0 else None
        if turn < 5:
            set_one(graph_exec, nodes[number], number, (230_000 + turn, 32, turn % 2 == 1), out)
        else:
            graph_exec.set_kernel_node_params(nodes[number], nothing, 1, 64, ())
        if held is not None:
            await held
    # the last five turns gave every node picked its empty kernel back
    assert await replayed(graph_exec, device, out, count) == [0] * count
    graph_exec.set_kernel_node_params(nodes[picks[-1]], put, 1, 32, (5, picks[-1], out))
    got = await replayed(graph_exec, device, out, count)
    assert got == [5_032 if n == picks[-1] else 0 for n in range(count)]
    await stream.synchronize()
    assert graph_exec.statistics().arena.live_slots == count
    destroy(graph_exec, graph, stream)


@pytest.mark.parametrize("sizes", [[8] * 11, [8, 40, 8, 8, 24, 8, 8, 40, 8, 8, 8]])
def test_a_node_s_slot_made_alone_is_the_one_its_run_s_spans_give(
    device: ahg.Device, sizes: list[int]
) -> None:
    """Runs placed across several chunks (spans of a few slots each, which instantiate's one
    chunk never makes): the slot made for one node alone, from its position in its run, is
    the slot the run's spans give it, for every position; its location too."""
    from ahipgraph.exec.arena import KernelArgArena
    from ahipgraph.exec.compile import Compiled
    from ahipgraph.exec.snapshot import ExecGraph, ExecNode

    arena = KernelArgArena(device, 64)  # four 16-byte slots a chunk
    try:
        records = [
            ExecNode(i, i, ahg.NodeType.Kernel, None, (i - 1,) if i else ()) for i in range(11)
        ]
        graph = ExecGraph(0, records)
        runs = [(0, 3, list(range(0, 11, 2))), (1, 5, list(range(1, 11, 2)))]  # interleaved
        placed = [
            (
                strand,
                first,
                items,
                arena.place_spans([bytes(sizes[i]) for i in items], [sizes[i] for i in items]),
            )
            for strand, first, items in runs
        ]
        assert all(len(spans) > 1 for _, _, _, spans in placed)

        def compiled() -> Compiled:
            made = Compiled([], {}, {}, [], 0, 1)
            for strand, first, items, spans in placed:
                made._runs.append((strand, first, graph, items))
                made._arg_spans.append((graph, items, spans))
            return made

        alone, bulk = compiled(), compiled()
        for node in reversed(records):
            slot, want = alone.arg_slot_of(node), bulk.arg_slots[node]
            assert (slot.chunk, slot.buffer, slot.offset, slot.size) == (
                want.chunk,
                want.buffer,
                want.offset,
                want.size,
            ), node.index
            assert alone.location_of(node) == bulk.locations[node]
    finally:
        arena.close()
