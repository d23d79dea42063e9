"""Hardware queues: in-order runners of programs on the device's event loop.

A queue runs its packets strictly in submission order. When the head packet parks (a barrier on
a signal that is not reached yet, an async body still running) the whole queue waits behind it,
as an AMD hardware queue waits on a barrier packet; the packet wakes the queue when it can go on.
Runs are scheduled with ``loop.call_soon`` — work submitted from a task starts after that task
yields, so device work is asynchronous to the host exactly as on a GPU, and deterministic.
A host that is about to wait for device work may run the scheduled work at once
(:meth:`Device.run_ready`): it is the work the loop would run next anyway, and doing it in place
saves the waiting task a trip through the event loop.

Invariants: at most one run is scheduled at a time (``_handle``), and a scheduled queue is in its
device's ``ready`` table; a queue is either empty, scheduled, or parked on its head packet;
``busy_until`` (simulated ns) never decreases.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.errors import HipError
from .program import Program

if TYPE_CHECKING:
    from .device import Device

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
        "index",
        "submitted",
    )

    def __init__(self, device: Device, index: int) -> None:
        self.device = device
        self.index = index
        self.busy_until = 0
        self.submitted = 0
        self.completed = 0
        self._packets: deque[Program] = deque()
        self._handle: asyncio.Handle | None = None  # the scheduled run, if any

    def submit(self, program: Program) -> None:
        """Append a packet. Must be called on the device's event loop."""
        device = self.device
        loop = device.bind_loop()
        now = device.clock.now
        if program.time < now:
            program.time = now
        packets = self._packets
        packets.append(program)
        self.submitted += 1
        device.in_flight += 1
        if len(packets) == 1 and self._handle is None:
            self._handle = loop.call_soon(self._run_scheduled)
            device.ready[self] = None

    def wake(self) -> None:
        """Resume a parked queue (called by the signal or future its head packet waits on)."""
        if self._handle is None:
            device = self.device
            loop = device.loop
            assert loop is not None
            self._handle = loop.call_soon(self._run_scheduled)
            device.ready[self] = None

    @property
    def scheduled(self) -> bool:
        return self._handle is not None

    def run_now(self) -> None:
        """Run now instead of at the scheduled turn of the loop (the host is about to wait)."""
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
            self._run()

    def _run_scheduled(self) -> None:
        self._handle = None
        self.device.ready.pop(self, None)
        self._run()

    def _run(self) -> None:
        packets = self._packets
        device = self.device
        while packets:
            program = packets[0]
            if not program.run(self):
                return
            packets.popleft()
            self.completed += 1
            try:
                program.finish()
            finally:
                device.retired()

    def abandon(self, error: HipError) -> None:
        """Fail every packet (their event loop closed) and run what is left on the new loop."""
        self._handle = None
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
