"""A null kernel: ``hipLaunchKernel`` answers ``InvalidDeviceFunction``, a kernel node
``InvalidValue``.

HIP's launch looks the function up before anything else and reports a null one as
``hipErrorInvalidDeviceFunction`` (hip-tests ``Unit_hipLaunchKernel_Negative_Parameters``),
while ``hipGraphAddKernelNode`` (and a launch a capturing stream turns into a node) refuses
``func == nullptr`` as ``hipErrorInvalidValue``. Every spelling of the eager launch agrees:
the coroutine, its ``_nowait`` twin, and a call on a full ring, which is refused without
waiting. Nothing is enqueued.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices


@pytest.fixture
def device() -> Iterator[ahg.Device]:
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=2)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


NULL: Any = None


@pytest.mark.asyncio
async def test_an_eager_launch_of_a_null_kernel_is_invalid_device_function(
    device: ahg.Device,
) -> None:
    with device.create_stream() as stream:
        with pytest.raises(ahg.InvalidDeviceFunction, match="kernel is null"):
            await stream.launch_kernel(NULL, 1, 1)
        with pytest.raises(ahg.InvalidDeviceFunction, match="kernel is null"):
            stream.launch_kernel_nowait(NULL, 1, 1)
        assert stream.statistics().submitted == 0
        gate = GatedHost()
        await stream.launch_host_func(gate)
        await stream.launch_host_func(int)  # the ring is full
        with pytest.raises(ahg.InvalidDeviceFunction, match="kernel is null"):
            await stream.launch_kernel(NULL, 1, 1)  # refused at once, not parked
        with pytest.raises(ahg.InvalidDeviceFunction, match="kernel is null"):
            stream.launch_kernel_nowait(NULL, 1, 1)  # not NotReady
        assert stream.statistics().submitted == 2
        gate.open()
        await stream.synchronize()


@pytest.mark.asyncio
async def test_a_null_kernel_node_is_invalid_value(device: ahg.Device) -> None:
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="kernel is null"):
        graph.add_kernel_node(NULL, 1, 1)
    with device.create_stream() as stream:
        stream.begin_capture()
        with pytest.raises(ahg.InvalidValue, match="kernel is null"):
            await stream.launch_kernel(NULL, 1, 1)
        captured = stream.end_capture()
    assert captured.nodes() == []
    captured.destroy()
    graph.destroy()
