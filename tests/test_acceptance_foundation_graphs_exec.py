"""Acceptance checks of the foundation, the graph layer and GraphExec, from the user's side.

Each test takes one promise of the product as a user reads it (public names only) and checks
exactly that promise. The groups:

* **Foundation**: HIP's error codes and names, devices and their limits, memory, kernel
  argument packing, bad input that changes nothing, events' timing rules, the per-stream fault
  rule, the legacy null stream, and a cancelled ``synchronize()``.
* **Graphs**: edges and their rules, cycles, queries, node destroy, child graphs as copies,
  clone, DOT in HIP's shape, handle validity, user objects and their owners, threads.
* **GraphExec**: launch ordering, empty graphs, host and event nodes, failures, the exec-side
  setters, enable/disable, update results, destroy while in use, flags, upload, statistics,
  steady-state replays and bounded argument space.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@ahg.kernel
def put_twice(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = 2 * value


@ahg.kernel
async def put_async(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@ahg.kernel
def increment(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = out[0] + 1


@ahg.kernel
def mixed(
    t: ahg.Threads, a: ahg.int8, b: ahg.float64, c: ahg.int16, out: ahg.Ptr[ahg.float64]
) -> None:
    out[0] = a + b + c


class Boom(Exception):
    pass


@ahg.kernel
def explode(t: ahg.Threads) -> None:
    raise Boom("kaboom")


GATE: asyncio.Event | None = None


@ahg.kernel
async def gated_put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    """Holds its queue until the test opens ``GATE``: a launch the test keeps in flight."""
    assert GATE is not None
    await GATE.wait()
    out[0] = value


def open_gate() -> asyncio.Event:
    global GATE
    GATE = asyncio.Event()
    return GATE


def value_at(device: ahg.Device, ptr: ahg.DevicePtr, index: int = 0) -> int:
    return int(device.view(ptr, np.int64, index + 1)[index])


# -- foundation: errors, devices, memory, kernels ------------------------------------------------


@pytest.mark.parametrize(
    ("code", "number", "hip_name"),
    [
        (ahg.ErrorCode.InvalidValue, 1, "hipErrorInvalidValue"),
        (ahg.ErrorCode.OutOfMemory, 2, "hipErrorOutOfMemory"),
        (ahg.ErrorCode.InvalidConfiguration, 9, "hipErrorInvalidConfiguration"),
        (ahg.ErrorCode.InvalidMemcpyDirection, 21, "hipErrorInvalidMemcpyDirection"),
        (ahg.ErrorCode.InvalidDevice, 101, "hipErrorInvalidDevice"),
        (ahg.ErrorCode.OperatingSystem, 304, "hipErrorOperatingSystem"),
        (ahg.ErrorCode.InvalidHandle, 400, "hipErrorInvalidHandle"),
        (ahg.ErrorCode.IllegalState, 401, "hipErrorIllegalState"),
        (ahg.ErrorCode.NotReady, 600, "hipErrorNotReady"),
        (ahg.ErrorCode.LaunchFailure, 719, "hipErrorLaunchFailure"),
        (ahg.ErrorCode.NotSupported, 801, "hipErrorNotSupported"),
        (ahg.ErrorCode.GraphExecUpdateFailure, 910, "hipErrorGraphExecUpdateFailure"),
    ],
)
def test_error_codes_have_hips_numbers_and_names_and_one_class_each(
    code: ahg.ErrorCode, number: int, hip_name: str
) -> None:
    assert int(code) == number
    assert code.hip_name == hip_name
    error_class = getattr(ahg, code.name)
    assert issubclass(error_class, ahg.HipError)
    assert error_class("x").code is code


@pytest.mark.parametrize("ordinal", [-1, 1, 7])
def test_a_device_ordinal_out_of_range_is_invalid_device(ordinal: int) -> None:
    with pytest.raises(ahg.InvalidDevice):
        ahg.get_device(ordinal)


def test_malloc_past_the_device_size_is_out_of_memory_and_takes_nothing(
    device: ahg.Device,
) -> None:
    before = device.memory_info()
    with pytest.raises(ahg.OutOfMemory):
        device.malloc(before.total + 1)
    assert device.memory_info() == before


def test_memory_comes_back_to_baseline_after_frees(device: ahg.Device) -> None:
    before = device.memory_info()
    ptrs = [device.malloc(n) for n in (1, 100, 4096, 1 << 20)]
    assert device.memory_info().free < before.free
    destroy(*ptrs)
    assert device.memory_info() == before


@pytest.mark.asyncio
async def test_kernel_arguments_of_mixed_sizes_reach_the_body(device: ahg.Device) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    await stream.launch_kernel(mixed, 1, 1, (3, 0.5, -2, out))
    await stream.synchronize()
    assert device.view(out, np.float64, 1)[0] == 1.5
    destroy(stream, out)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("grid", "block"),
    [(0, 1), (1, 0), (1, 100_000), ((2**31, 1, 1), 1)],
)
async def test_a_grid_or_block_of_zero_or_past_the_limits_is_invalid_configuration(
    device: ahg.Device, grid: object, block: object
) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    with pytest.raises(ahg.InvalidConfiguration):
        await stream.launch_kernel(put, grid, block, (1, out))
    assert stream.statistics().submitted == 0
    destroy(stream, out)


@pytest.mark.asyncio
@pytest.mark.parametrize("args", [(1,), ("x", None), (1, 5)])
async def test_wrong_kernel_arguments_are_a_type_error_and_submit_nothing(
    device: ahg.Device, args: tuple[object, ...]
) -> None:
    stream = device.create_stream()
    with pytest.raises(TypeError):
        await stream.launch_kernel(put, 1, 1, args)
    assert stream.statistics().submitted == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_copies_and_fills_outside_an_allocation_or_negative_are_refused(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(64)
    host = np.zeros(8, np.int64)
    stream = device.create_stream()
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy(buffer + 32, host)
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy(buffer, host, -1)
    with pytest.raises(ahg.InvalidValue):
        await stream.memset(buffer, 0, 65)
    with pytest.raises(ahg.InvalidValue):
        await stream.memset(buffer, 0, -1)
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy(ahg.NULL, host, 8)
    assert stream.statistics().submitted == 0
    destroy(stream, buffer)


@pytest.mark.asyncio
async def test_a_freed_pointer_is_refused_by_copies_fills_and_free(device: ahg.Device) -> None:
    host = np.zeros(2, np.int64)
    stream = device.create_stream()
    freed = device.malloc(16)
    device.free(freed)
    with pytest.raises(ahg.HipError):
        await stream.memcpy(freed, host, 8)
    with pytest.raises(ahg.HipError):
        await stream.memset(freed, 0, 8)
    with pytest.raises(ahg.InvalidValue):
        device.free(freed)
    assert stream.statistics().submitted == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_a_memcpy_direction_contradicting_its_endpoints_is_refused(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(64)
    stream = device.create_stream()
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await stream.memcpy(buffer, np.zeros(8, np.int64), 64, ahg.CopyKind.DeviceToHost)
    destroy(stream, buffer)


@pytest.mark.asyncio
async def test_destroyed_streams_and_events_are_refused(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    stream, dead_stream = device.create_stream(), device.create_stream()
    dead_event = device.create_event()
    dead_stream.destroy()
    dead_event.destroy()
    with pytest.raises(ahg.HipError):
        await dead_stream.memset(buffer, 0, 8)
    with pytest.raises(ahg.HipError):
        await stream.record_event(dead_event)
    destroy(stream, buffer)


# -- foundation: events, faults, null stream, cancellation ---------------------------------------


@pytest.mark.asyncio
async def test_elapsed_time_without_timing_or_recording_is_invalid_handle(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    untimed, timed, unrecorded = (
        device.create_event(disable_timing=True),
        device.create_event(),
        device.create_event(),
    )
    await stream.record_event(untimed)
    await stream.record_event(timed)
    await stream.synchronize()
    with pytest.raises(ahg.InvalidHandle):
        ahg.elapsed_time(untimed, timed)
    with pytest.raises(ahg.InvalidHandle):
        ahg.elapsed_time(timed, unrecorded)
    destroy(stream, untimed, timed, unrecorded)


@pytest.mark.asyncio
async def test_a_kernel_fault_is_launch_failure_on_its_op_and_stream_and_others_keep_working(
    device: ahg.Device,
) -> None:
    failing, healthy = device.create_stream(), device.create_stream()
    buffer = device.malloc(8)
    completion = await failing.launch_kernel(explode, 1, 1)
    await healthy.launch_kernel(put, 1, 1, (5, buffer))
    await healthy.synchronize()
    assert value_at(device, buffer) == 5
    with pytest.raises(ahg.LaunchFailure, match="explode"):
        await failing.synchronize()
    await failing.synchronize()  # reported once, then cleared: the stream works again
    with pytest.raises(ahg.LaunchFailure, match="explode"):
        await completion
    destroy(failing, healthy, buffer)


@pytest.mark.asyncio
async def test_the_null_stream_waits_for_blocking_streams(device: ahg.Device) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    stream = device.create_stream()
    out = np.zeros(1, np.int64)
    await stream.launch_kernel(gated_put, 1, 1, (9, buffer))
    await device.null_stream.memcpy(out, buffer, 8)
    gate.set()
    await device.synchronize()
    assert out[0] == 9
    destroy(stream, buffer)


@pytest.mark.asyncio
async def test_a_cancelled_synchronize_leaves_the_stream_usable(device: ahg.Device) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    stream = device.create_stream()
    await stream.launch_kernel(gated_put, 1, 1, (3, buffer))
    waiter = asyncio.ensure_future(stream.synchronize())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.set()
    await stream.synchronize()
    assert value_at(device, buffer) == 3
    assert stream.query()
    destroy(stream, buffer)


@pytest.mark.asyncio
async def test_a_stale_handle_stays_dead_after_its_slot_is_reused_and_pending_work_is_not_ready(
    device: ahg.Device,
) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    dead = device.create_stream()
    dead.destroy()
    stream = device.create_stream()  # may take the dead one's slot
    with pytest.raises(ahg.ContextIsDestroyed):
        await dead.memset(buffer, 0, 8)
    event = device.create_event()
    await stream.launch_kernel(gated_put, 1, 1, (1, buffer))
    await stream.record_event(event)
    assert stream.query() is False
    assert event.query() is False
    with pytest.raises(ahg.NotReady):
        ahg.elapsed_time(event, event)
    gate.set()
    await stream.synchronize()
    assert stream.query() is True
    assert event.query() is True
    destroy(stream, event, buffer)


# -- graphs: edges, cycles, queries, destroy ------------------------------------------------------


def test_edges_refuse_self_duplicate_and_missing_edges_and_change_nothing() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    with pytest.raises(ahg.InvalidValue):
        graph.add_dependencies(a, a)
    with pytest.raises(ahg.InvalidValue):
        graph.add_dependencies(a, b)
    with pytest.raises(ahg.InvalidValue):
        graph.remove_dependencies(b, a)
    with pytest.raises(ahg.InvalidValue):
        graph.add_empty_node(deps=[a, a])
    assert graph.edges() == [(a, b)]
    assert graph.nodes() == [a, b]
    destroy(graph)


def test_a_cycle_is_accepted_on_add_and_reported_by_nodes_and_instantiate() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    graph.add_dependencies(b, a)
    with pytest.raises(ahg.InvalidValue):
        graph.nodes()
    with pytest.raises(ahg.InvalidValue):
        graph.instantiate()
    graph.remove_dependencies(b, a)
    assert graph.nodes() == [a, b]
    destroy(graph)


def test_queries_on_a_diamond() -> None:
    graph = ahg.Graph()
    top = graph.add_empty_node()
    left = graph.add_empty_node(deps=[top])
    right = graph.add_empty_node(deps=[top])
    bottom = graph.add_empty_node(deps=[left, right])
    assert graph.nodes() == [top, left, right, bottom]
    assert graph.root_nodes() == [top]
    assert set(graph.edges()) == {(top, left), (top, right), (left, bottom), (right, bottom)}
    assert top.dependents() == [left, right]
    assert bottom.dependencies() == [left, right]
    assert all(node.type is ahg.NodeType.Empty for node in graph.nodes())
    destroy(graph)


def test_destroying_a_node_removes_its_edges_and_its_handle() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    c = graph.add_empty_node(deps=[b])
    b.destroy()
    assert graph.edges() == []
    assert a.dependents() == []
    assert c.dependencies() == []
    with pytest.raises(ahg.InvalidValue):
        b.dependencies()
    destroy(graph)


def test_memory_nodes_cannot_be_destroyed() -> None:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    free = graph.add_mem_free_node(alloc.get_mem_alloc_params().ptr, deps=[alloc])
    with pytest.raises(ahg.NotSupported):
        alloc.destroy()
    with pytest.raises(ahg.NotSupported):
        free.destroy()
    assert len(graph.nodes()) == 2
    destroy(graph)


def test_a_child_graph_node_embeds_a_copy_taken_when_added_even_of_its_own_graph(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(8)
    child = ahg.Graph()
    child.add_kernel_node(put, 1, 1, (4, buffer))
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    child.add_empty_node()
    assert len(node.get_child_graph().nodes()) == 1
    itself = parent.add_child_graph_node(parent)
    assert itself.type is ahg.NodeType.Graph
    assert len(itself.get_child_graph().nodes()) == 1
    destroy(parent, child, buffer)


def test_bad_node_parameters_are_refused_and_add_nothing(device: ahg.Device) -> None:
    buffer = device.malloc(64)
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        graph.add_memset_node(buffer, 0, 4, element_size=3)
    with pytest.raises(ahg.InvalidValue):
        graph.add_memset_node(buffer, 0, 65)
    with pytest.raises(ahg.InvalidValue):
        graph.add_memcpy_node(buffer + 8, np.zeros(8, np.int64), 64)
    with pytest.raises(ahg.InvalidValue):
        graph.add_host_node(None)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidConfiguration):
        graph.add_kernel_node(put, 0, 1, (1, buffer))
    assert graph.nodes() == []
    destroy(graph, buffer)


def test_node_parameters_are_settable_with_the_same_validation(device: ahg.Device) -> None:
    buffer = device.malloc(64)
    graph = ahg.Graph()
    kernel_node = graph.add_kernel_node(put, 1, 1, (1, buffer))
    copy_node = graph.add_memcpy_node(buffer, np.zeros(8, np.int64), 64)
    with pytest.raises(ahg.InvalidConfiguration):
        kernel_node.set_kernel_params(put, 0, 1, (1, buffer))
    with pytest.raises(ahg.InvalidValue):  # a memcpy node's direction is fixed at creation
        copy_node.set_memcpy_params(np.zeros(8, np.int64), buffer, 64)
    kernel_node.set_kernel_params(put, 2, 1, (7, buffer))
    params = kernel_node.get_kernel_params()
    assert params.grid.x == 2
    assert params.args[0] == 7
    destroy(graph, buffer)


# -- graphs: clone, DOT, validity -----------------------------------------------------------------


def test_clone_keeps_node_identity_but_not_nodes_added_afterwards() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    graph.add_empty_node(deps=[a])
    clone = graph.clone()
    copy = clone.find_in_clone(a)
    assert copy is not a
    assert copy.type is ahg.NodeType.Empty
    assert len(clone.nodes()) == 2
    assert len(clone.edges()) == 1
    late = graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        clone.find_in_clone(late)
    destroy(clone, graph)


def test_dot_has_hips_shape_a_cluster_per_graph_and_one_line_per_node_and_edge(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(64)
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    kernel_node = graph.add_kernel_node(put, 1, 1, (1, buffer))
    copy_node = graph.add_memcpy_node(buffer, np.zeros(8, np.int64), 64, deps=[kernel_node])
    set_node = graph.add_memset_node(buffer, 7, 16, deps=[copy_node])
    graph.add_child_graph_node(child, deps=[set_node])
    dot = graph.to_dot()
    lines = dot.splitlines()
    assert lines[0] == "digraph dot {"
    assert dot.count("subgraph cluster_") == 2  # the graph and its child
    assert sum("->" in line for line in lines) == 3
    node_lines = [line for line in lines if line.startswith('"graph_') and "[style=" in line]
    assert len(node_lines) == 5  # four nodes and the child's one
    assert 'shape="octagon"' in dot
    assert 'shape="trapezium"' in dot
    assert 'shape="invtrapezium"' in dot
    assert "MEMCPY\\n(HtoD" in dot
    assert "MEMSET\\n(7,16)" in dot
    assert all("_node_" in line for line in node_lines)
    assert 'shape="record"' in graph.to_dot(ahg.DotFlags.Verbose)
    destroy(graph, child, buffer)


def test_debug_dot_print_writes_the_dot_and_an_unopenable_path_is_operating_system(
    tmp_path: Path,
) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    path = tmp_path / "graph.dot"
    graph.debug_dot_print(path, 0)
    assert path.read_text() == graph.to_dot(0)
    with pytest.raises(ahg.OperatingSystem):
        graph.debug_dot_print(tmp_path / "missing" / "graph.dot", 0)
    destroy(graph)


def test_a_destroyed_graph_refuses_calls_invalidates_its_nodes_and_a_second_destroy() -> None:
    graph = ahg.Graph()
    node = graph.add_empty_node()
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.nodes()
    with pytest.raises(ahg.InvalidValue):
        graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        node.dependents()
    with pytest.raises(ahg.IllegalState):
        graph.destroy()


# -- graphs: user objects and threads ------------------------------------------------------------


def test_user_object_over_release_is_a_no_op_and_the_destructor_runs_once_with_data() -> None:
    seen: list[object] = []
    obj = ahg.UserObject(seen.append, data="payload", initial_refcount=2)
    obj.retain(3)
    assert obj.refcount == 5
    obj.release(6)  # more than it holds: nothing happens, as in HIP
    assert obj.refcount == 5
    assert seen == []
    obj.release(5)
    assert seen == ["payload"]
    obj.release(1)
    assert seen == ["payload"]


@pytest.mark.parametrize("count", [0, -1])
def test_user_object_counts_must_be_positive(count: int) -> None:
    with pytest.raises(ahg.InvalidValue):
        ahg.UserObject(lambda data: None, initial_refcount=count)
    obj = ahg.UserObject(lambda data: None)
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        obj.retain(count)
    with pytest.raises(ahg.InvalidValue):
        graph.retain_user_object(obj, count)
    assert obj.refcount == 1
    destroy(graph, obj)


def test_graph_ownership_move_clone_non_owner_release_and_destroy() -> None:
    seen: list[object] = []
    obj = ahg.UserObject(seen.append, data=1)
    graph, stranger = ahg.Graph(), ahg.Graph()
    graph.retain_user_object(obj, 1, move=True)  # takes over the caller's reference
    assert obj.refcount == 1
    assert graph in obj.owners
    stranger.release_user_object(obj, 1)  # it owns none: a no-op
    assert obj.refcount == 1
    clone = graph.clone()  # one reference per owned object
    assert obj.refcount == 2
    assert clone in obj.owners
    graph.destroy()
    assert obj.refcount == 1
    assert seen == []
    assert graph not in obj.owners
    clone.destroy()
    assert seen == [1]
    destroy(stranger)


def test_concurrent_retain_release_and_building_from_threads_keep_exact_counts() -> None:
    obj = ahg.UserObject(lambda data: None)
    graph = ahg.Graph()
    threads, rounds = 8, 100

    def work() -> None:
        for _ in range(rounds):
            obj.retain(2)
            graph.retain_user_object(obj, 1)
            graph.add_empty_node()
            graph.release_user_object(obj, 1)
            obj.release(2)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert obj.refcount == 1
    assert len(graph.nodes()) == threads * rounds
    destroy(graph, obj)


# -- GraphExec: launch ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_two_launches_of_one_exec_on_two_streams_are_ordered(device: ahg.Device) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    first_stream, second_stream = device.create_stream(), device.create_stream()
    graph = ahg.Graph()
    held = graph.add_kernel_node(gated_put, 1, 1, (10, buffer))
    graph.add_kernel_node(increment, 1, 1, (buffer,), deps=[held])
    graph_exec = graph.instantiate()
    first = await graph_exec.launch(first_stream)
    second = await graph_exec.launch(second_stream)
    gate.set()
    await second
    assert value_at(device, buffer) == 11  # the second ran after the whole first
    await first
    destroy(graph_exec, graph, first_stream, second_stream, buffer)


@pytest.mark.asyncio
async def test_stream_work_after_a_launch_sees_its_results(device: ahg.Device) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(gated_put, 1, 1, (42, buffer))
    graph_exec = graph.instantiate()
    out = np.zeros(1, np.int64)
    await graph_exec.launch(stream)
    await stream.memcpy(out, buffer, 8)
    gate.set()
    await stream.synchronize()
    assert out[0] == 42
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_an_empty_graph_launches_as_a_no_op_and_counts_as_a_launch(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph_exec = graph.instantiate()
    for _ in range(3):
        await (await graph_exec.launch(stream))
    graph_exec.launch_nowait(stream)
    stats = graph_exec.statistics()
    assert (stats.launches, stats.in_flight, stats.completed) == (4, 0, 4)
    assert stream.statistics().submitted == 0
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_host_and_event_nodes_run_in_the_graph(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    stream = device.create_stream()
    start, stop = device.create_event(), device.create_event()
    ran: list[int] = []
    graph = ahg.Graph()
    record = graph.add_event_record_node(start)
    host = graph.add_host_node(ran.append, (1,), deps=[record])
    kernel_node = graph.add_kernel_node(put, 1, 1, (3, buffer), deps=[host])
    graph.add_event_record_node(stop, deps=[kernel_node])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert ran == [1]
    assert value_at(device, buffer) == 3
    assert start.query()
    assert stop.query()
    assert ahg.elapsed_time(start, stop) > 0
    destroy(graph_exec, graph, stream, start, stop, buffer)


@pytest.mark.asyncio
async def test_a_failing_kernel_fails_the_handle_and_the_stream_and_returns_the_set(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(explode, 1, 1)
    graph_exec = graph.instantiate()
    handle = await graph_exec.launch(stream)
    with pytest.raises(ahg.LaunchFailure, match="explode"):
        await handle
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    pool = graph_exec.statistics().signal_pool
    assert pool.in_use == 0
    assert pool.free == pool.sets
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_replays_allocate_no_signal_set_no_chunk_and_no_memory(device: ahg.Device) -> None:
    buffer = device.malloc(32)
    stream = device.create_stream()
    graph = ahg.Graph()
    top = graph.add_kernel_node(put, 1, 1, (1, buffer))
    left = graph.add_kernel_node(put, 1, 1, (2, buffer + 8), deps=[top])
    right = graph.add_kernel_node(put, 1, 1, (3, buffer + 16), deps=[top])
    graph.add_empty_node(deps=[left, right])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    before, memory = graph_exec.statistics(), device.memory_info()
    for _ in range(1_000):
        await graph_exec.launch(stream)
    await stream.synchronize()
    after = graph_exec.statistics()
    assert after.signal_pool.sets == before.signal_pool.sets
    assert after.signal_pool.misses == 0
    assert after.arena.chunks == before.arena.chunks
    assert device.memory_info() == memory
    assert after.launches == before.launches + 1_000
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_a_cancelled_wait_for_a_signal_set_leaves_the_pool_consistent(
    device: ahg.Device,
) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(gated_put, 1, 1, (1, buffer))
    graph_exec = graph.instantiate(signal_sets=1)
    held = await graph_exec.launch(stream)
    parked = asyncio.ensure_future(graph_exec.launch(stream))
    for _ in range(10):  # a few loop turns: the task parks for a set
        if graph_exec.statistics().signal_pool.waiters:
            break
        await asyncio.sleep(0)
    assert graph_exec.statistics().signal_pool.waiters == 1
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked
    assert graph_exec.statistics().signal_pool.waiters == 0
    gate.set()
    await held
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use) == (1, 1, 0)
    assert graph_exec.statistics().launches == 1
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_an_event_wait_node_waits_for_a_record_on_another_stream(
    device: ahg.Device,
) -> None:
    gate = open_gate()
    buffer = device.malloc(16)
    producer, consumer = device.create_stream(), device.create_stream()
    event = device.create_event()
    await producer.launch_kernel(gated_put, 1, 1, (5, buffer))
    await producer.record_event(event)
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(event)
    graph.add_memcpy_node(buffer + 8, buffer, 8, deps=[wait])
    graph_exec = graph.instantiate()
    handle = await graph_exec.launch(consumer)
    gate.set()
    await handle
    assert value_at(device, buffer, 1) == 5
    destroy(graph_exec, graph, producer, consumer, event, buffer)


@pytest.mark.asyncio
async def test_stream_work_after_a_fork_waits_for_every_leaf(device: ahg.Device) -> None:
    gate = open_gate()
    buffer = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    root = graph.add_empty_node()
    graph.add_kernel_node(gated_put, 1, 1, (20, buffer), deps=[root])
    graph.add_kernel_node(put, 1, 1, (30, buffer + 8), deps=[root])
    graph_exec = graph.instantiate()
    assert graph_exec.statistics().strands == 2
    out = np.zeros(2, np.int64)
    await graph_exec.launch(stream)
    await stream.memcpy(out, buffer, 16)
    gate.set()
    await stream.synchronize()
    assert list(out) == [20, 30]
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_an_alloc_nodes_pointer_is_usable_by_later_nodes_on_every_launch(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    out = np.zeros(1, np.int64)
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(8)
    ptr = alloc.get_mem_alloc_params().ptr
    write = graph.add_kernel_node(put, 1, 1, (77, ptr), deps=[alloc])
    read = graph.add_memcpy_node(out, ptr, 8, deps=[write])
    graph.add_mem_free_node(ptr, deps=[read])
    graph_exec = graph.instantiate()
    for _ in range(2):
        out[0] = 0
        await (await graph_exec.launch(stream))
        assert out[0] == 77
    destroy(graph_exec, graph, stream)
    await device.synchronize()
    device.graph_mem_trim()


# -- GraphExec: setters, enable/disable, update ---------------------------------------------------


@pytest.mark.asyncio
async def test_exec_setters_change_only_the_execs_copy(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (5, buffer))
    graph_exec = graph.instantiate()
    graph_exec.set_kernel_node_params(node, put, 1, 1, (7, buffer))
    assert node.get_kernel_params().args[0] == 5
    await (await graph_exec.launch(stream))
    assert value_at(device, buffer) == 7
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="the host reads what a queued, gated launch writes: the environment's check reports it",
)
@pytest.mark.asyncio
async def test_a_launch_in_flight_keeps_its_arguments_and_the_next_sees_new_ones(
    device: ahg.Device,
) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(gated_put, 1, 1, (1, buffer))
    graph_exec = graph.instantiate()
    first = await graph_exec.launch(stream)
    graph_exec.set_kernel_node_params(node, gated_put, 1, 1, (2, buffer))
    second = await graph_exec.launch(stream)
    gate.set()
    await first
    assert value_at(device, buffer) == 1
    await second
    assert value_at(device, buffer) == 2
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_enable_disable_only_kernel_memcpy_and_memset_nodes(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    device.view(buffer, np.int64, 1)[0] = 0
    stream = device.create_stream()
    graph = ahg.Graph()
    kernel_node = graph.add_kernel_node(put, 1, 1, (5, buffer))
    host = graph.add_host_node(lambda: None, deps=[kernel_node])
    empty = graph.add_empty_node(deps=[host])
    graph_exec = graph.instantiate()
    for other in (host, empty):
        with pytest.raises(ahg.InvalidValue):
            graph_exec.set_node_enabled(other, False)
        with pytest.raises(ahg.InvalidValue):
            graph_exec.node_enabled(other)
    graph_exec.set_node_enabled(kernel_node, False)
    assert graph_exec.node_enabled(kernel_node) is False
    await (await graph_exec.launch(stream))
    assert value_at(device, buffer) == 0
    graph_exec.set_node_enabled(kernel_node, True)
    await (await graph_exec.launch(stream))
    assert value_at(device, buffer) == 5
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_after_the_source_graph_is_destroyed_the_exec_runs_but_refuses_its_nodes(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (6, buffer))
    graph_exec = graph.instantiate()
    graph.destroy()
    await (await graph_exec.launch(stream))
    assert value_at(device, buffer) == 6
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_params(node, put, 1, 1, (9, buffer))
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_enabled(node, False)
    destroy(graph_exec, stream, buffer)


def test_the_exec_refuses_a_node_of_another_graph(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    graph, other = ahg.Graph(), ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (1, buffer))
    stranger = other.add_kernel_node(put, 1, 1, (1, buffer))
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_params(stranger, put, 1, 1, (2, buffer))
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_enabled(stranger, True)
    destroy(graph_exec, graph, other, buffer)


def _one_kernel_graph(kernel: ahg.Kernel, value: int, buffer: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_kernel_node(kernel, 1, 1, (value, buffer))
    return graph


def test_update_reports_each_kind_with_the_node(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    graph = _one_kernel_graph(put, 1, buffer)
    graph_exec = graph.instantiate()
    grown = _one_kernel_graph(put, 1, buffer)
    grown.add_empty_node()
    retyped = ahg.Graph()
    retyped_node = retyped.add_empty_node()
    async_body = _one_kernel_graph(put_async, 1, buffer)
    expected = [
        (grown, ahg.UpdateResultKind.TopologyChanged),
        (retyped, ahg.UpdateResultKind.NodeTypeChanged),
        (async_body, ahg.UpdateResultKind.UnsupportedFunctionChange),
    ]
    for new, kind in expected:
        with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
            graph_exec.update(new)
        assert caught.value.result.kind is kind
    with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
        graph_exec.update(retyped)
    assert caught.value.result.node is retyped_node
    assert caught.value.code is ahg.ErrorCode.GraphExecUpdateFailure
    destroy(graph_exec, graph, grown, retyped, async_body, buffer)


def test_update_reports_parameters_changed_and_memory_nodes_not_supported(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(8)
    host = np.zeros(1, np.int64)
    copy_graph = ahg.Graph()
    copy_graph.add_memcpy_node(buffer, host, 8)
    copy_exec = copy_graph.instantiate()
    reversed_copy = ahg.Graph()
    reversed_copy.add_memcpy_node(host, buffer, 8)
    with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
        copy_exec.update(reversed_copy)
    assert caught.value.result.kind is ahg.UpdateResultKind.ParametersChanged
    memory_graphs = []
    for nbytes in (64, 128):
        graph = ahg.Graph()
        alloc = graph.add_mem_alloc_node(nbytes)
        graph.add_mem_free_node(alloc.get_mem_alloc_params().ptr, deps=[alloc])
        memory_graphs.append(graph)
    memory_exec = memory_graphs[0].instantiate()
    with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
        memory_exec.update(memory_graphs[1])
    assert caught.value.result.kind is ahg.UpdateResultKind.NotSupported
    destroy(copy_exec, memory_exec, copy_graph, reversed_copy, *memory_graphs, buffer)


@pytest.mark.asyncio
async def test_a_successful_update_changes_what_the_next_launch_runs(device: ahg.Device) -> None:
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = _one_kernel_graph(put, 1, buffer)
    graph_exec = graph.instantiate()
    new = _one_kernel_graph(put_twice, 5, buffer)
    assert graph_exec.update(new).kind is ahg.UpdateResultKind.Success
    await (await graph_exec.launch(stream))
    assert value_at(device, buffer) == 10
    destroy(graph_exec, graph, new, stream, buffer)


@pytest.mark.asyncio
async def test_argument_space_stays_bounded_over_many_updates_in_flight(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (0, buffer))
    graph_exec = graph.instantiate()
    for value in range(2_000):
        graph_exec.set_kernel_node_params(node, put, 1, 1, (value, buffer))
        await graph_exec.launch(stream)
        if value % 4 == 0:
            await stream.synchronize()
    await stream.synchronize()
    arena = graph_exec.statistics().arena
    assert arena.chunks == 1
    assert arena.live_slots + arena.free_slots <= 8
    assert value_at(device, buffer) == 1_999
    destroy(graph_exec, graph, stream, buffer)


# -- GraphExec: destroy while in use, flags, upload ----------------------------------------------


@pytest.mark.asyncio
async def test_destroy_in_flight_refuses_calls_at_once_and_frees_after_the_last_launch(
    device: ahg.Device,
) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    first_stream, second_stream = device.create_stream(), device.create_stream()
    seen: list[object] = []
    obj = ahg.UserObject(seen.append, data="gone")
    graph = ahg.Graph()
    node = graph.add_kernel_node(gated_put, 1, 1, (4, buffer))
    graph.retain_user_object(obj, 1, move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    assert obj.refcount == 1  # the executable's own reference
    baseline = device.memory_info()
    launches = [await graph_exec.launch(s) for s in (first_stream, second_stream)]
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue):
        await graph_exec.launch(first_stream)
    with pytest.raises(ahg.InvalidValue):
        await graph_exec.upload(first_stream)
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_params(node, gated_put, 1, 1, (1, buffer))
    assert seen == []
    assert graph_exec.statistics().in_flight == 2
    assert device.memory_info() == baseline
    gate.set()
    for launch in launches:
        await launch
    assert value_at(device, buffer) == 4
    assert seen == ["gone"]
    assert graph_exec.statistics().state == "closed"
    assert device.memory_info().free > baseline.free
    destroy(first_stream, second_stream, buffer)


@pytest.mark.parametrize("flags", [0, 1, 2, 8])
def test_hips_instantiate_flags_are_accepted_one_at_a_time(flags: int) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate(flags)
    destroy(graph_exec, graph)


@pytest.mark.parametrize("flags", [3, 16, -1])
def test_other_instantiate_flag_values_are_invalid_value(flags: int) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        graph.instantiate(flags)
    graph.instantiate().destroy()  # the refused instantiate left the graph instantiable
    destroy(graph)


@pytest.mark.asyncio
async def test_auto_free_on_launch_allows_relaunching_unfreed_graph_memory(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    plain, auto = ahg.Graph(), ahg.Graph()
    plain.add_mem_alloc_node(64)
    auto.add_mem_alloc_node(64)
    plain_exec = plain.instantiate()
    auto_exec = auto.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH)
    await (await plain_exec.launch(stream))
    with pytest.raises(ahg.InvalidValue):
        await plain_exec.launch(stream)
    await (await auto_exec.launch(stream))
    await (await auto_exec.launch(stream))
    assert auto_exec.statistics().launches == 2
    destroy(plain_exec, auto_exec, plain, auto, stream)
    await device.synchronize()
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_upload_validates_the_stream(device: ahg.Device) -> None:
    stream, dead = device.create_stream(), device.create_stream()
    dead.destroy()
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    await graph_exec.upload(stream)
    with pytest.raises(ahg.ContextIsDestroyed):
        await graph_exec.upload(dead)
    assert graph_exec.statistics().launches == 0
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_an_exhausted_pool_grows_with_a_counted_miss_in_grow_mode(
    device: ahg.Device,
) -> None:
    gate = open_gate()
    buffer = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(gated_put, 1, 1, (1, buffer))
    graph_exec = graph.instantiate(signal_sets=1, signal_set_policy="grow")
    launches = [await graph_exec.launch(stream) for _ in range(2)]
    pool = graph_exec.statistics().signal_pool
    assert (pool.prepopulated, pool.sets, pool.misses, pool.in_use) == (1, 2, 1, 2)
    gate.set()
    for launch in launches:
        await launch
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use) == (2, 2, 0)
    destroy(graph_exec, graph, stream, buffer)


@pytest.mark.asyncio
async def test_a_kernel_fault_surfaces_at_the_devices_synchronize(device: ahg.Device) -> None:
    stream = device.create_stream()
    await stream.launch_kernel(explode, 1, 1)
    with pytest.raises(ahg.LaunchFailure, match="explode"):
        await device.synchronize()
    await stream.synchronize()  # reported once
    destroy(stream)
