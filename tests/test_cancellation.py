"""Cancellation: a task cancelled while it waits for device work leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.device.signal import Signal
from cleanup import destroy
from fakes import HeldKernel, loop_turns


class Boom(Exception):
    pass


def no_waiters_on(signal: Signal) -> bool:
    """Nobody waits on ``signal``: no live waiter, and no stale entry left in its queue."""
    lot = signal._lot
    return signal.waiters == 0 and (lot is None or not lot._waiters)


_MADE: list[ahg.Stream] = []  # streams held_stream made, destroyed after each test


@pytest.fixture(autouse=True)
def _destroy_made_streams() -> Iterator[None]:
    yield
    while _MADE:
        destroy(_MADE.pop())


async def held_stream(device: ahg.Device) -> tuple[HeldKernel, ahg.Stream, ahg.Completion]:
    held = HeldKernel()
    stream = device.create_stream()
    _MADE.append(stream)
    completion = await held.launch(stream)
    await held.started.wait()
    return held, stream, completion


async def cancel_while_parked(wait: Awaitable[Any]) -> None:
    task = asyncio.ensure_future(wait)
    await loop_turns()  # the task runs up to its park and waits there
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.asyncio
async def test_cancelled_stream_synchronize_leaves_no_waiter_behind(device: ahg.Device) -> None:
    held, stream, completion = await held_stream(device)
    tail = stream.tail
    assert tail is not None
    await cancel_while_parked(stream.synchronize())
    assert no_waiters_on(tail)
    assert held.runs == 1  # the work itself was not cancelled...
    assert not completion.done()
    held.release()
    await stream.synchronize()  # ...and a later synchronize still sees it through
    assert completion.done()


@pytest.mark.asyncio
async def test_cancelled_event_synchronize_leaves_no_waiter_behind(device: ahg.Device) -> None:
    held, stream, _ = await held_stream(device)
    event = device.create_event()
    await stream.record_event(event)
    assert event.signal is not None
    await cancel_while_parked(event.synchronize())
    assert no_waiters_on(event.signal)
    held.release()
    await event.synchronize()
    assert event.query()
    destroy(event)


@pytest.mark.asyncio
async def test_cancelled_completion_wait_leaves_no_waiter_behind(device: ahg.Device) -> None:
    held, _, completion = await held_stream(device)
    await cancel_while_parked(completion.wait())
    assert no_waiters_on(completion._signal)
    held.release()
    await completion


@pytest.mark.asyncio
async def test_cancelled_device_synchronize_leaves_no_waiter_behind(device: ahg.Device) -> None:
    held, _, _ = await held_stream(device)
    await cancel_while_parked(device.synchronize())
    assert len(device.engine._idle) == 0
    assert not device.engine._idle._waiters
    held.release()
    await device.synchronize()
    assert device.in_flight == 0


@pytest.mark.asyncio
async def test_cancelled_null_stream_synchronize_leaves_no_waiter_on_any_stream(
    device: ahg.Device,
) -> None:
    held = [HeldKernel(f"k{i}") for i in range(2)]
    streams = [device.create_stream() for _ in range(2)]
    for kernel, stream in zip(held, streams, strict=True):
        await kernel.launch(stream)
    tails = [stream.tail for stream in streams]
    await cancel_while_parked(device.null_stream.synchronize())
    assert all(tail is not None and no_waiters_on(tail) for tail in tails)
    for kernel in held:
        kernel.release()
    await device.null_stream.synchronize()
    destroy(*streams)


@pytest.mark.asyncio
async def test_cancelling_one_waiter_does_not_disturb_the_others(device: ahg.Device) -> None:
    held, stream, _ = await held_stream(device)
    waiters: list[Callable[[], Awaitable[Any]]] = [
        stream.synchronize,
        stream.synchronize,
        device.synchronize,
    ]
    tasks = [asyncio.ensure_future(wait()) for wait in waiters]
    await loop_turns()  # all three park
    tasks[0].cancel()
    held.release()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[0], asyncio.CancelledError)
    assert results[1:] == [None, None]
    assert stream.tail is not None
    assert no_waiters_on(stream.tail)


@pytest.mark.asyncio
async def test_synchronize_cancelled_after_its_wake_up_keeps_the_streams_error(
    device: ahg.Device,
) -> None:
    # The race: the failing packet completes and wakes the synchronize, and the task is
    # cancelled before it resumes. The cancelled call must not swallow the error.
    gate = asyncio.Event()

    @ahg.kernel
    async def fail_when_released(t: ahg.Threads) -> None:
        await gate.wait()
        raise Boom("released")

    stream = device.create_stream()
    sync: asyncio.Future[None] | None = None
    retired = stream._retired_cb

    def retire_then_cancel(program: Any) -> None:
        # Runs right after the completion signal woke the synchronize, before it resumes.
        retired(program)
        assert sync is not None
        sync.cancel()

    stream._retired_cb = retire_then_cancel
    await stream.launch_kernel(fail_when_released, 1, 1)
    stream._retired_cb = retired
    sync = asyncio.ensure_future(stream.synchronize())
    await loop_turns()  # the synchronize parks on the kernel's completion
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await sync
    assert stream.tail is not None
    assert no_waiters_on(stream.tail)
    with pytest.raises(ahg.LaunchFailure, match="fail_when_released"):
        await stream.synchronize()  # the error was kept for the next caller
    await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_synchronize_cancelled_in_the_same_step_as_completion_leaves_no_waiter(
    device: ahg.Device,
) -> None:
    # The other side of the race: the task is cancelled just before the wake-up reaches it.
    held = HeldKernel()
    stream = device.create_stream()
    completion = await held.launch(stream)
    sync = asyncio.ensure_future(stream.synchronize())
    await loop_turns()  # the synchronize parks
    signal = completion._signal
    signal.when_reached(0, sync.cancel)  # device-side watchers run before host waiters wake
    held.release()
    with pytest.raises(asyncio.CancelledError):
        await sync
    assert no_waiters_on(signal)
    assert completion.done()
    await stream.synchronize()
    destroy(stream)
