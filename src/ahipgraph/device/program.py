"""Programs: the packets that hardware queues run.

A :class:`Program` is a list of ops run in order, a completion signal decremented when the last
op is done, and an optional ``on_done`` callback. It may also carry a *barrier*: signals it waits
for before it starts (an AQL packet's barrier bit), which is how a stream orders an enqueue after
another stream's work (legacy null-stream ordering) without a packet of its own, so an enqueue
given one slot of its ring appends exactly one packet. An eager stream operation is a program
of one op; a graph replay submits one prepared program per strand, which is what keeps a launch's
host cost independent of the graph's size.

A program runs until an op must wait (a signal not yet reached, an awaitable not yet finished);
then it parks, keeping its program counter, and its queue stops behind it — exactly how an AQL
barrier packet holds a hardware queue. If an op fails, the program records the first error and
goes on with its other ops — a failure stops nothing else, as on an eager stream, so which work
runs never depends on how a graph was spread over streams — and its completion carries the
error. Only work that is abandoned — its event loop closed, or the task of one of its async ops
was cancelled — is cut down to its synchronisation ops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextvars import Context
from typing import TYPE_CHECKING, Any

from ..core.errors import HipError, LaunchFailure
from . import hooks
from .engine import CUT_SHORT_BY_LOOP, HeldInterrupt, mark_abandoned
from .ops import Op
from .signal import Signal

if TYPE_CHECKING:
    from .hwqueue import HardwareQueue
    from .memory import DeviceMemory

__all__ = ["INTERRUPTS", "Program"]

# What user code may raise that is not its own failure: it propagates (after the program
# finishes as failed), as asyncio lets only these escape a callback or a task. Anything else,
# CancelledError and GeneratorExit included, fails the op with its HipError.
INTERRUPTS = (KeyboardInterrupt, SystemExit)


class Program:
    """A packet: ops, a launch-bound signal set, a completion signal and a done callback."""

    __slots__ = (
        "barrier",
        "completion",
        "context",
        "error",
        "interrupt",
        "memory",
        "on_done",
        "ops",
        "pc",
        "queue",
        "signals",
        "start_ns",
        "started",
        "time",
    )

    def __init__(
        self,
        ops: Sequence[Op],
        completion: Signal | None = None,
        *,
        signals: Sequence[Signal] = (),
        on_done: Callable[[Program], None] | None = None,
    ) -> None:
        self.ops = ops
        self.completion = completion
        self.signals = signals
        self.on_done = on_done
        self.error: HipError | None = None
        # A KeyboardInterrupt or SystemExit from user code: the program still runs its
        # synchronisation ops and finishes as failed, then the queue re-raises this.
        self.interrupt: BaseException | None = None
        self.pc = 0
        self.time = 0
        self.start_ns = 0  # simulated time the program began, once started
        self.started = False
        self.queue: HardwareQueue | None = None
        self.memory: DeviceMemory | None = None
        # Signals to wait for before the first op starts (see the module notes); the time the
        # program starts at is after them, as it was after a barrier packet of its own.
        self.barrier: tuple[Signal, ...] | None = None
        # The context the program's ops run in (see HardwareQueue.run), made when it first runs
        # and kept across parks, so a later op sees what an earlier one set whenever it resumes.
        self.context: Context | None = None

    def run(self, queue: HardwareQueue) -> bool:
        """Run as far as possible; True when finished, False when parked (the queue is woken)."""
        if not self.started:
            if self.barrier is not None and not self._barrier_passed(queue):
                return False
            self.started = True
            self.queue = queue
            self.memory = queue._device._memory
            if queue._busy_until > self.time:
                self.time = queue._busy_until
            self.start_ns = self.time
        if hooks.observers is not None:  # tracing or fault injection: the observed twin
            return self._run_observed(queue, hooks.observers)
        ops = self.ops
        pc = self.pc
        count = len(ops)
        while pc < count:
            op = ops[pc]
            try:
                blocker = op.run(self)
            except INTERRUPTS as exc:
                ops, pc, count = self._interrupted(op, pc, exc)
                continue
            except BaseException as exc:  # user code's own failure, CancelledError included
                self._record(op.fault(exc))
                pc += 1
                continue
            if blocker is None:
                pc += 1
            elif type(blocker) is Signal:
                self.pc = pc  # run this barrier again when the signal is reached
                blocker.when_reached(0, queue.wake)
                return False
            else:
                self.pc = pc + 1
                self._await_body(blocker, op)
                return False
        self.pc = pc
        queue._busy_until = self.time
        return True

    def _barrier_passed(self, queue: HardwareQueue) -> bool:
        """Wait for the barrier's signals (once per program, before it starts): True when
        all are reached (the program starts at the latest of them), else park the queue.

        Observers are told of a passed barrier as of a wait op (a trace draws it, and the
        flows into it, as it drew the wait packet the barrier stands for)."""
        barrier = self.barrier or ()
        for signal in barrier:
            if signal._value > 0:
                signal.when_reached(0, queue.wake)
                return False
        start = max(self.time, queue._busy_until)
        for signal in barrier:
            if signal._time > self.time:
                self.time = signal._time
        self.barrier = None
        if hooks.observers is not None:
            self.queue = queue
            for watcher in hooks.observers:
                watcher.barrier_passed(self, barrier, start)
        return True

    def _run_observed(self, queue: HardwareQueue, watchers: tuple[hooks.Observer, ...]) -> bool:
        """:meth:`run` with every op reported to ``watchers``, which may replace an op.

        Kept apart from :meth:`run` so the unobserved loop pays nothing for observation.
        """
        ops = self.ops
        pc = self.pc
        count = len(ops)
        while pc < count:
            op = ops[pc]
            self.pc = pc  # observers read the op's position
            start = self.time
            try:
                blocker = hooks.op_starting(watchers, self, op)
                if blocker is None:
                    blocker = op.run(self)
            except INTERRUPTS as exc:
                ops, pc, count = self._interrupted(op, pc, exc)
                continue
            except BaseException as exc:
                self._record(op.fault(exc))
                for watcher in watchers:
                    watcher.op_finished(self, op, start, exc)
                pc += 1
                continue
            if type(blocker) is Signal:
                self.pc = pc
                blocker.when_reached(0, queue.wake)
                return False
            for watcher in watchers:
                watcher.op_finished(self, op, start, None)
            if blocker is None:
                pc += 1
            else:
                self.pc = pc + 1
                self._await_body(blocker, op)
                return False
        self.pc = pc
        queue._busy_until = self.time
        for watcher in watchers:
            watcher.program_finished(self)
        return True

    def _await_body(self, blocker: Any, op: Op) -> None:
        """Run an async body as a task; the program goes on when it ends."""
        assert self.queue is not None
        future = self.queue._engine.start(blocker, self.queue)
        future.add_done_callback(lambda f: self._awaited(f, op))

    def _interrupted(self, op: Op, pc: int, exc: BaseException) -> tuple[Sequence[Op], int, int]:
        """``exc`` (KeyboardInterrupt, SystemExit) escaped ``op``: fail the program and keep
        only its synchronisation ops, so every signal it owes is still raised."""
        self.interrupt = exc
        self.pc = pc + 1
        self.abandon(op.fault(exc))
        return self.ops, 0, len(self.ops)

    def _awaited(self, future: asyncio.Future[Any], op: Op) -> None:
        failure = self.settle_body(future, op)
        if failure is not None and hooks.observers is not None:
            # Observers were told the op finished when its body was started: say how it ended.
            for watcher in hooks.observers:
                watcher.op_failed(self, op, failure)
        assert self.queue is not None
        self.queue.wake()

    def settle_body(self, future: asyncio.Future[Any], op: Op) -> BaseException | None:
        """Record how ``op``'s async body (run as ``future``) ended; return its failure.

        Whoever ran the body calls this: the program itself, or an op running ops of its own
        (a conditional node's body), so an async body fails its launch the same way wherever
        it sits. A body's own failure, any ``BaseException`` but an interrupt, is ``op``'s
        error and the program goes on (a task user code cancelled too); a body cancelled by its
        loop shutting down, or interrupted (KeyboardInterrupt, SystemExit, which asyncio
        re-raised already), abandons the program.
        """
        failure: BaseException | None = None
        if future.cancelled():
            assert self.queue is not None
            if _cut_short_by_loop(future, self.queue._engine._loop):
                failure = abandoned_by_loop(op)  # give up the rest
                mark_abandoned(failure, self.queue._engine._owner_number)
                self.abandon(failure)
                self.queue._engine._abandoned += 1
            else:  # the body raised CancelledError, or user code cancelled its task: it failed
                failure = asyncio.CancelledError()
                self._record(op.fault(failure))
        elif (failure := future.exception()) is not None:
            if isinstance(failure, HeldInterrupt):  # see Engine.interrupt_escapes
                failure = failure.interrupt
            if not isinstance(failure, INTERRUPTS):
                self._record(op.fault(failure))
            else:
                self.abandon(op.fault(failure))
        return failure

    def _record(self, error: HipError) -> None:
        if self.error is None:
            self.error = error

    def abandon(self, error: HipError) -> None:
        """Fail the program where it stands: only its synchronisation ops are left to run."""
        self._record(error)
        self.ops = [op for op in self.ops[self.pc :] if op.is_sync]
        self.pc = 0

    def finish(self) -> None:
        """Called by the queue once the program has run to its end."""
        self.context = None  # what its ops set goes with it
        if self.completion is not None:
            self.completion.decrement(self.time, self.error)
        on_done, self.on_done = self.on_done, None  # a Completion kept by the user holds this
        if on_done is not None:  # program: it must not keep the launch's executable alive
            on_done(self)

    def __repr__(self) -> str:
        return f"<Program ops={len(self.ops)} pc={self.pc} t={self.time}ns error={self.error!r}>"


def _cut_short_by_loop(future: asyncio.Future[Any], loop: asyncio.AbstractEventLoop | None) -> bool:
    """Whether an async body's cancelled task was cancelled by its event loop shutting down.

    ``asyncio.run`` (and a test runner's teardown) cancels every task left once the program's
    own is done, all in one sweep: so every task of the loop was being cancelled when the
    cancellation reached the body (the engine notes that moment, see ``engine._awaiting``), and
    still is, or is done, now. User code cancelling a body's task while others happen to be
    cancelled too (a timeout, a task group whose child failed) rarely meets both. A task user
    code cancelled, and one that raised CancelledError itself (``cancelling()`` is 0), failed:
    the rest of its program runs. Only the loop's cancellation abandons it.
    """
    if isinstance(future, asyncio.Task) and not future.cancelling():
        return False
    if loop is None:  # the device has no owner loop any more: it went
        return True
    if future not in CUT_SHORT_BY_LOOP:
        return False
    return all(task.done() or task.cancelling() for task in asyncio.all_tasks(loop))


def abandoned_by_loop(op: Op) -> HipError:
    """The error of an async body its event loop cancelled while shutting down.

    Not ``op.fault(...)``: that would report the user's function as having raised, when the
    loop gave up on it. Still a LaunchFailure (the launch did fail, and callers catch that),
    with no ``__cause__``: nothing the user wrote raised.
    """
    return LaunchFailure(
        f"{op!r} was abandoned: the event loop running it shut down and cancelled it "
        "before it finished"
    )
