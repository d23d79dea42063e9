"""A task cancelled while parked inside ``async with stream.capture()``, with a fork in it.

Captured operations never park (a capturing stream adds nodes, not packets), so the awaits
where a capture block really waits are the eager ones it may make on other streams under a
RELAXED capture: a stream synchronize, an event synchronize, an enqueue waiting for ring room,
a graph launch waiting for a signal set. The task is cancelled while parked at each. Then:
the capture is over (origin and fork capture nothing), its graph is gone, the parked call took
nothing (no packet, no signal set), the other stream's own work still completes, and every
stream captures again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left

CAPACITY = 4


class _Kit:
    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.origin = device.create_stream()  # queue 0
        self.other = device.create_stream()  # queue 1: where the block parks
        self.fork = device.create_stream()  # queue 0, forked into the capture
        self.fork_event, self.done = device.create_event(), device.create_event()
        self.ptr = device.malloc(NBYTES)
        self.held = HeldKernel()
        graph = ahg.Graph()
        graph.add_host_node(lambda: None)
        self.graph = graph
        # one signal set, and a launch that finds it taken waits for it
        self.exec = graph.instantiate(signal_sets=1, signal_set_policy="wait")

    async def hold_other(self, launch_first: bool) -> ahg.Completion | None:
        """Hold the other stream behind a kernel (then perhaps a launch taking the executable's
        one signal set), ``done`` recorded after, and its ring full."""
        await self.held.launch(self.other)
        first = await self.exec.launch(self.other) if launch_first else None
        await self.other.record_event(self.done)
        ring = self.device.statistics().queues[self.other.statistics().queue]
        while ring.pending < CAPACITY:
            await self.other.launch_host_func(int)
            ring = self.device.statistics().queues[self.other.statistics().queue]
        await self.held.started.wait()
        return first

    def parks(self) -> dict[str, Callable[[], Awaitable[Any]]]:
        return {
            "stream_synchronize": self.other.synchronize,
            "event_synchronize": self.done.synchronize,
            "enqueue_waiting_for_room": lambda: self.other.memset(self.ptr, 0, NBYTES),
            "launch_waiting_for_a_signal_set": lambda: self.exec.launch(self.other),
        }

    def close(self) -> None:
        self.exec.destroy()
        self.graph.destroy()
        for handle in (self.origin, self.other, self.fork, self.fork_event, self.done):
            handle.destroy()
        self.device.free(self.ptr)


PARKS = [
    "stream_synchronize",
    "event_synchronize",
    "enqueue_waiting_for_room",
    "launch_waiting_for_a_signal_set",
]


@pytest.mark.asyncio
@pytest.mark.parametrize("park", PARKS)
async def test_cancelled_while_parked_in_a_forked_capture_block(
    ahg_devices: Callable[..., list[ahg.Device]], park: str
) -> None:
    # two hardware queues of CAPACITY packets: streams made one after the other get one each
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=CAPACITY)
    (device,) = ahg_devices(1, properties)
    kit = _Kit(device)
    first = await kit.hold_other(launch_first=park == "launch_waiting_for_a_signal_set")
    submitted = kit.other.statistics().submitted
    before = Baseline.take(device)
    parked = asyncio.Event()

    async def block() -> None:
        async with kit.origin.capture(ahg.CaptureMode.RELAXED):
            await kit.origin.memset(kit.ptr, 1, NBYTES)
            await kit.origin.record_event(kit.fork_event)
            await kit.fork.wait_event(kit.fork_event)
            await kit.fork.launch_kernel(affine, 1, N, (N, 1, 1, kit.ptr, kit.ptr))
            parked.set()
            await kit.parks()[park]()  # parks: the other stream is held
            pytest.fail("the park returned while the other stream was held")

    task = asyncio.create_task(block())
    await parked.wait()
    await loop_turns()
    assert kit.fork.is_capturing() is ahg.CaptureStatus.ACTIVE
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # the capture is over, everywhere, and its graph is gone
    assert kit.origin.is_capturing() is ahg.CaptureStatus.NONE
    assert kit.fork.is_capturing() is ahg.CaptureStatus.NONE
    no_capture_left()
    assert Baseline.take(device) == before
    # the parked call took nothing
    assert kit.other.statistics().submitted == submitted
    assert kit.exec.statistics().launches == (1 if first is not None else 0)
    # the other stream's own work completes once released; the fork now runs eagerly
    kit.held.release()
    await kit.other.synchronize()
    if first is not None:
        await first
    pool = kit.exec.statistics().signal_pool
    assert (pool.free, pool.in_use, pool.waiters) == (1, 0, 0)
    await (await kit.fork.launch_kernel(affine, 1, N, (N, 1, 1, kit.ptr, kit.ptr)))
    assert device.view(kit.ptr, np.int64, N).tolist() == [1] * N  # 3 * 0 + 0 + 1
    for stream in (kit.origin, kit.fork, kit.other):
        stream.begin_capture()
        stream.end_capture().destroy()
    kit.close()
