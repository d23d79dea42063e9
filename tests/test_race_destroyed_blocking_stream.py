"""The race checker's legacy default-stream rules cover destroyed blocking streams.

A destroyed stream's enqueued work still runs, and the legacy null stream orders after it as
it would had the stream stayed open (a task's per-thread stream, destroyed when the task ends,
is the common case). The race checker must know that ordering too: null-stream work after a
destroyed blocking stream's write is no race, and a null-stream synchronize covers that write.
A destroyed non-blocking stream's write still races with the null stream.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel
from cleanup import destroy

N = 64
NBYTES = N * 4


@ahg.kernel(extents={"src": "n"})
def read(t: ahg.Threads, n: ahg.int32, src: ahg.ConstPtr[ahg.float32]) -> None:
    _ = src[:n]


async def write_then_destroy(
    device: ahg.Device, buf: ahg.DevicePtr, *, non_blocking: bool
) -> HeldKernel:
    """A stream that writes ``buf`` behind a held kernel, destroyed before the write runs."""
    held = HeldKernel("before the write")
    stream = device.create_stream(non_blocking=non_blocking)
    await held.launch(stream)
    await stream.memcpy(buf, np.ones(N, np.float32))
    stream.destroy()
    return held


@pytest.mark.asyncio
async def test_null_stream_work_after_a_destroyed_blocking_streams_write_is_no_race(
    device: ahg.Device,
) -> None:
    buf = device.malloc(NBYTES)
    with ahg.race_check(on_race="collect") as check:
        held = await write_then_destroy(device, buf, non_blocking=False)
        await device.null_stream.launch_kernel(read, 1, N, (N, buf))
        held.release()
        await device.synchronize()
    assert check.reports == []
    destroy(buf)


@pytest.mark.asyncio
async def test_a_null_stream_synchronize_covers_a_destroyed_blocking_streams_write(
    device: ahg.Device,
) -> None:
    buf = device.malloc(NBYTES)
    other = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="collect") as check:
        held = await write_then_destroy(device, buf, non_blocking=False)
        held.release()
        await device.null_stream.synchronize()
        await other.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    assert check.reports == []
    destroy(buf, other)


@pytest.mark.asyncio
async def test_a_destroyed_non_blocking_streams_write_still_races_with_the_null_stream(
    device: ahg.Device,
) -> None:
    buf = device.malloc(NBYTES)
    with ahg.race_check(on_race="collect") as check:
        held = await write_then_destroy(device, buf, non_blocking=True)
        await device.null_stream.launch_kernel(read, 1, N, (N, buf))
        held.release()
        await device.synchronize()
    assert [report.kind for report in check.reports] == ["read-after-write"]
    destroy(buf)
