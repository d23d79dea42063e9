"""A loop that closes while async bodies are still queued behind each other.

``asyncio.run`` cancels what is left once its main task returns, then runs a few more loop
turns (async generators, the default executor) and closes the loop. The device's pump runs in
those turns too: when the body it cancelled gives up its program, the next packet's async
body starts as a new task, which nothing cancels any more and the closed loop never runs.
asyncio then logged "Task was destroyed but it is pending!" about that task of the runtime's
own, and Python warned that the body's coroutine and the user's coroutine were never awaited
(an error under ``-W error``). The work is abandoned like everything its loop left behind
(the next loop fails it with IllegalState), and a body that never ran is closed quietly.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from loops import LOOPS

ran: list[int] = []


async def body(index: int) -> None:
    await asyncio.sleep(0)
    ran.append(index)


@ahg.kernel
async def async_kernel(t: ahg.Threads) -> None:
    await asyncio.sleep(0)


@pytest.mark.parametrize("new_loop", LOOPS, ids=lambda f: f.__module__.split(".")[0])
@pytest.mark.parametrize("queued", [3, 10])
def test_bodies_queued_when_the_loop_closes_leave_no_pending_task_and_no_warning(
    device: ahg.Device, new_loop: Callable[[], asyncio.AbstractEventLoop], queued: int
) -> None:
    stream = device.create_stream()
    handles: list[ahg.Completion] = []
    reported: list[dict[str, Any]] = []

    async def launch_and_leave() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, c: reported.append(c))
        for index in range(queued):
            handles.append(await stream.launch_host_func(body, index))
            handles.append(await stream.launch_kernel(async_kernel, 1, 1, ()))
        # returns with every body queued: the loop shuts down with them in flight

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(launch_and_leave())
        gc.collect()
    assert [c["message"] for c in reported] == []
    assert [str(w.message) for w in caught] == []

    async def settle() -> None:
        # What the closed loop left fails (how far it got depends on the shutdown's turns)
        # and completes on this loop.
        for handle in handles:
            with contextlib.suppress(ahg.LaunchFailure, ahg.IllegalState):
                await handle
        with contextlib.suppress(ahg.LaunchFailure, ahg.IllegalState):
            await stream.synchronize()
        assert device.statistics().in_flight == 0

    asyncio.run(settle())
    assert device.statistics().abandoned == 0
    stream.destroy()


@pytest.mark.leaks_allowed("the collected body's queue stays parked for good: that is the point")
@pytest.mark.asyncio
async def test_a_running_body_collected_while_pending_is_still_reported(
    device: ahg.Device,
) -> None:
    # Only a body that never ran is closed quietly: one that ran and awaits something
    # nothing else refers to is collected while pending, its queue then waits for good, and
    # asyncio's report of it is what tells the user.
    reported: list[str] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, c: reported.append(c["message"]))

    async def awaits_a_lost_future() -> None:
        await asyncio.get_running_loop().create_future()  # nothing else holds it

    stream = device.create_stream()
    await stream.launch_host_func(awaits_a_lost_future)
    await asyncio.sleep(0)  # the pump runs the host function and starts its task
    await asyncio.sleep(0)  # the task's first step: it parks on the future
    gc.collect()
    assert reported == ["Task was destroyed but it is pending!"]
    stream.destroy()
