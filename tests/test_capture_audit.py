"""Capture attacks that found a bug.

An operation whose argument's conversion changes the capture under it. Every enqueue reads its
stream's part in a capture before it converts its arguments, which runs user code (an
``__index__``) that may end the stream's capture or begin one. The call then fails with
``IllegalState`` (the capture "ended" or "began" "while this call was being made"), never
running eagerly the work meant for a capture, nor adding to a capture the work of a call made
before it began (``test_stream_arguments_reentrant`` holds the other operations). Three calls
converted an argument before reading the part, and slipped through:

* ``memset(dst, value, nbytes=n)``: the size in bytes (the count in elements was fine);
* ``record_event(event, flags)``: an event recorded eagerly once the capture had ended, or
  linked to a capture begun by its own flags;
* ``wait_event(event, flags)`` on a stream whose capture the flags began: a capture wait
  (here refused as ``StreamCaptureIsolation``, the event's record being outside the capture).

A capture a finished task left on its per-task stream. The task's streams are destroyed when it
finishes, which ends the capture, but by the task's done callback, which runs after whoever
awaited the task resumes. Until then the capture counted as in progress: it refused the
awaiting task's ``malloc`` and synchronising calls, ``capture_statistics()`` counted it, a wait
on an event recorded in it forked the waiting stream into it (whose next work then became nodes
of a graph about to be discarded, and never ran), and a stream it had forked in could not be
synchronised. The capture rules now destroy finished tasks' per-task streams first, as the
statistics readers do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import no_capture_left
from cleanup import destroy


class Reentrant:
    """An integer argument whose first conversion runs ``action`` (user code calling back)."""

    def __init__(self, value: int, action: Callable[[], object]) -> None:
        self.value = value
        self.action: Callable[[], object] | None = action

    def __index__(self) -> int:
        action, self.action = self.action, None
        if action is not None:
            action()
        return self.value


Call = Callable[[ahg.Stream, ahg.DevicePtr, ahg.Event, Callable[[int], Any]], Any]

ENDING: dict[str, Call] = {
    "memset nbytes": lambda s, a, e, i: s.memset(a, 1, nbytes=i(8)),
    "memset nbytes nowait": lambda s, a, e, i: s.memset_nowait(a, 1, nbytes=i(8)),
    "record_event flags": lambda s, a, e, i: s.record_event(e, i(0)),
    "record_event flags nowait": lambda s, a, e, i: s.record_event_nowait(e, i(0)),
}

BEGINNING: dict[str, Call] = {
    **ENDING,
    "wait_event flags": lambda s, a, e, i: s.wait_event(e, i(0)),
    "wait_event flags nowait": lambda s, a, e, i: s.wait_event_nowait(e, i(0)),
}


async def _call(result: Any) -> None:
    """Await the call if it is a coroutine (a ``_nowait`` twin has returned already)."""
    if asyncio.iscoroutine(result):
        await result


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(ENDING))
async def test_a_captured_call_whose_argument_ends_the_capture_runs_nothing_eagerly(
    device: ahg.Device, name: str
) -> None:
    """The memset ran on the device, and the event was recorded eagerly, for a call made on a
    capturing stream."""
    stream = device.create_stream()
    a = device.malloc(64)
    event = device.create_event()
    stream.begin_capture()
    ended: list[ahg.Graph] = []
    with pytest.raises(ahg.IllegalState, match="ended while this call was being made"):
        await _call(
            ENDING[name](
                stream, a, event, lambda v: Reentrant(v, lambda: ended.append(stream.end_capture()))
            )
        )
    (graph,) = ended
    assert graph.nodes() == []
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert stream.statistics().submitted == 0
    assert event.signal is None  # never recorded
    await stream.synchronize()
    assert device.view(a, "u1", 8).tolist() == [0] * 8  # no fill ran
    no_capture_left()
    destroy(graph, stream, event, a)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(BEGINNING))
async def test_an_eager_call_whose_argument_begins_a_capture_is_refused(
    device: ahg.Device, name: str
) -> None:
    """The call was made on a stream that was not capturing: the work became a node (or the
    event a link to the capture, or the wait a capture wait) of a capture begun under it."""
    stream = device.create_stream()
    other = device.create_stream()
    a = device.malloc(64)
    event = device.create_event()
    await other.record_event(event)  # an eager record: a wait on it is an eager wait
    await other.synchronize()
    with pytest.raises(ahg.IllegalState, match="a capture began"):
        await _call(BEGINNING[name](stream, a, event, lambda v: Reentrant(v, stream.begin_capture)))
    assert stream.statistics().submitted == 0
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert ahg.capture_statistics().event_links == 0  # the event is no capture's
    graph = stream.end_capture()
    assert graph.nodes() == []
    no_capture_left()
    destroy(graph, stream, other, event, a)


# -- a finished task's per-task stream, left capturing -------------------------------------------


async def _task_leaving_a_capture(
    device: ahg.Device, mode: ahg.CaptureMode, buffer: ahg.DevicePtr
) -> ahg.Stream:
    """Run a task that begins a capture on its per-task stream and returns without ending it;
    return that stream, right after ``await task``: the task's done callback, which destroys
    its streams (and so ends the capture), has not run yet."""

    async def job() -> ahg.Stream:
        stream = device.per_thread_stream()
        stream.begin_capture(mode)
        await stream.memset(buffer, 1, 8)
        return stream

    return await asyncio.create_task(job())


Unsafe = Callable[[ahg.Device, ahg.Stream, ahg.DevicePtr], Any]

UNSAFE_AFTER_THE_TASK: dict[str, Unsafe] = {
    "malloc": lambda device, other, buffer: device.free(device.malloc(8)),
    "stream synchronize": lambda device, other, buffer: other.synchronize(),
    "stream query": lambda device, other, buffer: other.query(),
    "device synchronize": lambda device, other, buffer: device.synchronize(),
    "synchronous memset": lambda device, other, buffer: device.memset(buffer, 0, 8),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(UNSAFE_AFTER_THE_TASK))
async def test_a_finished_tasks_capture_refuses_nothing_after_await_task(
    device: ahg.Device, name: str
) -> None:
    """A task's per-task streams are destroyed when it finishes, and a capture ends with its
    destroyed stream; but the destroy is the task's done callback, which runs after whoever
    awaited the task resumes. A GLOBAL capture the finished task left behind refused the
    awaiting task's ``malloc`` (and every other unsafe call) with ``StreamCaptureUnsupported``,
    as if still in progress, until the loop's next turn. The statistics readers settle finished
    tasks first (``per_thread``): the capture rules now do too."""
    other = device.create_stream()
    buffer = device.malloc(64)
    stream = await _task_leaving_a_capture(device, ahg.CaptureMode.GLOBAL, buffer)
    await _call(UNSAFE_AFTER_THE_TASK[name](device, other, buffer))
    assert not stream.alive
    no_capture_left()
    destroy(other, buffer)


@pytest.mark.asyncio
async def test_capture_statistics_right_after_await_task_count_no_finished_tasks_capture(
    device: ahg.Device,
) -> None:
    """``ahg.capture_statistics()`` counted the capture of a finished task's per-task stream
    until the loop's next turn, while ``registry_statistics()`` read just after counted the
    stream destroyed."""
    buffer = device.malloc(64)
    stream = await _task_leaving_a_capture(device, ahg.CaptureMode.RELAXED, buffer)
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    assert not stream.alive
    destroy(buffer)


@ahg.kernel
def _bump(t: ahg.Threads, p: ahg.Ptr[ahg.int64]) -> None:
    p[t.ids] = p[t.ids] + 1


@pytest.mark.asyncio
async def test_a_wait_on_an_event_of_a_finished_tasks_capture_does_not_fork_into_it(
    device: ahg.Device,
) -> None:
    """Right after ``await task``, a wait on an event the task recorded in a capture it left
    forked the waiting stream into that capture: the stream's next kernel became a node of a
    graph discarded at the loop's next turn, and never ran. The task's streams are destroyed
    when it finishes, which ends the capture: the wait is an eager one (on an event never
    recorded eagerly, a no-op) and the kernel runs."""
    stream = device.create_stream()
    event = device.create_event()
    buffer = device.malloc(64)
    await stream.memset(buffer, 0, 64)

    async def job() -> None:
        own = device.per_thread_stream()
        own.begin_capture(ahg.CaptureMode.RELAXED)
        await own.record_event(event)

    await asyncio.create_task(job())
    await stream.wait_event(event)
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    await stream.launch_kernel(_bump, 1, 1, (buffer,))
    await stream.synchronize()
    assert device.view(buffer, "i8", 1)[0] == 1
    assert event.query()  # not CapturedEvent: the capture it was recorded in has ended
    no_capture_left()
    destroy(stream, event, buffer)


@pytest.mark.asyncio
async def test_a_stream_forked_into_a_finished_tasks_capture_can_be_synchronised(
    device: ahg.Device,
) -> None:
    """A stream the finished task forked into its capture refused ``synchronize()`` with
    ``StreamCaptureUnsupported`` right after ``await task``, though the capture ends with the
    task's streams."""
    stream = device.create_stream()
    event = device.create_event()

    async def job() -> None:
        own = device.per_thread_stream()
        own.begin_capture(ahg.CaptureMode.RELAXED)
        await own.record_event(event)
        await stream.wait_event(event)  # forks ``stream`` into the capture

    await asyncio.create_task(job())
    await stream.synchronize()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    no_capture_left()
    destroy(stream, event)
