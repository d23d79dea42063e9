"""``begin_capture`` on one OS thread while another destroys the stream (a soak).

Either the begin sees the stream destroyed (ContextIsDestroyed) or its capture is ended by the
destroy: a capture must never be left in progress on a destroyed stream, where nothing can end
it (``end_capture`` of a destroyed stream is ContextIsDestroyed) and a GLOBAL one would refuse
every ``malloc`` for as long as the stream object lives. The two threads are started together
many times with a tiny switch interval, so the destroy lands inside the begin again and again.
"""

from __future__ import annotations

import threading

import pytest

import ahipgraph as ahg
from capture_helpers import no_capture_left

ROUNDS = 3000


def _one_round(device: ahg.Device) -> bool:
    """Begin on one thread, destroy on another, started together; True if the begin won."""
    stream = device.create_stream()
    start = threading.Barrier(2)
    outcome: list[BaseException | None] = []

    def begin() -> None:
        start.wait(timeout=30)
        try:
            stream.begin_capture(ahg.CaptureMode.GLOBAL)
            outcome.append(None)
        except BaseException as error:  # handed back to the test
            outcome.append(error)

    def destroy() -> None:
        start.wait(timeout=30)
        stream.destroy()

    threads = [threading.Thread(target=begin), threading.Thread(target=destroy)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (error,) = outcome
    if error is not None:
        assert isinstance(error, ahg.ContextIsDestroyed), error
    assert not stream.alive
    no_capture_left()  # begun or not, nothing is in progress on the destroyed stream
    return error is None


@pytest.mark.slow
def test_a_stream_destroyed_while_a_thread_begins_capturing_on_it(
    device: ahg.Device, fast_switching: None
) -> None:
    begun = sum(_one_round(device) for _ in range(ROUNDS))
    assert begun  # some rounds began before the destroy, and were ended by it
