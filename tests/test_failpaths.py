"""Failure paths that must be honest: a failed call changes nothing, nothing is pinned by
accident, deep graphs do not overflow the stack, and HIP's own error codes where the port of its
tests disagrees. Each test is named after its scenario."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.memnodes import RESERVATIONS
from ahipgraph.runtime.params import MemcpyParams
from cleanup import destroy, run_once
from fakes import HeldKernel


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


@ahg.kernel
def small(t: ahg.Threads, value: ahg.int32) -> None:
    return None


@ahg.kernel
def wide(t: ahg.Threads, a: ahg.int64, b: ahg.int64) -> None:
    return None


@ahg.kernel
def huge(t: ahg.Threads, a: ahg.int64, b: ahg.int64, c: ahg.int64, d: ahg.int64,
         e: ahg.int64, f: ahg.int64) -> None:  # fmt: skip
    return None


def state(graph_exec: ahg.GraphExec, device: ahg.Device) -> tuple[Any, ...]:
    return graph_exec.statistics(), device.statistics()


# -- 3. a failed update or kernel setter changes nothing -------------------------------------------


def two_small_kernels() -> tuple[ahg.Graph, ahg.GraphNode, ahg.GraphNode]:
    graph = ahg.Graph()
    a = graph.add_kernel_node(small, 1, 1, (1,))
    b = graph.add_kernel_node(small, 1, 1, (2,), deps=[a])
    return graph, a, b


def test_update_whose_second_slot_exceeds_a_chunk_leaves_the_first_node_untouched(
    device: ahg.Device,
) -> None:
    graph, _, _ = two_small_kernels()
    graph_exec = graph.instantiate(arena_headroom=0)  # one 32-byte chunk, both slots used
    new, a, _ = two_small_kernels()
    a.set_kernel_params(wide, 1, 1, (1, 2))  # needs a new 16-byte slot: fits in a chunk
    new.nodes()[1].set_kernel_params(huge, 1, 1, (1, 2, 3, 4, 5, 6))  # 48 bytes: never fits
    before = state(graph_exec, device)
    with pytest.raises(ahg.GraphExecUpdateFailure, match="exceed") as refused:
        graph_exec.update(new)
    assert refused.value.result.kind is ahg.UpdateResultKind.ParametersChanged
    assert state(graph_exec, device) == before
    assert graph_exec.statistics().arena.allocations == 2  # only instantiate's two slots
    destroy(graph_exec, graph, new)


def test_update_that_needs_a_chunk_on_a_full_device_is_out_of_memory_and_changes_nothing() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=4096))
    device = ahg.get_device(0)
    graph, _, _ = two_small_kernels()
    graph_exec = graph.instantiate(arena_headroom=16)  # 48-byte chunk: 16 bytes to spare
    free, _ = device.memory_info()
    filler = device.malloc(free)  # the device is now full
    new, a, b = two_small_kernels()
    a.set_kernel_params(wide, 1, 1, (1, 2))  # 16 bytes: fits in the spare room
    b.set_kernel_params(wide, 1, 1, (3, 4))  # 16 more: needs a second chunk
    before = state(graph_exec, device)
    with pytest.raises(ahg.OutOfMemory):
        graph_exec.update(new)
    assert state(graph_exec, device) == before
    device.free(filler)
    graph_exec.update(new)  # with memory back, the same update applies
    assert graph_exec.statistics().arena.chunks == 2
    destroy(graph_exec, graph, new)


@pytest.mark.asyncio
async def test_kernel_setter_with_launches_in_flight_and_no_room_keeps_the_version() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=4096))
    device = ahg.get_device(0)
    graph, a, _ = two_small_kernels()
    graph_exec = graph.instantiate(arena_headroom=0)
    stream = device.create_stream()
    held = HeldKernel()
    await held.launch(stream)
    await graph_exec.launch(stream)  # in flight: a setter must copy, never write in place
    filler = device.malloc(device.memory_info()[0])
    before = state(graph_exec, device)
    with pytest.raises(ahg.OutOfMemory):
        graph_exec.set_kernel_node_params(a, small, 1, 1, (9,))
    assert state(graph_exec, device) == before
    assert graph_exec.node_enabled(a)
    # Disabling keeps the node's argument slot (its bytes do not change): no memory needed.
    graph_exec.set_node_enabled(a, False)
    after = state(graph_exec, device)
    assert (after[0].arena, after[1]) == (before[0].arena, before[1])
    assert not graph_exec.node_enabled(a)
    held.release()
    await stream.synchronize()
    device.free(filler)
    destroy(graph_exec, graph, stream)


# -- 12. dropped devices are not pinned by the alloc-node table ------------------------------------


def test_a_dropped_devices_memory_is_collected_despite_alloc_node_reservations() -> None:
    gc.collect()
    baseline = len(RESERVATIONS)  # entries of devices other tests' objects still hold
    graph = ahg.Graph()
    graph.add_mem_alloc_node(1 << 20)  # an entry in the reservation table for device 0
    memory = weakref.ref(ahg.get_device(0).memory)
    ahg.configure_devices(1)  # drop device 0 and its memory
    gc.collect()
    assert memory() is None
    assert len(RESERVATIONS) == baseline  # the dropped device's entry went with it
    graph.add_mem_alloc_node(64)  # the graph keeps working on the new device
    assert len(RESERVATIONS) == baseline + 1
    destroy(graph)


# -- 13. deeply nested child graphs ---------------------------------------------------------------

DEPTH = 2_000


def nested(depth: int, out: ahg.DevicePtr) -> ahg.Graph:
    """A graph whose child graphs nest ``depth`` deep, with one kernel at the bottom.

    Built by editing each embedded copy in place, so building is linear in ``depth``.
    """
    top, blank = ahg.Graph(), ahg.Graph()
    inner = top
    for _ in range(depth):
        inner = inner.add_child_graph_node(blank).params.graph
    inner.add_kernel_node(put, 1, 1, (7, 0, out))
    blank.destroy()
    return top


@pytest.mark.asyncio
async def test_child_graphs_nested_2000_deep_clone_instantiate_launch_and_destroy(
    device: ahg.Device,
) -> None:
    baseline = GRAPHS.statistics().live
    out = device.malloc(8)
    graph = nested(DEPTH, out)
    assert GRAPHS.statistics().live == baseline + DEPTH + 1
    copy = graph.clone()
    assert GRAPHS.statistics().live == baseline + 2 * (DEPTH + 1)
    assert "graph_" in copy.to_dot()
    graph_exec = copy.instantiate()
    await run_once(graph_exec, device)
    assert int(device.view(out, np.int64, 1)[0]) == 7
    graph_exec.update(graph)  # same topology all the way down
    graph_exec.destroy()
    copy.destroy()
    graph.destroy()
    assert GRAPHS.statistics().live == baseline
    destroy(out)


# -- 14. HIP's codes -------------------------------------------------------------------------------


def test_retain_user_object_with_move_accepts_any_count() -> None:
    calls: list[Any] = []
    obj = ahg.UserObject(calls.append)
    graph = ahg.Graph()
    graph.retain_user_object(obj, 10, move=True)
    assert obj.refcount == 1
    graph.destroy()
    assert calls == [None]


def test_free_node_frees_memory_allocated_by_a_destroyed_graph(device: ahg.Device) -> None:
    baseline = len(RESERVATIONS)
    allocating = ahg.Graph()
    ptr = allocating.add_mem_alloc_node(64).params.ptr
    graph_exec = allocating.instantiate()  # the executable owns the range from here on
    allocating.destroy()
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    with ahg.Graph() as second, pytest.raises(ahg.InvalidValue, match="already"):
        second.add_mem_free_node(ptr)
    freeing.destroy()
    graph_exec.destroy()  # the allocation and its free are both gone: the range goes too
    assert device.memory.statistics().reservations == 0
    assert len(RESERVATIONS) == baseline


def test_an_unclaimed_allocation_goes_with_its_uninstantiated_graph(device: ahg.Device) -> None:
    baseline = len(RESERVATIONS)
    allocating = ahg.Graph()
    ptr = allocating.add_mem_alloc_node(64).params.ptr
    allocating.destroy()
    assert device.memory.statistics().reservations == 0
    assert len(RESERVATIONS) == baseline
    with ahg.Graph() as freeing, pytest.raises(ahg.InvalidValue, match="not allocated"):
        freeing.add_mem_free_node(ptr)


def test_free_node_frees_memory_allocated_by_another_live_graph(device: ahg.Device) -> None:
    allocating = ahg.Graph()
    ptr = allocating.add_mem_alloc_node(64).params.ptr
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    allocating.destroy()
    freeing.destroy()
    assert device.memory.statistics().reservations == 0


def test_zero_sized_memset_node_is_invalid_value_at_add(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    for width, height in ((0, 1), (4, 0)):
        with pytest.raises(ahg.InvalidValue, match="empty"):
            graph.add_memset_node(ptr, 0, width, height=height, pitch=16)
    assert graph.statistics().nodes == 0
    destroy(ptr, graph)


@pytest.mark.asyncio
async def test_zero_count_memcpy_is_invalid_value_in_node_and_exec_setters(
    device: ahg.Device,
) -> None:
    src, dst = device.malloc(8), device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_memcpy_node(dst, src, 8)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="0"):
        node.set_memcpy_params(dst, src, 0)
    with pytest.raises(ahg.InvalidValue, match="0"):
        node.set_params(MemcpyParams(dst, src, 0, ahg.CopyKind.DeviceToDevice))
    with pytest.raises(ahg.InvalidValue, match="0"):
        graph_exec.set_memcpy_node_params(node, dst, src, 0)
    assert node.params.nbytes == 8
    destroy(src, dst, graph, graph_exec)


@pytest.mark.parametrize("kind", [ahg.CopyKind.Default, ahg.CopyKind.HostToDevice, 0])
def test_exec_memcpy_setter_answers_a_changed_or_default_kind_with_invalid_value(
    device: ahg.Device, kind: Any
) -> None:
    src, dst = device.malloc(8), device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_memcpy_node(dst, src, 8)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="kind"):
        graph_exec.set_memcpy_node_params(node, dst, src, 8, kind)
    graph_exec.set_memcpy_node_params(node, dst, src, 8, ahg.CopyKind.DeviceToDevice)
    destroy(src, dst, graph, graph_exec)


def test_exec_event_setters_answer_a_null_or_destroyed_event_with_invalid_value(
    device: ahg.Device,
) -> None:
    event, gone = device.create_event(), device.create_event()
    gone.destroy()
    graph = ahg.Graph()
    record = graph.add_event_record_node(event)
    wait = graph.add_event_wait_node(event, deps=[record])
    graph_exec = graph.instantiate()
    for setter, node in (
        (graph_exec.set_event_record_node_event, record),
        (graph_exec.set_event_wait_node_event, wait),
    ):
        for bad in (None, gone):
            with pytest.raises(ahg.InvalidValue):
                setter(node, bad)  # type: ignore[operator]
        with pytest.raises(TypeError):
            setter(node, "event")  # type: ignore[operator]
    destroy(event, graph, graph_exec)


@pytest.mark.asyncio
async def test_none_as_the_arguments_of_a_kernel_that_takes_some_is_invalid_value(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="None"):
        await stream.launch_kernel(small, 1, 1, None)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="None"):
        graph.add_kernel_node(small, 1, 1, None)  # type: ignore[arg-type]
    no_args = ahg.Kernel(lambda t: None, name="no_args")
    node = graph.add_kernel_node(no_args, 1, 1, None)  # type: ignore[arg-type]
    assert node.params.args == ()
    assert stream.submitted == 0
    destroy(stream, graph)


def test_removing_an_edge_in_a_graph_with_memory_nodes_is_not_supported() -> None:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    empty = graph.add_empty_node(deps=[alloc])
    with pytest.raises(ahg.NotSupported):
        graph.remove_dependencies(alloc, empty)
    assert graph.edges() == [(alloc, empty)]
    destroy(graph)


# -- 15. kernel nodes are validated against their executable's device --------------------------


@pytest.mark.asyncio
async def test_a_1024_thread_node_is_refused_at_instantiate_on_a_device_limited_to_256() -> None:
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=256)]
    )
    small_device = ahg.get_device(1)
    with small_device.create_stream() as stream, pytest.raises(ahg.InvalidConfiguration):
        await stream.launch_kernel(small, 1, 1024, (1,))  # the eager launch is refused...
    graph = ahg.Graph()
    node = graph.add_kernel_node(small, 1, 1024, (1,))  # fine for the default device
    before = small_device.statistics()
    with pytest.raises(ahg.InvalidConfiguration):  # ...and so is the graph on that device
        graph.instantiate(device=small_device)
    assert small_device.statistics() == before
    assert not graph.statistics().instantiated
    node.set_kernel_params(small, 1, 256, (1,))
    graph_exec = graph.instantiate(device=small_device)
    with pytest.raises(ahg.InvalidConfiguration):
        graph_exec.set_kernel_node_params(node, small, 1, 1024, (1,))
    wider = ahg.Graph()
    wider.add_kernel_node(small, 1, 1024, (1,))
    with pytest.raises(ahg.GraphExecUpdateFailure) as failure:
        graph_exec.update(wider)
    assert failure.value.result.kind is ahg.UpdateResultKind.NotSupported  # type: ignore[attr-defined]
    destroy(graph, graph_exec, wider)


# -- 16. memset counts elements everywhere -------------------------------------------------------


@pytest.mark.asyncio
async def test_stream_memset_counts_elements_like_a_memset_node(device: ahg.Device) -> None:
    eager, graphed = device.malloc(32), device.malloc(32)
    stream = device.create_stream()
    await stream.memset(eager, 0x7F, 4, element_size=4)  # 4 elements of 4 bytes
    graph = ahg.Graph()
    graph.add_memset_node(graphed, 0x7F, 4, element_size=4)
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    await stream.synchronize()
    expected = [0x7F] * 4 + [0] * 4
    assert device.view(eager, np.uint32, 8).tolist() == expected
    assert device.view(graphed, np.uint32, 8).tolist() == expected
    destroy(eager, graphed, stream, graph, graph_exec)


# -- 17. instantiate flags UPLOAD and DEVICE_LAUNCH ------------------------------------------------


def test_device_launch_flag_is_not_supported_and_creates_nothing(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(small, 1, 1, (1,))
    before = device.statistics()
    with pytest.raises(ahg.NotSupported):
        graph.instantiate(ahg.InstantiateFlags.DEVICE_LAUNCH)
    assert device.statistics() == before
    assert not graph.statistics().instantiated
    destroy(graph)


def test_upload_flag_validates_the_upload_stream_at_instantiate() -> None:
    ahg.configure_devices(2)
    device, other = ahg.get_device(0), ahg.get_device(1)
    graph = ahg.Graph()
    graph.add_kernel_node(small, 1, 1, (1,))
    upload = ahg.InstantiateFlags.UPLOAD
    gone = device.create_stream()
    gone.destroy()
    mine, theirs = device.create_stream(), other.create_stream()
    before = device.statistics()
    with pytest.raises(ahg.ContextIsDestroyed):
        graph.instantiate(upload, upload_stream=gone)
    with pytest.raises(ahg.InvalidValue, match="device 1"):
        graph.instantiate(upload, upload_stream=theirs)
    with pytest.raises(TypeError, match="upload_stream"):
        graph.instantiate(upload, upload_stream="stream")
    with pytest.raises(ValueError, match="UPLOAD"):
        graph.instantiate(upload_stream=mine)
    assert device.statistics() == before
    assert not graph.statistics().instantiated
    graph_exec = graph.instantiate(upload, upload_stream=mine)
    assert graph_exec.flags is upload
    destroy(graph, graph_exec, mine, theirs)


# -- 9. bad option names and argument types -----------------------------------------------------


def test_misspelt_instantiate_option_is_a_type_error_naming_the_known_options() -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match=r"signal_set.*known: device, signal_sets"):
        graph.instantiate(signal_set=4)
    assert not graph.statistics().instantiated
    destroy(graph)


@pytest.mark.parametrize("device_arg", [0, "0", 1.0])
def test_instantiate_device_must_be_a_device(device_arg: Any) -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="Device"):
        graph.instantiate(device=device_arg)
    destroy(graph)


@pytest.mark.parametrize("bad", ["ptr", 4096, 0, 1.5])
def test_free_of_a_string_or_an_int_is_a_type_error(device: ahg.Device, bad: Any) -> None:
    before = device.statistics()
    with pytest.raises(TypeError, match="DevicePtr"):
        device.free(bad)
    assert device.statistics() == before


@pytest.mark.asyncio
async def test_object_dtype_host_array_is_refused_by_stream_and_node_memcpy(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(64)
    objects = np.array([object()] * 4, dtype=object)
    stream = device.create_stream()
    for call in (
        lambda: stream.memcpy(ptr, objects),
        lambda: stream.memcpy(objects, ptr),
    ):
        with pytest.raises(TypeError, match="Python objects"):
            await call()
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="Python objects"):
        graph.add_memcpy_node(ptr, objects)
    assert stream.submitted == 0
    assert graph.statistics().nodes == 0
    destroy(ptr, stream, graph)


@pytest.mark.asyncio
async def test_true_as_element_size_is_a_type_error(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    stream, graph = device.create_stream(), ahg.Graph()
    with pytest.raises(TypeError, match="element_size"):
        await stream.memset(ptr, 0, 4, element_size=True)
    with pytest.raises(TypeError, match="element_size"):
        graph.add_memset_node(ptr, 0, 4, element_size=True)
    destroy(ptr, stream, graph)


@pytest.mark.asyncio
@pytest.mark.parametrize("bad", [None, "event"])
async def test_none_or_a_string_as_an_event(device: ahg.Device, bad: Any) -> None:
    stream = device.create_stream()
    event = device.create_event()
    error = ahg.InvalidHandle if bad is None else TypeError
    with pytest.raises(error):
        await stream.record_event(bad)
    with pytest.raises(error):
        await stream.wait_event(bad)
    with pytest.raises(error):
        ahg.elapsed_time(bad, event)
    with pytest.raises(error):
        ahg.elapsed_time(event, bad)
    assert stream.submitted == 0
    destroy(stream, event)


@pytest.mark.asyncio
async def test_a_string_as_the_stream_of_launch_launch_nowait_or_upload(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(small, 1, 1, (1,))
    graph_exec = graph.instantiate()
    before = state(graph_exec, device)
    with pytest.raises(TypeError, match="Stream"):
        await graph_exec.launch("stream")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Stream"):
        graph_exec.launch_nowait("stream")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Stream"):
        await graph_exec.upload("stream")  # type: ignore[arg-type]
    assert state(graph_exec, device) == before
    destroy(graph, graph_exec)


def test_duration_ns_true_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="duration_ns"):
        ahg.kernel(duration_ns=True)(lambda t: None)
