"""A graph destroyed while a capture adds to it: the capture is invalidated at that moment.

A user can reach the graph a stream captures into: the one given to ``begin_capture_to_graph``,
the capture's own graph (``capture_info().graph``), or a child-graph node's embedded copy given
as the target. HIP does not guard against destroying it (its captured calls then use freed
memory); ahipgraph invalidates the capture when the graph goes, so that from then on:

* ``is_capturing()`` and ``capture_info()`` read INVALIDATED on every stream in the capture;
* every captured operation fails with ``StreamCaptureInvalidated``;
* the calls an invalidated capture refuses (``malloc``, synchronising the stream, querying an
  event recorded in it, updating its dependencies) are refused alike;
* ``end_capture`` raises ``StreamCaptureInvalidated``, leaves no stream capturing and nothing
  registered, and never destroys the graph a second time.

The same holds when the graph is destroyed on another OS thread, or by another task while the
capturing task, or an enqueue on the capturing stream, is parked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left, on_thread
from cleanup import destroy

INVALIDATED = ahg.CaptureStatus.INVALIDATED


class _Kit:
    """An origin and a stream forked into its capture, an event recorded in it, a buffer."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.origin, self.fork = device.create_stream(), device.create_stream()
        self.fork_event, self.other_event = device.create_event(), device.create_event()
        self.ptr = device.malloc(NBYTES)
        self.host = np.zeros(N, np.int64)

    async def fork_in(self) -> None:
        await self.origin.launch_kernel(affine, 1, N, (N, 0, 1, self.ptr, self.ptr))
        await self.origin.record_event(self.fork_event)
        await self.fork.wait_event(self.fork_event)

    def operations(self, stream: ahg.Stream) -> dict[str, Callable[[], Awaitable[Any]]]:
        """Every kind of captured operation, each on ``stream``."""
        ptr = self.ptr
        return {
            "launch_kernel": lambda: stream.launch_kernel(affine, 1, N, (N, 0, 1, ptr, ptr)),
            "memcpy": lambda: stream.memcpy(ptr, self.host, NBYTES),
            "memset": lambda: stream.memset(ptr, 0, NBYTES),
            "launch_host_func": lambda: stream.launch_host_func(int),
            "record_event": lambda: stream.record_event(self.other_event),
            "record_event_external": lambda: stream.record_event(self.other_event, 1),
            "wait_event_external": lambda: stream.wait_event(self.other_event, 1),
            "malloc_async": lambda: stream.malloc_async(64),
        }

    def close(self) -> None:
        destroy(self.origin, self.fork, self.fork_event, self.other_event, self.ptr)


@pytest.fixture
def kit(device: ahg.Device) -> Iterator[_Kit]:
    made = _Kit(device)
    yield made
    made.close()


def _begin(kit: _Kit, target: str) -> ahg.Graph:
    """Begin capturing on the origin into ``target``; return the graph a user can destroy."""
    if target == "user_graph":
        graph = ahg.Graph()
        kit.origin.begin_capture_to_graph(graph)
        return graph
    kit.origin.begin_capture()
    own = kit.origin.capture_info().graph
    assert own is not None
    return own


def _assert_invalidated(*streams: ahg.Stream) -> None:
    for stream in streams:
        assert stream.is_capturing() is INVALIDATED
        assert stream.capture_info() == ahg.CaptureInfo(INVALIDATED)


def _assert_ended(*streams: ahg.Stream) -> None:
    for stream in streams:
        assert stream.is_capturing() is ahg.CaptureStatus.NONE
    no_capture_left()


def _ends_invalidated(kit: _Kit) -> None:
    """Both streams read INVALIDATED; the origin's end says so and ends the capture on both."""
    _assert_invalidated(kit.origin, kit.fork)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        kit.origin.end_capture()
    _assert_ended(kit.origin, kit.fork)


@pytest.mark.asyncio
@pytest.mark.parametrize("target", ["user_graph", "capture_graph"])
async def test_destroying_the_target_invalidates_the_capture_on_every_stream(
    device: ahg.Device, kit: _Kit, target: str
) -> None:
    before = Baseline.take(device)
    graph = _begin(kit, target)
    await kit.fork_in()
    assert kit.fork.is_capturing() is ahg.CaptureStatus.ACTIVE
    graph.destroy()
    _assert_invalidated(kit.origin, kit.fork)
    for stream in (kit.origin, kit.fork):
        for name, operation in kit.operations(stream).items():
            with pytest.raises(ahg.StreamCaptureInvalidated):
                await operation()
            _assert_invalidated(kit.origin, kit.fork)  # and nothing else changed: ``name``
            del name
    with pytest.raises(ahg.StreamCaptureUnmatched):
        kit.fork.end_capture()  # still a fork: the origin ends the capture
    with pytest.raises(ahg.StreamCaptureInvalidated):
        kit.origin.end_capture()
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before
    with pytest.raises(ahg.IllegalState):
        graph.destroy()  # destroyed once, by the user; the failed end did not destroy it again
    # both streams capture again, and the fork's work now runs eagerly
    kit.origin.begin_capture()
    kit.origin.end_capture().destroy()
    await (await kit.fork.memset(kit.ptr, 0, NBYTES))


async def _invalidate(kit: _Kit, graph: ahg.Graph, how: str) -> None:
    if how == "graph_destroyed":
        graph.destroy()
    else:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            kit.origin.query()  # HIP's own invalidation: an illegal call on the stream


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["stream_query", "graph_destroyed"])
async def test_calls_refused_as_in_any_invalidated_capture(
    device: ahg.Device, kit: _Kit, how: str
) -> None:
    """The calls an invalidated capture refuses, and their codes, are the same either way."""
    graph = _begin(kit, "user_graph")
    await kit.fork_in()
    await kit.origin.record_event(kit.other_event)
    await _invalidate(kit, graph, how)
    _assert_invalidated(kit.origin, kit.fork)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(64)  # a GLOBAL capture, even invalidated, refuses every malloc
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await kit.fork.synchronize()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        kit.origin.query()
    with pytest.raises(ahg.CapturedEvent):
        kit.other_event.query()
    with pytest.raises(ahg.IllegalState):
        kit.origin.update_capture_dependencies([], ahg.CaptureDependencies.SET)
    _ends_invalidated(kit)
    if how == "stream_query":
        graph.destroy()  # the user's graph: still theirs
    ptr = device.malloc(64)  # nothing captures any more
    device.free(ptr)


@pytest.mark.asyncio
async def test_the_target_destroyed_on_another_thread(device: ahg.Device, kit: _Kit) -> None:
    before = Baseline.take(device)
    graph = _begin(kit, "user_graph")
    await kit.fork_in()
    on_thread(graph.destroy)
    _assert_invalidated(kit.origin, kit.fork)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await kit.fork.launch_kernel(affine, 1, N, (N, 0, 1, kit.ptr, kit.ptr))
    with pytest.raises(ahg.StreamCaptureInvalidated):
        kit.origin.end_capture()
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_the_target_destroyed_by_another_task_while_the_capturing_task_is_parked(
    device: ahg.Device, kit: _Kit
) -> None:
    # A RELAXED capture may wait on eager work elsewhere: the task parks on an event of a stream
    # held behind a kernel, and another task destroys the graph meanwhile.
    other, done, held = device.create_stream(), device.create_event(), HeldKernel()
    await held.launch(other)
    await other.record_event(done)
    await held.started.wait()
    graph = ahg.Graph()
    parked, outcome = asyncio.Event(), {}

    async def capturing() -> None:
        kit.origin.begin_capture_to_graph(graph, mode=ahg.CaptureMode.RELAXED)
        await kit.fork_in()
        parked.set()
        await done.synchronize()  # parks until the held kernel is released
        for name, operation in kit.operations(kit.fork).items():
            try:
                await operation()
            except ahg.StreamCaptureInvalidated:
                outcome[name] = "invalidated"
        try:
            kit.origin.end_capture()
        except ahg.StreamCaptureInvalidated:
            outcome["end_capture"] = "invalidated"

    task = asyncio.create_task(capturing())
    await parked.wait()
    await loop_turns()
    assert not task.done()
    graph.destroy()  # this task, while the capturing task is parked
    _assert_invalidated(kit.origin, kit.fork)
    held.release()
    await task
    assert outcome == dict.fromkeys([*kit.operations(kit.fork), "end_capture"], "invalidated")
    _assert_ended(kit.origin, kit.fork)
    destroy(other, done)


@pytest.mark.asyncio
async def test_an_enqueue_parked_for_room_resumes_into_the_invalidated_capture(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> None:
    # One hardware queue of 4 packets: an enqueue on the full ring parks. Meanwhile another task
    # begins a capture into a graph on that stream and destroys the graph; the parked enqueue,
    # once there is room, finds the stream capturing into an invalidated capture: it fails with
    # HIP's code, adds no node and submits no packet.
    properties = ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=4)
    (device,) = ahg_devices(1, properties)
    stream, held = device.create_stream(), HeldKernel()
    ptr = device.malloc(NBYTES)
    await held.launch(stream)
    queue = stream.statistics().queue
    while device.statistics().queues[queue].pending < 4:
        await stream.launch_host_func(int)
    await held.started.wait()
    submitted = stream.statistics().submitted
    parked = asyncio.create_task(stream.memset(ptr, 0, NBYTES))
    await loop_turns()
    assert not parked.done()
    graph = ahg.Graph()
    stream.begin_capture_to_graph(graph, mode=ahg.CaptureMode.RELAXED)
    graph.destroy()
    assert stream.is_capturing() is INVALIDATED
    held.release()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await parked
    assert stream.statistics().submitted == submitted
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    _assert_ended(stream)
    await stream.synchronize()
    destroy(stream, ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["parent_destroyed", "node_destroyed", "node_set_child_graph"])
async def test_an_embedded_copy_as_the_target(device: ahg.Device, kit: _Kit, how: str) -> None:
    """A child-graph node's embedded copy, given as the target, goes with its node."""
    before = Baseline.take(device)
    parent, source = ahg.Graph(), ahg.Graph()
    node = parent.add_child_graph_node(source)
    embedded = node.params.graph
    kit.origin.begin_capture_to_graph(embedded)
    await kit.fork_in()
    assert len(embedded.nodes()) == 1
    if how == "parent_destroyed":
        parent.destroy()
    elif how == "node_destroyed":
        node.destroy()
    else:
        node.set_child_graph(source)
    assert embedded.destroyed
    _ends_invalidated(kit)
    destroy(source, *(() if how == "parent_destroyed" else (parent,)))
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_a_target_destroyed_while_its_capture_begins(device: ahg.Device, kit: _Kit) -> None:
    # The graph goes after begin_capture_to_graph checked it and before the capture is made
    # (another thread could do this; here the dependencies' iteration does it, at that point).
    before = Baseline.take(device)
    graph = ahg.Graph()

    class DestroysTheGraph:
        def __iter__(self) -> Iterator[ahg.GraphNode]:
            graph.destroy()
            return iter(())

    with pytest.raises(ahg.InvalidValue):
        kit.origin.begin_capture_to_graph(graph, DestroysTheGraph())  # type: ignore[arg-type]
    assert kit.origin.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_two_captures_into_one_graph_are_both_invalidated(
    device: ahg.Device, kit: _Kit
) -> None:
    before = Baseline.take(device)
    graph = ahg.Graph()
    kit.origin.begin_capture_to_graph(graph)
    kit.fork.begin_capture_to_graph(graph)  # its own capture, into the same graph
    await kit.origin.memset(kit.ptr, 0, NBYTES)
    await kit.fork.memset(kit.ptr, 1, NBYTES)
    graph.destroy()
    _assert_invalidated(kit.origin, kit.fork)
    for stream in (kit.origin, kit.fork):
        with pytest.raises(ahg.StreamCaptureInvalidated):
            stream.end_capture()
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_a_capture_into_another_captures_graph_when_that_capture_fails(
    device: ahg.Device, kit: _Kit
) -> None:
    """The first capture fails and frees the graph it made: the second, adding to that graph,
    is invalidated with it rather than left ACTIVE on a graph that is gone."""
    before = Baseline.take(device)
    kit.origin.begin_capture()
    own = kit.origin.capture_info().graph
    assert own is not None
    kit.fork.begin_capture_to_graph(own)
    await kit.fork.memset(kit.ptr, 1, NBYTES)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        kit.origin.query()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        kit.origin.end_capture()  # frees the graph it made
    assert own.destroyed
    assert kit.fork.is_capturing() is INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await kit.fork.memset(kit.ptr, 2, NBYTES)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        kit.fork.end_capture()
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before


class _Raised(BaseException):
    """What an adversarial destructor raises: not an Exception."""


@pytest.mark.asyncio
@pytest.mark.parametrize("error", [_Raised, KeyboardInterrupt, ValueError])
async def test_a_raising_destructor_of_the_destroyed_target(
    device: ahg.Device, kit: _Kit, error: type[BaseException]
) -> None:
    """``destroy()`` raises what the graph's destructor raised, after the graph is gone and
    its capture invalidated: nothing half done, and the capture ends as any invalidated one."""
    before = Baseline.take(device)
    graph = ahg.Graph()

    def destructor(_: object) -> None:
        raise error("from a user-object destructor")

    graph.retain_user_object(ahg.UserObject(destructor), move=True)
    kit.origin.begin_capture_to_graph(graph)
    await kit.fork_in()
    with pytest.raises(error):
        graph.destroy()
    assert graph.destroyed
    _ends_invalidated(kit)
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_a_destructor_that_captures_while_the_target_goes(
    device: ahg.Device, kit: _Kit
) -> None:
    """The graph's destructor runs after the capture lock is released: it may begin, end and
    destroy captures (and their targets) itself without deadlock."""
    before = Baseline.take(device)
    graph, second = ahg.Graph(), ahg.Graph()
    seen: list[object] = []

    def destructor(_: object) -> None:
        seen.append(kit.origin.is_capturing())
        second.destroy()  # another capture's target, from inside a destroy
        seen.append(kit.fork.is_capturing())
        with pytest.raises(ahg.StreamCaptureInvalidated):
            kit.fork.end_capture()
        kit.fork.begin_capture()
        kit.fork.end_capture().destroy()

    graph.retain_user_object(ahg.UserObject(destructor), move=True)
    kit.origin.begin_capture_to_graph(graph)
    kit.fork.begin_capture_to_graph(second)
    graph.destroy()
    assert seen == [INVALIDATED, INVALIDATED]
    with pytest.raises(ahg.StreamCaptureInvalidated):
        kit.origin.end_capture()
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_a_capture_block_whose_graph_is_destroyed_inside_it(
    device: ahg.Device, kit: _Kit
) -> None:
    """A clean exit ends the capture with HIP's error; a cancelled block ends it quietly."""
    before = Baseline.take(device)

    async def block() -> None:
        async with kit.origin.capture():
            await kit.fork_in()
            graph = kit.origin.capture_info().graph
            assert graph is not None
            graph.destroy()

    with pytest.raises(ahg.StreamCaptureInvalidated):
        await block()
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_a_capture_block_cancelled_after_another_task_destroyed_its_graph(
    device: ahg.Device, kit: _Kit
) -> None:
    other, done, held = device.create_stream(), device.create_event(), HeldKernel()
    await held.launch(other)
    await other.record_event(done)
    await held.started.wait()
    before = Baseline.take(device)
    parked = asyncio.Event()
    graphs: list[ahg.Graph | None] = []

    async def block() -> None:
        async with kit.origin.capture(ahg.CaptureMode.RELAXED):
            await kit.fork_in()
            graphs.append(kit.origin.capture_info().graph)
            parked.set()
            await done.synchronize()  # parks until the held kernel is released

    task = asyncio.create_task(block())
    await parked.wait()
    await loop_turns()
    graph = graphs[0]
    assert graph is not None
    graph.destroy()
    _assert_invalidated(kit.origin, kit.fork)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # the block's own exception, unchanged
    _assert_ended(kit.origin, kit.fork)
    assert Baseline.take(device) == before
    held.release()
    await other.synchronize()
    destroy(other, done)
