"""The simulated clock.

Simulated time is an integer count of nanoseconds, so timelines are exact and the same program
gives the same timeline every run. Each device owns one :class:`SimClock`. Its ``now`` is the
host's view of device time: it only moves forward, when the host observes completed work (a
synchronize, an event query) or when the cost model advances a queue. Packets submitted later are
stamped no earlier than ``now``.
"""

from __future__ import annotations

__all__ = ["SimClock", "ns_to_ms"]


def ns_to_ms(nanoseconds: int) -> float:
    return nanoseconds / 1_000_000


class SimClock:
    """A monotonic simulated time in nanoseconds."""

    __slots__ = ("_now",)

    def __init__(self, start_ns: int = 0) -> None:
        self._now = start_ns

    @property
    def now(self) -> int:
        return self._now

    def observe(self, time_ns: int) -> int:
        """Move ``now`` forward to ``time_ns`` if it is later; return the new ``now``."""
        if time_ns > self._now:
            self._now = time_ns
        return self._now

    def __repr__(self) -> str:
        return f"<SimClock now={self._now}ns>"
