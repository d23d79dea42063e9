"""A BaseException from user code: CancelledError is that op's failure; KeyboardInterrupt and
SystemExit propagate, but the packet finishes as failed and the device keeps working."""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


def cancelled_result() -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.cancel()
    future.result()  # raises CancelledError


@pytest.mark.asyncio
async def test_a_cancelled_error_from_a_host_function_fails_that_op_only(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    failed = await stream.launch_host_func(cancelled_result)
    after = await stream.launch_kernel(add_one, 1, 1, (out,))
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed
    assert isinstance(caught.value.__cause__, asyncio.CancelledError)
    await after
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # the stream reports it once
    await stream.synchronize()
    assert device.view(out, "int64", 1)[0] == 1
    destroy(out, stream)


@pytest.mark.asyncio
async def test_a_cancelled_error_raised_by_an_async_body_fails_that_op(
    device: ahg.Device,
) -> None:
    async def body() -> None:
        raise asyncio.CancelledError

    stream = device.create_stream()
    done = await stream.launch_host_func(body)
    with pytest.raises(ahg.LaunchFailure):
        await done
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert device.statistics().in_flight == 0
    destroy(stream)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_propagates_and_the_device_stays_consistent(
    device: ahg.Device, interrupt: type[BaseException]
) -> None:
    out, side = device.malloc(8), device.malloc(8)  # one buffer per stream: they are unordered

    def stop() -> None:
        raise interrupt

    async def first_run(stream: ahg.Stream, other: ahg.Stream) -> tuple[ahg.Completion, ...]:
        failed = await stream.launch_host_func(stop)
        behind = await stream.launch_kernel(add_one, 1, 1, (out,))
        beside = await other.launch_kernel(add_one, 1, 1, (side,))
        await asyncio.sleep(0)  # the device runs on the loop's next turn
        await asyncio.sleep(0)
        return failed, behind, beside

    loop = asyncio.new_event_loop()
    try:
        stream = device.create_stream()
        other = device.create_stream()
        task = loop.create_task(first_run(stream, other))
        with pytest.raises(interrupt):
            loop.run_until_complete(task)

        async def afterwards() -> None:
            failed, behind, beside = await task
            with pytest.raises(ahg.LaunchFailure):
                await failed
            await behind
            await beside
            with pytest.raises(ahg.LaunchFailure):
                await stream.synchronize()
            await device.synchronize()

        loop.run_until_complete(afterwards())
    finally:
        loop.close()
    assert device.view(out, "int64", 1)[0] == 1  # behind the failed host function
    assert device.view(side, "int64", 1)[0] == 1  # beside it, on the other stream
    assert device.statistics().in_flight == 0
    destroy(out, side, stream, other)
