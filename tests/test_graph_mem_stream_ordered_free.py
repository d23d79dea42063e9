"""Freeing a graph allocation in stream order, behind the launch that allocates it.

HIP and CUDA let a graph's allocation outlive the graph and be freed by ``hipFreeAsync`` on a
stream ordered after the launch: launch, use, free, with no host wait between them. The
launch's memory is committed only when the stream reaches it, so the free must be accepted
for the reserved addresses, and fail on the stream (holding nothing) if it runs first.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing

M = ahg.GraphMemAttribute
KIB = 1024


@ahg.kernel
def fill(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


def used_and_reserved(device: ahg.Device) -> tuple[int, int]:
    return (
        device.graph_mem_attribute(M.UsedMemCurrent),
        device.graph_mem_attribute(M.ReservedMemCurrent),
    )


@pytest.mark.asyncio
async def test_launch_use_and_free_async_with_no_host_wait_between(device: ahg.Device) -> None:
    baseline = device.memory.bytes_in_use
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            host = np.zeros(KIB // 8, np.int64)
            for value in (3, 4):  # twice: the first free really gave the memory back
                await graph_exec.launch(stream)
                await stream.launch_kernel(fill, 1, 1, (value, ptr))
                await stream.memcpy(host, ptr, KIB)
                await stream.free_async(ptr)  # the launch has not run yet: nothing committed
                await stream.synchronize()
                assert host.tolist() == [value] * (KIB // 8)
                assert used_and_reserved(device) == (0, KIB)
    assert device.graph_mem_trim() == KIB
    assert device.memory.bytes_in_use == baseline


@pytest.mark.asyncio
async def test_a_free_async_the_stream_reaches_before_the_launch_fails_and_holds_nothing(
    device: ahg.Device,
) -> None:
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            early = await stream.free_async(ptr)  # nothing allocates before it on the stream
            with pytest.raises(ahg.InvalidValue, match="no memory behind it"):
                await early
            await (await graph_exec.launch(stream))
            assert used_and_reserved(device) == (KIB, KIB)
            device.free(ptr)  # the failed free's claim went with it
            assert used_and_reserved(device) == (0, KIB)
            with pytest.raises(ahg.InvalidValue, match="not the start of an allocation"):
                await stream.free_async(ptr + 8)  # inside the reservation, not its start
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_an_auto_free_launchs_memory_freed_on_the_stream_behind_it(
    device: ahg.Device,
) -> None:
    """The launch gives back the previous launch's memory as it starts, before it commits its
    own: that must not drop a free queued behind it for the memory it is about to commit."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH) as graph_exec:
            for value in (5, 6):
                await graph_exec.launch(stream)
                await stream.launch_kernel(fill, 1, 1, (value, ptr))
                freed = await stream.free_async(ptr)
                await freed  # freed once, by the stream: nothing left for the next launch
                assert used_and_reserved(device) == (0, KIB)
    assert device.graph_mem_trim() == KIB


@pytest.mark.asyncio
@pytest.mark.parametrize("destroy_graph", [False, True], ids=["exec", "exec-and-graph"])
async def test_an_executable_destroyed_before_the_stream_reaches_its_free_async(
    device: ahg.Device, destroy_graph: bool
) -> None:
    """Launch, use, ``free_async``, destroy: the executable is freed as its launch completes,
    and gives its ranges back then, before the stream reaches the free behind the launch. The
    free must still find the memory it frees, rather than fail the stream with a pointer that
    is no allocation any more; it gives the addresses back with the memory."""
    baseline = device.memory_info()
    reservations = device.statistics().memory.reservations
    with device.create_stream() as stream:
        graph = ahg.Graph()
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        graph_exec = graph.instantiate()
        await graph_exec.launch(stream)
        await stream.launch_kernel(fill, 1, 1, (9, ptr))
        host = np.zeros(KIB // 8, np.int64)
        await stream.memcpy(host, ptr, KIB)
        freed = await stream.free_async(ptr)
        graph_exec.destroy()  # in flight: freed when its launch completes
        if destroy_graph:
            graph.destroy()
        await freed
        await stream.synchronize()  # the stream holds no failure
        assert host.tolist() == [9] * (KIB // 8)
        assert graph_exec.state is ahg.ExecState.CLOSED
        assert used_and_reserved(device) == (0, KIB)
        assert device.statistics().memory.reservations == reservations
        if not destroy_graph:
            graph.destroy()
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == baseline


@pytest.mark.asyncio
@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="the two frees race by design, which the environment's race check reports",
)
async def test_a_free_node_beating_the_pending_free_of_a_destroyed_executable_leaks_nothing(
    device: ahg.Device,
) -> None:
    """The range of a destroyed executable waits for the ``free_async`` a stream holds; a
    free node of another graph that frees it first is a double free (that ``free_async``
    then fails on its stream), and the addresses go with the memory it frees, not held for
    a free that can no longer give them back."""
    reservations = device.statistics().memory.reservations
    held = testing.HeldKernel()
    with device.create_stream() as late, device.create_stream() as stream:
        graph = ahg.Graph()
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        freeing = ahg.Graph()
        freeing.add_mem_free_node(ptr)
        graph_exec, free_exec = graph.instantiate(), freeing.instantiate()
        await (await graph_exec.launch(stream))
        await held.launch(late)
        pending = await late.free_async(ptr)  # behind the held kernel
        graph_exec.destroy()
        graph.destroy()
        await (await free_exec.launch(stream))  # frees it first
        assert device.statistics().memory.reservations == reservations
        held.release()
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            await pending
        with pytest.raises(ahg.InvalidValue):
            await late.synchronize()
        free_exec.destroy()
        freeing.destroy()
    assert device.graph_mem_trim() == KIB
