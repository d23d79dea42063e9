"""Devices: the devices table, synchronisation, several devices, one event loop at a time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import HeldKernel, loop_turns


@ahg.kernel
def fill_ones(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[t.ids[t.ids < n]] = 1


# -- the devices table -------------------------------------------------------------------------


def test_one_default_device_exists() -> None:
    assert ahg.device_count() == 1
    device = ahg.get_device()
    assert device is ahg.get_device(0)
    assert device.ordinal == 0
    assert device.properties == ahg.DeviceProperties()
    assert device.name == ahg.DeviceProperties().name


@pytest.mark.parametrize("ordinal", [1, 2, -1])
def test_device_ordinal_out_of_range_is_invalid_device(ordinal: int) -> None:
    with pytest.raises(ahg.InvalidDevice, match="does not exist"):
        ahg.get_device(ordinal)


@pytest.mark.parametrize("ordinal", ["0", 0.0, True])
def test_device_ordinal_of_the_wrong_type_is_a_type_error(ordinal: Any) -> None:
    with pytest.raises(TypeError, match="ordinal"):
        ahg.get_device(ordinal)


def test_get_device_of_none_is_the_current_device() -> None:
    ahg.configure_devices(2)
    assert ahg.get_device(None) is ahg.get_device(0)


def test_configure_devices_with_shared_or_per_device_properties() -> None:
    devices = ahg.configure_devices(3)
    assert ahg.device_count() == 3
    assert [d.ordinal for d in devices] == [0, 1, 2]
    assert [ahg.get_device(i) for i in range(3)] == devices
    small = ahg.DeviceProperties(memory_bytes=1 << 20, hardware_queues=2)
    big = ahg.DeviceProperties(compute_units=8)
    devices = ahg.configure_devices(2, [small, big])
    assert [d.properties for d in devices] == [small, big]
    assert len(devices[0].queues) == 2
    assert devices[0].memory_info() == (1 << 20, 1 << 20)
    with pytest.raises(ahg.InvalidDevice):
        ahg.get_device(2)


def test_configure_devices_rejects_bad_requests() -> None:
    with pytest.raises(ValueError, match="at least one"):
        ahg.configure_devices(0)
    with pytest.raises(ValueError, match="property sets"):
        ahg.configure_devices(2, [ahg.DeviceProperties()])
    assert ahg.device_count() == 1  # a refused request leaves the table as it was


@pytest.mark.parametrize(
    "bad", [{"compute_units": 0}, {"hardware_queues": 0}, {"memory_bytes": -1}]
)
def test_device_properties_are_validated(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="invalid device properties"):
        ahg.DeviceProperties(**bad)


def test_cost_model_formulas() -> None:
    cost = ahg.CostModel()
    lanes = 10 * cost.lanes_per_cu
    assert cost.kernel_ns(1, 10, None) == cost.kernel_launch_ns + cost.wave_ns
    assert cost.kernel_ns(lanes, 10, None) == cost.kernel_launch_ns + cost.wave_ns
    assert cost.kernel_ns(lanes + 1, 10, None) == cost.kernel_launch_ns + 2 * cost.wave_ns
    assert cost.kernel_ns(10**9, 10, 77) == cost.kernel_launch_ns + 77
    assert cost.copy_ns(2500, ahg.CopyKind.HostToDevice) == cost.copy_latency_ns + 100
    assert cost.copy_ns(2500, ahg.CopyKind.DeviceToHost) == cost.copy_latency_ns + 100
    assert cost.copy_ns(5000, ahg.CopyKind.DeviceToDevice) == cost.copy_latency_ns + 5
    assert cost.fill_ns(5000) == cost.copy_latency_ns + 5


# -- synchronisation and statistics ------------------------------------------------------------


@pytest.mark.asyncio
async def test_device_synchronize_waits_for_every_stream(device: ahg.Device) -> None:
    held = [HeldKernel(f"k{i}") for i in range(3)]
    streams = [device.create_stream() for _ in range(3)]
    for kernel, stream in zip(held, streams, strict=True):
        await kernel.launch(stream)
    sync = asyncio.ensure_future(device.synchronize())
    await loop_turns()  # the synchronize parks until the device is idle
    for kernel in held[:2]:
        kernel.release()
    await loop_turns()  # two streams finish; the third still holds the device
    assert not sync.done()
    assert device.in_flight == 1
    held[2].release()
    await sync
    assert device.in_flight == 0
    assert all(stream.query() for stream in streams)
    destroy(*streams)
    assert device.clock.now == max(q.busy_until for q in device.queues) > 0


@pytest.mark.asyncio
async def test_device_synchronize_on_an_idle_device_returns_at_once(device: ahg.Device) -> None:
    await device.synchronize()
    assert device.in_flight == 0
    assert device.clock.now == 0


@pytest.mark.asyncio
async def test_statistics_count_every_packet(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = device.malloc(64)
    await stream.memset(ptr, 0, 64)
    await stream.launch_kernel(fill_ones, 1, 16, (16, ptr))
    await stream.launch_host_func(lambda: None)
    await device.synchronize()
    stats = device.statistics()
    assert stats.ordinal == 0
    assert stats.in_flight == 0
    assert stats.now_ns == device.clock.now
    assert stats.memory.bytes_in_use == 64
    queue = stats.queues[stream.queue.index]
    assert (queue.submitted, queue.completed, queue.pending) == (3, 3, 0)
    assert sum(q.submitted for q in stats.queues) == 3
    assert repr(device) == (
        f"<Device 0 {device.name!r} in_flight=0 memory=64/{device.properties.memory_bytes}>"
    )
    destroy(stream, ptr)


# -- several devices ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_each_device_has_its_own_memory_and_queues() -> None:
    dev0, dev1 = ahg.configure_devices(2)
    a, b = dev0.malloc(64), dev1.malloc(64)
    assert (a.device, b.device) == (0, 1)
    assert a != b
    stream0, stream1 = dev0.create_stream(), dev1.create_stream()
    assert stream0.queue.device is dev0
    assert stream1.queue.device is dev1
    await stream1.launch_kernel(fill_ones, 1, 16, (16, b))
    await stream1.synchronize()
    assert device_ones(dev1, b) == 16
    assert dev0.statistics().queues[0].submitted == 0  # device 0 did nothing
    assert dev0.memory.bytes_in_use == dev1.memory.bytes_in_use == 64
    destroy(a, b, stream0, stream1)


def device_ones(device: ahg.Device, ptr: ahg.DevicePtr) -> int:
    return int(device.view(ptr, np.int32, 16).sum())


def test_pointers_of_device_1_are_not_valid_on_device_0() -> None:
    dev0, dev1 = ahg.configure_devices(2)
    foreign = dev1.malloc(64)
    with pytest.raises(ahg.InvalidValue, match="not a live allocation of device 1"):
        dev0.free(foreign + 64)  # freed on its own device (see test_cross_device_free.py)
    with pytest.raises(ahg.InvalidDevicePointer, match="device 0"):
        dev0.memory.resolve(foreign, 1)
    with pytest.raises(ahg.InvalidDevicePointer):
        dev0.view(foreign, np.uint8)
    # The same address on device 0 is not device 1's allocation either.
    with pytest.raises(ahg.InvalidDevicePointer):
        dev0.memory.resolve(ahg.DevicePtr(0, foreign.address), 1)
    dev1.free(foreign)  # still the owner's to free


@pytest.mark.asyncio
async def test_a_kernel_given_another_devices_pointer_fails_to_launch() -> None:
    dev0, dev1 = ahg.configure_devices(2)
    foreign = dev1.malloc(64)
    stream = dev0.create_stream()
    completion = await stream.launch_kernel(fill_ones, 1, 16, (16, foreign))
    with pytest.raises(ahg.LaunchFailure, match="fill_ones") as info:
        await completion
    assert isinstance(info.value.__cause__, ahg.InvalidDevicePointer)
    assert device_ones(dev1, foreign) == 0  # nothing was written anywhere
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(foreign, stream)


@pytest.mark.asyncio
async def test_memcpy_between_devices() -> None:
    dev0, dev1 = ahg.configure_devices(2)
    src, dst = dev0.malloc(16), dev1.malloc(16)
    stream = dev0.create_stream()
    await stream.memcpy(src, np.arange(4, dtype=np.int32))
    await stream.memcpy(dst, src, 16)
    await stream.synchronize()
    assert dev1.view(dst, np.int32).tolist() == [0, 1, 2, 3]
    destroy(src, dst, stream)


def test_pointer_of_a_device_that_does_not_exist_is_invalid_device_pointer() -> None:
    async def copy() -> None:
        with (
            ahg.get_device(0).create_stream() as stream,
            pytest.raises(ahg.InvalidDevicePointer, match="no device"),
        ):
            await stream.memcpy(ahg.DevicePtr(5, 1 << 40), np.zeros(4, np.uint8))

    ahg.run(copy)


# -- one event loop at a time ------------------------------------------------------------------


def run_in_other_loop(probe: Callable[[], Awaitable[Any]]) -> BaseException | str:
    """Run ``probe()`` as a task on a fresh event loop in another thread.

    Returns what it raised, or "parked" if it was still waiting after a few loop turns (it is
    then cancelled), or "completed".
    """
    outcome: list[BaseException | str] = []

    async def main() -> None:
        task = asyncio.ensure_future(probe())
        await loop_turns()  # an IllegalState is raised on the task's first step
        if not task.done():
            task.cancel()
            outcome.append("parked")
        elif task.exception() is not None:
            outcome.append(task.exception())  # type: ignore[arg-type]
        else:
            outcome.append("completed")
        await asyncio.gather(task, return_exceptions=True)

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    thread.join()
    return outcome[0]


@pytest.mark.asyncio
async def test_using_a_busy_device_from_a_second_event_loop_is_illegal_state(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    stream = device.create_stream()
    completion = await held.launch(stream)
    event = device.create_event()
    await stream.record_event(event)
    await held.started.wait()
    ptr = device.malloc(8)
    other_stream = device.create_stream()
    probes: dict[str, Callable[[], Awaitable[Any]]] = {
        "launch": lambda: other_stream.launch_kernel(fill_ones, 1, 1, (1, ptr)),
        "memset": lambda: other_stream.memset(ptr, 0, 8),
        "stream.synchronize": stream.synchronize,
        "device.synchronize": device.synchronize,
        "event.synchronize": event.synchronize,
        "completion": completion.wait,
    }
    outcomes = {name: run_in_other_loop(probe) for name, probe in probes.items()}
    for name, outcome in outcomes.items():
        assert isinstance(outcome, ahg.IllegalState), name
        assert "busy on another event loop" in str(outcome)
    assert other_stream.submitted == 0
    held.release()
    await stream.synchronize()
    destroy(stream, event, ptr, other_stream)


@pytest.mark.asyncio
async def test_an_idle_device_can_move_to_another_event_loop(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = device.malloc(64)
    await stream.launch_kernel(fill_ones, 1, 16, (16, ptr))
    await stream.synchronize()

    async def use_elsewhere() -> None:
        other = device.create_stream()
        await other.memset(ptr, 0, 64)
        await other.synchronize()
        other.destroy()

    assert run_in_other_loop(use_elsewhere) == "completed"
    assert device_ones(device, ptr) == 0
    # ...and back again, now that the other loop is done with it.
    await stream.launch_kernel(fill_ones, 1, 16, (16, ptr))
    await stream.synchronize()
    assert device_ones(device, ptr) == 16
    destroy(stream, ptr)


def test_work_left_behind_by_a_closed_loop_fails_but_completes_on_the_next_loop() -> None:
    device = ahg.get_device(0)
    state: dict[str, Any] = {}

    async def abandon() -> None:
        # A kernel held open (its gate is never released) and work queued behind it, when
        # the loop closes under them.
        held = HeldKernel()
        stream = device.create_stream()
        ptr = device.malloc(64)
        state.update(stream=stream, ptr=ptr)
        await held.launch(stream)
        state["behind"] = await stream.launch_kernel(fill_ones, 1, 16, (16, ptr))
        await held.started.wait()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(abandon())
    loop.close()
    assert device.in_flight == 2

    async def use_again() -> list[int]:
        stream, ptr = state["stream"], state["ptr"]
        # The abandoned work fails instead of hanging; what was queued behind it never ran.
        with pytest.raises(ahg.IllegalState, match="closed"):
            await state["behind"]
        with pytest.raises(ahg.IllegalState, match="closed"):
            await stream.synchronize()
        assert device.view(ptr, np.int32).tolist() == [0] * 16
        # The device works normally afterwards.
        await stream.launch_kernel(fill_ones, 1, 16, (16, ptr))
        await stream.synchronize()
        return device.view(ptr, np.int32).tolist()

    assert ahg.run(use_again) == [1] * 16
    assert device.in_flight == 0
    destroy(state["stream"], state["ptr"])
    assert all(queue.pending == 0 for queue in device.queues)
