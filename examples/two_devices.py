"""Two devices: a pitched image on device 1, filtered by a graph of device 0 through peer access.

* the filter's weights live in a device symbol, uploaded with ``memcpy_to_symbol``;
* the image goes to device 1 as a pitched 2D copy (rows padded to 256 bytes);
* device 0 gets peer access to device 1, so its kernel reads the image where it lies;
* the graph, made for device 0, is launched on device 1's stream (a cross-device launch), gated
  by a stream memory wait that the host releases;
* the result comes back as a pitched copy and is checked against numpy.
"""

from __future__ import annotations

import asyncio

import numpy as np

import ahipgraph as ahg

ROWS, COLS, PITCH = 48, 40, 256  # COLS float32 = 160 bytes of each 256-byte row
WEIGHTS = ahg.device_symbol("two_devices.weights", dtype=np.float32, shape=(3,))


@ahg.kernel
def row_filter(
    t: ahg.Threads,
    rows: ahg.int32,
    cols: ahg.int32,
    pitch: ahg.int32,
    weights: ahg.Ptr[ahg.float32],
    src: ahg.Ptr[ahg.float32],
    dst: ahg.Ptr[ahg.float32],
) -> None:
    # One thread per row: dst[r, c] = w0 * src[r, c-1] + w1 * src[r, c] + w2 * src[r, c+1].
    stride = pitch // 4
    for r in t.ids[t.ids < rows]:
        row = src[r * stride : r * stride + cols]
        padded = np.concatenate(([0.0], row, [0.0])).astype(np.float32)
        out = weights[0] * padded[:-2] + weights[1] * padded[1:-1] + weights[2] * padded[2:]
        dst[r * cols : (r + 1) * cols] = out


async def main() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    image = np.random.default_rng(0).standard_normal((ROWS, COLS), dtype=np.float32)
    weights = np.array([0.25, 0.5, 0.25], np.float32)

    ahg.set_device(0)
    await d0.memcpy_to_symbol(WEIGHTS, weights)
    src = d1.malloc(PITCH * ROWS)
    out = d0.malloc(image.nbytes)
    gate = d1.malloc(4)
    stream1 = d1.create_stream()
    await stream1.memcpy_2d(src, PITCH, image, COLS * 4, COLS * 4, ROWS)

    d0.enable_peer_access(d1)
    graph = ahg.Graph()
    graph.add_kernel_node(row_filter, 1, ROWS, (ROWS, COLS, PITCH, WEIGHTS.address(d0), src, out))
    graph_exec = graph.instantiate(device=d0)

    waited = await stream1.wait_value_32(gate, 1, ahg.StreamWaitFlag.EQ)
    done = await graph_exec.launch(stream1)  # device 0's graph, in device 1's stream order
    await asyncio.sleep(0)
    if waited.done() or done.done():
        raise RuntimeError("the graph ran before the gate opened")
    d1.view(gate, np.uint32, 1)[0] = 1  # the host opens the gate
    await done

    result = np.zeros_like(image)
    await d0.memcpy_3d(
        ahg.PitchedPtr(result, COLS * 4), ahg.PitchedPtr(out, COLS * 4), (COLS * 4, ROWS, 1)
    )
    padded = np.pad(image, ((0, 0), (1, 1)))
    expected = 0.25 * padded[:, :-2] + 0.5 * padded[:, 1:-1] + 0.25 * padded[:, 2:]
    np.testing.assert_allclose(result, expected, rtol=1e-6)
    print(f"two devices: {ROWS}x{COLS} image filtered across devices; matches numpy")

    graph_exec.destroy()
    graph.destroy()
    stream1.destroy()
    d0.disable_peer_access(d1)
    for ptr, device in ((src, d1), (out, d0), (gate, d1)):
        device.free(ptr)


if __name__ == "__main__":
    ahg.run(main)
