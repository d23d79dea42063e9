"""A host array written by a device-to-host copy, then read by a host-to-device copy.

The race checker fingerprints a host-to-device copy's source array when the copy is enqueued
(or its graph launched) and compares it when the copy runs: a difference is a host write in
between, a race. A device-to-host copy ordered before it changes the array too, with no host
write at all: a stream doing ``memcpy(host, x)`` then ``memcpy(y, host)``, or a graph replayed
back to back whose last node copies into the array its first node reads, was reported as
"host-write-during-copy". A copy whose source a device-to-host copy writes meanwhile is no
longer compared; a host write with no device copy in between still is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from cleanup import destroy


@dataclass
class RoundTrip:
    """A stream, a device buffer ``x`` of sevens, a device buffer ``y`` and a host array."""

    device: ahg.Device
    stream: ahg.Stream
    x: ahg.DevicePtr
    y: ahg.DevicePtr
    host: np.ndarray

    def y_holds_sevens(self) -> bool:
        """Whether ``y`` holds what ``x`` held, copied through the host array."""
        return bool((self.device.view(self.y, np.uint8, 64, readonly=True) == 7).all())

    def close(self) -> None:
        destroy(self.stream, self.x, self.y)


async def round_trip(device: ahg.Device) -> RoundTrip:
    stream = device.create_stream()
    x, y = device.malloc(64), device.malloc(64)
    await stream.memset(x, 7, 64)
    await stream.synchronize()
    return RoundTrip(device, stream, x, y, np.zeros(16, np.float32))


@pytest.mark.asyncio
async def test_an_eager_round_trip_through_a_host_array_is_no_race(device: ahg.Device) -> None:
    trip = await round_trip(device)
    with ahg.race_check(on_race="collect") as check:
        await trip.stream.memcpy(trip.host, trip.x, 64)  # device to host, still queued next
        await trip.stream.memcpy(trip.y, trip.host, 64)
        await trip.stream.synchronize()
    assert check.reports == []
    assert trip.y_holds_sevens()
    trip.close()


@pytest.mark.asyncio
async def test_a_graph_replayed_back_to_back_through_a_host_array_is_no_race(
    device: ahg.Device,
) -> None:
    trip = await round_trip(device)
    graph = ahg.Graph()
    up = graph.add_memcpy_node(trip.y, trip.host, 64)
    graph.add_memcpy_node(trip.host, trip.x, 64, deps=[up])
    graph_exec = graph.instantiate()
    with ahg.race_check(on_race="collect") as check:
        await graph_exec.launch(trip.stream)
        await (await graph_exec.launch(trip.stream))  # reads what the first launch copied down
    assert check.reports == []
    assert trip.y_holds_sevens()
    destroy(graph_exec, graph)
    trip.close()


@pytest.mark.asyncio
async def test_a_host_write_during_the_copy_is_still_a_race(device: ahg.Device) -> None:
    stream = device.create_stream()
    x, y = device.malloc(64), device.malloc(64)
    host = np.zeros(16, np.float32)
    with ahg.race_check(on_race="collect") as check:
        await stream.memcpy(x, np.zeros(16, np.float32), 64)  # another array: no effect
        await stream.memcpy(y, host, 64)
        host[:] = 1  # before the copy ran
        await stream.synchronize()
    assert [report.kind for report in check.reports] == ["host-write-during-copy"]
    destroy(stream, x, y)


@pytest.mark.asyncio
async def test_a_graph_copying_into_the_source_of_an_eager_copy_is_no_race(
    device: ahg.Device,
) -> None:
    """The graph holds no copy from a host array, only one into it: it is watched all the same."""
    trip = await round_trip(device)
    graph = ahg.Graph()
    graph.add_memcpy_node(trip.host, trip.x, 64)
    graph_exec = graph.instantiate()
    with ahg.race_check(on_race="collect") as check:
        await graph_exec.launch(trip.stream)  # device to host, queued
        await trip.stream.memcpy(trip.y, trip.host, 64)  # reads what the launch copies down
        await trip.stream.synchronize()
    assert check.reports == []
    assert trip.y_holds_sevens()
    destroy(graph_exec, graph)
    trip.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("by", ["eager copy", "graph"])
async def test_a_device_to_host_copy_that_fails_leaves_the_host_write_a_race(
    device: ahg.Device, by: str
) -> None:
    """The failed copy wrote nothing into the array: the host's write is still compared."""
    down, up = device.create_stream(), device.create_stream()
    x, y = device.malloc(64), device.malloc(64)
    host = np.zeros(16, np.float32)
    graph = ahg.Graph()
    graph.add_memcpy_node(host, x, 64)
    graph_exec = graph.instantiate()
    with ahg.race_check(on_race="collect") as check:
        if by == "graph":
            await graph_exec.launch(down)
        else:
            await down.memcpy(host, x, 64)
        device.free(x)  # the queued copy from it fails
        await up.memcpy(y, host, 64)
        host[:] = 1  # before either copy ran
        with pytest.raises(ahg.InvalidDevicePointer):
            await down.synchronize()
        await up.synchronize()
    assert "host-write-during-copy" in [report.kind for report in check.reports]
    destroy(graph_exec, graph, down, up, y)


@pytest.mark.asyncio
@pytest.mark.parametrize("by", ["eager copy", "graph"])
async def test_a_host_write_past_what_a_device_copy_wrote_is_still_a_race(
    device: ahg.Device, by: str
) -> None:
    """The device-to-host copy writes only the array's first half: the copy reading the
    second half is still compared (it was dropped for sharing the array)."""
    down, up = device.create_stream(), device.create_stream()
    x, y = device.malloc(64), device.malloc(64)
    host = np.zeros(16, np.float32)
    graph = ahg.Graph()
    graph.add_memcpy_node(host, x, 32)
    graph_exec = graph.instantiate()
    with ahg.race_check(on_race="collect") as check:
        if by == "graph":
            await graph_exec.launch(down)
        else:
            await down.memcpy(host, x, 32)
        await up.memcpy(y, host[8:], 32)
        host[8:] = 1  # before either copy ran
        await down.synchronize()
        await up.synchronize()
    assert [report.kind for report in check.reports] == ["host-write-during-copy"]
    destroy(graph_exec, graph, down, up, x, y)


@ahg.kernel
def _held(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="the environment's outer check stays open: the copy is still watched, rightly",
)
async def test_a_copy_enqueued_in_an_ended_check_reports_nothing_to_the_next(
    device: ahg.Device,
) -> None:
    """An eager copy from a host array, still queued when its check ended, compared its source
    as it ran and reported into whichever check was open then, one that never saw the copy."""
    stream = device.create_stream()
    y = device.malloc(64)
    host = np.zeros(16, np.float32)
    with testing.hang_kernels(1) as hang:
        await stream.launch_kernel(_held, 1, 1, ())  # holds the queue
        with ahg.race_check(on_race="collect") as first:
            await stream.memcpy(y, host, 64)
        with ahg.race_check(on_race="collect") as second:
            host[:] = 1  # the copy has not run: but no check that saw it is open
            await hang.started.wait()
            hang.cancel()
            with pytest.raises(ahg.LaunchFailure):
                await stream.synchronize()
            assert second.reports == []
            assert second.statistics().ops == 0
    assert first.reports == []
    destroy(stream, y)
