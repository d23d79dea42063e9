"""An eager event record that cannot be submitted leaves the event as it was.

An event recorded in a capture in progress links the capture: a stream that waits on it forks
into that capture. An eager record replaces that record, but only once it is enqueued: a
record refused by the device (no running event loop in the calling thread, or the device busy
on another loop) changes nothing, so the event still links the capture (check, then commit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import ahipgraph as ahg
from cleanup import destroy


def in_a_thread_without_a_loop(call: Callable[[], object]) -> BaseException | None:
    """Run ``call`` on a fresh OS thread (no event loop there); what it raised, if anything."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # handed back to the test
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return raised[0] if raised else None


@pytest.mark.asyncio
async def test_a_refused_eager_record_keeps_the_events_capture_link(device: ahg.Device) -> None:
    origin, eager, joiner = device.create_stream(), device.create_stream(), device.create_stream()
    event = device.create_event()
    origin.begin_capture()
    await origin.record_event(event)  # recorded in the capture: a wait on it forks into it
    submitted = eager.statistics().submitted
    error = in_a_thread_without_a_loop(lambda: eager.record_event_nowait(event))
    assert isinstance(error, RuntimeError)
    assert eager.statistics().submitted == submitted
    await joiner.wait_event(event)  # still the captured record: the joiner forks in
    assert joiner.is_capturing() is ahg.CaptureStatus.ACTIVE
    joined = device.create_event()
    await joiner.record_event(joined)
    await origin.wait_event(joined)
    graph = origin.end_capture()
    assert joiner.is_capturing() is ahg.CaptureStatus.NONE
    destroy(graph, origin, eager, joiner, event, joined)
