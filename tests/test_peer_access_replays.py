"""Graph replays keep the views their kernels decoded; a view of a peer's memory must go when
that memory or the mapping to it does, or a replay keeps reaching memory it may no longer."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def _graph_bumping(ptr: ahg.DevicePtr, device: ahg.Device) -> tuple[ahg.Graph, ahg.GraphExec]:
    graph = ahg.Graph()
    for _ in range(3):  # a run of nodes of one kernel: the replay path that keeps its views
        graph.add_kernel_node(bump, 1, 1, (ptr,))
    return graph, graph.instantiate(device=device)


async def _replayed_on_device_0() -> tuple[
    ahg.Device, ahg.Device, ahg.DevicePtr, ahg.Graph, ahg.GraphExec, ahg.Stream
]:
    """Two devices, device 0 mapping device 1, and a graph on device 0 bumping an int32 of
    device 1's memory three times, launched once (its run has decoded and kept its views)."""
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    remote = d1.malloc(64)
    d0.enable_peer_access(d1)
    graph, graph_exec = _graph_bumping(remote, d0)
    stream = d0.create_stream()
    await (await graph_exec.launch(stream))
    return d0, d1, remote, graph, graph_exec, stream


async def _fails_on_the_pointer(graph_exec: ahg.GraphExec, stream: ahg.Stream) -> None:
    launch = await graph_exec.launch(stream)
    with pytest.raises(ahg.LaunchFailure) as caught:
        await launch
    assert isinstance(caught.value.__cause__, ahg.InvalidDevicePointer)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()


@pytest.mark.asyncio
async def test_a_replay_after_disabling_peer_access_faults() -> None:
    """The replay wrote the peer's memory after ``disable_peer_access`` as before it."""
    d0, d1, remote, graph, graph_exec, stream = await _replayed_on_device_0()
    assert d1.view(remote, np.int32, 1)[0] == 3
    d0.disable_peer_access(d1)
    await _fails_on_the_pointer(graph_exec, stream)
    assert d1.view(remote, np.int32, 1)[0] == 3  # untouched by the refused replay
    d0.enable_peer_access(d1)  # mapped again: the replay works again
    await (await graph_exec.launch(stream))
    assert d1.view(remote, np.int32, 1)[0] == 6
    d1.free(remote)
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_a_replay_after_the_peer_frees_the_memory_faults() -> None:
    """The replay kept writing the freed allocation's old buffer: a use after free."""
    _, d1, remote, graph, graph_exec, stream = await _replayed_on_device_0()
    old_bytes = d1.view(remote, np.int32, 1)  # keeps the freed buffer alive to look at
    d1.free(remote)
    await _fails_on_the_pointer(graph_exec, stream)
    assert old_bytes[0] == 3
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_replays_of_local_memory_are_unaffected_by_a_peer_freeing() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    local, remote = d0.malloc(64), d1.malloc(64)
    d0.enable_peer_access(d1)
    graph, graph_exec = _graph_bumping(local, d0)
    stream = d0.create_stream()
    await (await graph_exec.launch(stream))
    d1.free(remote)  # memory of the peer goes: this graph never used it
    await (await graph_exec.launch(stream))
    assert d0.view(local, np.int32, 1)[0] == 6
    d0.free(local)
    destroy(graph_exec, graph, stream)
