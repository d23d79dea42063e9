"""Awaitable handles for submitted device work."""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NoReturn, SupportsIndex

from ..core.errors import HipError
from ..core.lifecycle import FactoryOnly, safe_repr
from ..device.signal import Signal
from . import observe

if TYPE_CHECKING:
    from ..device.program import Program
    from .device import Device

__all__ = ["Completion", "make_completion"]

_FACTORY = FactoryOnly(
    "a Completion comes from an enqueue or a launch "
    "(await stream.memset(...), await graph_exec.launch(stream))"
)
_new_object = object.__new__


class Completion:
    """Resolves when the work it stands for is complete.

    ``await completion`` parks until the work's completion signal is reached, moves the host's
    view of simulated time forward to that moment, and raises the work's :class:`HipError` if it
    failed. ``done()`` is the non-blocking twin.
    """

    # ``__weakref__``: an awaitable handle, as an asyncio future is, which a user may track
    # weakly (a ``WeakSet`` of launches in flight) without keeping it alive.
    __slots__ = ("__weakref__", "_device", "_program", "_signal")
    _device: Device
    _program: Program | None  # the packet whose start time this work began at
    _signal: Signal

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: completions come from enqueues and launches
        (:func:`make_completion`). One made by hand would fail later, far from the mistake."""
        _FACTORY.refuse()

    # It stands for work of this process and never changes: a copy is itself, and a pickle is
    # refused naming it (not the device it refers to, as pickle's own walk would).
    def __copy__(self) -> Completion:
        return self

    def __deepcopy__(self, memo: object) -> Completion:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError("a Completion stands for work of this process and cannot be pickled")

    def done(self) -> bool:
        """True once the work is complete, failed or not: the non-blocking twin of ``await``.

        As for ``await`` (and ``Event.query()``), a True answer is the host seeing the work
        complete: work it enqueues from then on is stamped no earlier than the work's end
        (without this, a record made on an idle stream after ``done()`` said True was stamped
        before that end), and the race checker orders the host after the work.
        """
        signal = self._signal
        if signal._value > 0:
            return False
        self._device._clock.observe(signal._time)
        if observe.observer is not None:
            observe.observer.completion_awaited(signal)
        return True

    def exception(self) -> HipError | None:
        """The failure of completed work, or None (also None while it is still running)."""
        return self._signal._error if self.done() else None

    @property
    def start_ns(self) -> int | None:
        """Simulated time at which the work started, once it has completed."""
        program = self._program
        if program is None or not self.done():
            return None
        return program.start_ns

    @property
    def end_ns(self) -> int | None:
        """Simulated time at which the work completed, once it has."""
        return self._signal._time if self.done() else None

    async def wait(self) -> None:
        """The same as ``await completion``."""
        await self

    def __await__(self) -> Generator[Any, None, None]:
        signal = self._signal
        if signal._value > 0:
            yield from self._device._wait_signal(signal).__await__()
        else:
            self._device._clock.observe(signal._time)
        if observe.observer is not None:
            observe.observer.completion_awaited(signal)
        if signal._error is not None:
            # One error object answers every await of this work (and its stream's next
            # synchronize): each raise starts a fresh traceback, as ``Future.result()`` does,
            # so awaiting again neither piles up the earlier awaits' frames nor shows them.
            raise signal._error.with_traceback(None)

    @safe_repr
    def __repr__(self) -> str:
        state = "done" if self._signal._value <= 0 else "pending"  # a look, not the host's
        return f"<Completion {state} error={self._signal._error!r}>"


def make_completion(signal: Signal, device: Device, program: Program | None = None) -> Completion:
    """The one way to make a :class:`Completion`: for the work whose completion ``signal``
    is, on ``device``; ``program`` is the packet whose start time the work began at."""
    completion: Completion = _new_object(Completion)
    completion._signal = signal
    completion._device = device
    completion._program = program
    return completion
