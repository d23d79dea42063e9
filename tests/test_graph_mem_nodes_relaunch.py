"""The relaunch rule of graphs with memory nodes, decided as each launch commits.

A graph whose allocation is still live cannot be launched again (``InvalidValue``, HIP's
``hipGraphLaunch``). The rule is checked before a launch parks for a signal set, and again
under the executable's lock as it commits: two launches that parked together both saw no
earlier launch, and only the first may be taken, or the second would allocate memory that is
already allocated while it runs.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import exhaust_signal_sets, loop_turns

M = ahg.GraphMemAttribute
KIB = 1024


@pytest.mark.asyncio
async def test_of_two_launches_parked_for_a_signal_set_only_the_first_is_taken(
    device: ahg.Device,
) -> None:
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr  # never freed by the graph
        with graph.instantiate() as graph_exec:
            with exhaust_signal_sets(graph_exec):
                first = asyncio.ensure_future(graph_exec.launch(stream))
                second = asyncio.ensure_future(graph_exec.launch(stream))
                await loop_turns()  # both passed the check and parked: no launch yet
                assert not first.done()
                assert not second.done()
            await (await first)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await second  # refused at the enqueue, not failing on the device
            assert graph_exec.statistics().launches == 1
            assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB
            await stream.synchronize()  # the stream holds no failure
            device.free(ptr)
            await (await graph_exec.launch(stream))  # freed: launchable again
            device.free(ptr)
    assert device.graph_mem_trim() == KIB


@ahg.kernel
def store(t: ahg.Threads, value: ahg.int32, out: ahg.Ptr[ahg.int32]) -> None:
    out[0] = value


def allocate_and_store(graph: ahg.Graph) -> ahg.DevicePtr:
    """Give ``graph`` an allocation of KIB bytes, never freed by it, and a kernel storing 1
    there; the allocation's address."""
    alloc = graph.add_mem_alloc_node(KIB)
    ptr = alloc.params.ptr
    graph.add_kernel_node(store, 1, 1, (1, ptr), deps=[alloc])
    return ptr


async def launch_and_use(
    graph_exec: ahg.GraphExec, stream: ahg.Stream, ptr: ahg.DevicePtr, value: int, into: Any
) -> None:
    """Launch ``graph_exec`` on ``stream``, store ``value`` in its memory and copy it to the
    host array ``into``, all enqueued with no host wait."""
    await graph_exec.launch(stream)
    await stream.launch_kernel(store, 1, 1, (value, ptr))
    await stream.memcpy(into, ptr, 4)


@pytest.mark.asyncio
async def test_a_free_async_enqueued_but_not_yet_run_frees_for_the_relaunch(
    device: ahg.Device,
) -> None:
    """Launch, use, ``free_async``, relaunch, all in stream order with no host wait: the free
    the stream holds counts, as HIP and CUDA decide from the calls made, whether or not the
    stream has reached the free yet. Deciding from whether it ran refused the relaunch or
    took it depending on timing."""
    baseline = device.memory_info()
    with ahg.Graph() as graph, device.create_stream() as stream:
        alloc = graph.add_mem_alloc_node(KIB)
        ptr = alloc.params.ptr
        graph.add_kernel_node(store, 1, 1, (7, ptr), deps=[alloc])
        with graph.instantiate() as graph_exec:
            await (await graph_exec.launch(stream))  # done: the memory is committed
            freed = await stream.free_async(ptr)  # enqueued, not run yet
            assert not freed.done()
            second = await graph_exec.launch(stream)  # the pending free counts: taken
            await freed
            await second
            assert device.view(ptr, np.int32, 1).tolist() == [7]
            assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB
            await (await stream.free_async(ptr))
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == baseline


@pytest.mark.asyncio
async def test_a_pending_free_frees_one_launch_only(device: ahg.Device) -> None:
    """A free enqueued behind a launch still in flight frees that launch's memory: the next
    launch is taken, and one more without a free of its own is refused, though the first free
    has not run yet when it is asked for."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            first = await graph_exec.launch(stream)
            await stream.free_async(ptr)  # behind the first launch, which is in flight
            second = await graph_exec.launch(stream)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await graph_exec.launch(stream)  # the second launch's memory has no free
            assert graph_exec.statistics().launches == 2
            await first
            await second
            await stream.synchronize()  # the stream holds no failure
            assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB
            device.free(ptr)
    assert device.graph_mem_trim() == KIB


@pytest.mark.asyncio
@pytest.mark.parametrize("on_other", ["the free", "the first launch"])
async def test_a_pending_free_on_another_stream_does_not_free_for_the_relaunch(
    device: ahg.Device, on_other: str
) -> None:
    """Nothing orders a launch on one stream after a free pending on another, nor a free
    after a launch still in flight on another stream: the relaunch could commit the memory
    before that free gives the last launch's back, so it is refused, holding nothing."""
    if on_other == "the first launch" and os.environ.get("AHIPGRAPH_RACE_CHECK"):
        pytest.skip("the free races the launch by design, which the environment's check reports")
    with (
        ahg.Graph() as graph,
        device.create_stream() as stream,
        device.create_stream() as other,
    ):
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        first, freer = (stream, other) if on_other == "the free" else (other, stream)
        with graph.instantiate() as graph_exec:
            launched = await graph_exec.launch(first)
            if on_other == "the free":
                await launched
            freed = await freer.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await graph_exec.launch(stream)
            assert graph_exec.statistics().launches == 1
            await launched
            await freed
            await (await graph_exec.launch(stream))  # the free ran: launchable
            device.free(ptr)
    assert device.graph_mem_trim() == KIB


@pytest.mark.asyncio
async def test_a_free_async_after_a_launch_done_on_another_stream_frees_for_the_relaunch(
    device: ahg.Device,
) -> None:
    """Launch on one stream and wait for it, then ``free_async`` and relaunch on another with
    no host wait: the launch is done, so the free, ahead of the relaunch on its stream,
    frees its memory first, and the relaunch is taken (it was refused as if the launch could
    still commit memory after the free). The relaunch's memory takes a free of its own."""
    baseline = device.memory_info()
    with (
        ahg.Graph() as graph,
        device.create_stream() as stream,
        device.create_stream() as other,
    ):
        ptr = allocate_and_store(graph)
        host = np.zeros(1, np.int32)
        with graph.instantiate() as graph_exec:
            await (await graph_exec.launch(other))
            await stream.free_async(ptr)
            await launch_and_use(graph_exec, stream, ptr, 70, host)
            await stream.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await graph_exec.launch(other)  # nothing on other is ordered after that free
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [70]
            assert graph_exec.statistics().launches == 2
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == baseline


@pytest.mark.asyncio
async def test_launch_use_free_async_in_a_loop_with_no_host_wait(device: ahg.Device) -> None:
    """Each relaunch is taken on the free behind the launch before it and commits the memory
    again, so the memory then takes a free of its own while the earlier one is still pending;
    a second free of one launch's memory is still refused when it is called."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = allocate_and_store(graph)
        host = np.zeros(3, np.int32)
        with graph.instantiate() as graph_exec:
            for i in range(3):
                await launch_and_use(graph_exec, stream, ptr, 10 + i, host[i : i + 1])
                await stream.free_async(ptr)
                with pytest.raises(ahg.InvalidValue, match="already being freed"):
                    await stream.free_async(ptr)  # this launch's memory has its free
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [10, 11, 12]
            assert graph_exec.statistics().launches == 3
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB


@pytest.mark.asyncio
async def test_a_launch_of_a_graph_freeing_the_memory_frees_it_for_the_relaunch(
    device: ahg.Device,
) -> None:
    """Launch, use, launch a graph whose free node frees the allocation, relaunch: on one
    stream that free comes first, so the relaunch is taken though the stream has not reached
    it yet; with the freeing graph launched on another stream, nothing orders it before the
    relaunch, which is refused."""
    with (
        ahg.Graph() as graph,
        ahg.Graph() as freeing,
        device.create_stream() as stream,
        device.create_stream() as other,
    ):
        ptr = allocate_and_store(graph)
        freeing.add_mem_free_node(ptr)
        host = np.zeros(3, np.int32)
        with graph.instantiate() as graph_exec, freeing.instantiate() as free_exec:
            for i in range(3):
                await launch_and_use(graph_exec, stream, ptr, 20 + i, host[i : i + 1])
                await free_exec.launch(stream)
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [20, 21, 22]
            await (await graph_exec.launch(stream))
            freed = await free_exec.launch(other)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await graph_exec.launch(stream)
            await freed
            await (await graph_exec.launch(stream))  # it ran: launchable
            await (await free_exec.launch(stream))
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB


@pytest.mark.asyncio
@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="its free on another stream races the relaunch by design, which the check reports",
)
async def test_the_free_async_loop_also_works_with_auto_free_on_launch(
    device: ahg.Device,
) -> None:
    """With AUTO_FREE_ON_LAUNCH freeing the memory is optional, not refused: launch, use,
    ``free_async`` in a loop with no host wait frees each launch's memory as without the flag.
    A free on another stream orders nothing before the relaunch and gives it no such room."""
    baseline = device.memory_info()
    with (
        ahg.Graph() as graph,
        device.create_stream() as stream,
        device.create_stream() as other,
    ):
        ptr = allocate_and_store(graph)
        host = np.zeros(3, np.int32)
        with graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH) as graph_exec:
            for i in range(3):
                await launch_and_use(graph_exec, stream, ptr, 30 + i, host[i : i + 1])
                await stream.free_async(ptr)
                with pytest.raises(ahg.InvalidValue, match="already being freed"):
                    await stream.free_async(ptr)  # this launch's memory has its free
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [30, 31, 32]
            await (await graph_exec.launch(stream))
            freed = await other.free_async(ptr)
            await graph_exec.launch(stream)  # auto-freed: taken, but ordered after no free
            with pytest.raises(ahg.InvalidValue, match="already being freed"):
                await stream.free_async(ptr)
            await freed
            await stream.synchronize()
            await other.synchronize()
            if device.graph_mem_attribute(M.UsedMemCurrent):
                device.free(ptr)
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == baseline


@pytest.mark.asyncio
async def test_a_free_async_of_a_relaunch_taken_on_a_free_node_frees_that_launch(
    device: ahg.Device,
) -> None:
    """Launch, launch a graph whose free node frees the memory, relaunch, ``free_async``, all
    on one stream with no host wait: the free_async is for the relaunch's memory, so the free
    node running before it must not drop it (the stream then failed with "freed before the
    stream reached its free_async"). A second free_async of that memory is still refused."""
    baseline = device.memory_info()
    with (
        ahg.Graph() as graph,
        ahg.Graph() as freeing,
        device.create_stream() as stream,
    ):
        ptr = allocate_and_store(graph)
        freeing.add_mem_free_node(ptr)
        host = np.zeros(4, np.int32)
        with graph.instantiate() as graph_exec, freeing.instantiate() as free_exec:
            for i in range(4):
                await launch_and_use(graph_exec, stream, ptr, 40 + i, host[i : i + 1])
                if i % 2:
                    await stream.free_async(ptr)
                    with pytest.raises(ahg.InvalidValue, match="already being freed"):
                        await stream.free_async(ptr)  # this launch's memory has its free
                else:
                    await free_exec.launch(stream)
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [40, 41, 42, 43]
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == baseline


@pytest.mark.asyncio
async def test_a_free_async_after_auto_free_relaunches_frees_the_last_launch(
    device: ahg.Device,
) -> None:
    """With AUTO_FREE_ON_LAUNCH, launch twice then ``free_async``, on one stream with no host
    wait: each relaunch frees the memory of the launch before it as it starts, which runs
    after the free_async was made, and must not drop it: it is for the last launch's memory
    (the stream failed with "freed before the stream reached its free_async"). A second free
    of that memory is still refused when it is called."""
    baseline = device.memory_info()
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = allocate_and_store(graph)
        host = np.zeros(3, np.int32)
        with graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH) as graph_exec:
            for i in range(3):
                await launch_and_use(graph_exec, stream, ptr, 50 + i, host[i : i + 1])
            await stream.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match="already being freed"):
                await stream.free_async(ptr)
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [50, 51, 52]
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
            await (await graph_exec.launch(stream))  # and it launches on as before
            await (await stream.free_async(ptr))
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == baseline


@pytest.mark.asyncio
async def test_an_auto_free_relaunch_behind_a_free_on_its_stream_takes_a_free_of_its_own(
    device: ahg.Device,
) -> None:
    """With AUTO_FREE_ON_LAUNCH, a launch on one stream done, then on another stream
    ``free_async``, relaunch, ``free_async`` with no host wait: the first free, ahead of the
    relaunch on its stream, frees the last launch's memory, so the relaunch's auto-free frees
    nothing and the second free is for the relaunch's memory (it was refused as a double
    free, the relaunch having been counted as freeing memory of its own)."""
    with (
        ahg.Graph() as graph,
        device.create_stream() as stream,
        device.create_stream() as other,
    ):
        ptr = allocate_and_store(graph)
        host = np.zeros(1, np.int32)
        with graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH) as graph_exec:
            await (await graph_exec.launch(other))
            await stream.free_async(ptr)
            await launch_and_use(graph_exec, stream, ptr, 60, host)
            await stream.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match="already being freed"):
                await stream.free_async(ptr)
            await stream.synchronize()  # the stream holds no failure
            assert host.tolist() == [60]
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert device.graph_mem_trim() == KIB
