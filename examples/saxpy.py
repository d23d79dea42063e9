"""SAXPY on eager streams: copy in, launch, copy out, check the numbers."""

from __future__ import annotations

import numpy as np

import ahipgraph as ahg


@ahg.kernel
def saxpy(
    t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32], y: ahg.Ptr[ahg.float32]
) -> None:
    i = t.ids[t.ids < n]
    y[i] = a * x[i] + y[i]


async def main() -> None:
    device = ahg.get_device(0)
    n, a = 1 << 16, np.float32(2.5)
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)

    x, y = device.malloc(x_host.nbytes), device.malloc(y_host.nbytes)
    stream = device.create_stream()
    start, stop = device.create_event(), device.create_event()
    try:
        await stream.memcpy(x, x_host)
        await stream.memcpy(y, y_host)
        await stream.record_event(start)
        await stream.launch_kernel(saxpy, grid=(n + 255) // 256, block=256, args=(n, a, x, y))
        await stream.record_event(stop)
        out = np.empty_like(y_host)
        await stream.memcpy(out, y)
        await stream.synchronize()
    finally:
        device.free(x)
        device.free(y)
        stream.destroy()

    expected = a * x_host + y_host
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    print(f"saxpy n={n}: max |error| = {np.abs(out - expected).max():.2e}")
    print(f"kernel time (simulated): {ahg.elapsed_time(start, stop):.4f} ms")
    start.destroy()
    stop.destroy()


if __name__ == "__main__":
    ahg.run(main)
