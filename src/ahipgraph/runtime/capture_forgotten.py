"""A capturing stream dropped without ``destroy()``: its part of the capture ends when it is freed.

HIP leaks here: a capturing stream that is never destroyed keeps its capture in progress for
good, and a GLOBAL one then refuses every ``malloc`` of every thread. ahipgraph frees a
forgotten stream, so its capture must end as ``stream.destroy()`` ends it
(:func:`~.capture_lifecycle.part_ended`: an origin ends the whole sequence and its graph is
freed; a fork leaves the sequence, with its own forks).

Two things make that possible:

* the capture structures never hold a member stream strongly. The registry of sessions in
  progress holds each session, the session its parts, and a part its stream only through a
  weak reference (``StreamCapture.stream``); an event recorded during a capture remembers its
  stream weakly too (``_EventLink``), so a live event does not keep its stream, and therefore
  the capture, alive. A stream's strong link is the other way: ``stream._capture`` is its part;
* every part carries a :class:`ForgottenCapture` record, a :class:`HandleRecord` on the
  part's stream. When the stream is collected its finalizer warns (a second
  ``ForgottenHandleWarning`` next to the stream's own, naming the capture left in progress)
  and hands the record to the releaser thread, which ends the part taking the capture lock
  normally: never inside a finalizer, which may run while this very lock is held. A part that
  ends first (``end_capture``, ``destroy()``, an abort) detaches its record, so nothing runs or
  warns later. ``ahg.collect_forgotten()`` therefore leaves no capture of a forgotten stream
  in progress.

Between the stream's collection and the release, its part behaves as a destroyed stream's
would: no operation can reach it (it had no stream left to call through), ``end_capture`` of
its origin ends it with the rest, and the null stream's guard no longer counts it. Only the
registry still lists it, until the releaser's turn.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, ClassVar

from ..core.lifecycle import HandleRecord

if TYPE_CHECKING:
    from .capture_nodes import StreamCapture
    from .stream import Stream

__all__ = ["ForgottenCapture"]


class ForgottenCapture(HandleRecord):
    """Ends a part of a capture whose stream was collected; runs on the releaser thread.

    Refers to its part weakly: while the capture runs the session holds the part, and once the
    part has left its session there is nothing to end.
    """

    __slots__ = ("_part",)

    releases: ClassVar[bool] = True
    ending: ClassVar[str] = "end_capture() or destroy()"
    advice: ClassVar[str] = (
        "it ended as destroy() of its stream ends it; end the capture, or destroy the stream, "
        "before dropping the stream"
    )

    def __init__(self, part: StreamCapture, stream: Stream) -> None:
        role = "capture" if part.parent is None else "fork of capture"
        stream_label = stream._life.label
        super().__init__(stream, f"{role} #{part.session.id} on {stream_label}")
        self._part = weakref.ref(part)

    def release(self) -> None:
        part = self._part()
        if part is not None:
            from .capture_lifecycle import part_ended  # it imports the parts' module

            part_ended(part)
