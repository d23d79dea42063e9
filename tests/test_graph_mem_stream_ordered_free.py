"""Freeing a graph allocation in stream order, behind the launch that allocates it.

HIP and CUDA let a graph's allocation outlive the graph and be freed by ``hipFreeAsync`` on a
stream ordered after the launch: launch, use, free, with no host wait between them. The
launch's memory is committed only when the stream reaches it, so the free must be accepted
for the reserved addresses once a launch was taken, and fail on the stream (holding nothing)
if it runs first. Before any launch was taken no memory exists there: refused when called.
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


NEVER_LAUNCHED = "executable was never launched"


@pytest.mark.asyncio
async def test_a_free_of_an_executables_memory_before_its_first_launch_is_refused_when_called(
    device: ahg.Device,
) -> None:
    """No launch was taken, so no memory exists at the alloc node's address (a graph
    allocation's lifetime begins when a launch reaches its node; ``hipFreeAsync`` finds no
    memory there and says ``hipErrorInvalidValue``). The ``free_async`` was accepted and
    failed the stream; it is refused when called now, as is a ``free``, changing nothing."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            ring, memory = stream.statistics(), device.statistics().memory
            with pytest.raises(ahg.InvalidValue, match=NEVER_LAUNCHED):
                await stream.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match=NEVER_LAUNCHED):
                stream.free_async_nowait(ptr)
            with pytest.raises(ahg.InvalidValue, match=NEVER_LAUNCHED):
                device.free(ptr)
            assert (stream.statistics(), device.statistics().memory) == (ring, memory)
            assert used_and_reserved(device) == (0, 0)  # nothing was ever committed
            await (await graph_exec.launch(stream))  # no claim was left behind to fail it
            assert used_and_reserved(device) == (KIB, KIB)
            device.free(ptr)
            assert used_and_reserved(device) == (0, KIB)
            with pytest.raises(ahg.InvalidValue, match="not the start of an allocation"):
                await stream.free_async(ptr + 8)  # inside the reservation, not its start
            await stream.synchronize()  # the stream holds no failure
    device.graph_mem_trim()


@pytest.mark.asyncio
@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="the free races the launch on another stream on purpose",
)
async def test_a_free_async_the_stream_reaches_before_the_launch_fails_and_holds_nothing(
    device: ahg.Device,
) -> None:
    """The launch was taken, on another stream held behind a gate: the free on this stream
    is accepted (it may be ordered after that launch) and, reached first, fails there."""
    gate = testing.GatedHost()
    with ahg.Graph() as graph, device.create_stream() as stream:
        other = device.create_stream()
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            await other.launch_host_func(gate)
            launched = await graph_exec.launch(other)  # taken, not run: held by the gate
            early = await stream.free_async(ptr)  # nothing orders it after the launch
            with pytest.raises(ahg.InvalidValue, match="no memory behind it"):
                await early
            gate.open()
            await launched
            assert used_and_reserved(device) == (KIB, KIB)
            device.free(ptr)  # the failed free's claim went with it
            assert used_and_reserved(device) == (0, KIB)
        other.destroy()
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
