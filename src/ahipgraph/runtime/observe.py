"""Hook points through which the tools layer watches the runtime API.

The device hooks (:mod:`ahipgraph.device.hooks`) see ops run; the race checker
(:mod:`ahipgraph.tools.race`) needs what the *API* promised instead: which stream an op was
enqueued on, which event was recorded or waited where, when the host synchronised, which
executable was launched, which allocation was made or freed. The runtime reports those facts
here, in API order, on the calling thread.

When nothing observes, ``observer`` is ``None`` and each hook point costs exactly one
predictable branch (``if observe.observer is not None``): eager and launch paths do not move.
Captured work is not reported (it becomes graph nodes, which the static checker sees), except
that a stream memory operation, eager or captured, reports when it runs (``memop_done``): which
write released a wait is known only then.

Invariants: at most one observer at a time (the race checker multiplexes its own nesting);
``observer`` is replaced whole, never mutated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..device.pointer import DevicePtr
    from ..device.signal import Signal
    from .completion import Completion
    from .device import Device
    from .event import Event
    from .stream import Stream

__all__ = ["RuntimeObserver", "install", "observer", "uninstall"]


class RuntimeObserver:
    """Base class of runtime observers; every method is a no-op here."""

    def enqueue(self, stream: Stream, work: Any, submit: Callable[[], Completion]) -> Completion:
        """Eager work (kernel/copy/fill/host params, or a stream-ordered free) is enqueued by
        calling ``submit``; an observer may refuse it by raising before it calls ``submit``
        (check, then commit), and then nothing was enqueued."""
        return submit()

    def launching(self, graph_exec: Any, stream: Stream, user: Stream | None) -> Any:
        """An executable is about to be launched on ``stream`` (for ``user``'s stream, of
        another device, when not None); raising refuses the launch before anything of it is
        committed. Returns a plan handed back to :meth:`launched`."""
        return None

    def launched(
        self,
        graph_exec: Any,
        stream: Stream,
        completion: Completion,
        plan: Any = None,
        user: Stream | None = None,
    ) -> None:
        """An executable was launched on ``stream`` (``plan``: what :meth:`launching` gave)."""

    def host_accessed(self, ptr: DevicePtr, nbytes: int, write: bool, what: str) -> None:
        """The host touches ``nbytes`` of device memory at ``ptr`` (``device.view``) now;
        raising refuses the access."""

    def event_recorded(self, stream: Stream, event: Event) -> None:
        """``event`` now marks the point after everything enqueued on ``stream`` so far."""

    def event_waited(self, stream: Stream, event: Event) -> None:
        """Later work on ``stream`` waits for ``event``'s latest record."""

    def stream_synchronized(self, stream: Stream) -> None:
        """The host saw every op enqueued on ``stream`` so far complete."""

    def event_synchronized(self, event: Event) -> None:
        """The host saw ``event``'s latest record complete."""

    def device_synchronized(self, device: Device) -> None:
        """The host saw all work of ``device`` complete."""

    def completion_awaited(self, signal: Signal) -> None:
        """The host saw the work behind a :class:`Completion` (its ``signal``) complete."""

    def allocated(self, ptr: DevicePtr, nbytes: int, stream: Stream | None) -> None:
        """An allocation was made (``stream`` for ``malloc_async``)."""

    def freeing(self, ptr: DevicePtr) -> None:
        """The host is about to free ``ptr`` (``hipFree``, which does not wait here)."""

    def node_added(self, node: Any) -> None:
        """A graph node was created (so reports can name the line that added it)."""

    def memop_done(self, memop: Any) -> None:
        """A stream memory operation ran on the device: a ``write_value_*`` stored its word,
        or a ``wait_value_*`` saw its condition hold (called on the device's loop, as it
        happens: which write released a wait is known only then)."""


observer: RuntimeObserver | None = None
_lock = threading.Lock()


def install(new: RuntimeObserver) -> None:
    """Make ``new`` the observer. Raises RuntimeError if another one is installed."""
    global observer
    with _lock:
        if observer is not None and observer is not new:
            raise RuntimeError(f"a runtime observer is already installed: {observer!r}")
        observer = new


def uninstall(old: RuntimeObserver) -> None:
    """Stop calling ``old``; a no-op if it is not the installed observer."""
    global observer
    with _lock:
        if observer is old:
            observer = None
