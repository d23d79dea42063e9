"""``free_async`` of the null pointer frees nothing, as ``hipFreeAsync(nullptr)``.

``malloc_async(0)`` gives the null pointer (``hipMallocAsync`` of zero bytes), so code that
frees what it allocated must be able to give it back: HIP's ``hipFreeAsync`` returns success
for a null pointer and enqueues nothing, as ``free(NULL)`` and ``hipFree(nullptr)`` do. Eagerly
the call's completion is already done and no packet is added (so it never waits for room in a
full ring); while capturing it adds no node. Other bad pointers are refused as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices

NONE: Any = None


@pytest.fixture
def device() -> Iterator[ahg.Device]:
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=2)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


@pytest.mark.asyncio
async def test_an_eager_free_of_null_frees_nothing_and_enqueues_nothing(
    device: ahg.Device,
) -> None:
    with device.create_stream() as stream:
        before = device.statistics().memory
        for null in (await stream.malloc_async(0), ahg.NULL, NONE):
            done = await stream.free_async(null)
            assert done.done()
            await done
            stream.free_async_nowait(null)
        assert stream.statistics().submitted == 0
        assert device.statistics().memory == before
        gate = GatedHost()
        await stream.launch_host_func(gate)
        await stream.launch_host_func(int)  # the ring is full
        stream.free_async_nowait(ahg.NULL)  # no NotReady: nothing to enqueue
        await stream.free_async(ahg.NULL)  # does not wait for room
        memory = device.malloc(8)
        with pytest.raises(ahg.NotReady):
            stream.free_async_nowait(memory)  # a real free still needs room
        assert stream.statistics().submitted == 2
        gate.open()
        await stream.synchronize()
        device.free(memory)
        with pytest.raises(TypeError, match="DevicePtr"):
            await stream.free_async(5)  # type: ignore[arg-type]
        with pytest.raises(ahg.InvalidValue, match="start of an allocation"):
            await stream.free_async(ahg.DevicePtr(0, 1 << 40) + 1)


@pytest.mark.asyncio
async def test_a_captured_free_of_null_adds_no_node(device: ahg.Device) -> None:
    with device.create_stream() as stream:
        stream.begin_capture()
        ptr = await stream.malloc_async(0)
        assert ptr == ahg.NULL
        await stream.free_async(ptr)
        await stream.free_async(NONE)
        graph = stream.end_capture()
        assert graph.nodes() == []
        graph.destroy()
