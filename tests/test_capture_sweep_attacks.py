"""Attacks on stream capture that once found a bug.

* A node a capture made or needs, destroyed while the capture is in progress (the stream's
  last captured node, a ``begin_capture_to_graph`` dependency, a node an event recorded in the
  capture carries to its waiters, a captured node in the middle of the chain): the capture
  stayed ACTIVE with a destroyed node in its dependency set, ``capture_info()`` listed it,
  every later captured operation failed with ``InvalidValue`` and ``end_capture`` reported an
  unjoined fork that never was (or, with no later operation, returned a graph missing the
  work). HIP keeps raw pointers there (its next captured call uses freed memory); the capture
  is now invalidated at that moment, as when its whole graph is destroyed.
* A ``begin_capture_to_graph`` dependency destroyed on another thread after the begin checked
  it, before the begin took the capture lock: the capture began ACTIVE with that dead node.
* ``update_capture_dependencies`` refused by an invalidated capture said the stream "is not
  capturing" (while ``is_capturing()`` says INVALIDATED), or, invalidated under the call by
  its own iterable, that the capture "ended".
* An unjoined ``end_capture`` gave only a count of "forked branches": after an edge removed by
  hand between two of the origin's own nodes, there was no fork to look for. It names them.
"""

from __future__ import annotations

import os
import threading

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy

INVALIDATED = ahg.CaptureStatus.INVALIDATED


async def _launch(stream: ahg.Stream, ptr: ahg.DevicePtr, add: int = 0) -> ahg.GraphNode:
    work = await stream.launch_kernel(affine, N, 1, (N, 1, add, ptr, ptr))
    node = work.node
    assert node is not None
    return node


def _ends_invalidated(stream: ahg.Stream) -> None:
    assert stream.is_capturing() is INVALIDATED
    assert stream.capture_info() == ahg.CaptureInfo(INVALIDATED)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE


# -- a node the capture made or needs, destroyed mid-capture -------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("then", ["end", "launch", "memset"])
async def test_the_streams_last_captured_node_destroyed_invalidates_the_capture(
    device: ahg.Device, then: str
) -> None:
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    before = Baseline.take(device)
    stream.begin_capture()
    await _launch(stream, ptr)
    last = await _launch(stream, ptr, 1)
    last.destroy()
    assert stream.is_capturing() is INVALIDATED
    if then == "launch":
        with pytest.raises(ahg.StreamCaptureInvalidated):
            await _launch(stream, ptr, 2)
    elif then == "memset":
        with pytest.raises(ahg.StreamCaptureInvalidated):
            await stream.memset(ptr, 0, 8)
    _ends_invalidated(stream)  # not StreamCaptureUnjoined: nothing was forked
    assert Baseline.take(device) == before  # the capture's own graph was freed
    destroy(stream, ptr)


@pytest.mark.asyncio
async def test_the_only_captured_node_destroyed_is_not_an_empty_graph(device: ahg.Device) -> None:
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture()
    (await _launch(stream, ptr)).destroy()
    _ends_invalidated(stream)  # was: a graph with no nodes, the captured work silently gone
    destroy(stream, ptr)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_captured_node_in_the_middle_destroyed_invalidates_the_capture(
    device: ahg.Device,
) -> None:
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture()
    await _launch(stream, ptr)
    middle = await _launch(stream, ptr, 1)
    await _launch(stream, ptr, 2)
    middle.destroy()  # the first and last nodes lose their order
    _ends_invalidated(stream)
    destroy(stream, ptr)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_begin_capture_to_graph_dependency_destroyed_invalidates_the_capture(
    device: ahg.Device,
) -> None:
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    graph = ahg.Graph()
    dep, spare = graph.add_empty_node(), graph.add_empty_node()
    stream.begin_capture_to_graph(graph, [dep])
    spare.destroy()  # a node the capture does not need: an edit HIP allows, no effect
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    dep.destroy()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await _launch(stream, ptr)  # was: InvalidValue, "... was destroyed", capture ACTIVE
    _ends_invalidated(stream)
    assert not graph.destroyed  # the user's graph stays the user's
    assert graph.nodes() == []
    destroy(graph, stream, ptr)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_node_an_event_carries_to_its_waiters_destroyed_invalidates_the_capture(
    device: ahg.Device,
) -> None:
    origin, fork, ptr = device.create_stream(), device.create_stream(), device.malloc(NBYTES)
    event = device.create_event()
    graph = ahg.Graph()
    manual = graph.add_empty_node()  # not captured: only the event needs it
    origin.begin_capture_to_graph(graph, [manual])
    await origin.record_event(event)  # carries {manual}
    origin.update_capture_dependencies([], ahg.CaptureDependencies.SET)  # origin lets go of it
    manual.destroy()
    assert origin.is_capturing() is INVALIDATED
    await fork.wait_event(event)  # joins the capture, invalidated: never the destroyed node
    assert fork.capture_info() == ahg.CaptureInfo(INVALIDATED)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await _launch(fork, ptr)
    _ends_invalidated(origin)
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    destroy(graph, origin, fork, event, ptr)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_node_destroyed_in_a_forked_streams_set_invalidates_every_stream(
    device: ahg.Device,
) -> None:
    origin, fork, ptr = device.create_stream(), device.create_stream(), device.malloc(NBYTES)
    event = device.create_event()
    origin.begin_capture()
    await origin.record_event(event)
    await fork.wait_event(event)  # fork joins
    forked = await _launch(fork, ptr)
    forked.destroy()
    assert fork.is_capturing() is INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        await _launch(origin, ptr)
    _ends_invalidated(origin)
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    destroy(origin, fork, event, ptr)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_refused_node_destroy_leaves_the_capture_active(device: ahg.Device) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    ptr = await stream.malloc_async(NBYTES)  # a MemAlloc node: it cannot be destroyed
    deps = stream.capture_info().dependencies
    with pytest.raises(ahg.NotSupported):
        deps[0].destroy()
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE  # a refused call changes nothing
    await stream.free_async(ptr)
    graph = stream.end_capture()
    assert len(graph.nodes()) == 2  # alloc, free
    destroy(graph, stream)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_dependency_destroyed_while_begin_capture_to_graph_waits_for_the_lock(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another thread destroys a dependency after the begin checked it and before the begin
    holds the capture lock: no capture exists yet to invalidate, so the begin must see it."""
    from ahipgraph.device import table
    from ahipgraph.runtime import capture_lifecycle

    stream = device.create_stream()
    graph = ahg.Graph()
    dep = graph.add_empty_node()

    class DestroysTheDependency:
        """The device table, whose check the begin makes under the lock: the other thread's
        destroy lands at that point (the lock is re-entrant, so it can here)."""

        @staticmethod
        def live(dev: ahg.Device) -> None:
            dep.destroy()
            table.live(dev)

    monkeypatch.setattr(capture_lifecycle, "_device_table", DestroysTheDependency)
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        stream.begin_capture_to_graph(graph, [dep])
    monkeypatch.undo()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE  # was: ACTIVE, the dead node its set
    destroy(graph, stream)
    no_capture_left()


# -- update_capture_dependencies says why it refuses -----------------------------------------------


@pytest.mark.asyncio
async def test_an_update_refused_by_an_invalidated_capture_says_so(device: ahg.Device) -> None:
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture()
    last = await _launch(stream, ptr)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        stream.query()  # invalidates
    with pytest.raises(ahg.IllegalState, match="was invalidated"):  # was: "... is not capturing"
        stream.update_capture_dependencies([last], ahg.CaptureDependencies.ADD)
    _ends_invalidated(stream)
    destroy(stream, ptr)
    no_capture_left()


@pytest.mark.asyncio
async def test_an_update_whose_nodes_destroy_the_streams_dependency(device: ahg.Device) -> None:
    """The iterable (user code) destroys the node the stream depends on: the capture is
    invalidated under the call, which refuses, saying so, and changes nothing else."""
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture()
    first = await _launch(stream, ptr)
    last = await _launch(stream, ptr, 1)

    class DestroysTheDependency:
        def __iter__(self):  # type: ignore[no-untyped-def]
            last.destroy()
            return iter([first])

    with pytest.raises(ahg.IllegalState, match="invalidated while this call"):
        stream.update_capture_dependencies(DestroysTheDependency())  # type: ignore[arg-type]
    _ends_invalidated(stream)
    destroy(stream, ptr)
    no_capture_left()


# -- an unjoined end names the nodes ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_edge_removed_by_hand_mid_capture_is_unjoined_naming_the_node(
    device: ahg.Device,
) -> None:
    """HIP's unjoined check finds the origin's own first node a leaf once its edge to the next
    is removed: the error (HIP's code) names the node, not only a count of "forked branches"
    that the user never made."""
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture()
    first = await _launch(stream, ptr)
    second = await _launch(stream, ptr, 1)
    graph = stream.capture_info().graph
    assert graph is not None
    graph.remove_dependencies(first, second)
    with pytest.raises(ahg.StreamCaptureUnjoined) as caught:
        stream.end_capture()
    assert f"Kernel id={first.id} " in str(caught.value)
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    destroy(stream, ptr)
    no_capture_left()


@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")), reason="races captured launches on purpose"
)
def test_a_captured_node_destroyed_on_another_thread_while_launches_are_captured(
    device: ahg.Device,
) -> None:
    """One thread captures launches while another destroys one of them: the destroy takes the
    capture lock before the graph's (as a captured launch does), so neither waits on the
    other for good, and the capture ends invalidated whichever launch came last."""
    stream, ptr = device.create_stream(), device.malloc(NBYTES)
    stream.begin_capture(ahg.CaptureMode.RELAXED)
    graph = stream.capture_info().graph
    assert graph is not None
    three, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def capture() -> None:
        try:
            for count in range(1, 1_000_000):  # bounded: the destroy comes after 3
                stream.launch_kernel_nowait(affine, N, 1, (N, 1, 0, ptr, ptr))
                if count == 3:
                    three.set()
                if done.is_set():
                    return
        except ahg.StreamCaptureInvalidated:
            return
        except BaseException as error:
            errors.append(error)

    def destroy_one() -> None:
        try:
            three.wait(10)
            graph.nodes()[1].destroy()
        except BaseException as error:
            errors.append(error)
        finally:
            done.set()

    threads = [threading.Thread(target=capture), threading.Thread(target=destroy_one)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)  # a hang detector only
    assert errors == []
    _ends_invalidated(stream)
    destroy(stream, ptr)
    no_capture_left()
