"""``Device.synchronize`` reports the failure of work a stream enqueued before it was
destroyed: destroying a stream lets its work finish, and must not lose that work's failure."""

from __future__ import annotations

import gc
import weakref

import pytest

import ahipgraph as ahg


@ahg.kernel
def fails(t: ahg.Threads) -> None:
    raise ValueError("kernel body failed")


@ahg.kernel
def succeeds(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_a_failure_in_flight_when_its_stream_is_destroyed_is_reported(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    await stream.launch_kernel(fails, 1, 1, ())
    stream.destroy()  # the kernel has not run yet
    with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
        await device.synchronize()
    await device.synchronize()  # reported once


@pytest.mark.asyncio
async def test_a_failure_already_recorded_when_its_stream_is_destroyed_is_reported(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    failed = await stream.launch_kernel(fails, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure):
        await failed  # the work is done; the stream still owes the report
    stream.destroy()
    with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
        await device.synchronize()
    await device.synchronize()


@pytest.mark.asyncio
async def test_failures_of_a_destroyed_and_an_open_stream_are_reported_one_per_call(
    device: ahg.Device,
) -> None:
    gone, kept = device.create_stream(), device.create_stream()
    await gone.launch_kernel(fails, 1, 1, ())
    await kept.launch_kernel(fails, 1, 1, ())
    gone.destroy()
    for _ in range(2):
        with pytest.raises(ahg.LaunchFailure):
            await device.synchronize()
    await device.synchronize()
    kept.destroy()


@pytest.mark.asyncio
async def test_destroyed_streams_whose_work_succeeded_are_not_kept(device: ahg.Device) -> None:
    """The device keeps a destroyed stream only while it may owe a failure."""
    refs = []
    for _ in range(3):
        stream = device.create_stream()
        await stream.launch_kernel(succeeds, 1, 1, ())
        stream.destroy()  # work still in flight: kept until it is known to have succeeded
        refs.append(weakref.ref(stream))
        del stream
    await device.synchronize()
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]
    idle = device.create_stream()
    idle.destroy()  # nothing in flight: never kept
    ref = weakref.ref(idle)
    del idle
    gc.collect()
    assert ref() is None
