"""A ``wait_event`` the device refused orders nothing, for the race checker too.

A wait on a pending record enqueues a barrier; the device refuses it when the calling thread
has no running event loop (or the device is busy on another loop). The call then fails and
orders nothing, so the race checker must not count the wait: the reader that follows it
still races with the writer.
"""

from __future__ import annotations

import threading

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


@pytest.mark.asyncio
async def test_a_refused_wait_orders_nothing_for_the_race_checker(device: ahg.Device) -> None:
    buf = device.malloc(NBYTES)
    writer = device.create_stream(non_blocking=True)
    reader = device.create_stream(non_blocking=True)
    written = device.create_event()
    held = HeldKernel("before the write")
    refused: list[BaseException] = []

    def wait_without_a_loop() -> None:
        try:
            reader.wait_event_nowait(written)
        except RuntimeError as error:
            refused.append(error)

    with ahg.race_check(on_race="collect") as check:
        await held.launch(writer)
        await writer.memcpy(buf, np.ones(N, np.float32))
        await writer.record_event(written)
        thread = threading.Thread(target=wait_without_a_loop)
        thread.start()
        thread.join()
        assert len(refused) == 1
        await reader.launch_kernel(read, 1, N, (N, buf))
        held.release()
        await device.synchronize()
    assert [report.kind for report in check.reports] == ["read-after-write"]
    destroy(buf, writer, reader, written)
