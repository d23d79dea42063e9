"""Stream capture: the state machine that turns stream work into graph nodes (HIP §2).

Design (decide synchronously, await at the edges): every decision is a plain function that runs
atomically under one module lock and never awaits. Streams, events and the device call in
through one short hook per operation; the stream layer never holds capture logic itself.

This module is the one surface those layers (and the tests) use; each concern lives in a module
of its own, imported strictly downward:

  * :mod:`.capture_state` — modes, statuses, the sessions in progress, the events they recorded,
    the null stream's guard, ``exchange_capture_mode`` and ``statistics``;
  * :mod:`.capture_nodes` — how operations become nodes: a stream's part in a session
    (:class:`StreamCapture`) and what a captured operation returns (:class:`CapturedWork`);
  * :mod:`.capture_fork` — fork and join through events;
  * :mod:`.capture_rules` — the illegal-operations table, and the device layer's hooks;
  * :mod:`.capture_lifecycle` — begin, end, queries, dependency updates, destroyed streams;
  * :mod:`.capture_scope` — ``async with stream.capture()``;
  * :mod:`.capture_forgotten` — a capturing stream dropped without ``destroy()``: its part
    ends on the releaser thread, as ``destroy()`` would have ended it.
"""

from __future__ import annotations

from .capture_fork import (
    check_wait_flags,
    event_destroyed,
    record_eager,
    record_node_params,
    recorded_in_capture,
    wait_event,
    waits_eagerly,
)
from .capture_lifecycle import (
    abort,
    begin,
    end,
    info,
    status,
    stream_destroyed,
    update_dependencies,
)
from .capture_nodes import CapturedWork, StreamCapture
from .capture_rules import (
    check_device_sync,
    check_event_sync,
    check_stream_sync,
    check_sync_copy,
    check_unsafe_call,
)
from .capture_state import (
    EVENT_RECORD_DEFAULT,
    EVENT_RECORD_EXTERNAL,
    EVENT_WAIT_DEFAULT,
    EVENT_WAIT_EXTERNAL,
    NULL_GUARD,
    CaptureDependencies,
    CaptureInfo,
    CaptureMode,
    CaptureSession,
    CaptureStatistics,
    CaptureStatus,
    _NullGuard,
    exchange_capture_mode,
    statistics,
)

__all__ = [
    "EVENT_RECORD_DEFAULT",
    "EVENT_RECORD_EXTERNAL",
    "EVENT_WAIT_DEFAULT",
    "EVENT_WAIT_EXTERNAL",
    "NULL_GUARD",
    "CaptureDependencies",
    "CaptureInfo",
    "CaptureMode",
    "CaptureSession",
    "CaptureStatistics",
    "CaptureStatus",
    "CapturedWork",
    "StreamCapture",
    "_NullGuard",
    "abort",
    "begin",
    "check_device_sync",
    "check_event_sync",
    "check_stream_sync",
    "check_sync_copy",
    "check_unsafe_call",
    "check_wait_flags",
    "end",
    "event_destroyed",
    "exchange_capture_mode",
    "info",
    "record_eager",
    "record_node_params",
    "recorded_in_capture",
    "statistics",
    "status",
    "stream_destroyed",
    "update_dependencies",
    "wait_event",
    "waits_eagerly",
]
