"""Launching an executable on another device's stream (HIP's ``DependencyGraphDeviceCtxtChg``).

An executable's work runs on the device it was instantiated for. A launch on a stream of
another device runs as HIP's cross-device launch does (HIP_SEMANTICS §4.2 step 6):

1. on a stream of the executable's device that belongs to the executable (its *home* stream,
   made at the first such launch and destroyed with the executable), a marker waits for the
   user stream's earlier work;
2. the graph is launched on the home stream, reporting a failure to the user's stream;
3. a marker on the user's stream waits for the graph, so later work there starts after it.

So stream order holds on both sides, and ``stream.synchronize()`` on the user's stream covers
the graph. Launches of one executable stay ordered across devices (the previous-launch signal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..device.ops import WaitSignalsOp
from ..device.program import Program
from ..device.signal import Signal
from ..runtime.completion import Completion
from .exec_state import ExecState

if TYPE_CHECKING:
    from ..runtime.stream import Stream
    from .launcher import Launcher
    from .signal_pool import SignalSet

__all__ = ["enqueue_cross_device"]


def _waits(stream: Stream, home: Stream) -> list[Signal]:
    """The user stream's work the graph must follow (its tail, legacy ordering) that the
    executable's ``home`` stream has not passed yet (see ``Stream._ahead``)."""
    waits = list(stream._implicit_waits()) if not stream._non_blocking else []
    tail = stream._tail
    if tail is not None and home._ahead(tail):
        waits.append(tail)
    return waits


def enqueue_cross_device(launcher: Launcher, stream: Stream, signal_set: SignalSet) -> Completion:
    """Submit one launch by ``launcher`` for ``stream`` of another device (synchronous).

    Check, then commit: both devices are claimed for the caller's loop under both engines'
    locks (taken in one global order) before any packet is submitted, so a device taken by
    another thread's loop meanwhile refuses the launch with nothing submitted and the signal
    set given back, and the three submissions cannot be split by another loop.
    """
    try:
        home = launcher.home_stream()
        own, other = home._queue._engine, stream._queue._engine
        # One order for every thread: no deadlock. Taken as every submission takes them
        # (a finalizer's launch inside another enqueue on this thread is refused).
        first, second = (engine.submitting() for engine in sorted((own, other), key=id))
    except BaseException:
        launcher.pool.give_back(signal_set)
        raise
    with first, second:
        try:
            own.claim_locked()
            other.claim_locked()
            # Destroyed, or began capturing, while the launch waited for a set: refused as the
            # launch itself would be (the executable first, as HIP checks), before the home
            # stream's wait for the user's stream is submitted: a refused launch submits nothing.
            if launcher.owner._state is not ExecState.OPEN:
                launcher.owner._check_alive()  # raises
            if stream._state is not stream._state.OPEN:
                stream._check_open()  # raises
            part = stream._capture  # began capturing meanwhile: refused, as on its own device
            if part is not None:
                raise part.unsupported("a graph launch")
        except BaseException:
            launcher.pool.give_back(signal_set)
            raise
        waits = _waits(stream, home)
        # The wait is submitted by the launch itself, after its own checks (a destroyed event
        # node's event, graph allocations, the race checker): a refused launch submits nothing.
        prelude = Program((WaitSignalsOp(waits),)) if waits else None
        completion = launcher._enqueue_claimed(home, signal_set, stream, prelude)
        done = launcher.last_done  # the launch just enqueued
        stream._submit_locked(Program((WaitSignalsOp((done,)),), Signal(1)))
    return completion
