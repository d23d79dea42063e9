"""A task a declared host function spawns is the function's only while the function runs.

Inside a host function declared with ``ahg.host_function(fn, reads=..., writes=...)``, views
outside the declaration are refused, and the race checker takes the function's views as its
declared footprint rather than as host accesses. A task the function spawned inherited that
for good: after the function had ended, the task's own ``device.view`` of other memory still
failed with InvalidValue naming the host function. The function's call now ends with it (an
``async`` one's when its task ends), and a task it spawned that runs on is host code again.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_task_a_declared_host_function_spawned_is_host_code_once_it_ended(
    device: ahg.Device, kind: str
) -> None:
    declared, other = device.malloc(8), device.malloc(8)
    go_on = asyncio.Event()
    seen: list[str] = []

    async def background() -> None:
        if kind == "async":  # it starts while the host function still runs: refused there
            with pytest.raises(ahg.InvalidValue):
                device.view(other, np.int64, 1)
        await go_on.wait()  # the host function has ended by now
        device.view(other, np.int64, 1)[0] = 5
        seen.append("viewed")

    spawned: list[asyncio.Task[None]] = []

    def spawns() -> None:
        spawned.append(asyncio.get_running_loop().create_task(background()))

    async def spawns_async() -> None:
        spawns()
        await asyncio.sleep(0)  # the task starts while this function still runs

    fn = spawns if kind == "sync" else spawns_async
    stream = device.create_stream()
    await (await stream.launch_host_func(ahg.host_function(fn, reads=[declared])))
    go_on.set()
    await spawned[0]
    assert seen == ["viewed"]
    assert device.view(other, np.int64, 1)[0] == 5
    destroy(stream, declared, other)
