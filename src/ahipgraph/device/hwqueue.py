"""Hardware queues: in-order runners of programs on the device's event loop.

A queue runs its packets strictly in submission order. When the head packet parks (a barrier on
a signal that is not reached yet, an async body still running) the whole queue waits behind it,
as an AMD hardware queue waits on a barrier packet; the packet wakes the queue when it can go on.
A queue with work is put in its engine's ready table, which the engine runs on its loop's next
turn (one ``call_soon`` per turn for the whole device) — work submitted from a task starts after
that task yields, so device work is asynchronous to the host exactly as on a GPU, and
deterministic. Submission happens under the engine's lock, so the check that the caller's loop
owns the device and the append are one step (see :mod:`ahipgraph.device.engine`).

Invariants: a queue is either empty, ready (in the device's table), or parked on its head
packet; ``busy_until`` (simulated ns) never decreases.
"""

from __future__ import annotations

from asyncio import _get_running_loop
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import HipError
from . import hooks
from .program import Program

if TYPE_CHECKING:
    from .base import DeviceBase
    from .engine import Engine

__all__ = ["HardwareQueue", "QueueStatistics"]


@dataclass(frozen=True, slots=True)
class QueueStatistics:
    index: int
    pending: int
    submitted: int
    completed: int
    busy_until_ns: int


class HardwareQueue:
    """One in-order hardware queue of a device."""

    __slots__ = (
        "_handle",
        "_packets",
        "busy_until",
        "completed",
        "device",
        "engine",
        "index",
        "submitted",
    )

    def __init__(self, engine: Engine, index: int) -> None:
        self.engine = engine
        self.device: DeviceBase = engine.device
        self.index = index
        self.busy_until = 0
        self.submitted = 0
        self.completed = 0
        self._packets: deque[Program] = deque()

    def submit(self, program: Program) -> None:
        """Append a packet. Must be called on the device's event loop (bound if it is free)."""
        engine = self.engine
        with engine.lock:  # the owner check and the append are one step for other threads
            if engine.loop is not _get_running_loop():
                engine.bind_loop()  # binds a free device, or raises
            now = engine.clock.now
            if program.time < now:
                program.time = now
            packets = self._packets
            packets.append(program)
            self.submitted += 1
            engine.in_flight += 1
            if hooks.observers is not None:  # tracing: record the host enqueue
                for observer in hooks.observers:
                    observer.submitted(self, program)
            if len(packets) == 1:  # it was idle: run it soon (a parked queue is woken instead)
                engine.schedule(self)

    def wake(self) -> None:
        """Resume a parked queue (called by the signal or future its head packet waits on)."""
        self.engine.schedule(self)

    def run(self) -> None:
        """Run packets in order until the queue is empty or its head packet parks."""
        packets = self._packets
        engine = self.engine
        while packets:
            program = packets[0]
            if not program.run(self):
                return
            packets.popleft()
            self.completed += 1
            try:
                program.finish()
            finally:
                engine.in_flight -= 1
                if not engine.in_flight:
                    engine.became_idle()
            if program.interrupt is not None:  # KeyboardInterrupt/SystemExit: finished, re-raise
                if packets:
                    engine.schedule(self)  # the rest still runs on a later turn
                raise program.interrupt

    def abandon(self, error: HipError) -> None:
        """Fail every packet (their event loop closed) and run what is left on the new loop."""
        for program in self._packets:
            program.abandon(error)
        if self._packets:
            self.wake()

    @property
    def pending(self) -> int:
        return len(self._packets)

    def statistics(self) -> QueueStatistics:
        return QueueStatistics(
            self.index, len(self._packets), self.submitted, self.completed, self.busy_until
        )

    def __repr__(self) -> str:
        return (
            f"<HardwareQueue device={self.device.ordinal} index={self.index} "
            f"pending={len(self._packets)} busy_until={self.busy_until}ns>"
        )
