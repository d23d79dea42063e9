"""Attacks on executables and user objects that combine setters, updates and launches in flight.

Each test here reproduces a bug found by attacking the executable as a hostile user would.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.memnodes import RESERVATIONS
from cleanup import destroy
from fakes import GatedHost, loop_turns


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = out[index] * 10 + value


@ahg.kernel
def put_pair(
    t: ahg.Threads, value: ahg.int64, other: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]
) -> None:
    out[index] = out[index] * 10 + value + other


@pytest.mark.asyncio
async def test_setters_in_a_loop_during_a_launch_reuse_the_unread_slot(device: ahg.Device) -> None:
    """A setter called again and again while one launch is in flight took a new argument slot
    each time, although only the slot that launch reads must be kept: the arena grew by one
    slot per call until the launch completed (without bound, for a launch that never does)."""
    out = device.malloc(64)
    device.view(out, np.int64, 8)[:] = 0
    gate = GatedHost()
    graph = ahg.Graph()
    head = graph.add_host_node(gate)
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out), deps=[head])
    graph_exec = graph.instantiate(arena_headroom=0)
    stream = device.create_stream()
    try:
        first = await graph_exec.launch(stream)
        for value in range(2, 52):
            graph_exec.set_kernel_node_params(node, put, 1, 1, (value, 0, out))
        during_first = graph_exec.arena.statistics()
        second = await graph_exec.launch(stream)
        graph_exec.set_kernel_node_params(node, put, 1, 1, (7, 0, out))
        during_second = graph_exec.arena.statistics().live_slots
    finally:
        gate.open_all(3)
        await stream.synchronize()
    await first
    await second
    after = graph_exec.arena.statistics().live_slots
    third = await graph_exec.launch(stream)
    await third
    value = int(device.view(out, np.int64, 1)[0])
    destroy(graph_exec, graph, stream)
    device.free(out)
    # The first launch kept its arguments, the second took the last of the loop's.
    assert value == 1 * 100 + 51 * 10 + 7
    assert after == 1
    # The slot the first launch reads, and the one the next launch will: no more.
    assert during_first.live_slots == 2
    assert during_first.chunks <= 2
    # A launch read the last slot since: it is kept for that launch, a new one is taken.
    assert during_second == 3


@pytest.mark.asyncio
async def test_unread_slot_outgrown_during_a_launch_is_freed_at_once(device: ahg.Device) -> None:
    """A slot made since the last launch and then outgrown (a kernel with more arguments) is
    read by no launch: it is freed at once, not kept until the launch in flight completes."""
    out = device.malloc(64)
    device.view(out, np.int64, 8)[:] = 0
    gate = GatedHost()
    graph = ahg.Graph()
    head = graph.add_host_node(gate)
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out), deps=[head])
    graph_exec = graph.instantiate(arena_headroom=0)
    stream = device.create_stream()
    try:
        first = await graph_exec.launch(stream)
        graph_exec.set_kernel_node_params(node, put, 1, 1, (2, 0, out))
        graph_exec.set_kernel_node_params(node, put_pair, 1, 1, (3, 4, 0, out))
        during = graph_exec.arena.statistics().live_slots
    finally:
        gate.open_all(2)
        await stream.synchronize()
    await first
    second = await graph_exec.launch(stream)
    await second
    value = int(device.view(out, np.int64, 1)[0])
    after = graph_exec.arena.statistics().live_slots
    destroy(graph_exec, graph, stream)
    device.free(out)
    assert value == 1 * 10 + 7
    assert after == 1
    assert during == 2


@dataclass(frozen=True)
class StreamDestroyingCost(ahg.CostModel):
    """A user's cost model that destroys the streams it is given on its next estimate: user
    code an instantiate runs while it builds the executable's ops."""

    victims: list[ahg.Stream] = field(default_factory=list)

    def kernel_ns(self, threads: int, compute_units: int, duration_ns: int | None) -> int:
        while self.victims:
            self.victims.pop().destroy()
        return super().kernel_ns(threads, compute_units, duration_ns)


@pytest.mark.asyncio
async def test_upload_stream_destroyed_during_the_build_leaves_a_memory_graph_instantiable() -> (
    None
):
    """``instantiate(UPLOAD)`` whose upload stream is destroyed while the ops are built (by
    user code run then, or another thread) failed only after the graph was marked instantiated
    and its alloc range handed to the executable, which gave it back as it was destroyed: the
    graph with memory nodes could never be instantiated again (NotSupported) and had lost its
    reservation. The stream is checked again before anything is committed."""
    cost = StreamDestroyingCost()
    ahg.configure_devices(1, [ahg.DeviceProperties(cost=cost)])
    device = ahg.get_device(0)
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    ptr = alloc.params.ptr
    kernel = graph.add_kernel_node(put, 1, 1, (5, 0, ptr), deps=[alloc])
    graph.add_mem_free_node(ptr, deps=[kernel])
    reservations = len(RESERVATIONS)
    stream = device.create_stream()
    cost.victims.append(stream)
    with pytest.raises(ahg.ContextIsDestroyed):
        graph.instantiate(ahg.InstantiateFlags.UPLOAD, upload_stream=stream)
    assert not cost.victims  # the build ran the cost model
    assert len(RESERVATIONS) == reservations
    graph_exec = graph.instantiate()  # the failed call changed nothing: a first instantiate
    try:
        await (await graph_exec.launch())
    finally:
        destroy(graph_exec, graph)


@pytest.mark.asyncio
async def test_cross_device_launch_parked_while_its_stream_began_capturing_is_refused() -> None:
    """A launch on another device's stream that parked for a signal set, during which the
    stream began capturing, was submitted to the capturing stream anyway: it ran outside the
    capture, which ended valid and empty. As on the executable's own device, it is refused
    (StreamCaptureUnsupported, the capture invalidated), the set given back, nothing run."""
    ahg.configure_devices(2)
    home, other = ahg.get_device(0), ahg.get_device(1)
    out = home.malloc(64)
    home.view(out, np.int64, 8)[:] = 0
    gate = GatedHost()
    graph = ahg.Graph()
    head = graph.add_host_node(gate)
    graph.add_kernel_node(put, 1, 1, (1, 0, out), deps=[head])
    graph_exec = graph.instantiate(signal_sets=1, device=home)
    own_stream, stream = home.create_stream(), other.create_stream()
    try:
        first = await graph_exec.launch(own_stream)
        parked = asyncio.ensure_future(graph_exec.launch(stream))
        await loop_turns()
        assert graph_exec.statistics().signal_pool.waiters == 1
        stream.begin_capture()
        gate.open(0)
        await first
        with pytest.raises(ahg.StreamCaptureUnsupported):
            await parked
        with pytest.raises(ahg.StreamCaptureInvalidated):
            stream.end_capture()
        await home.synchronize()
        await other.synchronize()
        stats = graph_exec.statistics()
        assert (stats.launches, stats.in_flight) == (1, 0)
        assert (stats.signal_pool.free, stats.signal_pool.acquires) == (1, 1)
        assert gate.runs == 1
        assert int(home.view(out, np.int64, 1)[0]) == 1
    finally:
        gate.open_all(2)
        destroy(graph_exec, graph, own_stream, stream, out)
