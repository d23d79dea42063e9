"""Which OS thread owns a capture: the one that began it, and never a later thread.

CPython hands a new thread the ident of a thread that has ended, so a capture cannot remember
its thread by ident: a GLOBAL or THREAD_LOCAL capture begun on a thread that then exited would
belong to whichever thread came next with the same ident. That thread could end it (HIP:
WrongThread), and its own THREAD_LOCAL ``malloc`` would trip a capture it never began (HIP:
only this thread's captures count). Every fresh thread here must see the capture as someone
else's; a run of fresh threads makes an ident reuse all but certain on CPython.
"""

from __future__ import annotations

import threading

import pytest

import ahipgraph as ahg
from capture_helpers import no_capture_left, on_thread
from cleanup import destroy

FRESH_THREADS = 20


def _begin_on_a_thread_that_ends(stream: ahg.Stream, mode: ahg.CaptureMode) -> int:
    def begin() -> int:
        stream.begin_capture(mode)
        return threading.get_ident()

    ident = on_thread(begin)
    assert isinstance(ident, int)
    return ident


@pytest.mark.parametrize(
    "mode", [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL], ids=lambda m: m.name
)
def test_a_later_thread_cannot_end_the_capture_of_a_thread_that_ended(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    stream = device.create_stream()
    _begin_on_a_thread_that_ends(stream, mode)
    info = stream.capture_info()

    def try_to_end() -> None:
        with pytest.raises(ahg.StreamCaptureWrongThread):
            stream.end_capture()

    for _ in range(FRESH_THREADS):
        on_thread(try_to_end)
    assert stream.capture_info() == info  # untouched: still in progress, same id
    destroy(stream)  # a destroyed stream ends its capture
    no_capture_left()


def test_a_later_threads_thread_local_malloc_ignores_a_capture_it_did_not_begin(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    _begin_on_a_thread_that_ends(stream, ahg.CaptureMode.THREAD_LOCAL)

    def thread_local_malloc() -> None:
        ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
        device.free(device.malloc(64))  # this thread began no capture: allowed

    for _ in range(FRESH_THREADS):
        on_thread(thread_local_malloc)
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE  # never invalidated
    destroy(stream)
    no_capture_left()


def test_the_beginning_thread_still_owns_its_capture(device: ahg.Device) -> None:
    """The token is per thread, not per call: the beginner ends its own capture."""
    stream = device.create_stream()

    def begin_then_end() -> None:
        stream.begin_capture(ahg.CaptureMode.GLOBAL)
        with pytest.raises(ahg.StreamCaptureWrongThread):
            on_thread(stream.end_capture)
        stream.end_capture().destroy()

    on_thread(begin_then_end)
    no_capture_left()
    destroy(stream)
