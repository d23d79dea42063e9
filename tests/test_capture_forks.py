"""Fork and join through events during capture (HIP_SEMANTICS.md §2.4, §2.6): shapes, errors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left
from cleanup import destroy

_MADE: list[ahg.Stream | ahg.Event] = []  # what streams() and events() made for this test


@pytest.fixture(autouse=True)
def _destroy_made() -> Iterator[None]:
    yield
    while _MADE:
        made = _MADE.pop()
        if made.alive:  # some tests destroy a stream or event themselves
            made.destroy()


def streams(device: ahg.Device, count: int) -> list[ahg.Stream]:
    made = [device.create_stream() for _ in range(count)]
    _MADE.extend(made)
    return made


def events(device: ahg.Device, count: int) -> list[ahg.Event]:
    made = [device.create_event() for _ in range(count)]
    _MADE.extend(made)
    return made


@pytest.mark.asyncio
async def test_linear_fork_and_join_makes_a_diamond(device: ahg.Device) -> None:
    s0, s1 = streams(device, 2)
    fork, join = events(device, 2)
    a, b, c = (device.malloc(NBYTES) for _ in range(3))
    s0.begin_capture()
    root = (await s0.memcpy(a, np.arange(N, dtype=np.int64))).node
    await s0.record_event(fork)  # no node
    await s1.wait_event(fork)  # s1 joins the capture
    assert s1.capture_info().id == s0.capture_info().id
    assert s1.capture_info().graph is s0.capture_info().graph
    left = (await s0.launch_kernel(affine, 1, N, (N, 2, 0, a, b))).node
    right = (await s1.launch_kernel(affine, 1, N, (N, 3, 0, a, c))).node
    await s1.record_event(join)
    await s0.wait_event(join)
    tail = (await s0.launch_kernel(affine, 1, N, (N, 1, 0, c, b))).node
    with pytest.raises(ahg.StreamCaptureUnmatched):
        s1.end_capture()
    graph = s0.end_capture()
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    assert left.dependencies() == [root]
    assert right.dependencies() == [root]
    assert tail.dependencies() == [left, right]
    assert len(graph.nodes()) == 4
    exec_ = graph.instantiate()
    await (await exec_.launch(s0))
    x = np.arange(N)
    assert host_view(device, b).tolist() == (3 * (2 * x) + 3 * x).tolist()
    exec_.destroy()
    destroy(graph, a, b, c)
    no_capture_left()


@pytest.mark.asyncio
async def test_unjoined_fork_is_an_error_and_frees_the_graph(device: ahg.Device) -> None:
    s0, s1 = streams(device, 2)
    (fork,) = events(device, 1)
    a = device.malloc(NBYTES)
    before = Baseline.take(device)
    s0.begin_capture()
    await s0.memset(a, 1, NBYTES)
    await s0.record_event(fork)
    await s1.wait_event(fork)
    await s1.memset(a, 2, NBYTES)
    await s0.memset(a, 3, NBYTES)
    with pytest.raises(ahg.StreamCaptureUnjoined):
        s0.end_capture()
    assert s0.is_capturing() is ahg.CaptureStatus.NONE  # stricter than HIP: the sequence ends
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before
    destroy(a)


@pytest.mark.asyncio
async def test_empty_forks_add_no_nodes(device: ahg.Device) -> None:
    s0, s1, s2 = streams(device, 3)
    e0, e1, e2 = events(device, 3)
    s0.begin_capture()
    await s0.record_event(e0)
    await s1.wait_event(e0)
    await s2.wait_event(e0)
    await s1.record_event(e1)
    await s2.record_event(e2)
    await s0.wait_event(e1)
    await s0.wait_event(e2)
    graph = s0.end_capture()
    assert graph.nodes() == []  # hip-test captureEmptyStreams
    graph.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_nested_forks_over_three_streams(device: ahg.Device) -> None:
    s0, s1, s2 = streams(device, 3)
    e01, e12, e21, e10 = events(device, 4)
    a = device.malloc(NBYTES)
    s0.begin_capture()
    root = (await s0.memset(a, 0, NBYTES)).node
    await s0.record_event(e01)
    await s1.wait_event(e01)
    mid = (await s1.memset(a, 1, NBYTES)).node
    await s1.record_event(e12)
    await s2.wait_event(e12)  # forked from a forked stream
    leaf = (await s2.memset(a, 2, NBYTES)).node
    await s2.record_event(e21)
    await s1.wait_event(e21)
    await s1.record_event(e10)
    await s0.wait_event(e10)
    tail = (await s0.memset(a, 3, NBYTES)).node
    with pytest.raises(ahg.StreamCaptureUnmatched):
        s2.end_capture()
    graph = s0.end_capture()
    assert mid.dependencies() == [root]
    assert leaf.dependencies() == [mid]
    assert tail.dependencies() == [root, mid, leaf]  # joins append, as HIP does
    assert all(s.is_capturing() is ahg.CaptureStatus.NONE for s in (s0, s1, s2))
    graph.destroy()
    no_capture_left()
    destroy(a)


@pytest.mark.asyncio
async def test_overlapping_captures_on_two_streams_stay_apart(device: ahg.Device) -> None:
    s0, s1 = streams(device, 2)
    e0, e1 = events(device, 2)
    a = device.malloc(NBYTES)
    s0.begin_capture()
    s1.begin_capture()
    await s0.memset(a, 0, NBYTES)
    await s1.memset(a, 1, NBYTES)
    await s1.memset(a, 2, NBYTES)
    assert s0.capture_info().id != s1.capture_info().id
    await s0.record_event(e0)
    with pytest.raises(ahg.StreamCaptureMerge):
        await s1.wait_event(e0)
    g0 = s0.end_capture()
    g1 = s1.end_capture()
    assert (len(g0.nodes()), len(g1.nodes())) == (1, 2)
    # e0's capture has ended; s0 captures again, and e0 was not recorded in this capture
    s0.begin_capture()
    s1.begin_capture()
    with pytest.raises(ahg.StreamCaptureIsolation):
        await s1.wait_event(e0)
    await s0.record_event(e1)
    s0.end_capture().destroy()
    s1.end_capture().destroy()
    g0.destroy()
    g1.destroy()
    no_capture_left()
    destroy(a)


@pytest.mark.asyncio
async def test_external_wait_adds_an_event_wait_node(device: ahg.Device) -> None:
    (s0,) = streams(device, 1)
    (event,) = events(device, 1)
    a = device.malloc(NBYTES)
    s0.begin_capture()
    first = (await s0.memset(a, 0, NBYTES)).node
    await s0.wait_event(event, flags=1)
    info = s0.capture_info()
    (wait,) = info.dependencies
    assert wait.type is ahg.NodeType.WaitEvent
    assert wait.dependencies() == [first]
    with pytest.raises(ahg.InvalidValue):
        await s0.wait_event(event, flags=2)
    s0.end_capture().destroy()
    destroy(a)


@pytest.mark.asyncio
async def test_wait_on_an_eager_event_is_a_real_wait(device: ahg.Device) -> None:
    s0, s1 = streams(device, 2)
    (event,) = events(device, 1)
    await s1.record_event(event)
    s0.begin_capture()
    await s0.wait_event(event)  # recorded outside any capture: no node, no error
    graph = s0.end_capture()
    assert graph.nodes() == []
    graph.destroy()


@pytest.mark.asyncio
async def test_eager_record_after_a_capture_unlinks_the_event(device: ahg.Device) -> None:
    s0, s1 = streams(device, 2)
    (event,) = events(device, 1)
    s0.begin_capture()
    await s0.record_event(event)
    s0.end_capture().destroy()
    await s1.record_event(event)  # an ordinary record replaces the captured one
    s0.begin_capture()
    s1.begin_capture()
    await s1.wait_event(event)  # not isolation: the event's latest record is eager
    s0.end_capture().destroy()
    s1.end_capture().destroy()


@pytest.mark.asyncio
async def test_fork_into_a_stream_keeps_its_mode_and_invalidation_is_shared(
    device: ahg.Device,
) -> None:
    s0, s1 = streams(device, 2)
    (fork,) = events(device, 1)
    before = Baseline.take(device)
    s0.begin_capture(ahg.CaptureMode.RELAXED)
    await s0.record_event(fork)
    await s1.wait_event(fork)
    with pytest.raises(ahg.IllegalState):
        s1.begin_capture()  # already part of a capture
    with pytest.raises(ahg.StreamCaptureUnsupported):
        s1.query()
    assert s0.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        s0.end_capture()
    assert Baseline.take(device) == before
