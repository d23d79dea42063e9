"""Events: markers in a stream's work, for ordering between streams and for timing.

Recording an event enqueues a marker; the event completes when everything before the marker on
that stream has. Its timestamp is the simulated time at which the marker ran, so
``elapsed_time(start, end)`` reports simulated milliseconds straight from the cost model.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from ..core.clock import ns_to_ms
from ..core.errors import InvalidHandle, InvalidValue, NotReady
from ..core.ints import int_or_none
from ..core.lifecycle import (
    DestroyOnExit,
    FactoryOnly,
    HandleRecord,
    check_live,
    destroyed,
    safe_repr,
)
from ..core.registry import HandleId, HandleRegistry
from ..device.engine import refuse_trio
from ..device.signal import Signal
from . import capture, observe

if TYPE_CHECKING:
    from .device import Device
    from .per_thread import PerThreadStream
    from .stream import Stream

__all__ = ["EVENTS", "Event", "check_record_flags", "elapsed_time", "live_event"]

EVENTS: HandleRegistry[Event] = HandleRegistry("event")
_FACTORY = FactoryOnly("events are created with Device.create_event()")
_new_object = object.__new__


class EventState(enum.Enum):
    """An event's ``state``: open until ``destroy()`` (or until it is forgotten)."""

    OPEN = "open"
    DESTROYED = "destroyed"


class Event(DestroyOnExit):
    """A point in a stream's work. Create with ``device.create_event()``."""

    # Slots: an event takes no attribute it does not declare (a typo such as
    # ``event.disable_timming = True``, or a method shadowed on the instance, is refused with
    # AttributeError). ``__weakref__``: its registry, its finalizer and the capture's event
    # links (a weak-keyed table) hold it weakly.
    __slots__ = (
        "__weakref__",
        "_blocking_sync",
        "_device",
        "_disable_timing",
        "_hid",
        "_life",
        "_recorded_on",
        "_signal",
        "_state",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: events come from ``device.create_event()``."""
        _FACTORY.refuse()

    def _init(self, device: Device, *, disable_timing: bool, blocking_sync: bool) -> None:
        for name, flag in (("disable_timing", disable_timing), ("blocking_sync", blocking_sync)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        self._device = device
        self._disable_timing = bool(disable_timing)
        self._blocking_sync = bool(blocking_sync)
        self._signal: Signal | None = None  # completion of the latest record; None = unrecorded
        # The device whose work made the latest record, whose clock stamped it: this one,
        # unless a graph launched on another device recorded it (an event-record node).
        self._recorded_on: Device = device
        self._state = EventState.OPEN
        self._hid = EVENTS.register(self)
        # A forgotten event is freed with a warning (its registry slot is weak).
        self._life = HandleRecord(
            self, f"event #{self.hid.slot}.{self.hid.generation} on device {device.ordinal}"
        )

    @classmethod
    def _create(cls, device: Device, *, disable_timing: bool, blocking_sync: bool) -> Event:
        event: Event = _new_object(cls)
        event._init(device, disable_timing=disable_timing, blocking_sync=blocking_sync)
        return event

    def _check_open(self) -> None:
        if self._state is not EventState.OPEN:
            check_live(False, "event", self)

    def _recorded(self, signal: Signal, device: Device) -> None:
        """Point the event at a new marker (called by streams and graph event-record nodes).

        ``device`` runs the marker and stamps it with its own clock: a graph launched on
        another device records an event of this one there (its event-record node, or a
        record captured with ``hipEventRecordExternal``). The time of that record means
        nothing on this device's clock: :func:`elapsed_time` refuses to compare it with a
        record of another device, and the host observes it on the recording device.
        """
        self._recorded_on = device
        self._signal = signal

    def query(self) -> bool:
        """True if the latest record has completed, or the event was never recorded.

        Raises:
            CapturedEvent: the event was recorded in a capture in progress (now invalidated).
        """
        self._check_open()
        capture.check_event_sync(self)
        done = self._complete()
        if done and self._signal is not None:
            # The host saw the record complete, as synchronize() does: work it enqueues
            # from now on is stamped no earlier than the record (on the clock it is in).
            self._recorded_on.clock.observe(self._signal.time)
        if done and observe.observer is not None:
            observe.observer.event_synchronized(self)
        return done

    async def synchronize(self) -> None:
        """Wait until the latest record has completed (``hipEventSynchronize``).

        Raises:
            InvalidHandle: the event was destroyed.
            IllegalState: the device is busy on another event loop.
            CapturedEvent: the event was recorded in a capture in progress (now invalidated).
            RuntimeError: called from a trio task (ahipgraph runs on asyncio or uvloop).
        """
        refuse_trio()
        self._check_open()
        capture.check_event_sync(self)
        signal, device = self._signal, self._recorded_on
        if signal is not None:
            await device._wait_signal(signal)  # the recording device runs the marker
        if observe.observer is not None:
            observe.observer.event_synchronized(self)

    async def record(self, stream: Stream | PerThreadStream | None = None, flags: int = 0) -> None:
        """``hipEventRecord(event, stream)``: the same as ``await stream.record_event(event)``.

        HIP users hold the event and name the stream; this spelling keeps their code's shape.
        ``stream=None`` is HIP's null stream and ``STREAM_PER_THREAD`` the task's own stream,
        both of the current device, as HIP resolves them.

        Raises:
            TypeError: ``stream`` is neither a Stream nor None.
            InvalidHandle / ContextIsDestroyed / InvalidValue: as ``Stream.record_event``.
        """
        await self._stream_for_record(stream, flags).record_event(self, flags)

    def record_nowait(self, stream: Stream | PerThreadStream | None = None, flags: int = 0) -> None:
        """As :meth:`record`, but raise ``NotReady`` instead of waiting for ring space."""
        self._stream_for_record(stream, flags).record_event_nowait(self, flags)

    def _stream_for_record(self, stream: Stream | PerThreadStream | None, flags: int) -> Stream:
        from .stream import launch_stream  # stream.py imports this module

        # HIP's order (hipEventRecord_common): the flags, the event, then the stream.
        check_record_flags(flags)
        self._check_open()  # a destroyed event is the error, whatever the stream
        return launch_stream(stream, self._device, any_device=True)

    def elapsed_time(self, end: Event) -> float:
        """Simulated milliseconds from this event's record to ``end``'s (as ``elapsed_time``).

        Raises: as the module's :func:`elapsed_time`.
        """
        return elapsed_time(self, end)

    @property
    def time_ns(self) -> int | None:
        """Simulated time of the latest completed record, or None."""
        if self._signal is None or self._signal._value > 0:
            return None
        return self._signal._time

    @property
    def hid(self) -> HandleId:
        """The registry handle (read-only: its destroy retires exactly this one, never
        another handle's)."""
        return self._hid

    # What the event was made with and its latest record: read-only, as in HIP (its flags are
    # fixed at creation; only a record moves it). The runtime acts on each of them (which
    # device's clock and engine a wait uses, what a wait or query looks at, whether it may be
    # recorded), so a value assigned from outside would make it act on another event.

    @property
    def device(self) -> Device:
        """The device it was created on: its records are that device's work and clock."""
        return self._device

    @property
    def disable_timing(self) -> bool:
        """Created with ``hipEventDisableTiming``: ``elapsed_time`` refuses it."""
        return self._disable_timing

    @property
    def blocking_sync(self) -> bool:
        """Created with ``hipEventBlockingSync``."""
        return self._blocking_sync

    @property
    def signal(self) -> Signal | None:
        """The completion of its latest record (None: never recorded)."""
        return self._signal

    @property
    def state(self) -> EventState:
        """OPEN until ``destroy()``."""
        return self._state

    @property
    def alive(self) -> bool:
        """False once ``destroy()`` was called."""
        return self._state is EventState.OPEN

    def destroy(self) -> None:
        """Destroy the event. Raises InvalidHandle if it was already destroyed."""
        if EVENTS.unregister(self.hid) is None:
            if self._life.freed:  # collected: destroyed from a cycle-mate's __del__
                return
            raise destroyed("event", self, "destroy", "was already destroyed")
        self._life.detach()
        self._state = EventState.DESTROYED
        capture.event_destroyed(self)

    @safe_repr
    def __repr__(self) -> str:
        if not self.alive:
            state = "destroyed"
        elif self._signal is None:
            state = "unrecorded"
        else:
            state = "done" if self._complete() else "pending"
        replaced = " replaced" if self._device._engine._retired else ""  # as a stream's says
        return (
            f"<Event #{self.hid.slot}.{self.hid.generation} device={self._device.ordinal} "
            f"{state}{replaced}>"
        )

    def _complete(self) -> bool:
        return self._signal is None or self._signal._value <= 0


def elapsed_time(start: Event, end: Event) -> float:
    """Simulated milliseconds between two completed records (``hipEventElapsedTime``).

    Raises:
        InvalidHandle: either event is None, destroyed, made without timing, or never recorded;
            or the two belong to different devices, or their latest records were made by work
            of different devices (a graph launched on another device records on that
            device's clock): each device keeps its own clock (HIP's
            ``hipErrorInvalidResourceHandle``, the same code).
        TypeError: either is not an Event.
        NotReady: either record has not completed yet.
    """
    for event in (start, end):
        live_event(event)
    if start._device is not end._device:
        raise InvalidHandle(f"{start!r} and {end!r} belong to different devices")
    for event in (start, end):
        if event._disable_timing:
            raise InvalidHandle(f"{event!r} was created with timing disabled")
        if event._signal is None:
            raise InvalidHandle(f"{event!r} has not been recorded")
    if start._recorded_on is not end._recorded_on:
        raise InvalidHandle(
            f"{start!r} was recorded on device {start._recorded_on.ordinal} and {end!r} on "
            f"device {end._recorded_on.ordinal}: different devices' clocks"
        )
    start_ns, end_ns = start.time_ns, end.time_ns
    if start_ns is None or end_ns is None:
        pending = start if start_ns is None else end
        raise NotReady(f"the latest record of {pending!r} has not completed")
    return ns_to_ms(end_ns - start_ns)


def check_record_flags(flags: object) -> int:
    """``flags`` as the int it is, or InvalidValue unless it is an event record flag (0, or 1
    for ``hipEventRecordExternal``; 1.0 and True are not). Callers use what this returns: an
    integer that is not an ``int`` (it has ``__index__``) compares equal to 1 only by chance."""
    checked = int_or_none(flags)
    if checked not in (capture.EVENT_RECORD_DEFAULT, capture.EVENT_RECORD_EXTERNAL):
        raise InvalidValue(f"{flags!r} is not an event record flag")
    return checked


def live_event(event: object, what: str = "event") -> Event:
    """The checks every runtime call taking an event makes (``hipEventRecord``, ...).

    Raises:
        InvalidHandle: ``event`` is None (HIP's null event) or destroyed.
        TypeError: ``event`` is not an Event.
    """
    if event is None:
        raise InvalidHandle(f"{what} is null")
    if not isinstance(event, Event):
        raise TypeError(f"{what} must be an Event, got {event!r}")
    event._check_open()
    return event
