"""Captures inside captures.

A stream takes part in one capture at a time: beginning again on a capturing stream, its own or
a fork, is IllegalState (HIP), and a scope that fails to enter takes the enclosing block down
with its exception, ending that capture too. A capture on another stream inside a block is its
own sequence: its events fork other streams into it, never into the outer one (a wait that
would mix the two is StreamCaptureMerge and changes nothing); it ends, or fails, on its own;
and the two captures may end in either order. Each graph replays as if captured alone.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left
from cleanup import destroy


@pytest.fixture
def kit(device: ahg.Device) -> Any:
    streams = [device.create_stream() for _ in range(3)]
    events = [device.create_event() for _ in range(3)]
    ptrs = [device.malloc(NBYTES), device.malloc(NBYTES)]
    yield streams, events, ptrs
    destroy(*streams, *events, *ptrs)


async def _step(stream: ahg.Stream, ptr: ahg.DevicePtr, add: int) -> None:
    """``ptr = 3 * ptr + add``."""
    await stream.launch_kernel(affine, 1, N, (N, 0, add, ptr, ptr))


async def _replay(graph: ahg.Graph, stream: ahg.Stream, ptr: ahg.DevicePtr) -> int:
    exec_ = graph.instantiate()
    await stream.memset(ptr, 0, NBYTES)
    await (await exec_.launch(stream))
    values = set(host_view(stream.device, ptr).tolist())
    destroy(exec_, graph)
    assert len(values) == 1
    return values.pop()


@pytest.mark.asyncio
@pytest.mark.parametrize("inner_on", ["same stream", "fork"])
async def test_a_scope_on_a_stream_already_capturing_fails_and_ends_the_outer(
    device: ahg.Device, kit: Any, inner_on: str
) -> None:
    (s0, s1, _), (fork_event, _, _), (a, _) = kit
    before = Baseline.take(device)

    async def nested() -> None:
        async with s0.capture():
            await _step(s0, a, 1)
            await s0.record_event(fork_event)
            await s1.wait_event(fork_event)
            inner = s0 if inner_on == "same stream" else s1
            async with inner.capture():
                pytest.fail("entered a capture on a stream already capturing")

    with pytest.raises(ahg.IllegalState):
        await nested()
    assert s0.is_capturing() is ahg.CaptureStatus.NONE
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before
    no_capture_left()


@pytest.mark.asyncio
async def test_an_inner_capture_on_another_stream_is_its_own_sequence(kit: Any) -> None:
    (s0, s1, s2), (outer_event, inner_event, join_event), (a, b) = kit
    async with s0.capture() as outer:
        await _step(s0, a, 1)
        await s0.record_event(outer_event)
        async with s1.capture(ahg.CaptureMode.THREAD_LOCAL) as inner:
            await _step(s1, b, 2)
            await s1.record_event(inner_event)
            deps = s0.capture_info().dependencies
            with pytest.raises(ahg.StreamCaptureMerge):
                await s0.wait_event(inner_event)  # would mix the two graphs
            with pytest.raises(ahg.StreamCaptureMerge):
                await s1.wait_event(outer_event)
            assert s0.capture_info().dependencies == deps  # refused: nothing changed
            await s2.wait_event(inner_event)  # s2 forks into the inner capture only
            assert s2.capture_info().id == s1.capture_info().id != s0.capture_info().id
            await _step(s2, b, 3)
            await s2.record_event(join_event)
            await s1.wait_event(join_event)
        assert s2.is_capturing() is ahg.CaptureStatus.NONE  # ended with its origin
        await _step(s0, a, 4)
    assert outer.graph is not None
    assert inner.graph is not None
    assert len(outer.graph.nodes()) == 2
    assert len(inner.graph.nodes()) == 2
    assert await _replay(outer.graph, s0, a) == 3 * 1 + 4
    assert await _replay(inner.graph, s1, b) == 3 * 2 + 3
    no_capture_left()


@pytest.mark.asyncio
async def test_an_inner_failure_leaves_the_outer_capture_whole(
    device: ahg.Device, kit: Any
) -> None:
    (s0, s1, _), _, (a, b) = kit
    async with s0.capture() as outer:
        await _step(s0, a, 1)
        inside = Baseline.take(device)

        async def failing() -> None:
            async with s1.capture():
                await _step(s1, b, 2)
                raise KeyError("inner")

        with pytest.raises(KeyError):
            await failing()
        assert Baseline.take(device) == inside  # the inner graph is gone, nothing else
        await _step(s0, a, 2)
    assert outer.graph is not None
    assert await _replay(outer.graph, s0, a) == 3 * 1 + 2
    no_capture_left()


@pytest.mark.asyncio
async def test_nested_captures_end_in_either_order(kit: Any) -> None:
    (s0, s1, _), _, (a, b) = kit
    s0.begin_capture()
    await _step(s0, a, 1)
    s1.begin_capture()
    await _step(s1, b, 2)
    outer = s0.end_capture()  # the outer first: the inner goes on
    assert s1.is_capturing() is ahg.CaptureStatus.ACTIVE
    await _step(s1, b, 3)
    inner = s1.end_capture()
    assert await _replay(outer, s0, a) == 1
    assert await _replay(inner, s1, b) == 3 * 2 + 3
    no_capture_left()


@pytest.mark.asyncio
async def test_an_inner_capture_into_the_outer_captures_graph(kit: Any) -> None:
    """begin_capture_to_graph on the graph the outer capture is making: both add to it, each
    sees the other's nodes as manual; the outer hands it over, the inner keeps adding."""
    (s0, s1, _), _, (a, b) = kit
    s0.begin_capture()
    await _step(s0, a, 1)
    graph = s0.capture_info().graph
    assert graph is not None
    s1.begin_capture_to_graph(graph)
    await _step(s1, b, 2)
    assert s0.end_capture() is graph
    await _step(s1, b, 3)
    assert s1.end_capture() is graph
    assert len(graph.nodes()) == 3
    exec_ = graph.instantiate()
    await s0.memset(a, 0, NBYTES)
    await s0.memset(b, 0, NBYTES)
    await (await exec_.launch(s0))
    assert host_view(s0.device, a).tolist() == [1] * N
    assert host_view(s0.device, b).tolist() == [3 * 2 + 3] * N
    destroy(exec_, graph)
    no_capture_left()
