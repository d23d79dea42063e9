"""Copies of 0 bytes at the null pointer.

A stream copy of 0 bytes succeeds without looking at its pointers, as ``hipMemcpy[Async]``
does, but a null pointer is still refused with InvalidValue (a fill of 0 bytes at the null
pointer already was). The copy skipped every pointer check, the null check with them, so
``memcpy(null, src, 0)`` and ``memcpy_peer`` of 0 bytes from or to the null pointer
succeeded, eagerly and under capture. Each refusal leaves the device, its memory and the
kit's snapshot exactly as before, and a capture active and empty.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


def _calls(
    stream: ahg.Stream, ptr: ahg.DevicePtr, host: np.ndarray
) -> dict[str, Callable[[], Awaitable[Any]]]:
    null = ahg.DevicePtr(ptr.device, 0)
    return {
        "memcpy to null": lambda: stream.memcpy(null, host, 0),
        "memcpy from null": lambda: stream.memcpy(host, null, 0),
        "memcpy null to device": lambda: stream.memcpy(ptr, null, 0),
        "memset null": lambda: stream.memset(null, 7, 0),
        "peer to null": lambda: stream.memcpy_peer(null, ptr.device, ptr, ptr.device, 0),
        "peer from null": lambda: stream.memcpy_peer(ptr, ptr.device, null, ptr.device, 0),
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
async def test_an_empty_copy_at_the_null_pointer_is_still_invalid_value(
    device: ahg.Device, captured: bool
) -> None:
    stream = device.create_stream()
    ptr = device.malloc(64)
    host = np.arange(16, dtype=np.uint8)
    if captured:
        stream.begin_capture()
    before = (device.statistics(), device.memory_info(), ahg.testing.snapshot())
    for name, call in _calls(stream, ptr, host).items():
        with pytest.raises(ahg.InvalidValue, match="null"):
            await call()
        assert (device.statistics(), device.memory_info(), ahg.testing.snapshot()) == before, name
    if captured:
        assert stream.capture_info().status is ahg.CaptureStatus.ACTIVE
        graph = stream.end_capture()
        assert graph.nodes() == []
        graph.destroy()
    with pytest.raises(ahg.InvalidValue, match="null"):
        await device.memcpy(ahg.DevicePtr(0, 0), host, 0)
    await (await stream.memcpy(ptr + 64, host, 0))  # one past the end: still fine
    await stream.synchronize()
    assert host.tolist() == list(range(16))
    stream.destroy()
    device.free(ptr)
