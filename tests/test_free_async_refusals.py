"""``free_async`` refusals: frees ``hipFreeAsync`` refuses when called, and calls around them.

* Memory a graph frees itself (a MemAlloc node and a MemFree node of the same allocation in
  one graph, made by capture or by ``add_mem_alloc_node`` / ``add_mem_free_node``) has no
  launch's memory left for the user to free. A ``free_async`` of it was accepted and failed
  the stream later (``InvalidValue`` from the stream's completion); a ``Device.free`` of it
  while a launch was running freed the memory under the graph's own later nodes. Both are
  refused when called now, whatever the graph's state, and change nothing. So are a
  ``free_async`` of an alloc node's address in a graph never instantiated, and a
  ``free_async`` of a launch's memory that another graph's free node frees, once that
  graph's launch was taken after it (and a ``Device.free`` of it while that launch is
  queued), and a second free of a launch's memory once the first one ran.
* A ``free_async`` of a symbol's storage on a full ring said ``NotReady`` / parked, and was
  refused only once the ring had room.
* ``free_async`` on a stream of one device of another device's memory was refused; HIP frees
  it in its own device's pool, in the given stream's order. It is freed so now.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

import ahipgraph as ahg
from fakes import GatedHost, loop_turns
from rings import CAPACITY, fill_ring, ring_of

KIB = 1024
M = ahg.GraphMemAttribute
GRAPH_FREES = "freed by a memory-free node of the graph that allocates it"
RACES_ON_PURPOSE = pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="races on purpose (a host free against a launch in flight)",
)


@ahg.kernel
def fill(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


async def self_freeing_graph(
    how: str, stream: ahg.Stream, gate: GatedHost | None = None
) -> tuple[ahg.Graph, ahg.DevicePtr]:
    """A graph that allocates KIB, fills it (held by ``gate`` if given) and frees it."""
    if how == "capture":
        stream.begin_capture()
        ptr = await stream.malloc_async(KIB)
        await stream.launch_kernel(fill, 1, 1, (7, ptr))
        if gate is not None:
            await stream.launch_host_func(gate)
        await stream.free_async(ptr)
        return stream.end_capture(), ptr
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(KIB)
    ptr = alloc.params.ptr
    last = graph.add_kernel_node(fill, 1, 1, (7, ptr), deps=[alloc])
    if gate is not None:
        last = graph.add_host_node(gate, deps=[last])
    graph.add_mem_free_node(ptr, deps=[last])
    return graph, ptr


def refuses_every_free(device: ahg.Device, stream: ahg.Stream, ptr: ahg.DevicePtr) -> None:
    """Every free of ``ptr`` is refused when called, and changes nothing."""
    memory = device.statistics().memory
    ring = stream.statistics()
    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
        stream.free_async_nowait(ptr)
    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
        device.free(ptr)
    assert device.statistics().memory == memory
    assert stream.statistics() == ring


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["capture", "nodes"])
@pytest.mark.parametrize("state", ["graph", "instantiated", "running", "done"])
async def test_free_async_of_memory_its_graph_frees_is_refused_when_called(
    device: ahg.Device, how: str, state: str
) -> None:
    gate = GatedHost()
    with device.create_stream() as stream, device.create_stream() as other:
        graph, ptr = await self_freeing_graph(how, stream, gate)
        if state == "graph":
            with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                await other.free_async(ptr)
            refuses_every_free(device, other, ptr)
            graph.destroy()
            await other.synchronize()  # the stream holds no failure
            return
        with graph.instantiate() as graph_exec:
            if state == "instantiated":
                with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                    await other.free_async(ptr)
                refuses_every_free(device, other, ptr)
            else:
                done = await graph_exec.launch(stream)
                await gate.started()  # the launch is between its alloc and its free node
                assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB  # committed
                if state == "running":
                    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                        await other.free_async(ptr)
                    refuses_every_free(device, other, ptr)
                    assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB  # not freed
                gate.open()
                await done
                if state == "done":
                    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                        await stream.free_async(ptr)
                    refuses_every_free(device, stream, ptr)
                await stream.synchronize()  # the stream holds no failure
                assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
            await other.synchronize()
        graph.destroy()
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_a_free_node_added_after_instantiate_leaves_the_executables_memory_to_the_user(
    device: ahg.Device,
) -> None:
    """The executable was made before the graph had the free node: its launches leave their
    memory behind, which ``free_async`` must still free (launch, use, free, in a loop)."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            graph.add_mem_free_node(ptr)
            for value in (1, 2):
                await graph_exec.launch(stream)
                await stream.launch_kernel(fill, 1, 1, (value, ptr))
                await (await stream.free_async(ptr))
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_free_async_of_a_graph_reservation_never_instantiated_is_refused_when_called(
    device: ahg.Device,
) -> None:
    """No free node, but no executable either: no launch can put memory at the alloc node's
    reserved address, so a free of it was accepted only to fail the stream when reached."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        ring = stream.statistics()
        memory = device.statistics().memory
        with pytest.raises(ahg.InvalidValue, match="graph that was not instantiated"):
            await stream.free_async(ptr)
        with pytest.raises(ahg.InvalidValue, match="graph that was not instantiated"):
            stream.free_async_nowait(ptr)
        assert (stream.statistics(), device.statistics().memory) == (ring, memory)
        with graph.instantiate() as graph_exec:  # from here a launch allocates it
            await graph_exec.launch(stream)
            await (await stream.free_async(ptr))
            await stream.synchronize()  # the stream holds no failure
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


NODE_FREED = "freed by a memory-free node of a graph whose launch was taken after"


@pytest.mark.asyncio
@pytest.mark.parametrize("done", [False, True], ids=["queued", "done"])
async def test_free_async_after_another_graphs_free_node_launch_is_refused_when_called(
    device: ahg.Device, done: bool
) -> None:
    """Launch the allocating graph, then a graph whose free node frees it: that launch's memory
    is freed by the second launch, so a ``free_async`` of it is a second free (it was accepted
    and failed the stream). A relaunch of the allocating graph leaves memory to free again."""
    with ahg.Graph() as graph, ahg.Graph() as freeing, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        freeing.add_mem_free_node(ptr)
        with graph.instantiate() as graph_exec, freeing.instantiate() as free_exec:
            for _ in range(2):
                await graph_exec.launch(stream)
                freed = await free_exec.launch(stream)
                if done:
                    await freed
                ring = stream.statistics()
                with pytest.raises(ahg.InvalidValue, match=NODE_FREED):
                    await stream.free_async(ptr)
                with pytest.raises(ahg.InvalidValue, match=NODE_FREED):
                    stream.free_async_nowait(ptr)
                assert stream.statistics() == ring
            await graph_exec.launch(stream)  # its memory is the user's to free again
            await stream.free_async(ptr)
            await stream.synchronize()  # the stream holds no failure
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_a_free_node_launch_taken_before_the_allocating_launch_frees_nothing_of_it(
    device: ahg.Device,
) -> None:
    """The free node's launch comes first in stream order: the allocating launch behind it
    leaves its memory for the user, whose ``free_async`` is accepted and frees it."""
    with ahg.Graph() as graph, ahg.Graph() as freeing, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        freeing.add_mem_free_node(ptr)
        with graph.instantiate() as graph_exec, freeing.instantiate() as free_exec:
            await free_exec.launch(stream)
            with pytest.raises(ahg.InvalidValue, match=NODE_FREED):
                stream.free_async_nowait(ptr)  # nothing allocated it since
            await graph_exec.launch(stream)
            await (await stream.free_async(ptr))
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_device_free_of_memory_a_queued_free_node_launch_frees_is_refused(
    device: ahg.Device,
) -> None:
    """The free node's launch is still queued (behind a gate on another stream), so the memory
    is there: a ``Device.free`` of it freed it, and the free node's later free found nothing."""
    gate = GatedHost()
    with ahg.Graph() as graph, ahg.Graph() as freeing, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        freeing.add_mem_free_node(ptr)
        other = device.create_stream()
        with graph.instantiate() as graph_exec, freeing.instantiate() as free_exec:
            await (await graph_exec.launch(stream))
            await other.launch_host_func(gate)
            await free_exec.launch(other)
            before = device.statistics().memory
            with pytest.raises(ahg.InvalidValue, match=NODE_FREED):
                device.free(ptr)
            assert device.statistics().memory == before
            gate.open()
            await other.synchronize()
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0  # the node freed it
        other.destroy()
    device.graph_mem_trim()


USER_FREED = "was freed \\(free_async or free\\) since the last launch that allocates it"


@pytest.mark.asyncio
@pytest.mark.parametrize("first", ["free_async", "free"])
async def test_a_second_free_of_a_launchs_memory_is_refused_when_called(
    device: ahg.Device, first: str
) -> None:
    """Launch, free, and free again: the first free ran and gave the launch's memory back, so
    the second is a double free. It was accepted and failed the stream (``free_async``); it
    is refused when called, until a relaunch leaves memory to free again."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            await (await graph_exec.launch(stream))
            if first == "free":
                device.free(ptr)
            else:
                await (await stream.free_async(ptr))
            ring = stream.statistics()
            with pytest.raises(ahg.InvalidValue, match=USER_FREED):
                await stream.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match=USER_FREED):
                device.free(ptr)
            assert stream.statistics() == ring
            await graph_exec.launch(stream)  # memory to free again
            await stream.free_async(ptr)
            await stream.synchronize()  # the stream holds no failure
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


@RACES_ON_PURPOSE
@pytest.mark.asyncio
async def test_a_free_before_an_auto_free_relaunch_commits_leaves_that_launchs_memory_freeable(
    device: ahg.Device,
) -> None:
    """With AUTO_FREE_ON_LAUNCH the relaunch is taken with the last launch's memory still
    there; a ``Device.free`` before the relaunch commits frees that older memory, so the
    memory the relaunch commits must still take its own free."""
    gate = GatedHost()
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH) as graph_exec:
            await (await graph_exec.launch(stream))
            await stream.launch_host_func(gate)
            relaunch = await graph_exec.launch(stream)  # held behind the gate
            await gate.started()
            device.free(ptr)  # the first launch's memory
            gate.open()
            await relaunch
            assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB  # the relaunch's
            await (await stream.free_async(ptr))
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


# -- another device's memory ------------------------------------------------------------------


def two_devices() -> tuple[ahg.Device, ahg.Device]:
    ahg.configure_devices(2)
    return ahg.get_device(0), ahg.get_device(1)


@pytest.mark.asyncio
async def test_free_async_of_another_devices_memory_frees_it_there_in_stream_order() -> None:
    d0, d1 = two_devices()
    gate = GatedHost()
    free0, free1 = d0.memory_info(), d1.memory_info()
    with d0.create_stream() as stream, d1.create_stream() as stream1:
        ptr = d1.malloc(KIB)
        await stream.launch_host_func(gate)  # earlier work on the stream, still running
        freed = await stream.free_async(ptr)
        await gate.started()
        assert d1.memory_info().free == free1.free - KIB  # not before the stream gets there
        with pytest.raises(ahg.InvalidValue, match="already being freed"):
            d1.free(ptr)  # the stream holds its free
        with pytest.raises(ahg.InvalidValue, match="already being freed"):
            stream1.free_async_nowait(ptr)
        gate.open()
        await freed
        await stream.synchronize()  # the stream holds no failure
        assert d1.memory_info() == free1  # given back to device 1's allocator
        assert d0.memory_info() == free0
        with pytest.raises(ahg.InvalidValue, match="not the start of an allocation"):
            await stream.free_async(ptr)  # a second free: refused when called


@pytest.mark.asyncio
async def test_free_async_of_another_devices_allocation_inside_it_or_of_no_device_is_refused() -> (
    None
):
    d0, d1 = two_devices()
    with d0.create_stream() as stream:
        ptr = d1.malloc(KIB)
        ring = stream.statistics()
        with pytest.raises(ahg.InvalidValue, match="not the start of an allocation"):
            await stream.free_async(ptr + 8)
        with pytest.raises(ahg.InvalidValue, match="does not exist"):
            await stream.free_async(ahg.DevicePtr(5, ptr.address))
        with pytest.raises(ahg.InvalidValue, match="not the start of an allocation"):
            await stream.free_async(ahg.DevicePtr(1, 1 << 40))  # device 0's range, on 1
        assert stream.statistics() == ring
        d1.free(ptr)  # every refusal left it the caller's


@pytest.mark.asyncio
async def test_launch_and_free_async_on_one_stream_of_another_devices_graph_memory_in_a_loop() -> (
    None
):
    """A graph of device 0 allocating on device 1: launch, use, free on the launch's stream,
    with no host wait; the relaunch counts that free as it does a free of its own device's."""
    d0, d1 = two_devices()
    with ahg.Graph() as graph, d0.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB, device=1).params.ptr
        with graph.instantiate(device=d0) as graph_exec:
            hosts = [np.zeros(KIB, np.uint8) for _ in range(3)]
            for value, host in enumerate(hosts, 1):
                await graph_exec.launch(stream)
                await stream.memset(ptr, value, KIB)
                await stream.memcpy(host, ptr, KIB)
                await stream.free_async(ptr)
            await stream.synchronize()
            assert [host.tolist() for host in hosts] == [[v] * KIB for v in (1, 2, 3)]
            assert d1.graph_mem_attribute(M.UsedMemCurrent) == 0
            assert d1.graph_mem_attribute(M.UsedMemHigh) == KIB
    d1.graph_mem_trim()
    assert d1.memory.statistics().reservations == 0


# -- refused at once on a full ring -------------------------------------------------------------

SYMBOL = ahg.device_symbol("test_free_async_refusals.symbol", 64)


@pytest.mark.asyncio
async def test_free_async_of_a_symbols_storage_on_a_full_ring_is_refused_at_once(
    small_ring: ahg.Device,
) -> None:
    """The check a call runs before it waits for room missed the symbol rule: the twin said
    ``NotReady`` and the coroutine parked, to be refused only once the ring had room."""
    device = small_ring
    with device.create_stream() as stream:
        ptr = SYMBOL.address(device)
        held = await fill_ring(device, stream)
        ring = ring_of(device, stream)
        with pytest.raises(ahg.InvalidValue, match="symbol's storage"):
            stream.free_async_nowait(ptr)
        with pytest.raises(ahg.InvalidValue, match="symbol's storage"):
            await asyncio.wait_for(stream.free_async(ptr), 5)  # hang detector only
        assert ring_of(device, stream) == ring  # nobody parked
        held.release()
        await stream.synchronize()


@pytest.mark.asyncio
async def test_free_async_of_another_devices_memory_cancelled_while_parked_claims_nothing() -> None:
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=CAPACITY)
    ahg.configure_devices(2, properties)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    with d0.create_stream() as stream:
        ptr = d1.malloc(KIB)
        before = d1.statistics().memory
        held = await fill_ring(d0, stream)
        task = asyncio.ensure_future(stream.free_async(ptr))
        await loop_turns()  # the call checked its pointer and parked for room
        assert ring_of(d0, stream).waiting_for_room == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ring_of(d0, stream).waiting_for_room == 0
        held.release()
        await stream.synchronize()
        assert d1.statistics().memory == before  # not freed, and no claim held:
        await (await stream.free_async(ptr))  # freed once, by a later call
        assert d1.statistics().memory.allocations == before.allocations - 1
