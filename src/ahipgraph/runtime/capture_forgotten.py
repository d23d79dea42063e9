"""A capturing stream dropped without ``destroy()``: its part of the capture ends when it is freed.

HIP leaks here: a capturing stream that is never destroyed keeps its capture in progress for
good, and a GLOBAL one then refuses every ``malloc`` of every thread. ahipgraph frees a
forgotten stream, so its capture must end as ``stream.destroy()`` ends it
(:func:`~.capture_lifecycle.part_ended`: an origin ends the whole sequence and its graph is
freed; a fork leaves the sequence, with its own forks).

Three things make that possible:

* the capture structures never hold a member stream strongly. A part refers to its stream
  only through a weak reference (``StreamCapture.stream``); an event recorded during a capture
  remembers its stream weakly too (``_EventLink``), so a live event does not keep its stream,
  and therefore the capture, alive. A stream's strong link is the other way:
  ``stream._capture`` is its part, and the part holds its session;
* the registry of sessions in progress holds them weakly. Captured work may refer to its own
  stream (a host function's arguments, a bound method of an object that keeps the stream):
  session -> graph -> node -> stream. Through a strong registry that would keep the stream,
  and the capture, alive for good; held weakly, stream, parts, session and the graph the
  capture made are one garbage cycle, which the collector frees together. That graph is
  quiet while the capture owns it (nobody was given it; ``end_capture`` makes it warn again);
* every part carries a :class:`ForgottenCapture` record, a :class:`HandleRecord` on the
  part's stream. When the stream is collected its finalizer warns (a second
  ``ForgottenHandleWarning`` next to the stream's own, naming the capture left in progress)
  and hands the record to the releaser thread. If the part is still alive (something else
  holds the session: an origin or fork stream still in use, an event recorded in it, a
  returned ``CapturedWork``), the releaser ends it as ``destroy()`` would have, taking the
  capture lock normally: never inside a finalizer, which may run while this very lock is
  held. If the part was collected, its session went with it and only the null stream's guard
  needs a look. A part that ends first (``end_capture``, ``destroy()``, an abort) detaches its
  record, so nothing runs or warns later. ``ahg.collect_forgotten()`` therefore leaves no
  capture of a forgotten stream in progress.

Between the stream's collection and the release, its part (if alive) behaves as a destroyed
stream's would: no operation can reach it (it has no stream left to call through),
``end_capture`` of its origin ends it with the rest, and the null stream's guard no longer
counts it. Only the registry still lists it, until the releaser's turn.

The release runs on its own thread, at any moment, so a call on another member stream may have
found its stream capturing just before the capture ended. Queries, waits and ``synchronize()``
read the stream's part again under the capture lock and answer as for a stream not capturing;
an operation that would add a node is refused (``IllegalState``), never added to the graph of a
capture that ended (:meth:`~.capture_nodes.StreamCapture.check_active`).

A user object's data is the user's: the runtime holds a user object with references, data
included, until they are released, so data that refers to the stream keeps it alive.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import TYPE_CHECKING, ClassVar

from ..core.errors import Destroyed
from ..core.lifecycle import HandleRecord
from .capture_state import _LOCK, _refresh_null_guard

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from .capture_nodes import StreamCapture
    from .device import Device
    from .stream import Stream

__all__ = ["ForgottenCapture"]


class ForgottenCapture(HandleRecord):
    """Ends a part of a capture whose stream was collected; runs on the releaser thread.

    Refers to its part weakly: while the capture runs the session holds the part, and once the
    part has left its session there is nothing to end. An origin's record also refers weakly to
    the graph the capture made: a user may hold it (``capture_info().graph``) when the rest of
    the capture was collected, and a capture that ends this way frees its graph, as
    ``destroy()`` of its stream does.
    """

    __slots__ = ("_device", "_graph", "_part")

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
        self._device: Device = part.device
        session = part.session
        owned = part.parent is None and session.owns_graph
        self._graph: weakref.ref[Graph] | None = weakref.ref(session.graph) if owned else None

    def release(self) -> None:
        part = self._part()
        if part is not None:
            from .capture_lifecycle import part_ended  # it imports the parts' module

            part_ended(part)
            return
        # The part was collected with its stream: its whole session was garbage (nothing held
        # it but its forgotten streams). Nothing is left registered but the null stream's
        # guard, which needs a look, and the capture's graph if a user still holds it.
        with _LOCK:
            _refresh_null_guard(self._device)
        graph = self._graph() if self._graph is not None else None
        if graph is not None and not graph.destroyed:
            with contextlib.suppress(Destroyed):  # destroyed by its holder meanwhile
                graph.destroy()
