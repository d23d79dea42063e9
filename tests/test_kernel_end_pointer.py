"""A pointer one past an allocation's end is a legal kernel argument until it is dereferenced.

Range-style kernels take ``(begin, end)`` pointers, and ``x + nbytes`` is the end of ``x``. HIP
passes any address to a kernel and faults only on an access; a dispatch used to refuse the end
pointer outright (InvalidDevicePointer) even when no thread read through it. Its view is now
empty, so an access through it still fails the kernel, as any out-of-range access does.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def fill_range(t: ahg.Threads, begin: ahg.Ptr[ahg.int32], end: ahg.Ptr[ahg.int32]) -> None:
    """Writes each thread's id into [begin, end); ``end`` only says where the range stops."""
    count = begin.shape[0] - end.shape[0]  # views run to the allocation's end
    ids = t.ids[t.ids < count]
    begin[ids] = ids


@ahg.kernel
def write_end(t: ahg.Threads, end: ahg.Ptr[ahg.int32]) -> None:
    """Dereferences the end pointer: an out-of-range access."""
    end[0] = 1


async def _read(stream: ahg.Stream, x: ahg.DevicePtr, count: int) -> list[int]:
    out = np.zeros(count, np.int32)
    await stream.memcpy(out, x)
    await stream.synchronize()
    return out.tolist()


@pytest.mark.asyncio
async def test_an_eager_kernel_takes_an_end_pointer(device: ahg.Device) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    await stream.memset(x, 0xFF, 16)
    await stream.launch_kernel(fill_range, 1, 8, (x, x + 16))
    assert await _read(stream, x, 4) == [0, 1, 2, 3]
    # Mid-allocation ends are ordinary pointers, as before.
    await stream.launch_kernel(fill_range, 1, 8, (x + 8, x + 16))
    assert await _read(stream, x, 4) == [0, 1, 0, 1]
    destroy(stream, x)


@pytest.mark.asyncio
async def test_a_replayed_graph_takes_an_end_pointer(device: ahg.Device) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    with ahg.Graph() as graph:
        graph.add_memset_node(x, 0xFF, 16)
        graph.add_kernel_node(fill_range, 1, 8, (x, x + 16), deps=graph.nodes())
        with graph.instantiate() as graph_exec:
            for _ in range(3):
                await (await graph_exec.launch(stream))
                assert await _read(stream, x, 4) == [0, 1, 2, 3]
    destroy(stream, x)


@pytest.mark.asyncio
async def test_dereferencing_the_end_pointer_still_fails_the_kernel(device: ahg.Device) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    await stream.launch_kernel(write_end, 1, 1, (x + 16,))
    with pytest.raises(ahg.LaunchFailure, match="out of bounds"):
        await stream.synchronize()
    destroy(stream, x)


@pytest.mark.asyncio
async def test_past_the_end_or_freed_stays_an_invalid_pointer(device: ahg.Device) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    await stream.launch_kernel(fill_range, 1, 8, (x, x + 20))  # past the end, not at it
    with pytest.raises(ahg.LaunchFailure) as failure:
        await stream.synchronize()
    assert isinstance(failure.value.__cause__, ahg.InvalidDevicePointer)
    end = x + 16
    device.free(x)
    keep = device.malloc(64)  # memory elsewhere, so the device is not empty
    await stream.launch_kernel(fill_range, 1, 8, (end, end))  # the allocation is gone
    with pytest.raises(ahg.LaunchFailure) as failure:
        await stream.synchronize()
    assert isinstance(failure.value.__cause__, ahg.InvalidDevicePointer)
    destroy(stream, keep)
