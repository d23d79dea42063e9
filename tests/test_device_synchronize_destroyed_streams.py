"""``Device.synchronize`` reports the failure of work a stream enqueued before it was
destroyed: destroying a stream lets its work finish, and must not lose that work's failure."""

from __future__ import annotations

import gc
import weakref

import pytest

import ahipgraph as ahg
from ahipgraph.runtime import device as device_module


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


class _DestroysWhenCollected:
    """Cyclic garbage that destroys ``stream`` when the collector frees it."""

    def __init__(self, stream: ahg.Stream) -> None:
        self.stream = stream
        self.cycle = self

    def __del__(self) -> None:
        self.stream.destroy()


@pytest.mark.asyncio
async def test_a_stream_destroyed_by_a_collection_inside_another_destroy_keeps_its_failure(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # destroy() sorts out the destroyed streams that still owe a failure; the collector may
    # run while it does (it allocates), and a __del__ destroy another stream there. The
    # collection is made to land there: in the first test of whether a stream owes one.
    earlier, quiet, failing = (device.create_stream() for _ in range(3))
    for stream in (earlier, failing):
        failed = await stream.launch_kernel(fails, 1, 1, ())
        with pytest.raises(ahg.LaunchFailure):
            await failed  # done: each stream owes its report
    earlier.destroy()  # one destroyed stream owing a failure already
    owes = device_module._owes_failure
    collected: list[bool] = []

    def collecting_first(stream: ahg.Stream) -> bool:
        if not collected:
            collected.append(True)
            gc.collect()
        return owes(stream)

    monkeypatch.setattr(device_module, "_owes_failure", collecting_first)
    _DestroysWhenCollected(failing)
    quiet.destroy()
    monkeypatch.undo()
    assert collected
    assert failing.state is ahg.StreamState.DESTROYED
    for _ in range(2):  # earlier's failure and failing's
        with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
            await device.synchronize()
    await device.synchronize()
