"""A host view of device memory is the caller's own array object: reshaping it or making it
read-only changes nothing for kernels, which decode the same bytes through views of their own."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def fill(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[t.ids] = 7


@pytest.mark.asyncio
async def test_changing_a_host_views_metadata_does_not_reach_kernels(device: ahg.Device) -> None:
    """``device.view(ptr, dtype)`` handed out the allocator's cached view itself: setting its
    shape or its writeable flag made every later kernel given ``ptr`` fail."""
    stream = device.create_stream()
    frozen, reshaped = device.malloc(64), device.malloc(64)
    view = device.view(frozen, np.int32)
    view.flags.writeable = False
    view = device.view(reshaped, np.int32)
    view.shape = (2, 8)
    for ptr in (frozen, reshaped):
        await stream.launch_kernel(fill, 1, 16, (ptr,))
    await stream.synchronize()
    for ptr in (frozen, reshaped):
        assert device.view(ptr, np.int32).tolist() == [7] * 16
    # The caller's array still sees the bytes, in its own shape.
    assert view.shape == (2, 8)
    assert int(view.sum()) == 7 * 16
    device.free(frozen)
    device.free(reshaped)
    destroy(stream)


def test_two_host_views_are_distinct_objects_over_the_same_bytes(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    first, second = device.view(ptr, np.int32), device.view(ptr, np.int32)
    assert first is not second
    first[0] = 5
    assert second[0] == 5
    device.free(ptr)
