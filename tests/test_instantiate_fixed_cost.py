"""What instantiate does once per executable, made cheaper, must stay exactly as correct.

A small graph's fixed costs were cut: a kernel run shorter than ``_SHARED_RUN_MIN`` nodes gets
an op object per node instead of a class of its own (a class is its own reference cycle, and
it kept the arena chunk alive until a collector pass); a fresh arena makes its first chunk
before placing a run; a chain is cut and planned without the general loops; a small build
does not pause the collector; ``destroy`` makes its waiter error only when a launch waits.
These tests hold each of those to the behaviour of the general path, on both sides of every
threshold.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from array import array
from collections.abc import Iterator

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause
from ahipgraph.device.ops import KernelOp
from ahipgraph.exec import planner as planner_module
from ahipgraph.exec.arena import ArgSlot, KernelArgArena
from ahipgraph.exec.compile import _SHARED_RUN_MIN
from ahipgraph.exec.planner import (
    SegmentTable,
    _cut_segments,
    _cut_segments_columns,
    _cut_segments_nodes,
    plan_graph,
)
from ahipgraph.exec.snapshot import snapshot
from ahipgraph.graph.graph import BULK_BUILD_NODES
from ahipgraph.runtime import observe
from ahipgraph.runtime.params import KernelParams

# Both sides of the threshold between op objects and a shared class, and one far past it.
SIZES = (1, 2, _SHARED_RUN_MIN - 1, _SHARED_RUN_MIN, _SHARED_RUN_MIN + 1, 100)

SCALARS_SEEN: list[int] = []


@ahg.kernel
def add_to(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] += value


@ahg.kernel
def note(t: ahg.Threads, value: ahg.int64) -> None:
    """Scalars only: the dispatch unpacks rather than decodes."""
    SCALARS_SEEN.append(int(value))


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic pass: what a test's ``gc.collect()`` finds is everything left in cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _chain(x: ahg.DevicePtr, size: int, start: int = 1) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for i in range(size):
        nodes.append(graph.add_kernel_node(add_to, 1, 1, (x, start + i), deps=nodes[-1:]))
    return graph, nodes


def _value(device: ahg.Device, x: ahg.DevicePtr) -> int:
    return int(device.view(x, np.int64, 1)[0])


def _set(device: ahg.Device, x: ahg.DevicePtr, value: int) -> None:
    device.view(x, np.int64, 1)[0] = value


async def _eager(device: ahg.Device, stream: ahg.Stream, x: ahg.DevicePtr, size: int) -> int:
    """The chain's result computed on a stream, for comparison."""
    _set(device, x, 0)
    for i in range(size):
        await stream.launch_kernel(add_to, 1, 1, (x, 1 + i))
    await stream.synchronize()
    return _value(device, x)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_replays_equal_eager_results_on_both_sides_of_the_run_threshold(
    device: ahg.Device, size: int
) -> None:
    x = device.malloc(8)
    stream = device.create_stream()
    expected = await _eager(device, stream, x, size)
    graph, _ = _chain(x, size)
    graph_exec = graph.instantiate()
    _set(device, x, 0)
    for _ in range(3):
        await (await graph_exec.launch(stream))
    assert _value(device, x) == 3 * expected
    stats = graph_exec.statistics()
    assert stats.arena.live_slots == size
    assert stats.arena.allocations == size
    assert stats.arena.chunks == 1
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [2, _SHARED_RUN_MIN + 3])
async def test_scalar_kernels_run_in_order_on_both_sides(device: ahg.Device, size: int) -> None:
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(size):
        previous = [graph.add_kernel_node(note, 1, 1, (i,), deps=previous)]
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    SCALARS_SEEN.clear()
    await (await graph_exec.launch(stream))
    await (await graph_exec.launch(stream))
    assert [*range(size), *range(size)] == SCALARS_SEEN
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("collector_off")
async def test_a_small_executable_leaves_nothing_to_the_collector(device: ahg.Device) -> None:
    """Below the threshold nothing instantiate makes is in a cycle: reference counting frees
    the executable, its ops and its arena chunk the moment it is destroyed."""
    if observe.observer is not None:
        pytest.skip("the race checker keeps its own records of recent ops")
    x = device.malloc(8)
    stream = device.create_stream()
    before = device.memory_info()
    for size in (1, _SHARED_RUN_MIN - 1):
        graph, _ = _chain(x, size)
        gc.collect()
        graph_exec = graph.instantiate()
        await (await graph_exec.launch(stream))
        graph_exec.destroy()
        graph.destroy()
        del graph_exec, graph
        assert gc.collect() == 0
        assert device.memory_info() == before
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_two_executables_of_one_graph_have_their_own_arenas(device: ahg.Device) -> None:
    x, y = device.malloc(8), device.malloc(8)
    stream = device.create_stream()
    graph, nodes = _chain(x, 3)
    first, second = graph.instantiate(), graph.instantiate()
    first_ops = first._launcher.compiled.strand_ops[0]
    second_ops = second._launcher.compiled.strand_ops[0]
    kernel_ops = [
        (a, b) for a, b in zip(first_ops, second_ops, strict=True) if hasattr(a, "buffer")
    ]
    assert len(kernel_ops) == 3
    assert all(a.buffer is not b.buffer for a, b in kernel_ops)  # two arena chunks
    # A change to one executable's arguments is not the other's.
    second.set_kernel_node_params(nodes[1], add_to, 1, 1, (y, 10))
    await (await first.launch(stream))
    await (await second.launch(stream))
    assert _value(device, x) == (1 + 2 + 3) + (1 + 3)
    assert _value(device, y) == 10
    first.destroy()  # the other keeps working
    await (await second.launch(stream))
    assert _value(device, x) == (1 + 2 + 3) + 2 * (1 + 3)
    second.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [3, _SHARED_RUN_MIN + 1])
async def test_executables_on_two_devices_each_decode_against_their_own_memory(
    size: int,
) -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    results = []
    for dev in (d0, d1):
        x = dev.malloc(8)
        graph, _ = _chain(x, size)
        graph_exec = graph.instantiate(device=dev)
        stream = dev.create_stream()
        await (await graph_exec.launch(stream))
        await (await graph_exec.launch(stream))
        results.append(_value(dev, x))
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
        dev.free(x)
    assert results == [2 * sum(range(1, size + 1))] * 2


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [2, _SHARED_RUN_MIN + 1])
async def test_a_kernel_redefined_with_another_layout_is_never_served_stale(
    device: ahg.Device, size: int
) -> None:
    """Nothing made at instantiate is kept across executables keyed by name: a kernel of the
    same name with another parameter layout gets its own ops and argument bytes."""

    @ahg.kernel
    def step(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
        x[0] += value

    x = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for _ in range(size):
        previous = [graph.add_kernel_node(step, 1, 1, (x, 1), deps=previous)]
    old = graph.instantiate()
    await (await old.launch(stream))
    assert _value(device, x) == size

    @ahg.kernel  # type: ignore[no-redef]
    def step(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int64]) -> None:
        x[0] += 100 * value

    other = ahg.Graph()
    previous = []
    for _ in range(size):
        previous = [other.add_kernel_node(step, 1, 1, (1, x), deps=previous)]
    new = other.instantiate()
    _set(device, x, 0)
    await (await new.launch(stream))
    await (await old.launch(stream))  # the old executable still runs the old kernel
    assert _value(device, x) == 100 * size + size
    # An update moves the old executable's nodes to the new kernel (same topology).
    assert old.update(other).ok
    _set(device, x, 0)
    await (await old.launch(stream))
    assert _value(device, x) == 100 * size
    for handle in (old, new, graph, other):
        handle.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [3, _SHARED_RUN_MIN + 1])
async def test_update_with_new_arguments_is_seen_by_later_launches_only(
    device: ahg.Device, size: int
) -> None:
    x, y = device.malloc(8), device.malloc(8)
    stream = device.create_stream()
    graph, _ = _chain(x, size)
    graph_exec = graph.instantiate()
    held = await graph_exec.launch(stream)  # enqueued with x
    recaptured, _ = _chain(y, size, start=10)
    assert graph_exec.update(recaptured).ok
    await held
    await (await graph_exec.launch(stream))
    assert _value(device, x) == sum(range(1, size + 1))
    assert _value(device, y) == sum(range(10, 10 + size))
    for handle in (graph_exec, graph, recaptured):
        handle.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [2, _SHARED_RUN_MIN + 1])
async def test_destroy_in_flight_frees_everything_after_the_last_launch(
    device: ahg.Device, size: int
) -> None:
    x = device.malloc(8)
    stream = device.create_stream()
    before = device.memory_info()
    graph, _ = _chain(x, size)
    graph_exec = graph.instantiate()
    during = device.memory_info()
    assert during[0] < before[0]  # the arena chunk is device memory
    launches = [await graph_exec.launch(stream) for _ in range(3)]
    graph_exec.destroy()  # three launches in flight
    assert device.memory_info() == during
    for launch in launches:
        await launch
    assert _value(device, x) == 3 * sum(range(1, size + 1))
    assert device.memory_info() == before
    stats = graph_exec.statistics()
    assert stats.state == "closed"
    assert stats.arena.chunks == 0
    assert stats.signal_pool.waiters == 0
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_destroy_still_fails_a_launch_parked_for_a_signal_set(device: ahg.Device) -> None:
    x = device.malloc(8)
    stream = device.create_stream()
    graph, _ = _chain(x, 2)
    graph_exec = graph.instantiate(signal_sets=1)
    gate = asyncio.get_running_loop().create_future()

    async def hold() -> None:
        await gate

    await stream.launch_host_func(hold)  # the stream waits until the gate opens
    first = await graph_exec.launch(stream)  # takes the only set
    parked = asyncio.ensure_future(graph_exec.launch(stream))
    await asyncio.sleep(0)  # the second launch parks for the set
    assert graph_exec.pool.waiting == 1
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed while a launch waited"):
        await parked
    assert graph_exec.pool.waiting == 0
    gate.set_result(None)
    await first
    await stream.synchronize()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [2, _SHARED_RUN_MIN + 1])
async def test_a_replay_after_a_free_never_uses_a_stale_view(device: ahg.Device, size: int) -> None:
    """Op objects and shared classes alike decode again once memory was freed."""
    x = device.malloc(8)
    stream = device.create_stream()
    graph, nodes = _chain(x, size)
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    device.free(x)
    y = device.malloc(8)
    for node in nodes:
        graph_exec.set_kernel_node_params(node, add_to, 1, 1, (y, 2))
    await (await graph_exec.launch(stream))
    assert _value(device, y) == 2 * size
    device.free(y)
    with pytest.raises(ahg.HipError):  # every node's pointer is freed now
        await (await graph_exec.launch(stream))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


def test_instantiate_from_a_plain_thread_gives_a_working_executable(device: ahg.Device) -> None:
    x = device.malloc(8)
    graph, _ = _chain(x, 4)
    made: list[ahg.GraphExec] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            made.append(graph.instantiate())
        except BaseException as error:  # reported below
            errors.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(10)
    assert not errors
    (graph_exec,) = made

    async def main() -> None:
        stream = device.create_stream()
        await (await graph_exec.launch(stream))
        stream.destroy()

    asyncio.run(main())
    assert _value(device, x) == 1 + 2 + 3 + 4
    graph_exec.destroy()
    graph.destroy()
    device.free(x)


def test_a_failed_first_chunk_changes_nothing_and_the_graph_instantiates_later() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=64 * 1024))
    device = ahg.get_device(0)
    x = device.malloc(8)
    graph, _ = _chain(x, 4)
    before = device.memory_info()
    with pytest.raises(ahg.OutOfMemory):
        graph.instantiate()  # 128 KiB of headroom does not fit
    assert device.memory_info() == before
    graph.instantiate(arena_headroom=0).destroy()
    assert device.memory_info() == before
    graph.destroy()
    device.free(x)


# -- the arena: a run placed in a fresh arena --------------------------------------------------


def _places(slots: list[ArgSlot]) -> list[tuple[int, int, int]]:
    return [(slot.chunk, slot.offset, slot.size) for slot in slots]


@pytest.mark.parametrize("count", [2, 3, 40])
def test_a_fresh_arena_places_a_run_where_one_by_one_placing_would(
    device: ahg.Device, count: int
) -> None:
    datas, sizes = [bytes([i + 1]) * 12 for i in range(count)], [12] * count
    fresh = KernelArgArena(device, 4096)
    one_by_one = KernelArgArena(device, 4096)
    try:
        run = fresh.place_many(datas, sizes)  # one span: the chunk is made first
        each = [one_by_one.place(data, 12) for data in datas]
        assert _places(run) == _places(each) == [(0, 16 * i, 12) for i in range(count)]
        assert fresh.statistics() == one_by_one.statistics()
        assert bytes(run[0].buffer[: 16 * count]) == bytes(each[0].buffer[: 16 * count])
    finally:
        fresh.close()
        one_by_one.close()


def test_a_fresh_arena_with_a_too_large_first_item_makes_no_chunk(device: ahg.Device) -> None:
    before = device.memory_info()
    arena = KernelArgArena(device, 64)
    with pytest.raises(ahg.InvalidValue):
        arena.place_spans([b"a" * 100, b"b"], [100, 1])
    assert arena.statistics().chunks == 0
    assert device.memory_info() == before
    arena.close()
    with pytest.raises(ahg.InvalidValue):  # closed: refused, and still no chunk
        arena.place_spans([b"a", b"b"], [1, 1])
    assert device.memory_info() == before


# -- the planner: a chain's fast cut and plan --------------------------------------------------


def _columns(table: SegmentTable) -> tuple[object, ...]:
    return (
        table.first.tolist(),
        table.step.tolist(),
        table.size.tolist(),
        table.dep.tolist(),
        {k: v.tolist() for k, v in table.multi.items()},
        table.irregular,
    )


def _graphs() -> list[tuple[str, ahg.Graph]]:
    made: list[tuple[str, ahg.Graph]] = []
    for size in (1, 2, 3, 10, 63, 64, 300):  # both sides of the column cut's threshold
        graph = ahg.Graph()
        previous: list[ahg.GraphNode] = []
        for _ in range(size):
            previous = [graph.add_empty_node(deps=previous)]
        made.append((f"chain{size}", graph))
    graph = ahg.Graph()
    a, b = graph.add_empty_node(), graph.add_empty_node()
    graph.add_empty_node(deps=[a, b])
    made.append(("two roots and a join", graph))
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    graph.add_empty_node(deps=[a, b])
    made.append(("a chain with a skip edge", graph))
    graph = ahg.Graph()
    a = graph.add_empty_node()
    graph.add_empty_node(deps=[a])
    graph.add_empty_node(deps=[a])
    made.append(("a fork", graph))
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    a = graph.add_empty_node()
    c = graph.add_child_graph_node(child, deps=[a])
    graph.add_empty_node(deps=[c])
    child.destroy()  # the node holds its own copy
    made.append(("a chain through a child graph", graph))
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node()
    graph.add_dependencies(a, b)  # a chain, but not in insertion order: b after a
    graph.add_empty_node(deps=[b])
    made.append(("a chain added out of order", graph))
    return made


def test_the_chain_cut_and_plan_equal_the_general_ones() -> None:
    for name, graph in _graphs():
        with graph.lock:
            copy, _ = snapshot(graph)
        fast = _cut_segments(copy)
        general = SegmentTable.of(_cut_segments_nodes(copy))
        assert _columns(fast) == _columns(general), name
        plan = plan_graph(copy)
        if len(general) == 1:
            assert [list(s) for s in plan.strands] == [[0]], name
            assert (plan.num_signals, plan.start_signal, plan.final_waits, plan.levels) == (
                0,
                None,
                [],
                1,
            ), name
            one = array("i", [0])
            assert (plan.segments.level, plan.segments.strand, plan.segments.position) == (
                one,
                one,
                one,
            ), name
        prioritised = plan_graph(copy, use_priority=True)
        assert [list(s) for s in prioritised.strands] == [list(s) for s in plan.strands], name
        graph.destroy()


def test_a_long_chain_is_cut_by_its_check_as_the_column_cut_cuts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chain of any length is one segment found by two comparisons: what the column cut
    (pointer doubling, a pass per doubling of the length) makes of it, and it is never
    called for one."""
    for size in (64, 65, 1000):
        graph = ahg.Graph()
        previous: list[ahg.GraphNode] = []
        for _ in range(size):
            previous = [graph.add_empty_node(deps=previous)]
        with graph.lock:
            copy, _ = snapshot(graph)
        graph.destroy()
        columns = _columns(_cut_segments_columns(copy))
        with monkeypatch.context() as patch:
            patch.setattr(planner_module, "_cut_segments_columns", _never)
            assert _columns(_cut_segments(copy)) == columns == ([0], [1], [size], [-1], {0: []}, {})


def _never(graph: object) -> None:
    raise AssertionError("a chain is cut by its check")


# -- a short run's ops: KernelOp.make_each is KernelOp.make, field by field ---------------------


def _fields(op: object) -> dict[str, object]:
    names = {name for cls in type(op).__mro__ for name in getattr(cls, "__slots__", ())}
    return {name: getattr(op, name) for name in sorted(names) if hasattr(op, name)}


@pytest.mark.parametrize("kernel", [add_to, note])
def test_make_each_makes_what_make_makes(device: ahg.Device, kernel: ahg.Kernel) -> None:
    arena = KernelArgArena(device, 4096)
    x = device.malloc(8)
    try:
        slot = arena.allocate(64)
        threads = KernelParams.make(add_to, 1, 1, (x, 1)).threads
        offsets = range(0, 160, 16)
        each = KernelOp.make_each(kernel, threads, slot.buffer, offsets, 7, arena)
        one_by_one = [KernelOp.make(kernel, threads, slot.buffer, o, 7, arena) for o in offsets]
        assert [type(op) for op in each] == [type(op) for op in one_by_one]
        assert [_fields(op) for op in each] == [_fields(op) for op in one_by_one]
        every_slot = {n for cls in type(each[0]).__mro__ for n in getattr(cls, "__slots__", ())}
        assert every_slot - {"__weakref__"} == set(_fields(each[-1]))  # every field is set
        assert KernelOp.make_each(kernel, threads, slot.buffer, (), 7, arena) == []
    finally:
        arena.close()
        device.free(x)


# -- the collector pause: only for large builds, and always undone -------------------------------


@pytest.mark.parametrize("size", [3, BULK_BUILD_NODES])
def test_instantiate_leaves_the_collector_as_it_found_it(device: ahg.Device, size: int) -> None:
    x = device.malloc(8)
    thresholds = gc.get_threshold()
    # A large build here (no event loop) leaves a watched pause (core.gcpause), which the
    # graph's instantiate ends: the collector is left as it was before the build.
    graph, _ = _chain(x, size)
    graph.instantiate().destroy()
    assert gc.get_threshold() == thresholds
    assert not gcpause.is_paused()
    before = device.memory_info()
    with pytest.raises(TypeError):
        graph.instantiate(signal_sets="many")  # refused before anything is built
    with pytest.raises(ahg.OutOfMemory):
        graph.instantiate(arena_headroom=2 * device.memory_info()[1])  # fails while building
    assert gc.get_threshold() == thresholds
    assert not gcpause.is_paused()
    assert device.memory_info() == before
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.instantiate()  # destroyed: no node is counted, and the copy refuses it
    assert gc.get_threshold() == thresholds
    device.free(x)
