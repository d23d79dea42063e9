"""Faults: failures inside device work become HipErrors where the user looks for them."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import HeldKernel


class Boom(Exception):
    pass


@ahg.kernel
def explode(t: ahg.Threads, code: ahg.int32) -> None:
    raise Boom(f"code {code}")


@ahg.kernel
def write_at(t: ahg.Threads, index: ahg.int64, x: ahg.Ptr[ahg.int32]) -> None:
    x[index] = 7


@ahg.kernel
def fill_ones(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[:n] = 1


@pytest.mark.asyncio
async def test_exception_in_a_kernel_is_a_launch_failure_naming_the_kernel(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    completion = await stream.launch_kernel(explode, 1, 1, (3,))
    with pytest.raises(ahg.LaunchFailure, match="kernel 'explode' failed") as info:
        await completion
    assert isinstance(info.value.__cause__, Boom)
    assert "code 3" in str(info.value)
    assert completion.done()
    assert completion.exception() is info.value
    assert device.in_flight == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_failure_surfaces_at_the_next_stream_synchronize_then_clears(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    completion = await stream.launch_kernel(explode, 1, 1, (1,))
    with pytest.raises(ahg.LaunchFailure, match="explode") as info:
        await stream.synchronize()
    assert completion.exception() is info.value  # the same error at both places
    assert stream.statistics().error is False
    await stream.synchronize()  # reported once, then cleared
    log: list[str] = []
    await stream.launch_host_func(log.append, "usable")
    await stream.synchronize()
    assert log == ["usable"]
    destroy(stream)


@pytest.mark.asyncio
async def test_awaiting_the_completion_does_not_clear_the_streams_error(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    completion = await stream.launch_kernel(explode, 1, 1, (1,))
    with pytest.raises(ahg.LaunchFailure):
        await completion
    assert stream.statistics().error is True
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    with pytest.raises(ahg.LaunchFailure):
        await completion  # a completion keeps its outcome
    await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_first_failure_on_a_stream_is_the_one_reported(device: ahg.Device) -> None:
    stream = device.create_stream()
    await stream.launch_kernel(explode, 1, 1, (1,))
    await stream.launch_kernel(explode, 1, 1, (2,))
    with pytest.raises(ahg.LaunchFailure, match="code 1"):
        await stream.synchronize()
    await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_other_streams_keep_working_while_one_has_failed(device: ahg.Device) -> None:
    broken, healthy = device.create_stream(), device.create_stream()
    ptr = device.malloc(64)
    await broken.launch_kernel(explode, 1, 1, (1,))
    await broken.launch_kernel(explode, 1, 1, (2,))
    await healthy.launch_kernel(fill_ones, 1, 1, (16, ptr))
    await healthy.synchronize()  # no error here: the failure belongs to the other stream
    assert device.view(ptr, np.int32).sum() == 16
    with pytest.raises(ahg.LaunchFailure):
        await broken.synchronize()
    destroy(broken, healthy, ptr)


@pytest.mark.asyncio
async def test_device_synchronize_reports_a_streams_failure_once(device: ahg.Device) -> None:
    broken, healthy = device.create_stream(), device.create_stream()
    await broken.launch_kernel(explode, 1, 1, (9,))
    await healthy.launch_host_func(lambda: None)
    with pytest.raises(ahg.LaunchFailure, match="code 9"):
        await device.synchronize()
    await device.synchronize()
    await broken.synchronize()  # the device-wide report cleared the stream's error too
    destroy(broken, healthy)


@pytest.mark.asyncio
async def test_async_kernel_failing_after_an_await_is_a_launch_failure(
    device: ahg.Device,
) -> None:
    gate = asyncio.Event()

    @ahg.kernel
    async def fail_later(t: ahg.Threads) -> None:
        await gate.wait()
        raise Boom("late")

    stream = device.create_stream()
    completion = await stream.launch_kernel(fail_later, 1, 1)
    log: list[str] = []
    after = await stream.launch_host_func(log.append, "after")
    gate.set()
    with pytest.raises(ahg.LaunchFailure, match="fail_later") as info:
        await completion
    assert isinstance(info.value.__cause__, Boom)
    await after  # the queue moved on past the failed packet
    assert log == ["after"]
    destroy(stream)


@pytest.mark.asyncio
async def test_host_function_failure_names_the_function(device: ahg.Device) -> None:
    def broken_callback() -> None:
        raise Boom("host")

    async def broken_async_callback() -> None:
        await asyncio.sleep(0)  # fail on a later step, not on the first one
        raise Boom("async host")

    stream = device.create_stream()
    sync_failure = await stream.launch_host_func(broken_callback)
    async_failure = await stream.launch_host_func(broken_async_callback)
    with pytest.raises(ahg.LaunchFailure, match="broken_callback"):
        await sync_failure
    with pytest.raises(ahg.LaunchFailure, match="broken_async_callback") as info:
        await async_failure
    assert isinstance(info.value.__cause__, Boom)
    destroy(stream)


@pytest.mark.asyncio
async def test_kernel_indexing_past_its_allocation_fails_without_touching_neighbours(
    device: ahg.Device,
) -> None:
    target, neighbour = device.malloc(16), device.malloc(16)
    stream = device.create_stream()
    completion = await stream.launch_kernel(write_at, 1, 1, (4, target))  # 4 int32 = 16 bytes
    with pytest.raises(ahg.LaunchFailure, match="write_at"):
        await completion
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert not device.view(neighbour, np.uint8).any()
    assert not device.view(target, np.uint8).any()
    destroy(target, neighbour, stream)


@pytest.mark.asyncio
async def test_copy_whose_pointer_is_freed_before_it_runs_fails_cleanly(
    device: ahg.Device,
) -> None:
    # Freeing memory that queued work still uses is the race this test is about: the
    # checker must name it (and the suite's own check must not count it as the test's bug).
    held = HeldKernel()
    stream = device.create_stream()
    with ahg.race_check(on_race="collect") as rc:
        src = device.malloc(16)
        await held.launch(stream)
        out = np.full(16, 0xEE, dtype=np.uint8)
        copy = await stream.memcpy(out, src)  # valid when enqueued
        fill = await stream.memset(src, 1, 16)
        device.free(src)  # freed while the copy waits behind the held kernel
    (report,) = rc.reports  # the fill supersedes the copy's read: one report covers both
    assert (report.kind, report.second.where) == ("write-after-write", "host")
    assert "Memset" in report.first.op
    held.release()
    with pytest.raises(ahg.InvalidDevicePointer):
        await copy
    with pytest.raises(ahg.InvalidDevicePointer):
        await fill
    assert (out == 0xEE).all()  # nothing was copied
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_kernel_whose_pointer_is_freed_before_it_runs_is_a_launch_failure(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    stream = device.create_stream()
    with ahg.race_check(on_race="collect") as rc:  # the use-after-free is the subject
        ptr = device.malloc(64)
        await held.launch(stream)
        completion = await stream.launch_kernel(fill_ones, 1, 1, (16, ptr))
        device.free(ptr)
    (report,) = rc.reports
    assert (report.kind, report.second.where) == ("write-after-write", "host")
    assert "fill_ones" in report.first.op
    held.release()
    with pytest.raises(ahg.LaunchFailure, match="fill_ones") as info:
        await completion
    assert isinstance(info.value.__cause__, ahg.InvalidDevicePointer)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_a_failed_stream_still_completes_its_events(device: ahg.Device) -> None:
    broken, waiter = device.create_stream(), device.create_stream()
    event = device.create_event()
    await broken.launch_kernel(explode, 1, 1, (1,))
    await broken.record_event(event)
    await waiter.wait_event(event)
    log: list[str] = []
    await (await waiter.launch_host_func(log.append, "ran"))
    assert log == ["ran"]
    assert event.query()
    await waiter.synchronize()  # the failure is not the waiting stream's
    with pytest.raises(ahg.LaunchFailure):
        await broken.synchronize()
    destroy(broken, waiter, event)
