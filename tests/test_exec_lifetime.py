"""Executable lifetime: destroy while in use, user objects, threads, pools, replays and leaks.

DESIGN.md §3 (destroy while in use, user objects) and §5 invariants 1 and 2: after warm-up a
replay allocates nothing, and once everything is done and destroyed every pool, allocator and
registry is back at its baseline with every destructor run exactly once.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.memnodes import RESERVATIONS
from ahipgraph.graph.node import NODES
from ahipgraph.lifetime.user_object import USER_OBJECTS
from ahipgraph.runtime.event import EVENTS
from ahipgraph.runtime.stream import STREAMS
from cleanup import destroy, run_once
from fakes import GatedHost, loop_turns


@ahg.kernel
def add_one(t: ahg.Threads, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] += 1


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


def counts(device: ahg.Device) -> dict[str, int]:
    """Everything that must return to its baseline once all is destroyed."""
    return {
        "execs": len(EXECS),
        "graphs": len(GRAPHS),
        "nodes": len(NODES),
        "streams": len(STREAMS),
        "events": len(EVENTS),
        "user objects": len(USER_OBJECTS),
        "reservations": len(RESERVATIONS),
        # Memory the graph pool keeps for reuse is not leaked (a trim returns it).
        "bytes in use": device.memory.bytes_in_use - device.memory.graph_pool.cached,
        "device reservations": device.memory.statistics().reservations,
    }


def gated_diamond(out: ahg.DevicePtr, gate: object) -> ahg.Graph:
    """gate -> (add_one out[0] | add_one out[1]) -> join: two strands, signals between."""
    graph = ahg.Graph()
    root = graph.add_host_node(gate)  # type: ignore[arg-type]
    left = graph.add_kernel_node(add_one, 1, 1, (0, out), deps=[root])
    right = graph.add_kernel_node(add_one, 1, 1, (1, out), deps=[root])
    graph.add_empty_node(deps=[left, right])
    return graph


def values(device: ahg.Device, ptr: ahg.DevicePtr, count: int) -> list[int]:
    return [int(v) for v in device.view(ptr, np.int64, count)]


async def parked_on_pool(graph_exec: ahg.GraphExec) -> None:
    """Let the loop run until a launch waits on the executable's signal-set pool."""
    for _ in range(100):
        if graph_exec.statistics().signal_pool.waiters:
            return
        await asyncio.sleep(0)  # one loop iteration: the launching task takes its next step
    raise AssertionError("no launch parked on the signal-set pool")


# -- destroy while launches are in flight ----------------------------------------------------


@pytest.mark.asyncio
async def test_destroy_with_launches_in_flight_completes_them_and_frees_only_afterwards(
    device: ahg.Device,
) -> None:
    before = counts(device)
    out = device.malloc(16)
    gates = GatedHost()
    graph = gated_diamond(out, gates)
    graph_exec = graph.instantiate()
    assert graph_exec.statistics().strands == 2
    stream = device.create_stream()
    arena_bytes = graph_exec.statistics().arena.bytes_reserved
    handles = [await graph_exec.launch(stream) for _ in range(3)]
    await gates.started(0)
    during = counts(device)

    graph_exec.destroy()
    assert graph_exec.hid not in [e.hid for e in EXECS.live_objects()]
    assert graph_exec.statistics().state == "closing"
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        await graph_exec.launch(stream)
    # The handle is gone, but nothing the launches use was freed.
    assert counts(device) == {**during, "execs": during["execs"] - 1}
    assert device.memory.bytes_in_use == before["bytes in use"] + 16 + arena_bytes
    assert graph_exec.statistics().in_flight == 3

    gates.open(0)
    await handles[0]
    assert graph_exec.statistics().state == "closing"  # two launches still hold it
    assert device.memory.bytes_in_use == before["bytes in use"] + 16 + arena_bytes
    gates.open_all(3)
    for handle in handles:
        await handle
        assert handle.exception() is None
    assert values(device, out, 2) == [3, 3]  # every launch ran completely
    stats = graph_exec.statistics()
    assert stats.state == "closed"
    assert (stats.in_flight, stats.completed) == (0, 3)
    assert stats.signal_pool.in_use == 0

    graph.destroy()
    stream.destroy()
    device.free(out)
    assert counts(device) == before


@pytest.mark.asyncio
async def test_destroy_with_nothing_in_flight_frees_at_once(device: ahg.Device) -> None:
    before = counts(device)
    out = device.malloc(16)
    graph = gated_diamond(out, lambda: None)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    graph_exec.destroy()
    assert graph_exec.statistics().state == "closed"
    with pytest.raises(ahg.InvalidValue, match="already destroyed"):
        graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(out)
    assert counts(device) == before


@pytest.mark.asyncio
async def test_destroying_the_source_graph_leaves_the_exec_runnable(device: ahg.Device) -> None:
    out = device.malloc(16)
    child = ahg.Graph()
    child.add_kernel_node(add_one, 1, 1, (1, out))
    graph = ahg.Graph()
    first = graph.add_kernel_node(add_one, 1, 1, (0, out))
    graph.add_child_graph_node(child, deps=[first])
    child.destroy()
    graph_exec = graph.instantiate()
    graphs = len(GRAPHS)
    graph.destroy()
    assert len(GRAPHS) == graphs - 2  # the graph and its embedded child copy
    stream = device.create_stream()
    for _ in range(2):
        await (await graph_exec.launch(stream))
    assert values(device, out, 2) == [2, 2]
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph_exec.set_kernel_node_params(first, add_one, 1, 1, (1, out))
    destroy(out, graph_exec, stream)


# -- user objects ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_exec_holds_one_reference_per_user_object_until_its_last_launch_completes(
    device: ahg.Device,
) -> None:
    destroyed: list[str] = []
    many = ahg.UserObject(destroyed.append, "many")
    moved = ahg.UserObject(destroyed.append, "moved")
    gates = GatedHost()
    graph = ahg.Graph()
    graph.add_host_node(gates)
    graph.retain_user_object(many, 3)  # the graph holds 3, the user 1
    graph.retain_user_object(moved, move=True)  # the graph holds the user's only reference

    graph_exec = graph.instantiate()
    assert (many.refcount, moved.refcount) == (5, 2)  # one more each, whatever the graph holds
    assert many._owned_by(graph_exec) == 1
    assert moved._owned_by(graph_exec) == 1

    graph.destroy()
    many.release()
    assert (many.refcount, moved.refcount) == (1, 1)  # only the exec's references are left
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    second = await graph_exec.launch(stream)
    graph_exec.destroy()
    assert destroyed == []

    gates.open(0)
    await first
    await gates.started(1)
    assert destroyed == []  # the second launch still holds the exec, and so the objects
    gates.open(1)
    await second
    assert sorted(destroyed) == ["many", "moved"]
    assert not many.alive
    assert not moved.alive
    await stream.synchronize()
    assert sorted(destroyed) == ["many", "moved"]  # exactly once
    destroy(moved, stream)


def test_exec_destroy_with_nothing_in_flight_runs_the_destructor_there() -> None:
    destroyed: list[object] = []
    obj = ahg.UserObject(destroyed.append, "data")
    graph = ahg.Graph()
    graph.add_empty_node()
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    assert destroyed == []
    graph_exec.destroy()
    assert destroyed == ["data"]


@pytest.mark.asyncio
async def test_exec_also_holds_the_user_objects_of_its_child_graphs(device: ahg.Device) -> None:
    destroyed: list[object] = []
    obj = ahg.UserObject(destroyed.append, "child's")
    gates = GatedHost()
    child = ahg.Graph()
    child.add_host_node(gates)
    child.retain_user_object(obj, move=True)
    graph = ahg.Graph()
    graph.add_child_graph_node(child)
    child.destroy()  # the embedded copy owns a reference now
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    handle = await graph_exec.launch(stream)
    graph.destroy()
    graph_exec.destroy()
    assert destroyed == []  # the launch in flight runs the child's node
    gates.open(0)
    await handle
    assert destroyed == ["child's"]
    destroy(obj, stream)


def test_failed_instantiate_takes_no_user_object_reference(device: ahg.Device) -> None:
    obj = ahg.UserObject(lambda _: None)
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    graph.add_dependencies(b, a)
    graph.retain_user_object(obj)
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    with pytest.raises(ahg.InvalidValue):
        graph.instantiate(3)
    assert obj.refcount == 2
    assert len(obj.owners) == 1
    destroy(obj, graph)


# -- destroy from another thread -------------------------------------------------------------


@pytest.mark.asyncio
async def test_destroy_from_another_thread_while_launches_are_in_flight(
    device: ahg.Device,
) -> None:
    before = counts(device)
    destructor_threads: list[int] = []
    obj = ahg.UserObject(lambda _: destructor_threads.append(threading.get_ident()))
    out = device.malloc(16)
    gates = GatedHost()
    graph = gated_diamond(out, gates)
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    stream = device.create_stream()
    handles = [await graph_exec.launch(stream) for _ in range(4)]
    await gates.started(0)

    errors: list[BaseException] = []

    def destroy() -> None:
        try:
            graph_exec.destroy()
        except BaseException as error:  # reported below, on the test's thread
            errors.append(error)

    thread = threading.Thread(target=destroy)
    thread.start()
    thread.join()  # destroy() never blocks: it only retires the handle
    assert errors == []
    assert graph_exec.statistics().state == "closing"
    assert destructor_threads == []

    gates.open_all(4)
    for handle in handles:
        await handle
    assert values(device, out, 2) == [4, 4]
    assert destructor_threads == [threading.get_ident()]  # run by the last completion, once
    stream.destroy()
    device.free(out)
    assert counts(device) == before


def test_destroy_from_another_thread_with_nothing_in_flight_runs_the_destructor_there(
    device: ahg.Device,
) -> None:
    destructor_threads: list[int] = []
    obj = ahg.UserObject(lambda _: destructor_threads.append(threading.get_ident()))
    graph, out = ahg.Graph(), device.malloc(8)
    graph.add_kernel_node(add_one, 1, 1, (0, out))
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    thread = threading.Thread(target=graph_exec.destroy)
    thread.start()
    thread.join()
    assert destructor_threads == [thread.ident]
    assert graph_exec.statistics().state == "closed"
    destroy(obj, out)


def test_racing_destroys_from_many_threads_exactly_one_wins(device: ahg.Device) -> None:
    destroyed: list[object] = []
    obj = ahg.UserObject(destroyed.append, "data")
    graph, out = ahg.Graph(), device.malloc(8)
    graph.add_kernel_node(add_one, 1, 1, (0, out))
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def destroy() -> None:
        barrier.wait()
        try:
            graph_exec.destroy()
            outcome = "destroyed"
        except ahg.InvalidValue:
            outcome = "invalid"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=destroy) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["destroyed"] + ["invalid"] * 7
    assert destroyed == ["data"]
    device.free(out)


@pytest.mark.asyncio
async def test_destroy_from_a_thread_racing_completions_frees_everything_once(
    device: ahg.Device,
) -> None:
    """Completions run on the loop while another thread destroys: no double free, no leak."""
    before = counts(device)
    destroyed: list[object] = []
    obj = ahg.UserObject(destroyed.append, "data")
    out = device.malloc(16)
    graph = gated_diamond(out, lambda: None)
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    stream = device.create_stream()
    for _ in range(12):
        await graph_exec.launch(stream)
    thread = threading.Thread(target=graph_exec.destroy)
    thread.start()
    await stream.synchronize()  # completions run here, on the loop, while the thread destroys
    thread.join()
    assert values(device, out, 2) == [12, 12]
    assert destroyed == ["data"]
    assert graph_exec.statistics().state == "closed"
    stream.destroy()
    device.free(out)
    assert counts(device) == before


# -- the signal-set pool ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_task_cancelled_while_waiting_for_a_signal_set_leaves_the_pool_consistent(
    device: ahg.Device,
) -> None:
    gates = GatedHost()
    out = device.malloc(16)
    diamond = gated_diamond(out, gates)
    graph_exec = diamond.instantiate(signal_sets=1, wait_for_signal_sets=True)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    waiter = asyncio.ensure_future(graph_exec.launch(stream))
    await parked_on_pool(graph_exec)
    await loop_turns()  # and it stays parked: no set comes free while the first launch is held
    assert not waiter.done()
    assert graph_exec.statistics().signal_pool.waiters == 1
    with pytest.raises(ahg.NotReady):
        graph_exec.launch_nowait(stream)  # no set is free, and a waiter is ahead anyway

    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    pool = graph_exec.statistics().signal_pool
    assert (pool.waiters, pool.free, pool.in_use, pool.sets) == (0, 0, 1, 1)

    gates.open_all(2)
    await first
    pool = graph_exec.statistics().signal_pool
    assert (pool.waiters, pool.free, pool.in_use, pool.sets, pool.misses) == (0, 1, 0, 1, 0)
    await (await graph_exec.launch(stream))  # the pool still works
    stats = graph_exec.statistics()
    assert (stats.launches, stats.completed) == (2, 2)
    assert values(device, out, 2) == [2, 2]
    destroy(out, graph_exec, stream, diamond)


@pytest.mark.asyncio
async def test_task_cancelled_after_the_hand_off_gives_the_set_back(device: ahg.Device) -> None:
    gates = GatedHost()
    out = device.malloc(16)
    diamond = gated_diamond(out, gates)
    graph_exec = diamond.instantiate(signal_sets=1, wait_for_signal_sets=True)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    waiter = asyncio.ensure_future(graph_exec.launch(stream))
    await parked_on_pool(graph_exec)
    assert graph_exec.statistics().signal_pool.waiters == 1

    gates.open(0)
    # The first launch's completion wakes this task, then hands its set to the waiter in the
    # same callback; this task runs first, before the waiter could take the set.
    await first
    pool = graph_exec.statistics().signal_pool
    assert (pool.waiters, pool.free) == (0, 0)  # handed over, not yet taken
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    pool = graph_exec.statistics().signal_pool
    assert (pool.free, pool.in_use, pool.sets) == (1, 0, 1)  # the set came back
    assert graph_exec.statistics().launches == 1  # the cancelled launch never happened

    gates.open(1)
    await (await graph_exec.launch(stream))
    assert values(device, out, 2) == [2, 2]
    destroy(out, graph_exec, stream, diamond)


@pytest.mark.asyncio
async def test_destroy_while_a_launch_waits_for_a_signal_set(device: ahg.Device) -> None:
    before = counts(device)
    gates = GatedHost()
    out = device.malloc(16)
    graph = gated_diamond(out, gates)
    graph_exec = graph.instantiate(signal_sets=1, wait_for_signal_sets=True)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    waiter = asyncio.ensure_future(graph_exec.launch(stream))
    await parked_on_pool(graph_exec)
    graph_exec.destroy()
    gates.open_all(2)
    await first
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        await waiter  # it got a set only after the exec was destroyed
    stats = graph_exec.statistics()
    assert (stats.state, stats.launches, stats.completed) == ("closed", 1, 1)
    assert values(device, out, 2) == [1, 1]
    graph.destroy()
    stream.destroy()
    device.free(out)
    assert counts(device) == before


@pytest.mark.asyncio
async def test_stream_destroyed_while_its_launch_waits_for_a_signal_set(
    device: ahg.Device,
) -> None:
    gates = GatedHost()
    out = device.malloc(16)
    diamond = gated_diamond(out, gates)
    graph_exec = diamond.instantiate(signal_sets=1, wait_for_signal_sets=True)
    first_stream, second_stream = device.create_stream(), device.create_stream()
    first = await graph_exec.launch(first_stream)
    waiter = asyncio.ensure_future(graph_exec.launch(second_stream))
    await parked_on_pool(graph_exec)
    second_stream.destroy()
    gates.open_all(2)
    await first
    with pytest.raises(ahg.ContextIsDestroyed):
        await waiter
    pool = graph_exec.statistics().signal_pool
    assert (pool.free, pool.in_use, pool.waiters, pool.sets) == (1, 0, 0, 1)
    assert graph_exec.statistics().launches == 1
    await (await graph_exec.launch(first_stream))  # the exec and its pool still work
    assert values(device, out, 2) == [2, 2]
    destroy(out, graph_exec, first_stream, diamond)


@pytest.mark.asyncio
async def test_more_launches_in_flight_than_prepopulated_sets_grow_the_pool(
    device: ahg.Device,
) -> None:
    gates = GatedHost()
    out = device.malloc(16)
    diamond = gated_diamond(out, gates)
    graph_exec = diamond.instantiate(signal_sets=4, signal_set_policy="grow")
    stream = device.create_stream()
    handles = [await graph_exec.launch(stream) for _ in range(6)]
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.prepopulated, pool.misses, pool.in_use) == (6, 4, 2, 6)
    gates.open_all(12)
    for handle in handles:
        await handle
    for _ in range(6):  # the grown pool is kept: no more misses
        await graph_exec.launch(stream)
    await stream.synchronize()
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.misses, pool.free) == (6, 2, 6)
    assert values(device, out, 2) == [12, 12]
    destroy(out, graph_exec, stream, diamond)


@pytest.mark.asyncio
async def test_a_tight_launch_loop_keeps_to_the_prepopulated_sets(device: ahg.Device) -> None:
    out = device.malloc(16)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (0, out))
    graph_exec = graph.instantiate(signal_sets=4)
    stream = device.create_stream()
    # 100 launches without ever awaiting one: with every set in use, a launch first lets the
    # earlier, runnable launches finish (as a GPU would have) instead of growing the pool.
    handles = [await graph_exec.launch(stream) for _ in range(100)]
    await handles[-1]
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.misses, pool.acquires) == (4, 0, 100)
    assert values(device, out, 1) == [100]
    graph_exec.destroy()
    graph.destroy()
    device.free(out)
    destroy(stream)


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_launch_held_when_its_loop_ends_fails_and_gives_everything_back(
    use_uvloop: bool,
) -> None:
    """A launch held by an async host node when ``ahg.run`` returns must not wedge the exec.

    Ending the run cancels the host node's task, so the launch completes there with a
    LaunchFailure and returns its signal set; a later run on a new loop reports that failure
    on the stream once, launches normally, and destroying then frees everything.
    """
    device = ahg.get_device(0)
    before = counts(device)
    out = device.malloc(16)
    gates = GatedHost()
    graph = gated_diamond(out, gates)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    handles: list[ahg.Completion] = []
    log: list[str] = []

    async def first_loop() -> None:
        handles.append(await graph_exec.launch(stream))
        await gates.started(0)  # the launch is held in its gate when this loop ends

    async def second_loop() -> None:
        with pytest.raises(ahg.LaunchFailure, match="cancelled"):
            await handles[0]
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()  # the held launch's failure, reported once
        # No gate this time: the root host node just logs.
        graph_exec.set_host_node_params(graph.nodes()[0], log.append, ("second launch",))
        second = await graph_exec.launch(stream)
        await second
        await stream.synchronize()
        assert log == ["second launch"]

    ahg.run(first_loop, use_uvloop=use_uvloop)
    assert handles[0].done()
    stats = graph_exec.statistics()
    assert (stats.in_flight, stats.signal_pool.free) == (0, 16)
    ahg.run(second_loop, use_uvloop=use_uvloop)
    stats = graph_exec.statistics()
    assert (stats.in_flight, stats.completed) == (0, 2)
    assert stats.signal_pool.free == stats.signal_pool.sets == 16
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(out)
    assert counts(device) == before


# -- replays allocate nothing ----------------------------------------------------------------


@pytest.mark.asyncio
async def test_ten_thousand_replays_create_no_signal_set_no_arena_chunk_and_no_memory(
    device: ahg.Device,
) -> None:
    replays, batch = 10_000, 8
    out = device.malloc(16)
    diamond = gated_diamond(out, lambda: None)
    graph_exec = diamond.instantiate()
    stream = device.create_stream()
    start = graph_exec.statistics()
    memory = device.memory.bytes_in_use
    peak_memory = memory

    for _ in range(replays // batch):
        for _ in range(batch):
            await graph_exec.launch(stream)
        peak_memory = max(peak_memory, device.memory.bytes_in_use)
        await stream.synchronize()

    end = graph_exec.statistics()
    assert values(device, out, 2) == [replays, replays]
    assert (end.launches, end.completed, end.in_flight) == (replays, replays, 0)
    assert end.signal_pool.sets == start.signal_pool.sets == end.signal_pool.prepopulated
    assert end.signal_pool.misses == 0
    assert end.signal_pool.free == end.signal_pool.sets
    assert end.arena == start.arena  # not a single argument slot was allocated
    assert peak_memory == memory
    assert device.memory.bytes_in_use == memory
    destroy(out, graph_exec, diamond, stream)


# -- failures at instantiate -----------------------------------------------------------------


def test_instantiate_out_of_memory_creates_nothing() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=64 * 1024))
    device = ahg.get_device(0)
    obj = ahg.UserObject(lambda _: None)
    graph = ahg.Graph()
    ptrs = [device.malloc(8) for _ in range(3)]
    root = graph.add_kernel_node(add_one, 1, 1, (0, ptrs[0]))
    graph.add_kernel_node(add_one, 1, 1, (0, ptrs[1]), deps=[root])
    graph.add_kernel_node(add_one, 1, 1, (0, ptrs[2]), deps=[root])
    graph.retain_user_object(obj)
    before = counts(device)
    with pytest.raises(ahg.OutOfMemory):
        graph.instantiate()  # the argument arena (128 KiB headroom) does not fit
    assert counts(device) == before
    assert obj.refcount == 2
    graph.instantiate(arena_headroom=0).destroy()  # without headroom it fits
    destroy(obj, graph, *ptrs)


@pytest.mark.asyncio
async def test_instantiate_out_of_memory_with_memory_nodes_leaves_the_graph_instantiable() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=64 * 1024))
    device = ahg.get_device(0)
    before = counts(device)
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    ptr = alloc.params.ptr
    fill = graph.add_kernel_node(put, 1, 1, (1, 0, ptr), deps=[alloc])
    host = np.zeros(1, dtype=np.int64)
    copy = graph.add_memcpy_node(host, ptr, deps=[fill])
    graph.add_mem_free_node(ptr, deps=[copy])
    with pytest.raises(ahg.OutOfMemory):
        graph.instantiate()
    assert not graph.statistics().instantiated
    graph_exec = graph.instantiate(arena_headroom=0)  # not NotSupported: the first one failed
    await run_once(graph_exec, device)
    assert host.tolist() == [1]
    graph_exec.destroy()
    graph.destroy()
    assert counts(device) == before  # the test's stream is gone too


# -- leaks -----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_everything_destroyed_returns_every_registry_and_allocator_to_baseline(
    device: ahg.Device,
) -> None:
    device.null_stream  # noqa: B018 - created once per device; not part of the workload
    before = counts(device)
    destroyed: list[str] = []
    objects = [ahg.UserObject(destroyed.append, f"object {i}") for i in range(3)]
    out = device.malloc(64)
    host = np.zeros(2, dtype=np.int64)
    event = device.create_event()
    streams = [device.create_stream() for _ in range(2)]
    gates = GatedHost()

    child = ahg.Graph()
    inner = child.add_kernel_node(add_one, 1, 1, (2, out))
    child.add_memset_node(out + 24, 1, 8, deps=[inner])
    graph = gated_diamond(out, gates)
    leaf = graph.nodes()[-1]
    nested = graph.add_child_graph_node(child, deps=[leaf])
    record = graph.add_event_record_node(event, deps=[nested])
    graph.add_memcpy_node(host, out, deps=[record])
    graph.retain_user_object(objects[0], 2)
    graph.retain_user_object(objects[1], move=True)
    child.destroy()

    alloc_graph = ahg.Graph()
    alloc = alloc_graph.add_mem_alloc_node(64)
    fill = alloc_graph.add_kernel_node(put, 1, 1, (5, 0, alloc.params.ptr), deps=[alloc])
    alloc_graph.add_mem_free_node(alloc.params.ptr, deps=[fill])
    alloc_graph.retain_user_object(objects[2], move=True)

    first = graph.instantiate()
    copy = graph.clone()
    second = copy.instantiate(ahg.InstantiateFlags.USE_NODE_PRIORITY)
    copy.destroy()
    third = alloc_graph.instantiate()
    # first and its clone second both write ``out``: an event orders the two streams both
    # ways, so the work stays in flight on two streams without racing
    order = device.create_event()
    handles = [await first.launch(streams[0]) for _ in range(3)]
    await streams[0].record_event(order)
    await streams[1].wait_event(order)
    handles += [await second.launch(streams[1]) for _ in range(2)]
    handles.append(await third.launch(streams[1]))
    await streams[1].record_event(order)
    await streams[0].wait_event(order)
    first.set_kernel_node_params(graph.nodes()[1], add_one, 1, 1, (0, out))
    first.set_node_enabled(graph.nodes()[2], False)
    handles.append(await first.launch(streams[0]))
    first.destroy()  # with launches in flight
    second.destroy()
    third.destroy()
    graph.destroy()
    alloc_graph.destroy()
    objects[0].release()
    assert destroyed == []

    gates.open_all(6)
    for handle in handles:
        await handle
    assert sorted(destroyed) == ["object 0", "object 1", "object 2"]
    for stream in streams:
        await stream.synchronize()
        stream.destroy()
    event.destroy()
    order.destroy()
    device.free(out)
    assert counts(device) == before


@pytest.mark.asyncio
async def test_destroy_fails_every_launch_waiting_for_a_signal_set(device: ahg.Device) -> None:
    gates = GatedHost()
    out = device.malloc(16)
    diamond = gated_diamond(out, gates)
    graph_exec = diamond.instantiate(signal_sets=1, wait_for_signal_sets=True)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    waiters = [asyncio.ensure_future(graph_exec.launch(stream)) for _ in range(2)]
    await parked_on_pool(graph_exec)
    await loop_turns()  # both tasks are parked on the empty pool now
    assert graph_exec.statistics().signal_pool.waiters == 2
    graph_exec.destroy()
    for waiter in waiters:  # both fail at once, while the first launch is still held
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            await waiter
    assert not first.done()
    gates.open_all(2)
    await first
    stats = graph_exec.statistics()
    assert (stats.state, stats.launches, stats.completed) == ("closed", 1, 1)
    assert stats.signal_pool.waiters == 0
    destroy(out, stream, diamond)


def test_destroy_runs_every_raising_destructor_then_raises_the_first(device: ahg.Device) -> None:
    ran: list[str] = []

    def destructor(name: str) -> None:
        ran.append(name)
        raise RuntimeError(f"destructor {name}")

    graph = ahg.Graph()
    graph.add_empty_node()
    objects = [ahg.UserObject(destructor, name) for name in ("a", "b", "c")]
    for obj in objects:
        graph.retain_user_object(obj, 1, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()  # the executable now holds the last reference of each object
    with pytest.raises(RuntimeError, match="destructor"):
        graph_exec.destroy()
    assert sorted(ran) == ["a", "b", "c"]
    assert all(not obj.alive for obj in objects)
    assert graph_exec.statistics().state == "closed"


@pytest.mark.asyncio
async def test_a_destructor_raising_in_a_completion_is_contained_and_reported(
    device: ahg.Device,
) -> None:
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    ran: list[str] = []

    def bad(_: object) -> None:
        ran.append("bad")
        raise RuntimeError("destructor failed")

    out = device.malloc(16)
    gate = GatedHost()
    graph = ahg.Graph()
    graph.add_host_node(gate)
    first, second = ahg.UserObject(bad), ahg.UserObject(lambda _: ran.append("good"))
    graph.retain_user_object(first, move=True)
    graph.retain_user_object(second, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    stream = device.create_stream()
    done = await graph_exec.launch(stream)
    graph_exec.destroy()  # freed by the launch's completion, which runs the destructors
    behind = await stream.launch_kernel(put, 1, 1, (7, 0, out))
    gate.open()
    await done
    await behind
    await stream.synchronize()  # the destructor's error does not surface here
    assert sorted(ran) == ["bad", "good"]
    assert len(reported) == 1
    assert isinstance(reported[0]["exception"], RuntimeError)
    assert values(device, out, 1) == [7]
    assert device.statistics().in_flight == 0
    destroy(out, first, second, stream)
