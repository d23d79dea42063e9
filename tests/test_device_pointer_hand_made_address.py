"""A hand-made ``DevicePtr`` whose address is a number but not an int.

A pointer is not checked when it is made; every use checks it. An address that is a float or
a numpy integer *equal* to a live allocation's base was found in the allocation table all the
same: ``free`` freed the allocation, a memset was accepted and failed only when the stream ran
it (a slice with a float), a numpy address made the call fail with "__bool__ should return
bool". Every call now refuses such a pointer with its own HIP error, and changes nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

KINDS = [float, np.int64, np.uint64]


def forged(ptr: ahg.DevicePtr, kind: Any) -> ahg.DevicePtr:
    return ahg.DevicePtr(ptr.device, kind(ptr.address))


@pytest.mark.parametrize("kind", KINDS)
def test_free_and_view_refuse_it_and_the_allocation_lives(device: ahg.Device, kind: Any) -> None:
    ptr = device.malloc(16)
    before = device.memory_info()
    with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
        device.free(forged(ptr, kind))
    with pytest.raises(ahg.InvalidDevicePointer, match="not an int"):
        device.view(forged(ptr, kind), np.uint8, 4)
    assert device.memory_info() == before
    device.view(ptr, np.uint8, 4)[:] = 1  # still the user's
    device.free(ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", KINDS)
async def test_stream_and_graph_calls_refuse_it_when_called(device: ahg.Device, kind: Any) -> None:
    ptr = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    bad = forged(ptr, kind)
    with pytest.raises(ahg.InvalidDevicePointer, match="not an int"):
        await stream.memset(bad, 0, 4)
    with pytest.raises(ahg.InvalidDevicePointer, match="not an int"):
        await stream.memcpy(bad, np.zeros(4, np.uint8), 4)
    with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
        await stream.free_async(bad)
    with pytest.raises(ahg.InvalidDevicePointer, match="not an int"):
        graph.add_memset_node(bad, 0, 4)
    with pytest.raises(ahg.InvalidDevicePointer, match="not an int"):
        graph.add_memcpy_node(ptr, bad, 4)
    assert stream.statistics().submitted == 0
    assert graph.nodes() == []
    await stream.synchronize()  # nothing was enqueued that could fail later
    destroy(graph, stream, ptr)


def test_a_zero_that_is_not_an_int_is_not_null(device: ahg.Device) -> None:
    # Only the int 0 is the null pointer (which free takes as a no-op); a float 0.0 or a
    # numpy 0 names no allocation and is refused by the call that uses it.
    for kind in KINDS:
        pointer = ahg.DevicePtr(0, kind(0))
        assert bool(pointer)
        with pytest.raises(ahg.InvalidDevicePointer):
            device.view(pointer, np.uint8, 1)
    assert not ahg.DevicePtr(0, 0)
