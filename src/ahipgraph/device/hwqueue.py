"""Hardware queues: in-order runners of programs on the device's event loop.

A queue runs its packets strictly in submission order. When the head packet parks (a barrier on
a signal that is not reached yet, an async body still running) the whole queue waits behind it,
as an AMD hardware queue waits on a barrier packet; the packet wakes the queue when it can go on.
A queue with work is put in its engine's ready table, which the engine runs on its loop's next
turn (one ``call_soon`` per turn for the whole device) — work submitted from a task starts after
that task yields, so device work is asynchronous to the host exactly as on a GPU, and
deterministic. Submission happens under the engine's lock, so the check that the caller's loop
owns the device and the append are one step (see :mod:`ahipgraph.device.engine`).

A queue is a ring of fixed :attr:`~HardwareQueue.capacity` packets, like an AQL queue (ROCm's
default is 16,384 packets). A stream enqueue that finds the ring full parks until the device retires
a packet (:meth:`HardwareQueue.wait_for_room`); its ``*_nowait`` twin raises ``NotReady`` instead.
A stream enqueue given room appends exactly one packet: an implicit wait for another stream's
work (legacy null-stream ordering) is that packet's barrier
(:attr:`~ahipgraph.device.program.Program.barrier`), not a packet of its own, so stream enqueues
never put more than ``capacity`` packets in a ring, and a ring of one packet still takes them.
Graph launches do not wait for room (their signal-set pool bounds the launches in flight), so
their packets, and a cross-device launch's markers, may go past the capacity.

Invariants: a queue is either empty, ready (in the device's table), or parked on its head
packet; ``busy_until`` (simulated ns) never decreases; a task waits for room only while the
ring is full or other tasks wait before it.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable
from contextvars import Context
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import HipError, IllegalState, NotReady
from ..core.lifecycle import NoCopy
from ..core.waitqueue import RECHECK, WaitQueue
from . import hooks
from .engine import Engine, park_refusable
from .program import Program

if TYPE_CHECKING:
    from .base import DeviceBase

__all__ = ["HardwareQueue", "QueueStatistics"]


@dataclass(frozen=True, slots=True)
class QueueStatistics:
    index: int
    pending: int
    submitted: int
    completed: int
    busy_until_ns: int
    capacity: int
    waiting_for_room: int


class HardwareQueue(NoCopy):
    """One in-order hardware queue of a device."""

    __slots__ = (
        "_busy_until",
        "_capacity",
        "_completed",
        "_device",
        "_engine",
        "_handle",
        "_index",
        "_packets",
        "_room",
        "_submitted",
        "_waking",
    )

    def __init__(self, engine: Engine, index: int) -> None:
        self._engine = engine
        self._device: DeviceBase = engine._device
        self._index = index
        self._busy_until = 0
        self._submitted = 0
        self._completed = 0
        self._packets: deque[Program] = deque()
        self._capacity = engine._device.properties.hardware_queue_capacity
        self._room = WaitQueue()  # tasks parked until the ring has room, FIFO
        self._waking = 0  # tasks woken with room that have not submitted yet

    # What the queue is and where it stands: read-only from outside, as HIP gives no way to
    # change a hardware queue. A user reaches the queues (``device.queues``, ``stream.queue``):
    # a capacity set to 0 made every enqueue on the queue wait for room for good; a device set
    # to another ran the queue's kernels against that device's memory (they failed with
    # InvalidDevicePointer); a busy_until set ahead moved the device's clock by as much; the
    # counts made ``statistics()`` lie. The queue and its device read the private slots: these
    # properties are for users and are on no hot path.

    @property
    def engine(self) -> Engine:
        """The engine that runs this queue's packets."""
        return self._engine

    @property
    def device(self) -> DeviceBase:
        """The device whose work the queue runs."""
        return self._device

    @property
    def index(self) -> int:
        """Its index among its device's queues."""
        return self._index

    @property
    def capacity(self) -> int:
        """How many packets its ring holds (``DeviceProperties.hardware_queue_capacity``)."""
        return self._capacity

    @property
    def busy_until(self) -> int:
        """The simulated ns at which its last packet so far ends."""
        return self._busy_until

    @property
    def submitted(self) -> int:
        """Packets submitted to it so far."""
        return self._submitted

    @property
    def completed(self) -> int:
        """Packets it has run to their end so far."""
        return self._completed

    # -- room in the ring ------------------------------------------------------------------------
    #
    # A packet retired while tasks wait for room wakes the first of them. Until that task has
    # submitted (or failed to), its room counts as taken (``_waking``), so a task arriving
    # meanwhile cannot jump the queue and a failed waiter passes its room on.

    def has_room(self) -> bool:
        """True when an enqueue may go now: the ring is not full and nobody waits before it."""
        return len(self._packets) + self._waking < self._capacity and not self._room

    def check_room(self) -> None:
        """The ``*_nowait`` gate: raise ``NotReady`` rather than wait for room."""
        if not self.has_room():
            self._engine.claim()  # binding drops what a closed loop's waiters held
            if self.has_room():
                return
            raise NotReady(
                f"hardware queue {self._index} of device {self._device.ordinal} is full "
                f"({len(self._packets)} of {self._capacity} packets)"
            )

    async def wait_for_room(self, gone: Callable[[], bool] | None = None) -> bool:
        """Park until the device retires a packet and wakes this task to use its room; True
        then, False when ``gone()`` became True first (its stream was destroyed: the enqueue
        needs no room any more, and re-checks its call, which fails).

        Call only when :meth:`has_room` is False, and call :meth:`settle_room` once the enqueue
        given room (True) has been submitted or has failed; one given none (False) took
        nothing. A task cancelled while it waits takes nothing; one cancelled after it was
        woken passes the room on. Whoever makes ``gone()`` True calls :meth:`wake_gone`.

        Raises:
            IllegalState: the caller is this queue's own device work (its packet must retire
                before there is room), or the device is busy on another event loop. Nothing
                is taken.
        """
        # Only a waiter on the device's loop can be woken by it: this binds a free device or
        # raises IllegalState while the device is busy on another loop.
        self._engine.claim()
        room: bool = await park_refusable(
            functools.partial(self._park_for_room, gone), self._refuse_room_wait
        )
        return room

    async def _park_for_room(self, gone: Callable[[], bool] | None) -> bool:
        # Room now: binding dropped what a closed loop's waiters held, or a wait woken to
        # re-check gave back the room it had just been handed (see park_refusable).
        if self.has_room():
            self._waking += 1  # as if woken: the caller settles it
            return True
        return await self._room.park(on_abandon=self._settle, gone=gone) is not RECHECK

    def wake_gone(self) -> None:
        """Wake the tasks waiting for room whose ``gone()`` is now True (their stream was
        destroyed): they leave the ring's waiters at once, taking no room. Safe from any
        thread; a check of the waiters when none waits."""
        if self._room:
            self._room.wake_gone()

    def _refuse_room_wait(self, work: HardwareQueue) -> None:
        """Refuse a wait for room in this full ring by this queue's own device work: only the
        work's own packet retiring makes room. (A wait woken to re-check may find room: the
        room it had been handed just before, and gave back.)"""
        if work is self and not self.has_room():
            raise IllegalState(
                f"device {self._device.ordinal}: device work (an async kernel body or host "
                f"function) waited for room in its own full hardware queue {self._index}, "
                "which frees only after that work ends"
            )

    def settle_room(self) -> None:
        """A task woken with room has submitted its packets, or failed before it could."""
        self._settle()

    def _settle(self, _handed: object = None) -> None:
        self._waking -= 1
        self._wake_for_room()

    def _wake_for_room(self) -> None:
        """Wake the first task waiting for room if the ring has a free slot for it."""
        if (
            self._room
            and len(self._packets) + self._waking < self._capacity
            and self._room.unpark()
        ):
            self._waking += 1

    def submit(self, program: Program) -> None:
        """Append a packet. Must be called on the device's event loop (bound if it is free).

        Raises: as :meth:`Engine.bind_loop`, before anything changes.
        """
        engine = self._engine
        with engine.submitting():  # the owner check and the append: one step for other threads
            engine.claim_locked()
            self.submit_locked(program)

    def submit_locked(self, program: Program) -> None:
        """Append a packet for a caller that holds the engine's lock and has claimed the
        engine for its loop (:meth:`Engine.claim_locked`)."""
        engine = self._engine
        now = engine._clock.now
        if program.time < now:
            program.time = now
        packets = self._packets
        packets.append(program)
        self._submitted += 1
        engine._in_flight += 1
        if hooks.observers is not None:  # tracing: record the host enqueue
            for observer in hooks.observers:
                observer.submitted(self, program)
        if len(packets) == 1:  # it was idle: run it soon (a parked queue is woken instead)
            engine.schedule(self)

    def wake(self) -> None:
        """Resume a parked queue (called by the signal or future its head packet waits on)."""
        self._engine.schedule(self)

    def run(self, budget: int) -> int:
        """Run packets in order until the queue is empty, its head packet parks, or ``budget``
        packets ran (the rest is scheduled for the loop's next turn); returns how many ran."""
        packets = self._packets
        engine = self._engine
        ran = 0
        while packets:
            if ran == budget:
                engine.schedule(self)
                return ran
            ran += 1
            program = packets[0]
            # Each packet runs in a context of its own (every variable at its default), as
            # the pump's turn does: a kernel body that sets a context variable (``set_device``,
            # ``exchange_capture_mode``) would otherwise change what every later body of the
            # turn sees, another stream's included. One context per packet, not per op: the
            # ops of one packet (a graph's strand) are one piece of work, in one context also
            # when the packet parks and resumes on a later turn.
            context = program.context
            if context is None:
                context = program.context = Context()
            if not context.run(program.run, self):
                return ran
            packets.popleft()
            self._completed += 1
            if self._room:  # a ring slot is free: wake the first task waiting for room
                self._wake_for_room()
            try:
                program.finish()  # completion callbacks: user destructors may raise anything
            except BaseException:
                if packets:
                    engine.schedule(self)  # the rest still runs on a later turn
                raise
            finally:
                engine._in_flight -= 1
                if not engine._in_flight:
                    engine.became_idle()
            interrupt = program.interrupt
            if interrupt is not None and engine.interrupt_escapes():
                # KeyboardInterrupt/SystemExit: finished, re-raise (unless the loop is shutting
                # down for an earlier one: it then only failed the launch)
                if packets:
                    engine.schedule(self)  # the rest still runs on a later turn
                raise interrupt
        return ran

    def abandon(self, error: HipError) -> None:
        """Fail every packet (their event loop closed) and run what is left on the new loop."""
        for program in self._packets:
            program.abandon(error)
        # Tasks waiting for room belonged to the closed loop and went with it.
        self._room = WaitQueue()
        self._waking = 0
        if self._packets:
            self.wake()

    def packets(self) -> list[Program]:
        """The queued packets, the head first (a copy)."""
        return list(self._packets)

    @property
    def pending(self) -> int:
        return len(self._packets)

    def statistics(self) -> QueueStatistics:
        return QueueStatistics(
            self._index,
            len(self._packets),
            self._submitted,
            self._completed,
            self._busy_until,
            self._capacity,
            len(self._room),
        )

    def __repr__(self) -> str:
        return (
            f"<HardwareQueue device={self._device.ordinal} index={self._index} "
            f"pending={len(self._packets)}/{self._capacity} busy_until={self._busy_until}ns>"
        )
