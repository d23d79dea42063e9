"""Stream capture: record an eager two-stream pipeline once, replay it, recapture, update.

The pipeline (HIP/CUDA style, as PyTorch's ``torch.cuda.graph`` records it):

    main:  copy x in -> record fork ------------------------ wait join -> combine -> copy out
    side:               wait fork -> malloc_async tmp -> scale x into tmp -> host check
                                     -> copy tmp to y -> free_async tmp -> record join

It runs eagerly once, is captured once (the same code), replayed 1,000 times and checked against
the eager result and numpy; then it is captured again with new arguments and applied to the
executable with ``exec.update`` — no re-instantiation.
"""

from __future__ import annotations

import numpy as np

import ahipgraph as ahg

N = 4096


@ahg.kernel
def scale(t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32],
          out: ahg.Ptr[ahg.float32]) -> None:  # fmt: skip
    i = t.ids[t.ids < n]
    out[i] = a * x[i]


@ahg.kernel
def combine(t: ahg.Threads, n: ahg.int32, b: ahg.float32, x: ahg.Ptr[ahg.float32],
            y: ahg.Ptr[ahg.float32], z: ahg.Ptr[ahg.float32]) -> None:  # fmt: skip
    i = t.ids[t.ids < n]
    z[i] = x[i] + b * y[i]


class Pipeline:
    """The eager pipeline; ``run`` issues it on two streams (captured or not)."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.main, self.side = device.create_stream(), device.create_stream()
        self.fork, self.join = device.create_event(), device.create_event()
        self.x, self.y, self.z = (device.malloc(N * 4) for _ in range(3))
        self.checked = 0

    def check_positive(self, ptr: ahg.DevicePtr) -> None:
        """A host function between device steps (it runs on the host, in stream order)."""
        assert self.device.view(ptr, np.float32, N).min() >= 0
        self.checked += 1

    async def run(self, x_host: np.ndarray, out: np.ndarray, a: float, b: float) -> None:
        main, side, grid = self.main, self.side, (N + 255) // 256
        await main.memcpy(self.x, x_host)
        await main.record_event(self.fork)
        await side.wait_event(self.fork)  # fork: side joins the capture
        tmp = await side.malloc_async(N * 4)
        await side.launch_kernel(scale, grid, 256, (N, a, self.x, tmp))
        await side.launch_host_func(self.check_positive, tmp)
        await side.memcpy(self.y, tmp, N * 4)
        await side.free_async(tmp)
        await side.record_event(self.join)
        await main.wait_event(self.join)  # join back
        await main.launch_kernel(combine, grid, 256, (N, b, self.x, self.y, self.z))
        await main.memcpy(out, self.z)

    async def capture(self, x_host: np.ndarray, out: np.ndarray, a: float, b: float) -> ahg.Graph:
        async with self.main.capture() as scope:
            await self.run(x_host, out, a, b)
        assert scope.graph is not None
        return scope.graph

    def destroy(self) -> None:
        for ptr in (self.x, self.y, self.z):
            self.device.free(ptr)
        for handle in (self.main, self.side, self.fork, self.join):
            handle.destroy()


async def main() -> None:
    device = ahg.get_device(0)
    pipeline = Pipeline(device)
    x_host = np.abs(np.random.default_rng(0).standard_normal(N, dtype=np.float32))
    a, b = 2.0, 0.5

    eager = np.zeros(N, np.float32)
    await pipeline.run(x_host, eager, a, b)
    await pipeline.main.synchronize()
    expected = x_host + b * (a * x_host)
    np.testing.assert_allclose(eager, expected, rtol=1e-6)

    replayed = np.zeros(N, np.float32)
    graph = await pipeline.capture(x_host, replayed, a, b)
    kinds = sorted(node.type.name for node in graph.nodes())
    exec_ = graph.instantiate()
    for _ in range(1000):
        done = await exec_.launch(pipeline.main)
    await done
    np.testing.assert_array_equal(replayed, eager)
    print(f"captured {len(kinds)} nodes ({', '.join(kinds)})")
    print("1000 replays match eager execution and numpy")

    a2, b2 = 3.0, -1.0
    updated = np.zeros(N, np.float32)
    new_graph = await pipeline.capture(x_host, updated, a2, b2)  # same code, new arguments
    result = exec_.update(new_graph)
    assert result.ok, result
    await (await exec_.launch(pipeline.main))
    np.testing.assert_allclose(updated, x_host + b2 * (a2 * x_host), rtol=1e-6)
    print(f"recaptured with new arguments; exec.update: {result.kind.name}; results match numpy")
    print(f"host function ran {pipeline.checked} times")

    exec_.destroy()
    graph.destroy()
    new_graph.destroy()
    pipeline.destroy()


if __name__ == "__main__":
    ahg.run(main)
