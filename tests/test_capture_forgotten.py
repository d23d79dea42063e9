"""A capturing stream dropped without ``destroy()``.

HIP leaks such a stream and keeps its capture in progress for good; a GLOBAL one then refuses
every ``malloc`` of every thread. Here a forgotten capturing stream is freed as any forgotten
stream is, with its ``ForgottenHandleWarning``, and its capture ends as ``destroy()`` ends it
(an origin ends the sequence and frees the graph; a fork leaves it, HIP's semantics for a
destroyed fork) no later than ``ahg.collect_forgotten()``. A second warning names the capture
that was left in progress. Every test checks that nothing stays registered or allocated.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core.lifecycle import releaser_statistics
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left, on_thread
from cleanup import destroy

MODES = [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL, ahg.CaptureMode.RELAXED]


def forget(box: list[Any]) -> list[str]:
    """Drop the handles in ``box`` (the test's only references), collect them, and return the
    ForgottenHandleWarning messages given, sorted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    assert all(issubclass(w.category, ahg.ForgottenHandleWarning) for w in caught)
    return sorted(str(w.message) for w in caught)


def label(stream: ahg.Stream) -> str:
    return f"stream #{stream.hid.slot}.{stream.hid.generation} on device {stream.device.ordinal}"


def kinds(messages: list[str]) -> list[str]:
    """``unclosed stream``, ``unclosed capture``, ``unclosed fork of capture``: what warned."""
    return sorted(m.split(" #")[0] for m in messages)


def malloc_works(device: ahg.Device) -> None:
    ptr = device.malloc(16)  # StreamCaptureUnsupported while a GLOBAL capture is in progress
    device.free(ptr)


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Holds the releaser thread until set: a forgotten user object's destructor waits on it,
    so a test can look at what a collected stream left before its release runs."""
    opened = threading.Event()
    yield opened
    opened.set()


def hold_releaser(gate: threading.Event) -> None:
    started = threading.Event()

    def destructor(data: object) -> None:
        started.set()
        gate.wait(10)

    box = [ahg.UserObject(destructor)]
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed user object"):
        box.clear()
    assert started.wait(10)


# -- a forgotten origin ----------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
async def test_a_forgotten_origin_ends_its_capture_and_frees_everything(
    mode: ahg.CaptureMode, device: ahg.Device
) -> None:
    src = device.malloc(NBYTES)
    before = Baseline.take(device)
    box = [device.create_stream()]
    box[0].begin_capture(mode)
    ptr = await box[0].malloc_async(NBYTES)  # a reservation the capture graph holds
    await box[0].memset(ptr, 0, NBYTES)
    await box[0].launch_kernel(affine, 1, N, (N, 2, 1, src, ptr))
    assert ahg.capture_statistics() == ahg.CaptureStatistics(1, 1, 0)
    assert Baseline.take(device) != before  # the graph, its nodes and its reservation
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    no_capture_left()
    assert Baseline.take(device) == before  # graph, nodes, reservation and bytes given back
    malloc_works(device)
    # The null stream's guard (the stream was blocking) is lifted: the null stream works.
    await device.null_stream.memset(src, 0, NBYTES)
    await device.null_stream.synchronize()
    destroy(src)


def test_a_forgotten_global_capture_refuses_malloc_until_released(device: ahg.Device) -> None:
    box = [device.create_stream()]
    box[0].begin_capture()
    with pytest.raises(ahg.StreamCaptureUnsupported):  # the capture is still there...
        device.malloc(16)
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    malloc_works(device)  # ...and gone with its stream
    no_capture_left()


def test_the_warnings_name_the_stream_and_the_capture_left_in_progress(
    device: ahg.Device,
) -> None:
    box = [device.create_stream()]
    box[0].begin_capture()
    stream_label, capture_id = label(box[0]), box[0].capture_info().id
    assert forget(box) == [
        f"unclosed capture #{capture_id} on {stream_label}: dropped without end_capture() or "
        f"destroy(); freed by its finalizer (it ended as destroy() of its stream ends it; end the "
        f"capture, or destroy the stream, before dropping the stream)",
        f"unclosed {stream_label}: dropped without destroy(); freed by its finalizer (destroy "
        f"it, or use it in a `with` block)",
    ]


def test_a_stream_whose_capture_ended_warns_only_for_itself(device: ahg.Device) -> None:
    box = [device.create_stream()]
    box[0].begin_capture()
    box[0].end_capture().destroy()
    assert kinds(forget(box)) == ["unclosed stream"]
    # and one whose capture was invalidated and ended by the failed end
    box = [device.create_stream()]
    box[0].begin_capture()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        box[0].query()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        box[0].end_capture()
    assert kinds(forget(box)) == ["unclosed stream"]
    no_capture_left()


@pytest.mark.asyncio
async def test_a_forgotten_origin_ends_its_live_forks(device: ahg.Device) -> None:
    side = device.create_stream()
    fork = device.create_event()
    dst = device.malloc(NBYTES)
    before = Baseline.take(device)
    box = [device.create_stream()]
    box[0].begin_capture()
    await box[0].record_event(fork)
    await side.wait_event(fork)
    await side.memset(await side.malloc_async(8), 0, 8)
    assert side.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    assert side.is_capturing() is ahg.CaptureStatus.NONE  # forks end with their origin
    with pytest.raises(ahg.IllegalState):
        side.end_capture()
    no_capture_left()
    assert Baseline.take(device) == before
    await side.memset(dst, 7, NBYTES)  # the fork is an ordinary stream again: work runs
    await side.synchronize()
    assert (device.view(dst, np.uint8, NBYTES) == 7).all()
    await side.wait_event(fork)  # the event's capture ended: an ordinary wait
    destroy(side, fork, dst)


@pytest.mark.asyncio
async def test_a_forgotten_origin_with_its_events_still_alive(device: ahg.Device) -> None:
    """A recorded event remembers its stream weakly: it keeps neither stream nor capture."""
    other = device.create_stream()
    events = [device.create_event(), device.create_event()]
    before = Baseline.take(device)
    box = [device.create_stream()]
    box[0].begin_capture()
    await box[0].record_event(events[0])
    await box[0].memset(await box[0].malloc_async(8), 0, 8)
    await box[0].record_event(events[1])
    assert ahg.capture_statistics().event_links == 2
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    no_capture_left()  # no link left either
    assert Baseline.take(device) == before
    for event in events:
        assert event.query()  # not CapturedEvent: its capture is over
        await other.wait_event(event)  # an ordinary wait, neither a fork nor an isolation error
        await event.synchronize()
    assert other.is_capturing() is ahg.CaptureStatus.NONE
    # A new capture on another stream is not refused by the old events (no isolation: their
    # recording stream is gone and captures nothing).
    other.begin_capture()
    await other.wait_event(events[0])
    graph = other.end_capture()
    assert graph.nodes() == []
    destroy(graph, other, *events)


# -- a forgotten fork ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_forgotten_unjoined_fork_leaves_its_nodes_unjoined(device: ahg.Device) -> None:
    """As for a destroyed fork (HIP removes it from the capture): the origin ends alone, and
    the fork's work that never joined back is HIP's unjoined error; the graph is freed."""
    origin = device.create_stream()
    fork = device.create_event()
    before = Baseline.take(device)
    origin.begin_capture()
    await origin.record_event(fork)
    box = [device.create_stream()]
    await box[0].wait_event(fork)
    await box[0].memset(await box[0].malloc_async(8), 0, 8)
    assert ahg.capture_statistics().capturing_streams == 2
    assert kinds(forget(box)) == ["unclosed fork of capture", "unclosed stream"]
    assert ahg.capture_statistics().capturing_streams == 1  # the fork left
    assert origin.is_capturing() is ahg.CaptureStatus.ACTIVE
    await origin.memset(await origin.malloc_async(8), 0, 8)
    with pytest.raises(ahg.StreamCaptureUnjoined):
        origin.end_capture()
    no_capture_left()
    assert Baseline.take(device) == before
    destroy(origin, fork)


@pytest.mark.asyncio
async def test_a_forgotten_fork_that_joined_back_keeps_its_work(device: ahg.Device) -> None:
    origin = device.create_stream()
    fork, join = device.create_event(), device.create_event()
    src, dst = device.malloc(NBYTES), device.malloc(NBYTES)
    await device.memcpy(src, np.arange(N, dtype=np.int64))
    await device.memset(dst, 0, NBYTES)
    origin.begin_capture()
    await origin.record_event(fork)
    box = [device.create_stream()]
    await box[0].wait_event(fork)
    await box[0].launch_kernel(affine, 1, N, (N, 2, 5, src, dst))
    await box[0].record_event(join)
    assert kinds(forget(box)) == ["unclosed fork of capture", "unclosed stream"]
    await origin.wait_event(join)  # joins what the forgotten fork recorded
    await origin.launch_kernel(affine, 1, N, (N, 1, 0, src, dst))
    graph = origin.end_capture()
    assert len(graph.nodes()) == 2
    with graph.instantiate() as graph_exec:
        await graph_exec.launch(origin)
        await origin.synchronize()
    first = 2 * np.arange(N) + 5
    assert (host_view(device, dst) == first * 3 + np.arange(N)).all()
    no_capture_left()
    destroy(graph, origin, fork, join, src, dst)


@pytest.mark.asyncio
async def test_a_forgotten_empty_fork_changes_nothing(device: ahg.Device) -> None:
    origin = device.create_stream()
    fork = device.create_event()
    origin.begin_capture()
    await origin.record_event(fork)
    box = [device.create_stream()]
    await box[0].wait_event(fork)
    assert kinds(forget(box)) == ["unclosed fork of capture", "unclosed stream"]
    await origin.memset(await origin.malloc_async(8), 0, 8)
    graph = origin.end_capture()
    assert len(graph.nodes()) == 2
    no_capture_left()
    destroy(graph, origin, fork)


@pytest.mark.asyncio
async def test_a_fork_of_a_forgotten_fork_leaves_with_it(device: ahg.Device) -> None:
    origin, third = device.create_stream(), device.create_stream()
    events = [device.create_event(), device.create_event()]
    origin.begin_capture()
    await origin.record_event(events[0])
    box = [device.create_stream()]
    await box[0].wait_event(events[0])
    await box[0].record_event(events[1])
    await third.wait_event(events[1])  # forked from the fork
    assert ahg.capture_statistics().capturing_streams == 3
    assert kinds(forget(box)) == ["unclosed fork of capture", "unclosed stream"]
    assert third.is_capturing() is ahg.CaptureStatus.NONE  # left with its parent, as destroy()
    assert origin.is_capturing() is ahg.CaptureStatus.ACTIVE
    origin.end_capture().destroy()
    no_capture_left()
    destroy(origin, third, *events)


# -- between the collection and the release --------------------------------------------------------


@pytest.mark.asyncio
async def test_a_collected_fork_before_its_release_is_as_a_destroyed_one(
    device: ahg.Device, gate: threading.Event
) -> None:
    """The part of a collected stream is still listed until the releaser's turn; the origin's
    end meanwhile treats it as a destroyed stream's, and the late release does nothing."""
    origin = device.create_stream()
    fork = device.create_event()
    origin.begin_capture()
    await origin.record_event(fork)
    box = [device.create_stream()]
    await box[0].wait_event(fork)
    hold_releaser(gate)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        gc.collect()  # collected now; released once the gate opens
    assert kinds([str(w.message) for w in caught]) == [
        "unclosed fork of capture",
        "unclosed stream",
    ]
    assert ahg.capture_statistics().capturing_streams == 2  # listed until the release
    assert repr(origin).endswith("capture=active>")
    await origin.memset(await origin.malloc_async(8), 0, 8)
    graph = origin.end_capture()  # ends the collected part with the rest
    no_capture_left()
    gate.set()
    ahg.collect_forgotten()  # the late release finds the part ended: nothing happens
    no_capture_left()
    assert len(graph.nodes()) == 2
    destroy(graph, origin, fork)


@pytest.mark.asyncio
async def test_the_origin_destroyed_while_a_collected_forks_release_waits(
    device: ahg.Device, gate: threading.Event
) -> None:
    before = Baseline.take(device)
    origin = device.create_stream()
    fork = device.create_event()
    origin.begin_capture()
    await origin.record_event(fork)
    box = [device.create_stream()]
    await box[0].wait_event(fork)
    await box[0].memset(await box[0].malloc_async(8), 0, 8)
    hold_releaser(gate)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        gc.collect()
    origin.destroy()  # ends the session, the collected fork's part with it
    no_capture_left()
    gate.set()
    ahg.collect_forgotten()
    no_capture_left()
    fork.destroy()
    assert Baseline.take(device) == before


def test_a_collected_capture_is_gone_at_once_and_its_release_lifts_the_guard(
    device: ahg.Device, gate: threading.Event
) -> None:
    """Nothing but its forgotten stream held the capture: the collector takes stream, capture
    and graph together. The release then only lifts the null stream's guard."""
    before = Baseline.take(device)
    box = [device.create_stream()]
    box[0].begin_capture()  # GLOBAL, on a blocking stream: the null stream is guarded
    with pytest.raises(ahg.StreamCaptureImplicit):
        device.null_stream.is_capturing()
    hold_releaser(gate)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        gc.collect()
    assert kinds([str(w.message) for w in caught]) == ["unclosed capture", "unclosed stream"]
    no_capture_left()  # at once: nothing registered
    malloc_works(device)
    with pytest.raises(ahg.StreamCaptureImplicit):
        device.null_stream.is_capturing()  # until the release's turn
    gate.set()
    ahg.collect_forgotten()
    assert device.null_stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before


# -- tasks, blocks, threads and loops --------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_block_abandoned_by_a_cancelled_task_then_forgotten(device: ahg.Device) -> None:
    before = Baseline.take(device)
    box = [device.create_stream()]
    entered = asyncio.Event()

    async def body() -> None:
        async with box[0].capture():
            await box[0].memset(await box[0].malloc_async(8), 0, 8)
            entered.set()
            await asyncio.Event().wait()  # never set: the task is cancelled here

    task = asyncio.create_task(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    del task
    no_capture_left()  # the block ended it
    assert kinds(forget(box)) == ["unclosed stream"]  # the capture ended before: no second
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_a_block_whose_coroutine_is_dropped_suspended_inside_it(device: ahg.Device) -> None:
    """A coroutine never resumed, dropped while suspended in the block: closing it ends the
    capture, and the stream it held is then an ordinary forgotten stream."""
    before = Baseline.take(device)
    box: list[Any] = [device.create_stream()]
    never = asyncio.get_running_loop().create_future()

    async def body(stream: ahg.Stream) -> None:
        async with stream.capture():
            await stream.memset(await stream.malloc_async(8), 0, 8)
            await never

    coroutine = body(box[0])
    assert coroutine.send(None) is never  # suspended inside the block
    assert ahg.capture_statistics().sessions == 1
    box.append(coroutine)
    del coroutine
    assert kinds(forget(box)) == ["unclosed stream"]
    no_capture_left()
    assert Baseline.take(device) == before
    never.cancel()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_forgotten_on_an_os_thread(mode: ahg.CaptureMode, device: ahg.Device) -> None:
    dst = device.malloc(8)
    before = Baseline.take(device)

    def capture_and_drop() -> None:
        stream = device.create_stream()
        stream.begin_capture(mode)
        stream.memset_nowait(dst, 0, 8)
        # returns with the stream dropped, capturing

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        on_thread(capture_and_drop)
        ahg.collect_forgotten()
    assert kinds([str(w.message) for w in caught]) == ["unclosed capture", "unclosed stream"]
    no_capture_left()
    assert Baseline.take(device) == before
    malloc_works(device)
    on_thread(lambda: malloc_works(device))  # the thread's mode no longer trips anything
    destroy(dst)


def test_an_ended_threads_per_thread_stream_ends_its_capture(device: ahg.Device) -> None:
    """A thread's own stream goes with the thread, quietly (the runtime owns it); the capture
    it left in progress is ended, and named."""
    before = Baseline.take(device)

    def capture_and_exit() -> None:
        device.per_thread_stream().begin_capture(ahg.CaptureMode.THREAD_LOCAL)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        on_thread(capture_and_exit)
        ahg.collect_forgotten()
    assert kinds([str(w.message) for w in caught]) == ["unclosed capture"]
    no_capture_left()
    assert Baseline.take(device) == before


def test_forgotten_in_a_second_event_loop(device: ahg.Device) -> None:
    before = Baseline.take(device)

    async def capture_and_drop() -> None:
        stream = device.create_stream()
        stream.begin_capture()
        await stream.memset(await stream.malloc_async(8), 0, 8)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        on_thread(lambda: asyncio.run(capture_and_drop()))
        ahg.collect_forgotten()
    assert kinds([str(w.message) for w in caught]) == ["unclosed capture", "unclosed stream"]
    no_capture_left()
    assert Baseline.take(device) == before
    malloc_works(device)


# -- misuse ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt("from a destructor")])
def test_a_raising_destructor_of_the_capture_graph_is_contained(
    error: BaseException, device: ahg.Device
) -> None:
    """The capture ends before its graph is freed; a user-object destructor that raises while
    the releaser frees the graph is reported, and the releaser keeps working."""
    ran: list[object] = []

    def destructor(data: object) -> None:
        ran.append(data)
        raise error

    unraisable: list[Any] = []
    failed = releaser_statistics()["failed"]
    box = [device.create_stream()]
    box[0].begin_capture()
    graph = box[0].capture_info().graph
    assert graph is not None
    graph.retain_user_object(ahg.UserObject(destructor, "payload"), move=True)
    del graph
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    finally:
        sys.unraisablehook = previous
    assert ran == ["payload"]
    assert [u.exc_value for u in unraisable] == [error]
    assert releaser_statistics()["failed"] == failed + 1
    no_capture_left()
    malloc_works(device)
    box = [device.create_stream()]  # the releaser survived: the next one is freed too
    box[0].begin_capture()
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    no_capture_left()


def test_a_capture_to_a_users_graph_leaves_the_graph_to_the_user(device: ahg.Device) -> None:
    dst = device.malloc(8)
    graph = ahg.Graph()
    first = graph.add_empty_node()
    box = [device.create_stream()]
    box[0].begin_capture_to_graph(graph, [first])
    box[0].memset_nowait(dst, 0, 8)
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    no_capture_left()
    assert not graph.destroyed  # never the capture's to free, as for a destroyed stream
    assert len(graph.nodes()) == 2
    destroy(graph, dst)


@pytest.mark.asyncio
async def test_a_thousand_forgotten_captures_are_all_ended(device: ahg.Device) -> None:
    before = Baseline.take(device)
    fork = device.create_event()
    box: list[ahg.Stream] = []
    for i in range(500):
        origin, side = device.create_stream(), device.create_stream()
        origin.begin_capture(MODES[i % 3])
        await origin.record_event(fork)
        await side.wait_event(fork)
        await side.memset(await side.malloc_async(8), 0, 8)
        box += (origin, side)
    del origin, side
    found = kinds(forget(box))
    assert found.count("unclosed stream") == 1000
    assert found.count("unclosed capture") == 500
    # A fork dropped after its origin warns unless the origin's release already ended it.
    assert found.count("unclosed fork of capture") <= 500
    assert len(found) == 1000 + 500 + found.count("unclosed fork of capture")
    no_capture_left()
    assert Baseline.take(device) == before
    malloc_works(device)
    destroy(fork)


@pytest.mark.asyncio
async def test_a_capture_graph_a_user_holds_is_freed_with_the_forgotten_capture(
    device: ahg.Device,
) -> None:
    """As when the stream is destroyed: the capture's graph is freed, whoever holds it."""
    before = Baseline.take(device)
    box = [device.create_stream()]
    box[0].begin_capture()
    await box[0].memset(await box[0].malloc_async(8), 0, 8)
    graph = box[0].capture_info().graph
    assert graph is not None
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    assert graph.destroyed
    with pytest.raises(ahg.IllegalState):
        graph.destroy()
    del graph
    no_capture_left()
    assert Baseline.take(device) == before


@pytest.mark.asyncio
async def test_captured_work_still_held_keeps_nothing_in_progress(device: ahg.Device) -> None:
    """A returned CapturedWork holds its session (not the stream): the release ends it."""
    dst = device.malloc(8)
    before = Baseline.take(device)
    box = [device.create_stream()]
    box[0].begin_capture()
    work = await box[0].memset(dst, 0, 8)
    assert kinds(forget(box)) == ["unclosed capture", "unclosed stream"]
    no_capture_left()
    assert Baseline.take(device) == before  # its node went with the freed graph
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await work  # still the same mistake, and nothing to invalidate any more
    no_capture_left()
    malloc_works(device)
    destroy(dst)


class _Pipeline:
    """User code that keeps its stream and captures its own method: a common shape."""

    def __init__(self, device: ahg.Device) -> None:
        self.stream = device.create_stream()
        self.done = 0

    def on_done(self) -> None:
        self.done += 1


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["host argument", "bound method"])
async def test_a_stream_its_captured_work_refers_to_is_still_forgotten(
    how: str, device: ahg.Device
) -> None:
    """The capture's graph refers back to the stream; the registry holds captures weakly, so
    stream, capture and graph are one garbage cycle, collected and freed together. (A user
    object's data is another matter: the runtime holds a referenced user object, data
    included, until its references are released, so data that refers to the stream keeps it.)"""
    before = Baseline.take(device)
    pipeline = _Pipeline(device)
    stream = pipeline.stream
    stream.begin_capture()
    if how == "host argument":
        await stream.launch_host_func(print, stream)
    else:
        await stream.launch_host_func(pipeline.on_done)
    await stream.memset(await stream.malloc_async(8), 0, 8)
    stream_ref = weakref.ref(stream)
    box: list[Any] = [pipeline]
    del pipeline, stream
    found = kinds(forget(box))
    assert stream_ref() is None
    assert found == ["unclosed capture", "unclosed stream"]
    no_capture_left()
    assert Baseline.take(device) == before
    malloc_works(device)
