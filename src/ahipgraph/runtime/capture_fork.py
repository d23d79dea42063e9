"""Fork and join through events during capture (HIP §2.4).

An event recorded on a capturing stream creates no node: it remembers the recording stream's
dependency set (``capture_state._EventLink``). A wait on such an event forks the waiting stream
into the same session (same graph, id and mode), or, on a stream already in the session, joins
the remembered set into its own. A wait that would merge two sessions is ``StreamCaptureMerge``
(HIP silently mixes two graphs); an event of a capturing stream that was not recorded in the
capture running there is ``StreamCaptureIsolation``.

A stream of another device never forks in: its operations would become nodes of a graph whose
nodes all run on the device the executable is made for, and fail there at replay. HIP joins it
silently and refuses the multi-device graph only when it is instantiated (``NotSupported``);
here the wait itself is ``NotSupported``, and changes nothing, as the other refused joins: the
capture goes on without that stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..core.errors import (
    InvalidValue,
    NotSupported,
    StreamCaptureImplicit,
    StreamCaptureIsolation,
    StreamCaptureMerge,
)
from ..core.ints import int_or_none
from .capture_nodes import StreamCapture, _graphs
from .capture_state import (
    _LINKS,
    _LOCK,
    EVENT_WAIT_DEFAULT,
    EVENT_WAIT_EXTERNAL,
    NULL_GUARD,
    CaptureStatus,
    _refresh_null_guard,
    link_of,
)

_ACTIVE = CaptureStatus.ACTIVE

if TYPE_CHECKING:
    from ..graph.node import GraphNode
    from .event import Event
    from .stream import Stream

__all__ = [
    "check_wait_flags",
    "event_destroyed",
    "record_eager",
    "record_node_params",
    "recorded_in_capture",
    "wait_event",
    "waits_eagerly",
]


def check_wait_flags(flags: object) -> int:
    """``flags`` as the int it is, or InvalidValue unless it is a stream wait flag (1.0 and
    True are not). Callers use what this returns (see ``check_record_flags``)."""
    checked = int_or_none(flags)
    if checked not in (EVENT_WAIT_DEFAULT, EVENT_WAIT_EXTERNAL):
        raise InvalidValue(f"{flags!r} is not a stream wait flag")
    return checked


def wait_event(stream: Stream, event: Event, flags: int) -> bool:
    """``hipStreamWaitEvent`` when capture is involved; False means "do the eager wait".

    Raises:
        InvalidValue: bad flags. StreamCaptureIsolation, StreamCaptureMerge,
        StreamCaptureInvalidated, StreamCaptureImplicit, NotSupported (a stream of another
        device): see the module notes.
    """
    flags = check_wait_flags(flags)
    link = link_of(event)  # first: it may end a finished task's capture, this stream's too
    part = stream._capture
    if part is None and (link is None or link.ended):
        return False
    if part is NULL_GUARD:
        raise NULL_GUARD._refuse()
    with _LOCK:
        part = stream._capture  # again: a capture may have ended meanwhile (the releaser)
        if part is NULL_GUARD:
            raise NULL_GUARD._refuse()
        if isinstance(part, StreamCapture):
            part.check_active()
            if flags == EVENT_WAIT_EXTERNAL:
                part._append(_graphs().NodeType.WaitEvent, lambda: _event_params(event))
                return True
        if link is None or link.ended:
            recorder = link.stream if link is not None else None  # None: collected, not capturing
            source = recorder._capture if recorder is not None else None
            if isinstance(source, StreamCapture):
                raise StreamCaptureIsolation(
                    f"{event!r} was not recorded in the capture now running on {recorder!r}"
                )
            return False  # recorded outside any capture: a real wait, as in HIP
        source_session = link.session
        assert source_session is not None  # a link whose capture runs has its session
        if isinstance(part, StreamCapture):
            if part.session is not source_session:
                raise StreamCaptureMerge(
                    f"{stream!r} and {event!r} belong to two different captures"
                )
            part.deps.extend(missing(part.deps, link.deps))
            return True
        if stream._is_null:
            # The legacy stream never takes part in a capture (it cannot begin one either):
            # joining it would make it a member whose guard then hides its part.
            raise StreamCaptureImplicit(
                f"the null stream cannot wait on {event!r}, recorded in a capture in progress"
            )
        stream._check_open()  # again: destroyed on another thread meanwhile (stream_destroyed)
        if stream._device is not source_session.device:
            raise NotSupported(
                f"{stream!r} cannot join a capture on device {source_session.device.ordinal}: "
                "a graph's nodes all run on the one device it is instantiated for"
            )
        recorder = link.stream  # None once collected: its part is as a destroyed stream's
        source_part = recorder._capture if recorder is not None else None
        parent = source_part if isinstance(source_part, StreamCapture) else source_session.origin
        fork = StreamCapture(source_session, stream, link.deps, parent)
        if parent is not None:
            parent.children.append(fork)
        _refresh_null_guard(stream._device)
        return True


def waits_eagerly(stream: Stream, event: Event, flags: object) -> bool:
    """Whether ``wait_event`` on ``stream``, which captures, is the real wait HIP enqueues
    there (an event recorded outside any capture) rather than a node, a fork or join, or an
    error: such a wait adds a packet to the stream's hardware queue, so it needs room in it
    as any eager enqueue does. A read without the lock, for the call to know whether it may
    wait for room: the call itself decides again (:func:`wait_event`)."""
    part = stream._capture
    if not isinstance(part, StreamCapture) or part.session.status is not _ACTIVE:
        return False
    if int_or_none(flags) != EVENT_WAIT_DEFAULT:
        return False
    link = link_of(event)
    if link is None:
        return True
    if not link.ended:
        return False
    recorder = link.stream
    return recorder is None or not isinstance(recorder._capture, StreamCapture)


def recorded_in_capture(event: Event) -> bool:
    """Whether ``event``'s latest record was made in a capture still running: a wait on it
    forks or joins (or is refused), and adds no packet. A read without the lock, as
    :func:`waits_eagerly`."""
    link = link_of(event)
    return link is not None and not link.ended


def missing(have: list[GraphNode], new: Iterable[GraphNode]) -> list[GraphNode]:
    """``new`` without nodes already in ``have`` or repeated (order kept)."""
    seen = set(have)
    out = []
    for node in new:
        if node not in seen:
            seen.add(node)
            out.append(node)
    return out


def record_node_params(event: Event) -> Callable[[], Any]:
    """What builds the EventRecord node of a captured ``hipEventRecordExternal``."""
    return lambda: _event_params(event)


def _event_params(event: Event) -> Any:
    from ..graph.params import event_params

    return event_params(event)


def record_eager(event: Event) -> None:
    """An eager record replaces a captured one: the event no longer links to a capture."""
    if event in _LINKS:
        with _LOCK:
            _LINKS.pop(event, None)


def event_destroyed(event: Event) -> None:
    """A destroyed event leaves its capture's records (HIP erases it from ``captureEvents_``)."""
    if event in _LINKS:
        with _LOCK:
            link = _LINKS.pop(event, None)
            if link is not None and link.session is not None:
                link.session.recorded.discard(event)
