"""A loop that closes with an async host function about to start.

An async host function's coroutine was made when its op ran, and awaited by a wrapper task
that sets the running-host-function context. When the loop shut down before that task's
first step (``asyncio.run`` returning while the host node was due), asyncio cancelled the
wrapper before it ever ran, and the user's coroutine, made but never awaited, warned
"coroutine ... was never awaited" when it was collected: a ``RuntimeWarning`` far from any
mistake of the user's (an error under ``-W error``). The coroutine is now the task itself,
started in the context the wrapper used to set.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings

import pytest

import ahipgraph as ahg


async def _body() -> None:
    await asyncio.sleep(0)


@pytest.mark.leaks_allowed(
    "its loop shuts down with host functions running: the device counts them as abandoned"
)
def test_a_loop_closed_before_an_async_host_function_started_does_not_warn(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_host_node(_body)
    graph_exec = graph.instantiate()
    handles: list[ahg.Completion] = []

    async def launch_and_leave() -> None:
        handles.append(await stream.launch_host_func(_body))
        handles.append(await graph_exec.launch(stream))
        # returns with both host functions due: asyncio.run shuts the loop down

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(launch_and_leave())
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]

    async def settle() -> None:
        # Work its loop gave up on fails (how far it got depends on the shutdown's turns),
        # and still completes on this loop.
        for handle in handles:
            with contextlib.suppress(ahg.LaunchFailure):
                await handle
        with contextlib.suppress(ahg.LaunchFailure):
            await stream.synchronize()
        assert device.statistics().in_flight == 0

    asyncio.run(settle())
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_an_async_host_function_still_runs_as_the_running_host_function(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(8)
    seen: list[int] = []

    async def reads() -> None:
        await asyncio.sleep(0)
        seen.append(int(device.view(buffer, "u1", readonly=True)[0]))

    declared = ahg.host_function(reads, reads=[buffer])
    stream = device.create_stream()
    await stream.memset(buffer, 9, 8)
    await (await stream.launch_host_func(declared))
    assert seen == [9]

    async def views_outside() -> None:
        await asyncio.sleep(0)
        device.view(buffer, "u1", readonly=True)

    undeclared = ahg.host_function(views_outside, reads=[])
    with pytest.raises(ahg.LaunchFailure):
        await (await stream.launch_host_func(undeclared))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    stream.destroy()
    device.free(buffer)
