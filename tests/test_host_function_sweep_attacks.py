"""Host functions that hand the queue a task of the host program's own making.

A host function may return an awaitable, and its queue waits for it. A task the host
program made earlier, handed over that way, is then the host function's work: a wait of its
own for the stream that runs the host function (``stream.synchronize()``) could never end,
as the stream waits for the task. It waited for good; it is now refused with IllegalState,
as the same wait by the host function itself is, and the host call fails with it.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
async def test_a_handed_task_that_synchronizes_the_stream_holding_it_is_refused(
    device: ahg.Device,
) -> None:
    with device.create_stream() as stream:

        async def waits_for_the_stream() -> None:
            await asyncio.sleep(0)  # step 1: the host function below hands this task over
            await stream.synchronize()  # step 2: the stream waits for this very task

        task = asyncio.ensure_future(waits_for_the_stream())
        handed = await stream.launch_host_func(lambda: task)
        with pytest.raises(ahg.LaunchFailure) as caught:
            await asyncio.wait_for(handed, 5)
        assert isinstance(caught.value.__cause__, ahg.IllegalState)
        with pytest.raises(ahg.IllegalState):
            await task
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
        ran: list[int] = []
        await stream.launch_host_func(ran.append, 1)
        await asyncio.wait_for(stream.synchronize(), 5)
        assert ran == [1]
    assert device.statistics().in_flight == 0


@pytest.mark.asyncio
async def test_a_read_only_view_cannot_be_made_writeable_again(device: ahg.Device) -> None:
    """A view that is read-only (``readonly=True``, or memory a declared host function only
    reads) must stay so: numpy lets code set a cleared writeable flag back over writeable
    memory, and the race checker takes such a view as a read."""
    ptr = device.malloc(8)
    view = device.view(ptr, np.int64, 1, readonly=True)
    with pytest.raises(ValueError, match="WRITEABLE"):
        view.flags.writeable = True
    outcome: list[str] = []

    def reader() -> None:
        declared = device.view(ptr, np.int64, 1)  # declared only as read: read-only
        try:
            declared.flags.writeable = True
            declared[0] = 9
        except ValueError:
            outcome.append("refused")

    stream = device.create_stream()
    await (await stream.launch_host_func(ahg.host_function(reader, reads=[ptr])))
    assert outcome == ["refused"]
    assert int(device.view(ptr, np.int64, 1)[0]) == 0
    stream.destroy()
    device.free(ptr)
