"""An async host function whose task user code cancels fails its call, as if it raised
CancelledError: the rest of the stream's work runs, and the device does not count it as work
its event loop cut short when it shut down (which the leak report would blame on the test)."""

from __future__ import annotations

import asyncio

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
