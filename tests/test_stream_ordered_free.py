"""A stream-ordered free (``stream.free_async``) owns the memory from the call on.

Written as a user's suite would be: public API only. HIP takes memory given to
``hipFreeAsync`` out of its pool's busy list when the call is made, so a second free of it is
refused there. Here the second free was accepted: a second ``free_async`` was enqueued and
failed only when its stream reached it (a sticky error reported by some later, unrelated
``synchronize``), and a ``device.free`` freed the memory at once, under the pending free, which
then failed the same way, or, for a graph allocation launched again meanwhile, freed the new
launch's memory while it ran. Each later free is now refused when called, and changes nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing


@pytest.mark.asyncio
async def test_a_second_free_async_of_pending_memory_is_refused_when_called(
    device: ahg.Device,
) -> None:
    held = testing.HeldKernel()
    with device.create_stream() as stream, device.create_stream() as other:
        ptr = device.malloc(256)
        await held.launch(stream)  # the stream cannot reach the free until released
        await stream.free_async(ptr)
        submitted = stream.statistics().submitted, other.statistics().submitted

        for second in (stream, other):
            with pytest.raises(ahg.InvalidValue, match="already being freed"):
                await second.free_async(ptr)
            with pytest.raises(ahg.InvalidValue, match="already being freed"):
                second.free_async_nowait(ptr)

        assert (stream.statistics().submitted, other.statistics().submitted) == submitted
        held.release()
        await stream.synchronize()  # the one free ran, and nothing failed
        await other.synchronize()
        assert device.statistics().memory.allocations == 0


@pytest.mark.asyncio
async def test_device_free_of_memory_a_stream_will_free_is_refused(device: ahg.Device) -> None:
    held = testing.HeldKernel()
    with device.create_stream() as stream:
        ptr = device.malloc(256)
        await held.launch(stream)
        await stream.memset(ptr, 7, 256)  # enqueued before the free: it must still find memory
        await stream.free_async(ptr)

        with pytest.raises(ahg.InvalidValue, match="already being freed"):
            device.free(ptr)
        assert device.statistics().memory.allocations == 1  # still there for the memset

        held.release()
        await stream.synchronize()
        assert device.statistics().memory.allocations == 0
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            device.free(ptr)  # the usual answer once it is gone


@pytest.mark.asyncio
async def test_a_graph_allocation_freed_by_a_stream_is_not_freed_twice(device: ahg.Device) -> None:
    """A graph's allocation may be freed outside the graph; while that free is pending, the
    memory is neither freed again nor reallocated by a launch not ordered after the free (one
    on another stream; a relaunch on the free's own stream is ordered after it, and taken)."""
    held = testing.HeldKernel()
    with ahg.Graph() as graph, device.create_stream() as stream, device.create_stream() as other:
        alloc = graph.add_mem_alloc_node(64)
        ptr = alloc.params.ptr
        graph.add_memset_node(ptr, 1, 64, deps=alloc)
        with graph.instantiate() as graph_exec:
            await (await graph_exec.launch(stream))
            await held.launch(stream)
            await stream.free_async(ptr)

            with pytest.raises(ahg.InvalidValue, match="already being freed"):
                device.free(ptr)
            with pytest.raises(ahg.InvalidValue, match="never freed"):
                await graph_exec.launch(other)  # the memory is still the last launch's

            held.release()
            await stream.synchronize()
            await (await graph_exec.launch(stream))  # freed once: launchable again
            assert device.view(ptr, np.uint8).tolist() == [1] * 64
            device.free(ptr)
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_a_free_async_the_race_checker_refuses_leaves_the_memory_freeable(
    device: ahg.Device,
) -> None:
    writer, freer = device.create_stream(), device.create_stream()
    ptr = device.malloc(256)
    with ahg.race_check(on_race="raise"):
        await writer.memset(ptr, 1, 256)
        with pytest.raises(ahg.RaceError):
            await freer.free_async(ptr)  # nothing orders it after the memset
        await writer.synchronize()
        device.free(ptr)  # the refused free_async holds nothing
    assert device.statistics().memory.allocations == 0
    writer.destroy()
    freer.destroy()


@pytest.mark.asyncio
async def test_a_second_free_async_that_must_wait_for_room_is_refused_before_it_parks() -> None:
    properties = ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=4)
    with testing.fresh_devices(1, properties) as (device,):
        stream = device.create_stream(non_blocking=True)
        ptr = device.malloc(64)
        gate = testing.GatedHost()
        stream.launch_host_func_nowait(gate)
        stream.free_async_nowait(ptr)
        while device.statistics().queues[0].pending < 4:  # the ring full behind the gate
            stream.launch_host_func_nowait(int)
        before = stream.statistics()
        parked = stream.free_async(ptr)
        with pytest.raises(ahg.InvalidValue, match="already being freed"):
            parked.send(None)  # refused at its first step: it never parked
        with pytest.raises(ahg.InvalidValue, match="already being freed"):
            stream.free_async_nowait(ptr)  # the refusal, not NotReady
        assert stream.statistics() == before
        gate.open()
        await stream.synchronize()
        stream.destroy()
