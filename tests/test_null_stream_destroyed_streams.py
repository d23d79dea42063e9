"""The legacy null stream orders after the work of destroyed blocking streams.

``destroy()`` lets a stream's enqueued work finish; HIP's ``hipStreamDestroy`` does too, so
null-stream work enqueued afterwards still waits for it, as it would had the stream stayed
open. The same holds for a task's per-thread stream, which is destroyed when the task ends
while its work may still run. A destroyed non-blocking stream never ordered with the null
stream and still does not.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import HeldKernel, loop_turns


def stream_off_the_null_queue(device: ahg.Device, *, non_blocking: bool = False) -> ahg.Stream:
    """A stream on another hardware queue than the null stream's (a shared queue would
    serialise the two anyway and hide the ordering under test)."""
    null_queue = device.null_stream.queue
    made = [device.create_stream(non_blocking=non_blocking)]
    while made[-1].queue is null_queue:
        made.append(device.create_stream(non_blocking=non_blocking))
    for extra in made[:-1]:
        extra.destroy()
    return made[-1]


@pytest.mark.asyncio
async def test_null_stream_work_waits_for_a_destroyed_blocking_streams_work(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    held = HeldKernel("blocking", log)
    stream = stream_off_the_null_queue(device)
    await held.launch(stream)
    await held.started.wait()
    stream.destroy()
    after = await device.null_stream.launch_host_func(log.append, "null")
    await loop_turns()
    assert log == ["blocking start"]
    assert not device.null_stream.query()
    held.release()
    await after
    assert log == ["blocking start", "blocking end", "null"]
    assert device.null_stream.query()


@pytest.mark.asyncio
async def test_null_stream_synchronize_covers_a_destroyed_blocking_streams_work(
    device: ahg.Device,
) -> None:
    held = HeldKernel("blocking")
    stream = stream_off_the_null_queue(device)
    await held.launch(stream)
    stream.destroy()
    sync = asyncio.ensure_future(device.null_stream.synchronize())
    await loop_turns()
    assert not sync.done()
    held.release()
    await sync
    assert held.runs == 1


@pytest.mark.asyncio
async def test_null_stream_work_waits_for_a_finished_tasks_per_thread_work(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    held = HeldKernel("per-thread", log)
    null_queue = device.null_stream.queue
    # Streams take queues round-robin: turn it until the next one is not the null stream's.
    made = [device.create_stream()]
    while device.queues[(made[-1].queue.index + 1) % len(device.queues)] is null_queue:
        made.append(device.create_stream())
    destroy(*made)

    async def task() -> None:
        mine = device.per_thread_stream()
        assert mine.queue is not null_queue
        await held.launch(mine)

    await asyncio.create_task(task())  # the task's stream is destroyed as the task ends
    await held.started.wait()
    after = await device.null_stream.launch_host_func(log.append, "null")
    await loop_turns()
    assert log == ["per-thread start"]
    held.release()
    await after
    assert log == ["per-thread start", "per-thread end", "null"]


@pytest.mark.asyncio
async def test_a_destroyed_non_blocking_stream_still_does_not_hold_the_null_stream(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    held = HeldKernel("non-blocking", log)
    stream = stream_off_the_null_queue(device, non_blocking=True)
    await held.launch(stream)
    await held.started.wait()
    stream.destroy()
    await (await device.null_stream.launch_host_func(log.append, "null"))
    assert log == ["non-blocking start", "null"]
    held.release()
    await device.synchronize()
