"""Unsafe calls from OS threads, for every capture mode and every caller mode (HIP §2.7).

A capture is begun on an OS thread in one mode (in a task of the thread's own event loop: HIP's
"thread" is the task, see ``test_capture_modes``); the same task, or one on another thread, in
its own mode, then makes the calls the modes may forbid: ``malloc``, ``free``, and synchronising or
querying a stream that is not capturing. HIP's rule, by the *caller's* mode: RELAXED never
refuses; THREAD_LOCAL refuses while this thread has a capture of its own (not RELAXED);
GLOBAL refuses that too, and also while any GLOBAL capture runs anywhere. A refused call
raises ``StreamCaptureUnsupported`` and invalidates the capture; an allowed one changes
nothing. Querying an event recorded in the capture is ``CapturedEvent`` from any thread in any
mode, and invalidates it too. Each capture then ends where it must (its own thread unless
RELAXED) and nothing is left.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import no_capture_left, on_thread

MODES = list(ahg.CaptureMode)
GLOBAL, RELAXED = ahg.CaptureMode.GLOBAL, ahg.CaptureMode.RELAXED


def _refused(capture: ahg.CaptureMode, caller: ahg.CaptureMode, same_thread: bool) -> bool:
    if caller is RELAXED:
        return False
    return (same_thread and capture is not RELAXED) or (caller is GLOBAL and capture is GLOBAL)


class _Kit:
    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.stream, self.other = device.create_stream(), device.create_stream()
        self.event = device.create_event()
        self.ptr = device.malloc(64)

    def calls(self) -> dict[str, Callable[[], Any]]:
        return {
            "malloc": lambda: self.device.free(self.device.malloc(8)),
            "free": lambda: self.device.free(self.ptr),
            "query": self.other.query,
            "synchronize": self.other.synchronize,
        }

    def close(self) -> None:
        for handle in (self.stream, self.other, self.event):
            handle.destroy()
        if self.ptr is not None:
            self.device.free(self.ptr)


@pytest.fixture
def kit(device: ahg.Device) -> Iterator[_Kit]:
    made = _Kit(device)
    yield made
    made.close()


def _in_mode(mode: ahg.CaptureMode, call: Callable[[], Any]) -> Callable[[], Awaitable[str]]:
    """``call`` made in ``mode`` by the calling task: "ok" or the HIP error's name."""

    async def run() -> str:
        previous = ahg.exchange_capture_mode(mode)
        try:
            result = call()
            if asyncio.iscoroutine(result):
                await result
        except ahg.HipError as error:
            return type(error).__name__
        finally:
            ahg.exchange_capture_mode(previous)
        return "ok"

    return run


def _on_thread_task(body: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``body()`` as the main task of an event loop on a fresh OS thread."""

    async def main() -> Any:
        return await body()

    return on_thread(lambda: asyncio.run(main()))


def _end(stream: ahg.Stream) -> str:
    try:
        stream.end_capture().destroy()
    except ahg.HipError as error:
        return type(error).__name__
    return "ended"


@pytest.mark.parametrize("call", ["malloc", "free", "query", "synchronize"])
@pytest.mark.parametrize(
    ("capture", "caller", "same_thread"), list(itertools.product(MODES, MODES, [True, False]))
)
def test_an_unsafe_call_by_the_callers_mode(
    kit: _Kit, capture: ahg.CaptureMode, caller: ahg.CaptureMode, same_thread: bool, call: str
) -> None:
    refused = _refused(capture, caller, same_thread)
    probe = _in_mode(caller, kit.calls()[call])

    async def begin_and_maybe_probe() -> str | None:
        kit.stream.begin_capture(capture)
        return await probe() if same_thread else None

    outcome = _on_thread_task(begin_and_maybe_probe)
    if not same_thread:
        outcome = _on_thread_task(probe)
    assert outcome == ("StreamCaptureUnsupported" if refused else "ok")
    if call == "free" and not refused:
        kit.ptr = None  # type: ignore[assignment]  # freed by the call
    status = ahg.CaptureStatus.INVALIDATED if refused else ahg.CaptureStatus.ACTIVE
    assert kit.stream.is_capturing() is status
    # only the capture's own task may end it (any task, when RELAXED); that task has ended
    assert on_thread(lambda: _end(kit.stream)) == (
        "ended" if capture is RELAXED else "StreamCaptureWrongThread"
    )
    if capture is not RELAXED:
        kit.stream.destroy()  # its task has gone: destroying the stream ends the capture
        kit.stream = kit.device.create_stream()
    no_capture_left()


@pytest.mark.parametrize(
    ("capture", "caller", "same_thread"), list(itertools.product(MODES, MODES, [True, False]))
)
def test_querying_an_event_recorded_in_the_capture(
    kit: _Kit, capture: ahg.CaptureMode, caller: ahg.CaptureMode, same_thread: bool
) -> None:
    query = _in_mode(caller, kit.event.query)
    out: list[str] = []

    async def begin_record_and_end() -> None:
        kit.stream.begin_capture(capture)
        await kit.stream.record_event(kit.event)
        out.append(await query() if same_thread else _on_thread_task(query))
        out.append(_end(kit.stream))

    _on_thread_task(begin_record_and_end)
    assert out == ["CapturedEvent", "StreamCaptureInvalidated"]
    no_capture_left()
