"""``begin_capture_to_graph`` while the user's graph is destroyed, instantiated, cloned,
launched or captured into by a second stream, in the middle of the capture.

The graph stays the user's: the capture adds nodes to it and never destroys it. What was
instantiated or cloned before a captured node was added does not see that node; a destroyed
graph invalidates the capture (its later operations and its end fail with
``StreamCaptureInvalidated``; ``tests/test_capture_target_destroyed.py`` covers the rest);
nothing is left registered on any path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left
from cleanup import destroy


@pytest.fixture
def kit(device: ahg.Device) -> Any:
    stream, other = device.create_stream(), device.create_stream()
    ptr = device.malloc(NBYTES)
    yield stream, other, ptr
    destroy(stream, other, ptr)


async def _step(stream: ahg.Stream, ptr: ahg.DevicePtr, add: int) -> None:
    """``ptr = 3 * ptr + add``: order-sensitive, so a missing or extra node shows."""
    await stream.launch_kernel(affine, 1, N, (N, 0, add, ptr, ptr))


async def _run(exec_: ahg.GraphExec, stream: ahg.Stream, ptr: ahg.DevicePtr) -> list[int]:
    await stream.memset(ptr, 0, NBYTES)
    await (await exec_.launch(stream))
    return host_view(stream.device, ptr).tolist()


@pytest.mark.asyncio
async def test_the_graph_destroyed_mid_capture(device: ahg.Device, kit: Any) -> None:
    stream, _, ptr = kit
    before = Baseline.take(device)
    graph = ahg.Graph()
    start = graph.add_empty_node()
    stream.begin_capture_to_graph(graph, [start])
    await _step(stream, ptr, 1)
    graph.destroy()
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await _step(stream, ptr, 2)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await stream.malloc_async(64)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    with pytest.raises(ahg.IllegalState):
        graph.destroy()  # destroyed once, by its owner; the capture never destroys it
    no_capture_left()
    assert Baseline.take(device) == before
    stream.begin_capture()  # the stream captures again
    stream.end_capture().destroy()


@pytest.mark.asyncio
async def test_instantiated_cloned_and_launched_mid_capture(kit: Any) -> None:
    stream, other, ptr = kit
    graph = ahg.Graph()
    stream.begin_capture_to_graph(graph)
    await _step(stream, ptr, 1)
    early = graph.instantiate()  # one node
    clone = graph.clone()
    await _step(stream, ptr, 2)
    assert await _run(early, other, ptr) == [1] * N  # the launch runs beside the capture
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await early.launch(stream)  # a launch on the capturing stream: invalidates it
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert len(graph.nodes()) == 2  # the user's graph keeps what was captured
    assert len(clone.nodes()) == 1
    late = graph.instantiate()
    assert await _run(late, other, ptr) == [5] * N  # 3 * 1 + 2
    cloned = clone.instantiate()
    assert await _run(cloned, other, ptr) == [1] * N
    no_capture_left()
    destroy(early, late, cloned, graph, clone)


@pytest.mark.asyncio
async def test_an_executable_updated_from_the_graph_mid_capture(kit: Any) -> None:
    stream, other, ptr = kit
    graph = ahg.Graph()
    stream.begin_capture_to_graph(graph)
    await _step(stream, ptr, 1)
    await _step(stream, ptr, 2)
    exec_ = graph.instantiate()
    twin = ahg.Graph()
    stream_node = graph.nodes()
    twin_first = twin.add_kernel_node(affine, 1, N, (N, 0, 7, ptr, ptr))
    twin.add_kernel_node(affine, 1, N, (N, 0, 8, ptr, ptr), deps=[twin_first])
    assert exec_.update(twin).ok  # same topology, new arguments
    await _step(stream, ptr, 3)  # the capture goes on, into the user's graph only
    assert await _run(exec_, other, ptr) == [3 * 7 + 8] * N
    with pytest.raises(ahg.GraphExecUpdateFailure):
        exec_.update(graph)  # three nodes now: not the executable's topology
    result = stream.end_capture()
    assert result is graph
    assert [n.id for n in graph.nodes()[:2]] == [n.id for n in stream_node]
    destroy(exec_, graph, twin)
    no_capture_left()


@pytest.mark.asyncio
async def test_two_streams_capture_into_one_graph(device: ahg.Device, kit: Any) -> None:
    first, second, ptr = kit
    other_ptr = device.malloc(NBYTES)
    graph = ahg.Graph()
    first.begin_capture_to_graph(graph)
    second.begin_capture_to_graph(graph, mode=ahg.CaptureMode.RELAXED)
    assert first.capture_info().id != second.capture_info().id
    await _step(first, ptr, 1)
    await _step(second, other_ptr, 4)
    await _step(first, ptr, 2)
    # each capture's nodes are the other's manual nodes: neither is unjoined
    assert first.end_capture() is graph
    await _step(second, other_ptr, 5)
    assert second.end_capture() is graph
    assert len(graph.nodes()) == 4
    assert sorted(len(n.dependencies()) for n in graph.nodes()) == [0, 0, 1, 1]
    exec_ = graph.instantiate()
    await first.memset(ptr, 0, NBYTES)
    await first.memset(other_ptr, 0, NBYTES)
    await (await exec_.launch(first))
    assert host_view(device, ptr).tolist() == [5] * N
    assert host_view(device, other_ptr).tolist() == [17] * N
    np.testing.assert_array_equal(host_view(device, ptr), np.full(N, 5))
    destroy(exec_, graph, other_ptr)
    no_capture_left()
