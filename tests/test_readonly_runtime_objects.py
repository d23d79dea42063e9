"""What the runtime objects a user can reach are made of, and where they stand, is read-only.

A device hands out its engine, hardware queues, memory and clock; a stream its queue and tail
signal; an event its signal; an executable its signal-set pool, argument arena and plan. Their
attributes were plain ones the runtime acts on, and a user could assign them: a signal's value
set to 0 made a pending record say done and a ``synchronize()`` return while its work still
ran; its time moved the device's clock and ``elapsed_time`` by days. Each is now a read-only
property over a private attribute only the runtime writes; the runtime reads the private names,
so no property call lands on a hot path. (``test_readonly_handles.py`` does the same for the
handles themselves.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel
from cleanup import destroy

SIGNAL_ATTRIBUTES = "value time error"


@ahg.kernel
def increment(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def _assert_read_only(thing: Any, names: str) -> None:
    for name in names.split():
        value = getattr(thing, name)
        with pytest.raises(AttributeError):
            setattr(thing, name, value)  # even the value it has: nothing but the runtime sets it
        with pytest.raises(AttributeError):
            delattr(thing, name)
        after = getattr(thing, name)
        assert after is value or (type(after) is list and after == value)  # a list: a copy


@pytest.mark.asyncio
async def test_a_signal_s_value_time_and_error_can_be_read_and_not_assigned(
    device: ahg.Device,
) -> None:
    stream, event = device.create_stream(), device.create_event()
    await stream.record_event(event)
    await event.synchronize()
    for signal in (event.signal, stream.tail):
        _assert_read_only(signal, SIGNAL_ATTRIBUTES)
    destroy(stream, event)


@pytest.mark.asyncio
async def test_a_pending_record_stays_pending_whatever_is_assigned_to_its_signal(
    device: ahg.Device,
) -> None:
    # The signal's value set to 0, the event's query() and the stream's said done while the
    # kernel before the record was still held, and the stream's synchronize() returned at once.
    stream, event, held = device.create_stream(), device.create_event(), HeldKernel()
    done = await held.launch(stream)
    await stream.record_event(event)
    for signal in (event.signal, stream.tail):
        assert signal is not None
        with pytest.raises(AttributeError):
            signal.value = 0  # type: ignore[misc]
    assert not event.query()
    assert not stream.query()
    held.release()
    await stream.synchronize()
    assert done.done()
    assert event.query()
    destroy(stream, event)


@pytest.mark.asyncio
async def test_a_signal_s_time_stays_the_device_s(device: ahg.Device) -> None:
    # The end event's signal time set to 10**15 ns, elapsed_time said a billion ms, and the
    # next synchronize moved the device's clock eleven days ahead.
    stream, start, end = device.create_stream(), device.create_event(), device.create_event()
    await stream.record_event(start)
    await stream.record_event(end)
    await stream.synchronize()
    assert end.signal is not None
    with pytest.raises(AttributeError):
        end.signal.time = 10**15  # type: ignore[misc]
    await end.synchronize()
    assert 0 <= ahg.elapsed_time(start, end) < 1
    assert device.clock.now < 10**15
    destroy(stream, start, end)


QUEUE_ATTRIBUTES = "engine device index capacity busy_until submitted completed"


def test_a_hardware_queue_s_attributes_can_be_read_and_not_assigned(device: ahg.Device) -> None:
    stream = device.create_stream()
    for queue in (*device.queues, stream.queue):
        _assert_read_only(queue, QUEUE_ATTRIBUTES)
    destroy(stream)


@pytest.mark.asyncio
async def test_a_stream_s_queue_keeps_its_ring_and_its_device() -> None:
    # The queue's capacity set to 0, every enqueue on its streams waited for room for good;
    # its device set to device 1, a kernel of device 0 failed with InvalidDevicePointer (it
    # ran against device 1's memory) and left device 0's memory unchanged.
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    stream, x = device0.create_stream(), device0.malloc(4)
    for name, value in (("capacity", 0), ("device", device1)):
        with pytest.raises(AttributeError):
            setattr(stream.queue, name, value)
    await stream.memset(x, 0, 4)
    await stream.launch_kernel(increment, 1, 1, (x,))
    await stream.synchronize()
    assert device0.view(x, "int32", 1)[0] == 1
    destroy(stream, x)


@pytest.mark.asyncio
async def test_a_queue_s_busy_time_moves_only_with_its_packets(device: ahg.Device) -> None:
    # Its busy_until set to 10**15 ns, the next memset started there: elapsed_time across it
    # stayed small but the device's clock jumped eleven days ahead.
    stream = device.create_stream()
    x = device.malloc(4)
    with pytest.raises(AttributeError):
        stream.queue.busy_until = 10**15  # type: ignore[misc]
    await stream.memset(x, 0, 4)
    await stream.synchronize()
    assert device.clock.now < 10**15
    assert stream.queue.statistics().submitted == stream.queue.submitted == 1
    destroy(stream, x)


ENGINE_ATTRIBUTES = "device clock queues lock loop in_flight retired abandoned owner_number"


def test_an_engine_s_attributes_can_be_read_and_not_assigned(device: ahg.Device) -> None:
    _assert_read_only(device.engine, ENGINE_ATTRIBUTES)
    with pytest.raises(AttributeError):
        device.engine.ready = ()  # type: ignore[misc]


@pytest.mark.asyncio
async def test_a_device_keeps_taking_work_and_waits_for_it_whatever_is_assigned_to_its_engine(
    device: ahg.Device,
) -> None:
    # retired set to True, the device refused every call with InvalidDevice ("replaced by
    # configure_devices"); in_flight set to 0 while a kernel was held, device.synchronize()
    # returned at once and the count went to -1 when the kernel ended; queues set to () made
    # create_stream fail with ZeroDivisionError.
    engine, held = device.engine, HeldKernel()
    for name, value in (("retired", True), ("in_flight", 0), ("queues", ())):
        with pytest.raises(AttributeError):
            setattr(engine, name, value)
    stream = device.create_stream()
    done = await held.launch(stream)
    synchronized = asyncio.ensure_future(device.synchronize())
    await held.started.wait()
    assert engine.in_flight == 1
    assert not synchronized.done()
    held.release()
    await synchronized
    assert done.done()
    assert engine.in_flight == device.statistics().in_flight == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_the_engine_s_ready_queues_and_loop_are_its_own(device: ahg.Device) -> None:
    # Its ready table cleared, or its loop set to None, a memset already submitted never ran:
    # the stream's synchronize() hung.
    stream, x = device.create_stream(), device.malloc(4)
    await stream.memset(x, 3, 4)
    ready = device.engine.ready
    assert ready == (stream.queue,)
    assert not hasattr(ready, "clear")  # a copy: nothing the engine runs from
    with pytest.raises(AttributeError):
        device.engine.loop = None  # type: ignore[misc]
    await stream.synchronize()
    assert device.view(x, "uint8", 4).tolist() == [3, 3, 3, 3]
    destroy(stream, x)


MEMORY_ATTRIBUTES = "ordinal total_bytes address_base address_end graph_pool frees mapped_by"
GRAPH_POOL_ATTRIBUTES = "used cached used_high reserved_high commits reused_bytes"


def test_a_device_memory_s_attributes_can_be_read_and_not_assigned(device: ahg.Device) -> None:
    _assert_read_only(device.memory, MEMORY_ATTRIBUTES)
    _assert_read_only(device.memory.graph_pool, GRAPH_POOL_ATTRIBUTES)
    with pytest.raises(AttributeError):
        device.memory.peers = {}  # type: ignore[misc]


def test_a_device_s_memory_keeps_its_size_and_its_device() -> None:
    # total_bytes set to 0, every malloc failed with OutOfMemory; ordinal set to 1, device 0's
    # malloc handed out a pointer naming device 1, which device 0's free then refused ("not a
    # live allocation of device 1"): the memory leaked.
    ahg.configure_devices(2)
    device0 = ahg.get_device(0)
    for name, value in (("total_bytes", 0), ("ordinal", 1)):
        with pytest.raises(AttributeError):
            setattr(device0.memory, name, value)
    x = device0.malloc(4)
    assert x.device == 0
    assert device0.memory_info().total == device0.properties.memory_bytes
    device0.free(x)
    assert device0.memory.statistics().allocations == 0


@pytest.mark.asyncio
async def test_peer_access_is_changed_only_by_enable_and_disable_peer_access() -> None:
    # The peers table cleared, can_access_peer still said True and a kernel of device 0 on
    # device 1's memory failed with InvalidDevicePointer ("device 0 has no peer access").
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    device0.enable_peer_access(device1)
    peers = device0.memory.peers
    assert list(peers) == [1]
    with pytest.raises(TypeError):
        del peers[1]  # type: ignore[attr-defined]
    y, stream = device1.malloc(4), device0.create_stream()
    await device1.memset(y, 0, 4)
    await stream.launch_kernel(increment, 1, 1, (y,))
    await stream.synchronize()
    assert device1.view(y, "int32", 1)[0] == 1
    device0.disable_peer_access(device1)
    assert dict(device0.memory.peers) == {}
    destroy(stream, y)


def test_the_graph_pool_s_counters_change_only_with_graph_memory(device: ahg.Device) -> None:
    # cached set to 10**6, graph_mem_trim() gave the device back a million bytes no graph had
    # returned: memory_info() said a million bytes more were free than the device has, and
    # bytes_in_use went to -1000000. used set to 5, UsedMemCurrent said 5.
    pool = device.memory.graph_pool
    for name in ("cached", "used"):
        with pytest.raises(AttributeError):
            setattr(pool, name, 10**6)
    assert device.graph_mem_trim() == 0
    assert device.memory_info().free == device.memory_info().total
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    device.set_graph_mem_attribute(ahg.GraphMemAttribute.UsedMemHigh, 0)  # HIP's setter stays


POOL_ATTRIBUTES = "count extra prepopulated wait_when_empty closed"
ARENA_ATTRIBUTES = "device chunk_bytes strict closed writes"
PLAN_ATTRIBUTES = "segments strands num_signals start_signal final_waits levels"


@ahg.kernel
def put(t: ahg.Threads, x: ahg.Ptr[ahg.int32], value: ahg.int32) -> None:
    x[0] = value


def test_an_executable_s_pool_arena_and_plan_can_be_read_and_not_assigned(
    device: ahg.Device,
) -> None:
    x, graph = device.malloc(4), ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (x, 1))
    graph_exec = graph.instantiate()
    _assert_read_only(graph_exec.pool, POOL_ATTRIBUTES)
    _assert_read_only(graph_exec.arena, ARENA_ATTRIBUTES)
    _assert_read_only(graph_exec.plan, PLAN_ATTRIBUTES)
    destroy(graph_exec, graph, x)


@pytest.mark.asyncio
async def test_a_kernel_node_s_new_arguments_reach_the_next_launch_whatever_is_assigned(
    device: ahg.Device,
) -> None:
    # The arena's write count set back to its value before set_kernel_node_params, the next
    # launch ran the kernel with its old arguments (x stayed 1): the dispatch op decodes its
    # arguments again only when the count moves.
    stream, x, graph = device.create_stream(), device.malloc(4), ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (x, 1))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    writes = graph_exec.arena.writes
    graph_exec.set_kernel_node_params(node, put, 1, 1, (x, 2))
    with pytest.raises(AttributeError):
        graph_exec.arena.writes = writes  # type: ignore[misc]
    await (await graph_exec.launch(stream))
    assert device.view(x, "int32", 1)[0] == 2
    destroy(graph_exec, graph, stream, x)


@pytest.mark.asyncio
async def test_a_live_executable_launches_and_its_destroy_frees_its_arguments(
    device: ahg.Device,
) -> None:
    # The pool's closed set to True, every launch failed with InvalidValue ("the signal-set
    # pool is closed"); the arena's, destroy() left its argument chunk allocated for good.
    # The plan's segments set to None, statistics() raised TypeError.
    stream, x, graph = device.create_stream(), device.malloc(4), ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (x, 3))
    allocations = device.memory.statistics().allocations
    graph_exec = graph.instantiate()
    for part in (graph_exec.pool, graph_exec.arena):
        with pytest.raises(AttributeError):
            part.closed = True  # type: ignore[misc]
    with pytest.raises(AttributeError):
        graph_exec.plan.segments = None  # type: ignore[misc]
    await (await graph_exec.launch(stream))
    assert device.view(x, "int32", 1)[0] == 3
    assert graph_exec.statistics().launches == 1
    graph_exec.destroy()
    assert device.memory.statistics().allocations == allocations
    destroy(graph, stream, x)


@pytest.mark.asyncio
async def test_a_capture_block_ends_its_own_capture_whatever_is_assigned(
    device: ahg.Device,
) -> None:
    # The scope's stream set to another stream inside the block, the exit found no capture of
    # its own there: it aborted the capture, destroyed its graph and raised IllegalState
    # ("ended inside its block").
    stream, other, x = device.create_stream(), device.create_stream(), device.malloc(4)
    async with stream.capture() as scope:
        await stream.memset(x, 0, 4)
        with pytest.raises(AttributeError):
            scope.stream = other  # type: ignore[misc]
        with pytest.raises(AttributeError):
            scope.graph = None  # type: ignore[misc]
    assert scope.stream is stream
    assert scope.graph is not None
    assert [node.type for node in scope.graph.nodes()] == [ahg.NodeType.Memset]
    assert stream.is_capturing() == ahg.CaptureStatus.NONE
    destroy(scope.graph, stream, other, x)


@ahg.kernel(extents={"src": "n"})
def read_all(t: ahg.Threads, n: ahg.int32, src: ahg.ConstPtr[ahg.float32]) -> None:
    float(src.sum())


@pytest.mark.asyncio
async def test_a_race_check_keeps_the_mode_it_was_made_with(device: ahg.Device) -> None:
    # on_race set to "rasie" (misspelt) inside a raise-mode block, a race between a side
    # stream's copy and the null stream's kernel passed its racing call: no RaceError, no
    # warning, only a collected report. active and reports were assignable too.
    buf, side = device.malloc(64 * 4), device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="raise") as check:
        _assert_read_only(check, "on_race active reports")
        with pytest.raises(AttributeError):
            check.on_race = "rasie"  # type: ignore[misc]
        await side.memcpy(buf, np.ones(64, np.float32))
        with pytest.raises(ahg.RaceError):  # at the racing call, before it is enqueued
            await device.null_stream.launch_kernel(read_all, 1, 64, (64, buf))
    assert check.on_race == "raise"
    assert not check.active
    await device.synchronize()
    destroy(buf, side)


@pytest.mark.asyncio
async def test_a_race_check_s_reports_are_a_copy_of_its_record(device: ahg.Device) -> None:
    # reports handed out the check's own list: reports.clear() hid a race from statistics()
    # and from every later read.
    buf, side = device.malloc(64 * 4), device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="collect") as check:
        await side.memcpy(buf, np.ones(64, np.float32))
        await device.null_stream.launch_kernel(read_all, 1, 64, (64, buf))
        await device.synchronize()
    found = check.reports
    assert found
    found.clear()
    assert len(check.reports) == check.statistics().reports > 0
    destroy(buf, side)


COEFFICIENTS = ahg.device_symbol(
    "readonly_runtime_objects_coefficients", dtype="float32", shape=(4,)
)


@pytest.mark.asyncio
async def test_a_device_symbol_stays_what_it_was_declared_as(device: ahg.Device) -> None:
    # Its name set to another, every copy to it raised InvalidSymbol ("not a declared
    # symbol"); its shape set to (2, 2, 2), view() failed to reshape its four floats.
    symbol, stream = COEFFICIENTS, device.create_stream()
    _assert_read_only(symbol, "name dtype shape nbytes")
    for name, value in (("name", "another"), ("shape", (2, 2, 2)), ("nbytes", 64)):
        with pytest.raises(AttributeError):
            setattr(symbol, name, value)
    await stream.memcpy_to_symbol(symbol, np.arange(4, dtype=np.float32))
    await stream.synchronize()
    assert symbol.view(device).tolist() == [0.0, 1.0, 2.0, 3.0]
    destroy(stream)


@pytest.mark.asyncio
async def test_a_host_function_s_declaration_is_changed_only_by_declaring_it_again(
    device: ahg.Device,
) -> None:
    # writes set to cover a buffer declared only as read, the function wrote it: the view
    # check that enforces the declaration let the write through.
    x, stream = device.malloc(4), device.create_stream()
    await device.memset(x, 0, 4)

    def bump() -> None:
        device.view(x, "int32", 1)[0] += 1

    declared = ahg.host_function(bump, reads=[x])
    _assert_read_only(declared, "fn reads writes")
    with pytest.raises(AttributeError):
        declared.writes = ((x, None),)  # type: ignore[misc]
    await stream.launch_host_func(declared)
    with pytest.raises(ahg.LaunchFailure, match="read-only"):
        await stream.synchronize()
    assert device.view(x, "int32", 1)[0] == 0
    destroy(stream, x)
