"""``stream.malloc_async_nowait``: ``malloc_async`` from synchronous code.

Every stream call that is a coroutine has a ``_nowait`` twin (``free_async`` has
``free_async_nowait``), so code that cannot await (a host function, a callback, a sync helper)
can make the same call. ``malloc_async`` enqueues no packet, so its twin never reports
``NotReady``, even on a full ring; it allocates, captures and refuses exactly as the coroutine.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices


@pytest.fixture
def device() -> Iterator[ahg.Device]:
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=2)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


@pytest.mark.asyncio
async def test_the_twin_allocates_in_stream_order_without_awaiting(device: ahg.Device) -> None:
    with device.create_stream() as stream:
        ptr = stream.malloc_async_nowait(256)
        assert isinstance(ptr, ahg.DevicePtr)
        assert device.statistics().memory.bytes_in_use == 256
        await stream.memset(ptr, 7, 256)
        await stream.synchronize()
        assert device.view(ptr, np.uint8).tolist() == [7] * 256
        await stream.free_async(ptr)
        await stream.synchronize()
        assert device.statistics().memory.bytes_in_use == 0


@pytest.mark.asyncio
async def test_a_full_ring_does_not_make_the_twin_report_not_ready(device: ahg.Device) -> None:
    with device.create_stream() as stream:
        gate = GatedHost()
        await stream.launch_host_func(gate)
        await stream.launch_host_func(int)  # the ring is full
        ptr = stream.malloc_async_nowait(64)  # needs no room: allocated at once
        with pytest.raises(ahg.NotReady):
            stream.memset_nowait(ptr, 0, 64)  # what a twin says when it needs room
        assert stream.statistics().submitted == 2
        gate.open()
        await stream.synchronize()
        await stream.free_async(ptr)
        await stream.synchronize()


@pytest.mark.asyncio
async def test_the_twin_refuses_and_captures_as_the_coroutine(device: ahg.Device) -> None:
    with device.create_stream() as stream:
        before = device.statistics().memory
        with pytest.raises(ahg.InvalidValue):
            stream.malloc_async_nowait(-1)
        with pytest.raises(TypeError, match=r"^Stream\.malloc_async_nowait\(\)"):
            stream.malloc_async_nowait()  # type: ignore[call-arg]
        with pytest.raises(TypeError, match=r"^Stream\.malloc_async\(\)"):
            await stream.malloc_async()  # type: ignore[call-arg]
        assert device.statistics().memory == before
        async with stream.capture() as capture:
            ptr = stream.malloc_async_nowait(128)
            await stream.memset(ptr, 1, 128)
            await stream.free_async(ptr)
        assert capture.graph is not None
        kinds = [node.type for node in capture.graph.nodes()]
        assert kinds == [ahg.NodeType.MemAlloc, ahg.NodeType.Memset, ahg.NodeType.MemFree]
        capture.graph.destroy()
