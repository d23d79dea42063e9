"""Changing an executable: per-node setters, enable/disable, whole-graph update.

The rule under test everywhere (DESIGN.md §5, invariant 3): a launch already enqueued never sees
parameters changed after it was enqueued; the next launch sees them. Launches are held open with
an ``async`` kernel (or eager work ahead of them on the stream) that waits for the test.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from cleanup import destroy, run_once
from fakes import HeldKernel, loop_turns


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


@ahg.kernel
def add_one(t: ahg.Threads, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] += 1


@ahg.kernel
async def async_put(t: ahg.Threads, value: ahg.int64, index: ahg.int32,
                    out: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    out[index] = value


def recorder(seen: list[int], name: str = "record") -> ahg.Kernel:
    """A kernel that appends its argument to ``seen``: what each dispatch was given."""

    def body(t: ahg.Threads, value: ahg.int64) -> None:
        seen.append(value)

    return ahg.Kernel(body, name=name)


def values(device: ahg.Device, ptr: ahg.DevicePtr, count: int) -> list[int]:
    return [int(v) for v in device.view(ptr, np.int64, count)]


# What helpers (and arguments made inline) created for a test; destroyed or freed after it.
_MADE: list[Any] = []

T = TypeVar("T")


def _track(made: T) -> T:
    _MADE.append(made)
    return made


@pytest.fixture(autouse=True)
def _destroy_made() -> Iterator[None]:
    yield
    while _MADE:
        made = _MADE.pop()
        if isinstance(made, ahg.DevicePtr):
            ahg.get_device(made.device).free(made)
        elif made.alive:  # a test may have destroyed it itself
            made.destroy()


async def held_stream(device: ahg.Device) -> tuple[HeldKernel, ahg.Stream]:
    """A stream whose queue is held by eager work: launches on it stay enqueued, not started."""
    held = HeldKernel("eager")
    stream = device.create_stream()
    _track(stream)
    await held.launch(stream)
    await held.started.wait()
    return held, stream


# -- an update while a launch is in flight ---------------------------------------------------


def _set_value_by_setter(graph_exec: ahg.GraphExec, graph: ahg.Graph, node: ahg.GraphNode,
                         kernel: ahg.Kernel, value: int) -> None:  # fmt: skip
    graph_exec.set_kernel_node_params(node, kernel, 1, 1, (value,))


def _set_value_by_update(graph_exec: ahg.GraphExec, graph: ahg.Graph, node: ahg.GraphNode,
                         kernel: ahg.Kernel, value: int) -> None:  # fmt: skip
    new = graph.clone()
    new.find_in_clone(node).set_kernel_params(kernel, 1, 1, (value,))
    result = graph_exec.update(new)
    assert result.kind is ahg.UpdateResultKind.Success
    new.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("change", [_set_value_by_setter, _set_value_by_update])
async def test_launch_in_flight_keeps_old_arguments_and_the_next_launch_gets_new_ones(
    device: ahg.Device, change: Callable[..., None]
) -> None:
    seen: list[int] = []
    record = recorder(seen)
    held = HeldKernel("gate")
    graph = ahg.Graph()
    gate = graph.add_kernel_node(held.kernel, 1, 1)
    node = graph.add_kernel_node(record, 1, 1, (1,), deps=[gate])
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    first = await graph_exec.launch(stream)
    await held.started.wait()  # launch 1 is running, held before its recording kernel
    change(graph_exec, graph, node, record, 2)
    second = await graph_exec.launch(stream)
    change(graph_exec, graph, node, record, 3)  # after launch 2 was enqueued: launch 3's
    await loop_turns()
    assert seen == []

    held.release()
    await first
    assert seen == [1]
    await second
    assert seen == [1, 2]
    await (await graph_exec.launch(stream))
    assert seen == [1, 2, 3]
    destroy(graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_setters_before_a_launch_starts_do_not_reach_it(device: ahg.Device) -> None:
    """Launches queued behind other work (not started at all) keep their own parameters."""
    log: list[str] = []
    a, b = device.malloc(64), device.malloc(64)
    src_a, src_b = device.malloc(8), device.malloc(8)
    host_a, host_b = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    graph = ahg.Graph()
    fill = graph.add_memset_node(a, 1, 8)
    copy = graph.add_memcpy_node(host_a, src_a, deps=[fill])
    host = graph.add_host_node(log.append, ("old",), deps=[copy])
    graph_exec = graph.instantiate()
    held, stream = await held_stream(device)
    await stream.memset(src_a, 0x11, 8)
    await stream.memset(src_b, 0x22, 8)

    first = await graph_exec.launch(stream)
    graph_exec.set_memset_node_params(fill, b, 2, 8)
    graph_exec.set_memcpy_node_params(copy, host_b, src_b)
    graph_exec.set_host_node_params(host, log.append, ("new",))
    second = await graph_exec.launch(stream)
    held.release()
    await first
    await second

    assert log == ["old", "new"]
    assert device.view(a, np.uint8, 8).tolist() == [1] * 8
    assert device.view(b, np.uint8, 8).tolist() == [2] * 8
    assert host_a.view(np.uint8).tolist() == [0x11] * 8
    assert host_b.view(np.uint8).tolist() == [0x22] * 8
    destroy(a, b, src_a, src_b, graph, graph_exec)


@pytest.mark.asyncio
@pytest.mark.parametrize("updates", [20_000, pytest.param(100_000, marks=pytest.mark.slow)])
async def test_many_updates_with_launches_in_flight_keep_the_arena_bounded(
    device: ahg.Device, updates: int
) -> None:
    """DESIGN.md §3: superseded argument space is reclaimed (HIP leaks it).

    The promise is bounded growth over 100,000 updates (the slow soak); 20,000 keep the
    default run fast and are already far more than the arena could hold without reclaiming
    (each update with a launch in flight needs a fresh slot). Every launch must also see
    exactly the value set just before it.
    """
    launch_every, window = 4, 8
    seen: list[int] = []
    record = recorder(seen)
    graph = ahg.Graph()
    node = graph.add_kernel_node(record, 1, 1, (-1,))
    graph_exec = graph.instantiate(arena_headroom=256)  # room for a handful of spare slots
    stats = graph_exec.statistics().arena
    chunk_bytes, baseline = stats.chunk_bytes, device.memory.bytes_in_use
    stream = device.create_stream()
    expected: list[int] = []
    in_flight: list[ahg.Completion] = []
    max_live = 0

    for value in range(updates):
        graph_exec.set_kernel_node_params(node, record, 1, 1, (value,))
        if value % launch_every == launch_every - 1:
            in_flight.append(await graph_exec.launch(stream))
            expected.append(value)
            if len(in_flight) > window:
                await in_flight.pop(0)
            max_live = max(max_live, graph_exec.statistics().arena.live_slots)
    await stream.synchronize()

    assert seen == expected
    stats = graph_exec.statistics().arena
    assert stats.chunks <= 2
    assert device.memory.bytes_in_use <= baseline + chunk_bytes
    # One slot for each launch in flight, plus the one the next launch will read: a setter
    # rewrites in place a slot taken since the last launch (no launch reads it yet).
    assert max_live <= window + 2
    assert stats.allocations <= window + 2  # everything else was reused
    # So each run of setters between two launches takes one slot, not one per setter.
    assert stats.allocations + stats.reuses <= updates // launch_every + 1
    assert stats.reuses > 0
    assert graph_exec.statistics().signal_pool.misses == 0
    destroy(graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_updates_rewrite_in_place_unless_a_launch_is_in_flight(device: ahg.Device) -> None:
    seen: list[int] = []
    record = recorder(seen)
    graph = ahg.Graph()
    node = graph.add_kernel_node(record, 1, 1, (0,))
    graph_exec = graph.instantiate(strict_flush=True)  # a dispatch of unflushed bytes fails

    graph_exec.set_kernel_node_params(node, record, 1, 1, (1,))
    stats = graph_exec.statistics()
    assert (stats.versions, stats.arena.allocations, stats.arena.live_slots) == (1, 1, 1)
    assert stats.arena.unflushed == 0

    held, stream = await held_stream(device)
    first = await graph_exec.launch(stream)
    graph_exec.set_kernel_node_params(node, record, 1, 1, (2,))  # copy on write
    stats = graph_exec.statistics()
    assert (stats.versions, stats.arena.allocations, stats.arena.live_slots) == (2, 2, 2)
    held.release()
    await first
    stats = graph_exec.statistics()
    assert (stats.arena.live_slots, stats.arena.free_slots) == (1, 1)  # the old slot came back

    second = await graph_exec.launch(stream)
    graph_exec.set_kernel_node_params(node, record, 1, 1, (3,))
    assert graph_exec.statistics().arena.reuses == 1  # ...and was reused
    await second
    await (await graph_exec.launch(stream))
    assert seen == [1, 2, 3]
    assert graph_exec.statistics().arena.allocations == 2
    destroy(graph, graph_exec)


@pytest.mark.asyncio
async def test_a_kernel_with_larger_arguments_gets_a_larger_slot(device: ahg.Device) -> None:
    seen: list[tuple[int, ...]] = []

    def wide_body(t: ahg.Threads, a: ahg.int64, b: ahg.int64, c: ahg.int64,
                  d: ahg.int64) -> None:  # fmt: skip
        seen.append((a, b, c, d))

    wide = ahg.Kernel(wide_body, name="wide")
    narrow_seen: list[int] = []
    narrow = recorder(narrow_seen)
    graph = ahg.Graph()
    node = graph.add_kernel_node(narrow, 1, 1, (1,))
    graph_exec = graph.instantiate()
    held, stream = await held_stream(device)
    first = await graph_exec.launch(stream)
    graph_exec.set_kernel_node_params(node, wide, 1, 1, (1, 2, 3, 4))  # in flight
    second = await graph_exec.launch(stream)
    held.release()
    await first
    await second
    graph_exec.set_kernel_node_params(node, narrow, 1, 1, (5,))  # nothing in flight
    graph_exec.set_kernel_node_params(node, wide, 1, 1, (5, 6, 7, 8))
    await (await graph_exec.launch(stream))
    assert narrow_seen == [1]
    assert seen == [(1, 2, 3, 4), (5, 6, 7, 8)]
    destroy(graph, graph_exec)


@pytest.mark.asyncio
async def test_setters_from_another_thread_while_the_loop_launches(device: ahg.Device) -> None:
    """Setters are plain synchronous code, safe from any thread (DESIGN.md §4).

    Every launch must see one whole update (never half of one), in the order they were made,
    and the first launch after the writer finished must see the last one.
    """
    pairs: list[tuple[int, int]] = []

    def pair_body(t: ahg.Threads, a: ahg.int64, b: ahg.int64) -> None:
        pairs.append((a, b))

    pair = ahg.Kernel(pair_body, name="pair")
    graph = ahg.Graph()
    node = graph.add_kernel_node(pair, 1, 1, (0, 0))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    updates = 3_000
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for value in range(1, updates + 1):
                graph_exec.set_kernel_node_params(node, pair, 1, 1, (value, -value))
        except BaseException as error:  # reported on the test's thread
            errors.append(error)

    thread = threading.Thread(target=writer)
    thread.start()
    launches = 0
    while thread.is_alive() and launches < 20_000:
        await graph_exec.launch(stream)
        launches += 1
        if launches % 8 == 0:
            await stream.synchronize()
    thread.join()
    await (await graph_exec.launch(stream))
    assert errors == []
    assert all(a == -b for a, b in pairs)
    firsts = [a for a, _ in pairs]
    assert firsts == sorted(firsts)
    assert pairs[-1] == (updates, -updates)
    stats = graph_exec.statistics()
    assert stats.in_flight == 0
    assert stats.arena.live_slots == 1
    destroy(graph, graph_exec, stream)


class Chain:
    """gate (async host, run k waits for gate k) -> three recording kernels, in a chain."""

    SIZE = 3

    def __init__(self) -> None:
        self.log: list[tuple[int, int]] = []
        self.gates: list[asyncio.Event] = []
        self.runs = 0

        def body(t: ahg.Threads, node: ahg.int32, value: ahg.int64) -> None:
            self.log.append((node, value))

        self.kernel = ahg.Kernel(body, name="chain")

    async def gate(self) -> None:
        run = self.runs
        self.runs += 1
        while len(self.gates) <= run:
            self.gates.append(asyncio.Event())
        await self.gates[run].wait()

    def open(self, run: int) -> None:
        while len(self.gates) <= run:
            self.gates.append(asyncio.Event())
        self.gates[run].set()

    def build(self, values: list[int]) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
        graph = ahg.Graph()
        nodes = [graph.add_host_node(self.gate)]
        for i, value in enumerate(values):
            nodes.append(graph.add_kernel_node(self.kernel, 1, 1, (i, value), deps=nodes[-1:]))
        return graph, nodes[1:]


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(
            st.just("set"),
            st.integers(0, Chain.SIZE - 1),
            st.integers(0, 10**6),
            st.booleans(),
        ),
        st.tuples(st.just("enable"), st.integers(0, Chain.SIZE - 1), st.booleans()),
        st.tuples(st.just("launch")),
        st.tuples(st.just("open")),
    ),
    max_size=30,
)


@pytest.mark.asyncio
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(operations=OPERATIONS)
async def test_every_launch_sees_exactly_the_parameters_it_was_enqueued_with(
    operations: list[tuple[Any, ...]],
) -> None:
    """Invariant 3, with setters, update() and enable/disable interleaved with held launches."""
    ahg.configure_devices(1)  # a fresh device per example: nothing left over from another
    device = ahg.get_device(0)
    chain = Chain()
    values = [0] * Chain.SIZE
    enabled = [True] * Chain.SIZE
    graph, nodes = chain.build(values)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    expected: list[list[tuple[int, int]]] = []
    handles: list[ahg.Completion] = []
    opened = 0
    try:
        for operation in operations:
            if operation[0] == "set":
                _, index, value, whole_graph = operation
                values[index] = value
                if whole_graph:
                    new, _ = chain.build(values)
                    assert graph_exec.update(new).ok
                    new.destroy()
                else:
                    args = (index, value)
                    graph_exec.set_kernel_node_params(nodes[index], chain.kernel, 1, 1, args)
            elif operation[0] == "enable":
                _, index, flag = operation
                enabled[index] = flag
                graph_exec.set_node_enabled(nodes[index], flag)
            elif operation[0] == "launch":
                handles.append(await graph_exec.launch(stream))
                expected.append([(i, v) for i, v in enumerate(values) if enabled[i]])
            elif opened < len(handles):  # open the oldest held launch and let it finish
                chain.open(opened)
                await handles[opened]
                opened += 1
                assert chain.log == [entry for launch in expected[:opened] for entry in launch]
    finally:
        for run in range(len(handles)):  # never leave a launch held, even when failing
            chain.open(run)
        await stream.synchronize()
    assert chain.log == [entry for launch in expected for entry in launch]
    assert graph_exec.statistics().in_flight == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


# -- enable / disable ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_disabled_node_does_nothing_but_keeps_its_ordering(device: ahg.Device) -> None:
    log: list[str] = []
    out = device.malloc(8 * 3)
    held = HeldKernel("before", log)
    graph = ahg.Graph()
    before = graph.add_kernel_node(held.kernel, 1, 1)
    kernel = graph.add_kernel_node(put, 1, 1, (5, 0, out), deps=[before])
    memset = graph.add_memset_node(out + 8, 7, 8, deps=[kernel])
    memcpy = graph.add_memcpy_node(out + 16, np.full(1, 9, dtype=np.int64), deps=[memset])
    graph.add_host_node(log.append, ("after",), deps=[memcpy])
    graph_exec = graph.instantiate()
    for node in (kernel, memset, memcpy):
        assert graph_exec.node_enabled(node)
        graph_exec.set_node_enabled(node, False)
        assert not graph_exec.node_enabled(node)

    handle = await graph_exec.launch(_track(device.create_stream()))
    await held.started.wait()
    await loop_turns()
    assert log == ["before start"]  # the node after the disabled ones still waits
    held.release()
    await handle
    assert log == ["before start", "before end", "after"]
    assert values(device, out, 3) == [0, 0, 0]

    for node in (kernel, memset, memcpy):
        graph_exec.set_node_enabled(node, True)
    await run_once(graph_exec, device)
    assert values(device, out, 2)[0] == 5
    assert device.view(out + 8, np.uint8, 8).tolist() == [7] * 8
    assert values(device, out + 16, 1) == [9]
    destroy(out, graph, graph_exec)


@pytest.mark.asyncio
async def test_disabling_with_a_launch_in_flight_affects_only_later_launches(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(add_one, 1, 1, (0, out))
    graph_exec = graph.instantiate()
    held, stream = await held_stream(device)
    first = await graph_exec.launch(stream)
    graph_exec.set_node_enabled(node, False)
    second = await graph_exec.launch(stream)
    graph_exec.set_node_enabled(node, True)
    third = await graph_exec.launch(stream)
    held.release()
    for handle in (first, second, third):
        await handle
    assert values(device, out, 1) == [2]  # launches 1 and 3 ran the kernel, 2 did not
    destroy(out, graph, graph_exec)


@pytest.mark.asyncio
async def test_a_disabled_node_takes_new_parameters_and_uses_them_once_enabled(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph_exec = graph.instantiate()
    graph_exec.set_node_enabled(node, False)
    graph_exec.set_kernel_node_params(node, put, 1, 1, (2, 0, out))
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert values(device, out, 1) == [0]
    assert not graph_exec.node_enabled(node)  # a setter does not re-enable
    graph_exec.set_node_enabled(node, True)
    await (await graph_exec.launch(stream))
    assert values(device, out, 1) == [2]
    destroy(out, graph, graph_exec, stream)


def test_any_nonzero_value_enables(device: ahg.Device) -> None:
    graph, out = ahg.Graph(), device.malloc(8)
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph_exec = graph.instantiate()
    graph_exec.set_node_enabled(node, 0)
    assert graph_exec.node_enabled(node) is False
    graph_exec.set_node_enabled(node, 2**31 - 1)
    assert graph_exec.node_enabled(node) is True
    destroy(graph, graph_exec, out)


@pytest.mark.parametrize("kind", ["host", "empty", "record", "wait", "child"])
def test_only_kernel_memcpy_and_memset_nodes_can_be_disabled(device: ahg.Device, kind: str) -> None:
    event = device.create_event()
    graph = ahg.Graph()
    adders: dict[str, Callable[[], ahg.GraphNode]] = {
        "host": lambda: graph.add_host_node(print),
        "empty": graph.add_empty_node,
        "record": lambda: graph.add_event_record_node(event),
        "wait": lambda: graph.add_event_wait_node(event),
        "child": lambda: graph.add_child_graph_node(_track(ahg.Graph())),
    }
    node = adders[kind]()
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_enabled(node, False)
    with pytest.raises(ahg.InvalidValue):
        graph_exec.node_enabled(node)
    destroy(event, graph, graph_exec)


# -- setters: which nodes they accept --------------------------------------------------------


def _foreign_nodes(
    graph: ahg.Graph, node: ahg.GraphNode, child: ahg.GraphNode, device: ahg.Device
) -> dict[str, Any]:
    """Nodes an exec made from ``graph`` does not know, keyed by how they came about."""
    buf = _track(device.malloc(8))
    return {
        "another graph's node": _track(ahg.Graph()).add_kernel_node(put, 1, 1, (0, 0, buf)),
        "a node added after instantiate": graph.add_kernel_node(put, 1, 1, (0, 0, buf)),
        "the node's copy in a clone": _track(graph.clone()).find_in_clone(node),
        "a node inside a child graph's copy": child.params.graph.nodes()[0],
    }


FOREIGN = [
    "another graph's node",
    "a node added after instantiate",
    "the node's copy in a clone",
    "a node inside a child graph's copy",
]


@pytest.mark.asyncio
@pytest.mark.parametrize("which", FOREIGN)
async def test_setters_reject_nodes_the_exec_does_not_know(device: ahg.Device, which: str) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    embedded = ahg.Graph()
    embedded.add_kernel_node(put, 1, 1, (1, 0, out))
    child = graph.add_child_graph_node(embedded, deps=[node])
    graph_exec = graph.instantiate()
    foreign = _foreign_nodes(graph, node, child, device)[which]
    with pytest.raises(ahg.InvalidValue, match="not a node of the graph"):
        graph_exec.set_kernel_node_params(foreign, put, 1, 1, (2, 0, out))
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_enabled(foreign, False)
    with pytest.raises(ahg.InvalidValue):
        graph_exec.node_enabled(foreign)
    await run_once(graph_exec, device)
    assert values(device, out, 1) == [1]  # nothing changed
    destroy(out, graph, embedded, graph_exec)


@pytest.mark.asyncio
async def test_setters_reject_destroyed_nodes_and_nodes_of_a_destroyed_graph(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    extra = graph.add_kernel_node(put, 1, 1, (3, 0, out), deps=[node])
    graph_exec = graph.instantiate()
    extra.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph_exec.set_kernel_node_params(extra, put, 1, 1, (2, 0, out))
    graph.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph_exec.set_kernel_node_params(node, put, 1, 1, (2, 0, out))
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph_exec.set_node_enabled(node, False)
    await run_once(graph_exec, device)
    assert values(device, out, 1) == [3]  # the exec still runs its own copy, unchanged
    destroy(out, graph_exec)


SETTERS: dict[str, tuple[str, Callable[[ahg.GraphExec, ahg.GraphNode, dict[str, Any]], None]]] = {
    "kernel": (
        "kernel",
        lambda e, n, r: e.set_kernel_node_params(n, put, 1, 1, (1, 0, r["buf"])),
    ),
    "memcpy": ("memcpy", lambda e, n, r: e.set_memcpy_node_params(n, r["host"], r["buf"], 8)),
    "memset": ("memset", lambda e, n, r: e.set_memset_node_params(n, r["buf"], 1, 8)),
    "host": ("host", lambda e, n, r: e.set_host_node_params(n, print)),
    "event record": ("record", lambda e, n, r: e.set_event_record_node_event(n, r["event"])),
    "event wait": ("wait", lambda e, n, r: e.set_event_wait_node_event(n, r["event"])),
    "child graph": ("child", lambda e, n, r: e.set_child_graph_node_params(n, _track(ahg.Graph()))),
}


NODE_KINDS = ["kernel", "memcpy", "memset", "host", "empty", "record"]


@pytest.mark.parametrize(
    ("setter", "node_kind"),
    [(s, k) for s in SETTERS for k in NODE_KINDS if k != SETTERS[s][0]],
)
def test_a_setter_given_a_node_of_another_type_is_invalid_value(
    device: ahg.Device, setter: str, node_kind: str
) -> None:
    _, call = SETTERS[setter]
    resources = {
        "buf": device.malloc(64),
        "host": np.zeros(8, dtype=np.uint8),
        "event": device.create_event(),
    }
    graph = ahg.Graph()
    adders: dict[str, Callable[[], ahg.GraphNode]] = {
        "kernel": lambda: graph.add_kernel_node(put, 1, 1, (1, 0, resources["buf"])),
        "memcpy": lambda: graph.add_memcpy_node(resources["host"], resources["buf"], 8),
        "memset": lambda: graph.add_memset_node(resources["buf"], 0, 8),
        "host": lambda: graph.add_host_node(print),
        "empty": graph.add_empty_node,
        "record": lambda: graph.add_event_record_node(resources["event"]),
    }
    node = adders[node_kind]()
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="node, not"):
        call(graph_exec, node, resources)
    destroy(graph, graph_exec, resources["buf"], resources["event"])


def test_handle_and_type_are_checked_before_parameter_values(device: ahg.Device) -> None:
    graph = ahg.Graph()
    empty = graph.add_empty_node()
    graph_exec = graph.instantiate()
    other = _track(ahg.Graph()).add_kernel_node(put, 1, 1, (1, 0, _track(device.malloc(8))))
    with pytest.raises(ahg.InvalidValue):  # not InvalidConfiguration: the type comes first
        graph_exec.set_kernel_node_params(empty, put, 0, 0, ())
    with pytest.raises(ahg.InvalidValue):  # not TypeError for the arguments: the handle first
        graph_exec.set_kernel_node_params(other, put, 1, 1, ("bad",))
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):  # the exec before the node
        graph_exec.set_kernel_node_params(empty, put, 1, 1, ())
    destroy(graph)


@pytest.mark.parametrize(
    "call",
    [
        lambda e, n: e.set_node_enabled(None, True),
        lambda e, n: e.set_kernel_node_params(None, put, 1, 1, ()),
        lambda e, n: e.update(None),
        lambda e, n: e.set_child_graph_node_params(n, None),
    ],
    ids=["set_node_enabled", "set_kernel_node_params", "update", "set_child_graph_node_params"],
)
def test_a_null_handle_is_invalid_value(
    call: Callable[[ahg.GraphExec, ahg.GraphNode], None],
) -> None:
    graph, empty = ahg.Graph(), ahg.Graph()
    child = graph.add_child_graph_node(empty)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="null"):
        call(graph_exec, child)
    destroy(graph, graph_exec, empty)


# -- setters: which parameter changes they accept ---------------------------------------------


@pytest.mark.asyncio
async def test_memcpy_setter_cannot_change_direction(device: ahg.Device) -> None:
    buf = device.malloc(8)
    other = device.malloc(8)
    host = np.zeros(1, dtype=np.int64)
    graph = ahg.Graph()
    node = graph.add_memcpy_node(host, buf)  # device to host
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="direction"):
        graph_exec.set_memcpy_node_params(node, buf, host)  # host to device
    with pytest.raises(ahg.InvalidValue, match="direction"):
        graph_exec.set_memcpy_node_params(node, other, buf, 8)  # device to device
    with pytest.raises(ahg.InvalidValue, match="kind is fixed"):
        graph_exec.set_memcpy_node_params(node, host, buf, kind=ahg.CopyKind.HostToDevice)
    stream = device.create_stream()
    await stream.memset(buf, 3, 8)
    await (await graph_exec.launch(stream))
    assert host.view(np.uint8).tolist() == [3] * 8  # still the original copy
    destroy(buf, other, graph, graph_exec, stream)


def test_memset_setter_keeps_a_2d_fill_s_shape_and_device() -> None:
    ahg.configure_devices(2)
    device, other = ahg.get_device(0), ahg.get_device(1)
    buf = device.malloc(256)
    graph = ahg.Graph()
    node = graph.add_memset_node(buf, 0, 16, height=4, pitch=32)
    graph_exec = graph.instantiate()
    graph_exec.set_memset_node_params(node, buf + 8, 5, 8, element_size=2, height=4, pitch=32)
    with pytest.raises(ahg.InvalidValue, match="row size and height"):
        graph_exec.set_memset_node_params(node, buf, 0, 16, height=3, pitch=32)
    with pytest.raises(ahg.InvalidValue, match="row size and height"):
        graph_exec.set_memset_node_params(node, buf, 0, 8, height=4, pitch=32)
    with pytest.raises(ahg.InvalidValue, match="another device"):
        graph_exec.set_memset_node_params(
            node, _track(other.malloc(256)), 0, 16, height=4, pitch=32
        )
    destroy(buf, graph, graph_exec)


@pytest.mark.asyncio
async def test_kernel_setter_may_change_the_kernel_but_not_sync_to_async(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (4, 0, out))
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="synchronous and an async body"):
        graph_exec.set_kernel_node_params(node, async_put, 1, 1, (5, 0, out))
    with pytest.raises(ahg.InvalidConfiguration):
        graph_exec.set_kernel_node_params(node, put, 0, 1, (5, 0, out))
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert values(device, out, 1) == [4]  # failed setters changed nothing

    graph_exec.set_kernel_node_params(node, add_one, 1, 1, (0, out))  # another kernel is fine
    await (await graph_exec.launch(stream))
    assert values(device, out, 1) == [5]
    destroy(out, graph, graph_exec, stream)


# -- whole-graph update ----------------------------------------------------------------------


class Update:
    """A graph shaped like the exec's, with one deliberate difference."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.out = device.malloc(64)
        self.src = device.malloc(8)
        self.host = np.zeros(1, dtype=np.int64)
        self.graphs: list[ahg.Graph] = []

    def close(self) -> None:
        """Destroy the graphs it built (those the test did not) and free its memory."""
        for graph in self.graphs:
            if graph.alive:
                graph.destroy()
        destroy(self.out, self.src)

    def build(self, value: int = 1, change: str = "") -> tuple[ahg.Graph, list[ahg.GraphNode]]:
        """kernel -> memcpy (D2H) -> memset -> child(kernel), with ``change`` applied."""
        graph = ahg.Graph()
        self.graphs.append(graph)
        nodes = [graph.add_kernel_node(put, 1, 1, (value, 0, self.out))]
        if change == "memcpy direction":
            nodes.append(graph.add_memcpy_node(self.src, self.host, deps=nodes[-1:]))
        elif change == "node type":
            nodes.append(graph.add_memset_node(self.src, 0, 8, deps=nodes[-1:]))
        else:
            nodes.append(graph.add_memcpy_node(self.host, self.src, deps=nodes[-1:]))
        height = 2 if change == "memset shape" else 1
        nodes.append(graph.add_memset_node(self.out + 8, value, 8, height=height, deps=nodes[-1:]))
        child = ahg.Graph()
        inner = put if change != "kernel body" else async_put
        first = child.add_kernel_node(inner, 1, 1, (value, 2, self.out))
        if change == "child topology":
            child.add_empty_node(deps=[first])
        # Same topological order either way; only the child node's dependency differs.
        deps = nodes[1:2] if change == "dependencies" else nodes[-1:]
        nodes.append(graph.add_child_graph_node(child, deps=deps))
        child.destroy()
        if change == "node count":
            nodes.append(graph.add_empty_node(deps=nodes[-1:]))
        return graph, nodes

    def results(self) -> tuple[int, int, int]:
        out = self.device.view(self.out, np.int64, 3)
        return int(out[0]), int(out[1]) & 0xFF, int(out[2])


FAILURES = {
    # change: (result kind, index of the new graph's node the result names, or None)
    "node count": (ahg.UpdateResultKind.TopologyChanged, None),
    "dependencies": (ahg.UpdateResultKind.TopologyChanged, 3),
    "node type": (ahg.UpdateResultKind.NodeTypeChanged, 1),
    "memcpy direction": (ahg.UpdateResultKind.ParametersChanged, 1),
    "memset shape": (ahg.UpdateResultKind.ParametersChanged, 2),
    "kernel body": (ahg.UpdateResultKind.UnsupportedFunctionChange, 3),
    "child topology": (ahg.UpdateResultKind.TopologyChanged, 3),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("change", list(FAILURES))
async def test_update_failures_name_the_kind_and_node_and_change_nothing(
    device: ahg.Device, change: str
) -> None:
    setup = Update(device)
    graph, _ = setup.build(1)
    graph_exec = graph.instantiate()
    new, new_nodes = setup.build(2, change)  # new values everywhere, plus one bad change
    kind, index = FAILURES[change]

    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        graph_exec.update(new)
    assert info.value.code == ahg.ErrorCode.GraphExecUpdateFailure
    assert int(info.value.code) == 910
    result = info.value.result  # type: ignore[attr-defined]
    assert result.kind is kind
    assert not result.ok
    assert result.node is (None if index is None else new_nodes[index])
    assert kind.name in str(info.value)

    await run_once(graph_exec, device)
    assert setup.results() == (1, 1, 1)  # all-or-nothing: the valid changes were not applied
    destroy(graph_exec)
    setup.close()


@pytest.mark.asyncio
async def test_update_success_applies_every_node_s_new_parameters(device: ahg.Device) -> None:
    setup = Update(device)
    graph, nodes = setup.build(1)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert setup.results() == (1, 1, 1)

    new, _ = setup.build(7)
    result = graph_exec.update(new)
    assert result.kind is ahg.UpdateResultKind.Success
    assert result.ok
    assert result.node is None
    await (await graph_exec.launch(stream))
    assert setup.results() == (7, 7, 7)
    assert nodes[0].params.args[0] == 1  # the source graph is untouched

    graph.destroy()  # update works with any graph, the exec's own source gone or not
    newer, _ = setup.build(9)
    graph_exec.update(newer)
    await (await graph_exec.launch(stream))
    assert setup.results() == (9, 9, 9)
    destroy(graph_exec, stream)
    setup.close()


@pytest.mark.asyncio
async def test_update_rejects_destroyed_and_cyclic_graphs(device: ahg.Device) -> None:
    setup = Update(device)
    graph, _ = setup.build(1)
    graph_exec = graph.instantiate()
    destroyed, _ = setup.build(2)
    destroyed.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph_exec.update(destroyed)
    cyclic, nodes = setup.build(3)
    cyclic.add_dependencies(nodes[-1], nodes[0])
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph_exec.update(cyclic)
    await run_once(graph_exec, device)
    assert setup.results() == (1, 1, 1)
    destroy(graph_exec)
    setup.close()


@pytest.mark.asyncio
async def test_update_of_a_graph_with_event_nodes_takes_the_new_events(device: ahg.Device) -> None:
    out = device.malloc(8)
    old, new_event = device.create_event(), device.create_event()
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph.add_event_record_node(old, deps=[node])
    graph_exec = graph.instantiate()
    new = ahg.Graph()
    new_node = new.add_kernel_node(put, 1, 1, (2, 0, out))
    new.add_event_record_node(new_event, deps=[new_node])
    assert graph_exec.update(new).ok
    await run_once(graph_exec, device)
    assert values(device, out, 1) == [2]
    assert old.signal is None  # never recorded
    assert new_event.signal is not None
    assert new_event.query()
    destroy(out, old, new_event, graph, graph_exec, new)


# -- event and child-graph setters -----------------------------------------------------------


@pytest.mark.asyncio
async def test_event_record_setter_records_the_new_event_from_the_next_launch(
    device: ahg.Device,
) -> None:
    old, new = device.create_event(), device.create_event()
    graph = ahg.Graph()
    node = graph.add_event_record_node(old)
    graph_exec = graph.instantiate()
    graph_exec.set_event_record_node_event(node, new)
    await run_once(graph_exec, device)
    assert new.signal is not None
    assert old.signal is None
    destroy(old, new, graph, graph_exec)


@pytest.mark.asyncio
async def test_event_wait_setter_waits_for_the_new_event_from_the_next_launch(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    old, new = device.create_event(), device.create_event()
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(old)
    graph.add_host_node(log.append, ("graph",), deps=[wait])
    graph_exec = graph.instantiate()
    graph_exec.set_event_wait_node_event(wait, new)
    held, stream = await held_stream(device)
    await stream.record_event(new)
    handle = await graph_exec.launch(_track(device.create_stream()))
    await loop_turns()
    assert log == []
    held.release()
    await handle
    assert log == ["graph"]
    destroy(old, new, graph, graph_exec)


def _child(
    value: int, out: ahg.DevicePtr, *, extra: bool = False, memset: bool = False
) -> ahg.Graph:
    child = _track(ahg.Graph())
    if memset:
        first = child.add_memset_node(out, 0, 8)
    else:
        first = child.add_kernel_node(put, 1, 1, (value, 0, out))
    second = child.add_kernel_node(put, 1, 1, (value + 1, 1, out), deps=[first])
    if extra:
        child.add_empty_node(deps=[second])
    return child


@pytest.mark.asyncio
async def test_child_graph_setter_takes_new_parameters_for_the_same_topology(
    device: ahg.Device,
) -> None:
    out = device.malloc(16)
    graph = ahg.Graph()
    node = graph.add_child_graph_node(_child(1, out))
    graph_exec = graph.instantiate()
    held, stream = await held_stream(device)
    first = await graph_exec.launch(stream)
    graph_exec.set_child_graph_node_params(node, _child(10, out))
    held.release()
    await first
    assert values(device, out, 2) == [1, 2]  # the launch in flight kept the old child
    await (await graph_exec.launch(stream))
    assert values(device, out, 2) == [10, 11]
    destroy(out, graph, graph_exec)


@pytest.mark.parametrize(
    "mismatch", [{"extra": True}, {"memset": True}], ids=["node count", "node type"]
)
def test_child_graph_setter_with_another_shape_is_unknown(
    device: ahg.Device, mismatch: dict[str, bool]
) -> None:
    out = device.malloc(16)
    graph = ahg.Graph()
    node = graph.add_child_graph_node(_child(1, out))
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.Unknown, match="does not match"):
        graph_exec.set_child_graph_node_params(node, _child(2, out, **mismatch))
    destroy(out, graph, graph_exec)


def test_child_graph_setter_rejects_the_parent_graph_and_bad_handles(device: ahg.Device) -> None:
    out = device.malloc(16)
    graph, first, second = ahg.Graph(), _child(1, out), _child(1, out)
    node = graph.add_child_graph_node(first)
    kernel = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.Unknown):
        graph_exec.set_child_graph_node_params(node, graph)
    with pytest.raises(ahg.InvalidValue, match="node, not"):
        graph_exec.set_child_graph_node_params(kernel, second)
    gone = _child(1, out)
    gone.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph_exec.set_child_graph_node_params(node, gone)
    destroy(out, graph, graph_exec, first, second)


def test_update_of_memory_nodes_of_another_size_is_not_supported(device: ahg.Device) -> None:
    def alloc_free_graph(nbytes: int) -> tuple[ahg.Graph, ahg.GraphNode]:
        graph = ahg.Graph()
        alloc = graph.add_mem_alloc_node(nbytes)
        graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
        return graph, alloc

    graph, _ = alloc_free_graph(64)
    graph_exec = graph.instantiate()
    same, _ = alloc_free_graph(64)  # same shape, its own reserved addresses: the same allocation
    assert graph_exec.update(same).ok
    other, other_alloc = alloc_free_graph(128)
    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        graph_exec.update(other)
    result = info.value.result  # type: ignore[attr-defined]
    assert result.kind is ahg.UpdateResultKind.NotSupported
    assert result.node is other_alloc
    graph_exec.destroy()
    for g in (other, same, graph):
        g.destroy()
    assert device.memory.statistics().reservations == 0
