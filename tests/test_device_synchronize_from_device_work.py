"""``Device.synchronize`` awaited by the device's own work (an async kernel body or host
function) would wait for itself forever: it is IllegalState, and the work fails with it."""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
async def waits_for_its_device(t: ahg.Threads) -> None:
    await ahg.get_device(0).synchronize()


async def host_waits_for_its_device() -> None:
    await ahg.get_device(0).synchronize()


def _caused_by_illegal_state(error: BaseException) -> None:
    assert isinstance(error.__cause__, ahg.IllegalState)
    assert "waited for its own device" in str(error.__cause__)


@pytest.mark.asyncio
async def test_an_async_kernel_body_waiting_for_its_device_fails(device: ahg.Device) -> None:
    stream = device.create_stream()
    failed = await stream.launch_kernel(waits_for_its_device, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed  # it hung here for good
    _caused_by_illegal_state(caught.value)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert device.in_flight == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_an_async_host_function_waiting_for_its_device_fails(device: ahg.Device) -> None:
    stream = device.create_stream()
    failed = await stream.launch_host_func(host_waits_for_its_device)
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed
    _caused_by_illegal_state(caught.value)
    with pytest.raises(ahg.LaunchFailure):
        await device.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_a_task_the_work_spawned_may_wait_once_the_work_is_done(
    device: ahg.Device,
) -> None:
    """The mark is the work's, not its children's for good: after the work ends, a task it
    started synchronizes normally."""
    spawned: list[asyncio.Task[None]] = []
    release = asyncio.Event()

    async def later() -> None:
        await release.wait()
        await device.synchronize()

    async def spawner() -> None:
        spawned.append(asyncio.get_running_loop().create_task(later()))

    stream = device.create_stream()
    await (await stream.launch_host_func(spawner))
    release.set()
    await spawned[0]  # the host function is done: no IllegalState
    destroy(stream)
