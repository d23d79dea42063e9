"""The illegal-operations table of stream capture (HIP §2.7), and its hooks in the device layer.

Each check runs where the operation starts, before it does anything: a call that a capture in
progress forbids invalidates the captures it concerns (HIP's side effect) and raises HIP's
error. Which captures an unsafe call concerns depends on the calling task's mode and on each
session's mode and owner (:func:`_unsafe_targets`). The checks return at once while nothing
captures, so eager work pays one dictionary test.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import CapturedEvent, StreamCaptureImplicit, StreamCaptureUnsupported
from . import device as _device_module
from .capture_nodes import StreamCapture
from .capture_state import _LOCK, _MODE, _SESSIONS, CaptureMode, CaptureSession, _caller, link_of
from .per_thread import settle_finished

if TYPE_CHECKING:
    from .event import Event
    from .stream import Stream

__all__ = [
    "check_device_sync",
    "check_event_sync",
    "check_stream_sync",
    "check_sync_copy",
    "check_unsafe_call",
]


def _unsafe_targets() -> list[CaptureSession]:
    """The sessions an unsafe call by the calling task trips, under the task's mode."""
    mode = _MODE.get()
    if mode is CaptureMode.RELAXED:
        return []
    me = _caller()
    return [
        s
        for s in _SESSIONS
        if (s.owner is me and s.mode is not CaptureMode.RELAXED)
        or (mode is CaptureMode.GLOBAL and s.mode is CaptureMode.GLOBAL)
    ]


def _in_progress() -> bool:
    """Whether captures are in progress, once the streams of finished tasks are destroyed.

    A task's per-task streams are destroyed when it finishes, by its done callback, which runs
    after whoever awaited the task has resumed (see :mod:`.per_thread`): a capture the task
    left on one of them would refuse that caller's ``malloc`` as if still in progress. The
    rules settle finished tasks first, as the statistics readers do; only while some capture
    is in progress, so eager work pays nothing for it.
    """
    settle_finished()
    return bool(_SESSIONS)


def check_unsafe_call(what: str) -> None:
    """``hipMalloc``/``hipFree``-like calls under the calling task's mode (HIP §2.7)."""
    if not _SESSIONS or not _in_progress():
        return
    with _LOCK:
        targets = _unsafe_targets()
        for session in targets:
            session.invalidate()
    if targets:
        raise StreamCaptureUnsupported(f"{what} is not allowed while a capture is in progress")


def check_stream_sync(stream: Stream, what: str) -> None:
    """``hipStreamSynchronize`` / ``hipStreamQuery`` rules."""
    part = stream._capture
    if isinstance(part, StreamCapture):
        settle_finished()  # a capture a finished task left on its per-task stream ends first
        with _LOCK:
            part = stream._capture  # again: its capture may have ended meanwhile (the releaser)
            if isinstance(part, StreamCapture):
                raise part.unsupported(what)
    check_unsafe_call(what)


def check_device_sync() -> None:
    """``hipDeviceSynchronize``: any capture anywhere is invalidated."""
    _invalidate_all(StreamCaptureUnsupported, "synchronising the device")


def check_sync_copy() -> None:
    """Synchronous copies and fills: any capture anywhere is invalidated (``Implicit``)."""
    _invalidate_all(StreamCaptureImplicit, "a synchronous copy or fill")


def _invalidate_all(error: type[Exception], what: str) -> None:
    if not _SESSIONS or not _in_progress():
        return
    with _LOCK:
        live = list(_SESSIONS)
        for session in live:
            session.invalidate()
    if live:
        raise error(f"{what} is not allowed while a capture is in progress")


def check_event_sync(event: Event) -> None:
    """``hipEventSynchronize`` / ``hipEventQuery`` on an event recorded in a running capture."""
    link = link_of(event)
    if link is None or link.ended:
        return
    with _LOCK:
        session = link.session
        if session is None:  # the capture ended meanwhile
            return
        session.invalidate()
    raise CapturedEvent(f"{event!r} was recorded in a capture that is in progress")


class _DeviceChecks:
    """The capture checks the device layer calls (it cannot import this layer)."""

    def unsafe_call(self, what: str) -> None:
        check_unsafe_call(what)

    def device_sync(self) -> None:
        check_device_sync()

    def sync_copy(self) -> None:
        check_sync_copy()


_device_module.capture_checks = _DeviceChecks()
