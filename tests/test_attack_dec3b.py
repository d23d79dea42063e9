"""Hostile use of the synchronous copies that run on their memory's device.

A synchronous copy whose device memory is all on another device runs on that device's null
stream, after this device's null stream's last work: this device's legacy order is still the
call's, so a capture a blocking stream of this device began during the call (the arguments'
own code, or another task while the call waited for this null stream) refuses it, as it
refuses a copy of this device's own memory and a copy of 0 bytes.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, fresh_devices


class _BeginsCapture:
    """A size whose ``__index__`` begins a capture on ``stream``: user code run by the call's
    argument checks."""

    def __init__(self, stream: ahg.Stream, size: int) -> None:
        self.stream, self.size = stream, size

    def __index__(self) -> int:
        if self.stream.is_capturing() == ahg.CaptureStatus.NONE:
            self.stream.begin_capture()
        return self.size


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [8, 0])
@pytest.mark.parametrize("call", ["memcpy", "memcpy_2d", "memcpy_peer"])
async def test_a_copy_of_another_devices_memory_whose_size_began_a_capture_here_is_refused(
    size: int, call: str
) -> None:
    """A copy of 8 bytes of device 1's memory, called on device 0, whose size began a capture
    on a blocking stream of device 0 ran on device 1's null stream while that capture went
    on; one of 0 bytes, or one of device 0's own memory, was refused."""
    with fresh_devices(2) as (d0, d1):
        stream = d0.create_stream()
        ptr = d1.malloc(64)
        host = np.zeros(64, np.uint8)
        nbytes = _BeginsCapture(stream, size)
        calls = {
            "memcpy": lambda: d0.memcpy(host, ptr, nbytes),  # type: ignore[arg-type]
            "memcpy_2d": lambda: d0.memcpy_2d(host, 8, ptr, 8, nbytes, 1),  # type: ignore[arg-type]
            "memcpy_peer": lambda: d0.memcpy_peer(ptr, d1, ptr + 8, d1, nbytes),  # type: ignore[arg-type]
        }
        with pytest.raises(ahg.StreamCaptureImplicit):
            await calls[call]()
        assert stream.is_capturing() == ahg.CaptureStatus.ACTIVE  # the capture goes on
        stream.end_capture().destroy()
        assert (d0.null_stream.submitted, d1.null_stream.submitted) == (0, 0)
        stream.destroy()
        d1.free(ptr)


@pytest.mark.asyncio
async def test_a_copy_of_another_devices_memory_is_refused_if_a_capture_began_while_it_waited() -> (
    None
):
    """The copy waits for device 0's null stream before it moves to device 1's: a capture
    another task began on device 0 meanwhile refuses it, as it refuses an enqueue on device
    0's null stream that waited for room."""
    with fresh_devices(2) as (d0, d1):
        stream = d0.create_stream()
        ptr = d1.malloc(64)
        host = np.zeros(64, np.uint8)
        held = HeldKernel()
        running = await d0.null_stream.launch_kernel(held.kernel, 1, 1, ())
        await held.started.wait()
        copy = asyncio.ensure_future(d0.memcpy(host, ptr, 64))
        await asyncio.sleep(0)  # the copy waits for device 0's null stream
        assert not copy.done()
        stream.begin_capture()
        held.release()
        await running
        async with asyncio.timeout(5):
            with pytest.raises(ahg.StreamCaptureImplicit):
                await copy
        stream.end_capture().destroy()
        assert d1.null_stream.submitted == 0
        stream.destroy()
        d1.free(ptr)
