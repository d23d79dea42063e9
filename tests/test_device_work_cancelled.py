"""An async host function whose task user code cancels fails its call, as if it raised
CancelledError: the rest of the stream's work runs, and the device does not count it as work
its event loop cut short when it shut down (which the leak report would blame on the test)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
async def test_a_cancelled_host_function_task_fails_its_call_and_the_stream_goes_on(
    device: ahg.Device,
) -> None:
    started = asyncio.Event()
    tasks: list[asyncio.Task[object]] = []
    ran: list[int] = []

    async def forever() -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        started.set()
        await asyncio.Event().wait()

    with device.create_stream() as stream:
        done = await stream.launch_host_func(forever)
        await started.wait()
        tasks[0].cancel()
        with pytest.raises(ahg.LaunchFailure) as caught:
            await done
        assert isinstance(caught.value.__cause__, asyncio.CancelledError)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
        await stream.launch_host_func(lambda: ran.append(1))
        await stream.synchronize()
    assert ran == [1]
    stats = device.statistics()
    assert (stats.in_flight, stats.abandoned) == (0, 0)


@pytest.mark.asyncio
async def test_a_host_function_cancelled_by_a_failing_task_group_child_is_not_abandoned(
    device: ahg.Device,
) -> None:
    """The child that cancels the host function's task fails, so its group cancels the
    parent task too: when the body's task finishes, every other task is being cancelled, as
    when the loop shuts down; but the loop is not shutting down, and the body just failed."""
    started = asyncio.Event()
    tasks: list[asyncio.Task[object]] = []
    ran: list[int] = []

    async def forever() -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        started.set()
        await asyncio.Event().wait()

    async def cancel_it_and_fail() -> None:
        tasks[0].cancel()
        raise ValueError("the child failed")

    with device.create_stream() as stream:
        done = await stream.launch_host_func(forever)
        await stream.launch_host_func(lambda: ran.append(1))
        await started.wait()
        with pytest.raises(ExceptionGroup):
            await _in_a_group_with(cancel_it_and_fail)
        with pytest.raises(ahg.LaunchFailure) as caught:
            await done
        assert isinstance(caught.value.__cause__, asyncio.CancelledError)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
    assert ran == [1]
    stats = device.statistics()
    assert (stats.in_flight, stats.abandoned) == (0, 0)


async def _in_a_group_with(child: Callable[[], Awaitable[None]]) -> None:
    """Wait, in a task group with ``child``, until the group cancels this task."""
    async with asyncio.TaskGroup() as group:
        group.create_task(child())
        await asyncio.Event().wait()
