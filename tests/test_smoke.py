from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def scale(t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32]) -> None:
    i = t.ids[t.ids < n]
    x[i] *= a


@pytest.mark.asyncio
async def test_scale_roundtrip(device: ahg.Device) -> None:
    n = 1000
    host = np.arange(n, dtype=np.float32)
    ptr = device.malloc(host.nbytes)
    stream = device.create_stream()
    await stream.memcpy(ptr, host)
    await stream.launch_kernel(scale, (n + 255) // 256, 256, (n, 3.0, ptr))
    out = np.empty_like(host)
    await stream.memcpy(out, ptr)
    await stream.synchronize()
    np.testing.assert_array_equal(out, host * 3)
    device.free(ptr)
    assert device.memory.bytes_in_use == 0
    destroy(stream)
