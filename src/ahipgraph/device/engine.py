"""The device engine: hardware queues, the event loop they run on, the ready pump, idle waiting
and the clock.

The engine knows nothing about streams, events or graphs: it runs programs on hardware queues.
Every asyncio call the device makes (``get_running_loop``, ``call_soon``, futures, tasks, the
loop's exception handler) goes through it, so it is the one seam where another executor could
be put in later.

**One owner loop.** An engine runs its work on one event loop at a time: the first loop that
submits work binds it. It moves to another loop only when it is idle (nothing in flight and the
pump not running) or when its loop has closed; the work a closed loop left behind fails with
:class:`IllegalState` and still completes on the new loop, so every signal it owes is raised and
everything it borrowed is returned. Using a busy engine from a second loop is
:class:`IllegalState`, raised before anything is taken.

**One lock.** ``lock`` makes binding, the idle check, submission and the pump's hand-over
atomic when loops on several threads share a device:

* a submission checks the owner and appends its packets under the lock
  (:meth:`Engine.claim_locked`, then ``HardwareQueue.submit_locked``), so no other loop can
  take the engine between the check and the append; a graph launch holds it from its check
  through the submission of all its programs;
* the pump runs only on the owner loop's thread, and a pump scheduled on a loop that has since
  lost the engine does nothing; while it runs, no other loop can bind;
* work is scheduled onto the owner loop with ``call_soon``, or ``call_soon_threadsafe`` from
  another thread, so a future of one loop is never resolved from another loop's thread.

The lock is held only for bookkeeping: never while user code runs on purpose, never taken twice
by one caller (the ``*_locked`` methods are for callers holding it), so an uncontended
submission pays one acquire. Python can still run user code under it: an allocation made there
may start a collection, and a finalizer (``__del__``, a weakref callback) or a
``gc.callbacks`` hook then runs on this thread, mid-bookkeeping. So the lock is re-entrant,
and what such code does that needs no submission (make a stream, free memory, destroy a
handle) works. A submission from there is refused (:meth:`Engine.submitting`,
``IllegalState``): it would append its packets in the middle of the enqueue it interrupted,
and with a plain lock it waited for itself for ever. The queues, the ready table and ``in_flight``
change only on the owner loop's thread: under the lock when a submission may race a binding,
without it while the pump runs (``_running`` keeps every other loop out) or from a packet's
wake (work in flight keeps every other loop out).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import itertools
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from contextvars import Context, ContextVar, copy_context
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.clock import SimClock
from ..core.errors import HipError, IllegalState, InvalidDevice
from ..core.lifecycle import NoCopy
from ..core.waitqueue import WaitQueue
from .host_function import InContext
from .work_waits import waits_for_head

if TYPE_CHECKING:
    from .base import DeviceBase
    from .hwqueue import HardwareQueue
    from .signal import Signal

__all__ = ["PUMP_BUDGET", "Engine", "current_loop", "park_refusable", "running_loop"]

_T = TypeVar("_T")

# The hardware queue whose device work (an async kernel body or host function) the calling
# task is, in a cell emptied when that work ends: set in the context each such task starts
# with, so a wait that could only end after the waiter itself finished is refused instead of
# hanging for good. A task the work spawned inherits the cell, and is free to wait once the
# work is done.
_DEVICE_WORK: ContextVar[list[HardwareQueue | None]] = ContextVar("ahipgraph_device_work")
_NO_WORK: list[HardwareQueue | None] = [None]
# The same cells, for tasks made elsewhere that a host function handed to its queue (it
# returned one, and the queue waits for it): such a task is that work until the work ends,
# but its context, made before, cannot get the variable above. One cell per hand-over: a task
# two host functions returned is the work of both queues, each waiting for it.
_HANDED: weakref.WeakKeyDictionary[asyncio.Future[Any], list[list[HardwareQueue | None]]] = (
    weakref.WeakKeyDictionary()
)
# Tasks parked in an engine wait (:func:`park_refusable`), each with a cell: the task's count
# of cancellation requests as it parked, and 1 once a hand-over woke it to re-check its wait
# (0 before). Weak: a task its closed loop dropped while it was parked is not kept alive by it.
_PARKED: weakref.WeakKeyDictionary[asyncio.Task[Any], list[int]] = weakref.WeakKeyDictionary()
# Numbers each owner loop an engine gets (see Engine.owner_number), unique in the process.
_OWNER_NUMBERS = itertools.count(1)
# The attribute :func:`mark_abandoned` sets on the failure of abandoned work.
_ABANDONED_BY = "_ahg_abandoned_by_loop"


def mark_abandoned(error: HipError, owner: int) -> HipError:
    """Mark ``error`` as the failure of work the owner loop numbered ``owner`` abandoned.

    Such work fails and completes (on the next loop, for work left queued), and nothing is in
    flight any more: what is left is its failure, pending on its stream until a synchronize
    reports it. A leak check reads the mark (see :func:`abandoned_by`) to tell a program that
    went on without ever looking at what an earlier loop left behind. An attribute of the
    error itself, not a table: an error is not weakly referable, and a table holding raised
    errors would keep their tracebacks' frames alive.
    """
    vars(error)[_ABANDONED_BY] = owner
    return error


def abandoned_by(error: HipError) -> int | None:
    """The owner-loop number :func:`mark_abandoned` gave ``error``, or None."""
    owner = vars(error).get(_ABANDONED_BY)
    return owner if isinstance(owner, int) else None


# The caller's running loop or None, without raising: the one way the device layer asks.
current_loop = asyncio._get_running_loop

# Packets one turn of the pump runs before it lets the event loop turn. Device work that keeps
# feeding itself (a host function that launches more work, again and again) would otherwise run
# in one callback, and no other task, timeout or cancellation would get a turn until it ended;
# a GPU runs beside the host, not instead of it. Large enough that ordinary work (a graph launch
# is one packet per hardware queue) never notices.
PUMP_BUDGET = 256


def running_loop() -> asyncio.AbstractEventLoop:
    """The caller's asyncio loop, or an error that says what is wrong.

    Raises:
        RuntimeError: no asyncio loop runs here: plain synchronous code, a thread without a
            loop, or another async library (under anyio's trio backend asyncio's own message,
            "no running event loop", would not say why).
    """
    loop = current_loop()
    if loop is not None:
        return loop
    if _in_trio():
        raise RuntimeError(
            "ahipgraph runs on asyncio (or uvloop), not trio: start the program with "
            "ahg.run(main), asyncio.run(main()) or anyio.run(main, backend='asyncio')"
        )
    raise RuntimeError(
        "this call needs a running asyncio event loop: call it from a coroutine "
        "(ahg.run(main) starts one)"
    )


def device_work_queues() -> tuple[HardwareQueue, ...]:
    """The hardware queues whose device work (an async body still running) the caller is:
    none for the host program; the work's queue for device work and the tasks it spawned;
    and, for a task host functions handed to their queues, each queue still waiting for it."""
    queue = _DEVICE_WORK.get(_NO_WORK)[0]
    queues: tuple[HardwareQueue, ...] = () if queue is None else (queue,)
    if _HANDED and current_loop() is not None:
        task = asyncio.current_task()
        cells = None if task is None else _HANDED.get(task)
        if cells:
            queues += tuple(cell[0] for cell in cells if cell[0] is not None)
    return queues


async def park_refusable(
    wait: Callable[[], Awaitable[_T]], refuse: Callable[[HardwareQueue], None]
) -> _T:
    """``await wait()``, refused by ``refuse`` as it starts and if the task becomes device
    work meanwhile.

    ``refuse(work)`` raises ``IllegalState`` when the wait, made by device work ``work``, could
    only end after that work ends; it is asked first for each queue whose work the caller is
    (:func:`device_work_queues`), so a wait for itself is refused before anything is taken.

    A task the host program made may already be parked in such a wait when a host function
    hands it to its queue (returns it, and the queue waits for it): the queue then waits for
    the task, and the task for the queue. So the hand-over wakes a task parked here
    (:meth:`Engine._start_in_context` cancels it, and the cancellation is taken back here)
    and the task re-checks its wait with ``refuse(work)``, which raises ``IllegalState`` if
    the wait now needs its own work to end, or parks again. ``wait`` must lose nothing when
    cancelled (the one wait primitive gives back what it was handed). The normal path pays a
    dict entry per wait. A cancellation by anyone else wins: one requested while the task is
    parked, before the hand-over (not delivered yet) or after it, passes through.
    """
    for work in device_work_queues():
        refuse(work)
    task = asyncio.current_task()
    if task is None:  # not a task: nothing can hand it over
        return await wait()
    woken = [task.cancelling(), 0]
    _PARKED[task] = woken
    # The frame must not hold its own task while it is parked: a task dropped with its closed
    # loop would then go only as this frame is closed, and its coroutine, closed by the
    # collector from inside that frame, would fail with "coroutine already executing".
    own = weakref.ref(task)
    del task
    try:
        while True:
            try:
                return await wait()
            except asyncio.CancelledError:
                if not woken[1]:  # not a hand-over's
                    raise
                woken[1] = 0
                task = own()
                if task is not None and task.uncancel() > woken[0]:  # cancelled by another too
                    raise
                del task
            for work in device_work_queues():
                refuse(work)
    finally:
        task = own()
        if task is not None:
            _PARKED.pop(task, None)
        del task


def _wake_handed(task: asyncio.Task[Any], loop: asyncio.AbstractEventLoop | None) -> None:
    """A host function handed ``task`` to its queue: a wait it is parked in re-checks (see
    :func:`park_refusable`). Only a pending task of the engine's loop, on its thread."""
    woken = _PARKED.get(task)
    if woken is None or woken[1] or task.done() or task.get_loop() is not loop:
        return
    if task.cancelling() > woken[0]:  # someone cancelled it meanwhile: it leaves the wait
        return
    woken[1] = 1
    task.cancel()


def refuse_trio() -> None:
    """Raise :func:`running_loop`'s error when a trio task, with no asyncio loop, calls.

    For the waits that need no loop when there is nothing to wait for (a synchronize of idle
    work): under trio they would pass, and the program would fail later, at its first wait
    for real work. A plain call without any loop is left alone.
    """
    if current_loop() is None and _in_trio():
        running_loop()


def _in_trio() -> bool:
    """True when the caller is a trio task (checked only if trio was imported)."""
    trio: Any = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except Exception:
        return False
    return True


class Engine(NoCopy):
    """Runs one device's hardware queues on the event loop that owns it."""

    __slots__ = (
        "_abandoned",
        "_clock",
        "_device",
        "_idle",
        "_in_flight",
        "_interrupted",
        "_lock",
        "_loop",
        "_next_queue",
        "_owner_number",
        "_pump",
        "_queues",
        "_ready",
        "_retired",
        "_running",
    )

    def __init__(self, device: DeviceBase, hardware_queues: int) -> None:
        self._device = device  # what the queues' programs run against (memory, ordinal)
        self._clock = SimClock()
        # Re-entrant only for finalizers the collector runs under it: see the module note.
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_flight = 0
        # Set once configure_devices replaced the device: every submission is refused (see
        # claim_locked); work already in flight still runs to its end.
        self._retired = False
        # Packets the owner loop cut short as it shut down (it cancelled their async bodies):
        # work left in flight, gone from ``in_flight`` once the loop is gone, which a leak
        # check must still see. A loop that takes the engine over starts again from zero: the
        # program went on, and the failures are reported there. (Work a closed loop left queued
        # stays in flight until the next loop runs it, so ``in_flight`` shows that.)
        self._abandoned = 0
        # Which owner loop ``abandoned`` counts for: a new number each time a loop takes the
        # engine over, so a leak report can tell a count that started again from one that
        # did not (a baseline's abandoned work is not the current loop's).
        self._owner_number = next(_OWNER_NUMBERS)
        # Queues with a scheduled run, in scheduling order (a dict as an ordered set).
        self._ready: dict[HardwareQueue, None] = {}
        self._pump: asyncio.Handle | None = None  # the owner loop's callback running the table
        self._running = False  # the pump is running queues (on the owner loop's thread)
        self._idle = WaitQueue()
        # The loop an interrupt from device work last escaped, and the tasks it had then
        # (weakly): see interrupt_escapes.
        self._interrupted: tuple[asyncio.AbstractEventLoop, weakref.WeakSet[Any]] | None = None
        self._next_queue = 0
        from .hwqueue import HardwareQueue  # hwqueue.py imports this module

        self._queues = tuple(HardwareQueue(self, i) for i in range(hardware_queues))

    # What the engine is made of and where it stands: read-only from outside. A user reaches
    # the engine (``device.engine``, ``queue.engine``): ``retired`` set to True made its
    # device refuse all work with InvalidDevice; ``in_flight`` set to 0 made
    # ``device.synchronize()`` return while work still ran, and the count then went negative;
    # ``queues`` set to ``()`` made ``create_stream`` fail with ZeroDivisionError; ``loop`` or
    # ``lock`` replaced broke the one-owner-loop rule. The engine, its queues and the runtime
    # read and write the private slots: these properties are for users and are on no hot path.

    @property
    def device(self) -> DeviceBase:
        """The device whose queues it runs (their programs run against its memory)."""
        return self._device

    @property
    def clock(self) -> SimClock:
        """The device's simulated clock."""
        return self._clock

    @property
    def queues(self) -> tuple[HardwareQueue, ...]:
        """The device's hardware queues."""
        return self._queues

    @property
    def lock(self) -> threading.RLock:
        """The lock over binding, the idle check, submission and the pump (see the module note)."""
        return self._lock

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop that owns the engine (None before the first submission)."""
        return self._loop

    @property
    def in_flight(self) -> int:
        """Packets submitted and not yet finished."""
        return self._in_flight

    @property
    def retired(self) -> bool:
        """True once ``configure_devices`` replaced the device: it takes no new work."""
        return self._retired

    @property
    def abandoned(self) -> int:
        """Packets the owner loop cut short as it shut down (see ``owner_number``)."""
        return self._abandoned

    @property
    def owner_number(self) -> int:
        """Which owner loop ``abandoned`` counts for: new each time a loop takes the engine."""
        return self._owner_number

    @property
    def ready(self) -> tuple[HardwareQueue, ...]:
        """The queues with a scheduled run, in scheduling order (a copy)."""
        return tuple(self._ready)

    # -- the owner loop -------------------------------------------------------------------------

    def bind_loop(self) -> asyncio.AbstractEventLoop:
        """The loop running this engine's work: the caller's, binding it if the engine is free.

        Raises:
            IllegalState: the engine has work in flight (or is running it) on another, still
                open, loop. Nothing changes.
            RuntimeError: called outside a running event loop.
        """
        loop = running_loop()
        if loop is self._loop:
            return loop
        with self._lock:
            self._bind(loop)
        return loop

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Make ``loop`` the owner (the lock is held): see :meth:`bind_loop`."""
        current = self._loop
        if loop is current:
            return
        busy = self._in_flight or self._running
        if busy and current is not None and not current.is_closed():
            raise IllegalState(f"device {self._device.ordinal} is busy on another event loop")
        previous = self._owner_number
        self._loop = loop
        self._abandoned = 0  # what the old loop gave up on is behind the program now
        self._owner_number = next(_OWNER_NUMBERS)
        self._pump = None  # a callback left on the old loop sees it lost the engine
        self._running = False  # a closed loop cannot be running it
        self._idle = WaitQueue()
        self._interrupted = None  # the old loop's shutdown is over
        if current is not None and (self._in_flight or current.is_closed()):
            # Work, and tasks waiting for ring room (even one woken that never resumed),
            # that the closed loop left behind.
            self._fail_abandoned_work(previous)

    def claim(self) -> asyncio.AbstractEventLoop:
        """The caller's loop, which owns the engine from here on: the fast path of
        :meth:`bind_loop` for the owner loop. Call it *without* the lock; a submission that
        must not lose the engine to another thread's loop before it is in uses
        :meth:`claim_locked` instead.

        Raises: as :meth:`bind_loop` (no running loop, or another open loop is busy with it).
        """
        loop = current_loop()
        if loop is None or loop is not self._loop:
            return self.bind_loop()
        return loop

    def submitting(self) -> threading.RLock:
        """:attr:`lock`, for a submission to take (``with engine.submitting():``).

        Raises:
            IllegalState: this thread holds the lock already: the caller is a finalizer or a
                collector callback that an allocation under it ran (see the module note), and
                its work would be appended in the middle of another submission. Nothing
                changes.
        """
        lock = self._lock
        if lock._is_owned():  # type: ignore[attr-defined]  # (threading.Condition uses it too)
            raise IllegalState(
                f"device {self._device.ordinal}: work enqueued by a finalizer or garbage-collector "
                "callback that ran inside an enqueue on this thread; enqueue it from the event "
                "loop instead (loop.call_soon)"
            )
        return lock

    def claim_locked(self) -> asyncio.AbstractEventLoop:
        """:meth:`claim` for a caller that holds :attr:`lock`: the owner check and what the
        caller submits next are then one step for every other thread.

        Raises:
            InvalidDevice: ``configure_devices`` replaced the device (see
                :meth:`_refuse_retired`).
            As :meth:`bind_loop`. Nothing changes.
        """
        if self._retired:
            self._refuse_retired()
        loop = current_loop()
        if loop is None:
            return running_loop()  # raises, saying why
        if loop is not self._loop:
            self._bind(loop)
        return loop

    def _refuse_retired(self) -> None:
        """Refuse new work on a device ``configure_devices`` replaced (``InvalidDevice``).

        Its successor has its ordinal and the same address range, and copies and fills resolve
        pointers by ordinal: work enqueued on the replaced device (an eager fill through a
        stream kept from before, a launch of an executable instantiated there) would write the
        successor's allocations at those addresses. Work in flight when it was replaced runs to
        its end.
        """
        raise InvalidDevice(
            f"device {self._device.ordinal} was replaced by configure_devices and takes no new work"
        )

    def _fail_abandoned_work(self, owner: int) -> None:
        """Work left behind by a closed loop (the owner numbered ``owner``) fails, but still
        completes on the new loop.

        Each abandoned program keeps only its synchronisation ops, so every signal it owes is
        still raised, every launch still returns what it borrowed, and everyone waiting for
        that work wakes with the error instead of hanging. The error is marked as that loop's
        abandoned work (see :func:`mark_abandoned`).
        """
        error = IllegalState(
            f"device {self._device.ordinal}: the event loop running this work closed"
        )
        mark_abandoned(error, owner)
        self._ready.clear()
        for queue in self._queues:
            queue.abandon(error)

    # -- the pump ---------------------------------------------------------------------------------

    def schedule(self, queue: HardwareQueue) -> None:
        """``queue`` has work it can run: run it on the owner loop's next turn.

        Called on the owner loop's thread (a submission, under the lock; a packet's wake, while
        work is in flight), where the owner cannot change underneath, so it takes no lock.

        The pump runs in a context of its own, every variable at its default: device work runs
        on behalf of no task, as a GPU's does. Scheduled in the caller's context (``call_soon``'s
        default), it would run every kernel body, completion and destructor of its turn in
        whichever task's context woke the device: that task's current device and capture mode,
        or, for work a declared host function launched, that function's declaration, which then
        judged the views of the kernels it launched.
        """
        self._ready[queue] = None
        if self._pump is None:
            loop = self._loop
            assert loop is not None
            if loop is current_loop():
                self._pump = loop.call_soon(self._run_pump, loop, context=Context())
            elif not loop.is_closed():  # from another thread: never touch the loop
                self._pump = loop.call_soon_threadsafe(self._run_pump, loop, context=Context())

    def _run_pump(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._loop is not loop:  # the engine moved to another loop meanwhile
                return
            self._pump = None
        self.run_ready()

    def run_ready(self) -> None:
        """Run the scheduled queues, now, until none is left.

        Called by the pump on the owner loop (hosts never run device work themselves: they
        park). Not reentrant (device work that waits from inside the device simply parks), and
        a call from any other loop or thread does nothing.
        """
        ready = self._ready
        with self._lock:
            if self._running or self._loop is not current_loop():
                return
            self._running = True
        budget = PUMP_BUDGET
        try:  # the ready table is the owner thread's while ``_running`` keeps others out
            while ready:
                if not budget:  # the rest on the loop's next turn: see PUMP_BUDGET
                    with self._lock:
                        loop = self._loop
                        if self._pump is None and loop is not None and not loop.is_closed():
                            self._pump = loop.call_soon(self._run_pump, loop, context=Context())
                    break
                queue = next(iter(ready))
                del ready[queue]
                budget -= queue.run(budget)
        except BaseException:  # KeyboardInterrupt/SystemExit from user code: the rest runs later
            with self._lock:
                loop = self._loop
                if ready and self._pump is None and loop is not None and not loop.is_closed():
                    self._pump = loop.call_soon(self._run_pump, loop, context=Context())
            raise
        finally:
            with self._lock:
                self._running = False

    def interrupt_escapes(self) -> bool:
        """Whether a ``KeyboardInterrupt`` or ``SystemExit`` that device work raised on the
        owner loop propagates (True: the caller re-raises it), or only fails its launch.

        It propagates, stopping the loop on the spot, unless an earlier one escaped this loop
        and every task the loop had then is done or being cancelled: the loop is shutting down
        because of that first interrupt (``asyncio.run`` and ``anyio.run`` cancel what is left
        and run it to its end before they re-raise it). Raised again there, a second one (the
        next graph's host function raising the same) stopped that shutdown too: the loop closed
        with the cancelled tasks' ``finally`` blocks never run, so every graph, executable and
        stream they would have destroyed stayed alive, and work left queued stayed in flight.
        The first interrupt is on its way to the caller already; the later one fails its launch
        (its ``LaunchFailure`` has it as its cause). A loop that runs on after an interrupt,
        its tasks not cancelled, still gets every later one.

        Called only when an interrupt escaped user code (never on the replay path); on the
        owner loop's thread.
        """
        loop = self._loop
        interrupted = self._interrupted
        if (
            interrupted is not None
            and interrupted[0] is loop
            and all(task.done() or task.cancelling() for task in interrupted[1])
        ):
            return False
        if loop is not None:
            self._interrupted = (loop, weakref.WeakSet(asyncio.all_tasks(loop)))
        return True

    def became_idle(self) -> None:
        """The last packet in flight finished (queues count ``in_flight`` down themselves)."""
        self._idle.unpark_all()

    async def wait_idle(self) -> None:
        """Park until nothing is in flight (at once if nothing is).

        Raises:
            IllegalState: the engine is busy on another event loop, or the caller is this
                engine's own device work (it would wait for itself).
        """
        if self._in_flight:
            self.bind_loop()
            if self._in_flight:
                await park_refusable(self._until_idle, self._refuse_idle_wait)

    async def _until_idle(self) -> None:
        while self._in_flight:
            await self._idle.park()

    def _refuse_idle_wait(self, work: HardwareQueue) -> None:
        """Refuse a wait for idle by this engine's own device work, which it never is while
        that work runs."""
        if work._engine is self and self._in_flight:
            raise IllegalState(
                f"device {self._device.ordinal}: device work (an async kernel body or host "
                "function) waited for its own device to be idle, which it never is while "
                "that work runs"
            )

    async def _wait_signal(self, signal: Signal, gone: Callable[[], bool] | None = None) -> None:
        """How a host waits for device work: return at once if it is done, else park.

        Parking yields to the event loop, which runs the device's work (and every other task);
        the host never runs device work itself. Afterwards the host's clock has seen the moment
        the signal was reached. With ``gone``, the wait also ends once ``gone()`` is True and
        ``signal.wake_gone()`` is called, the signal perhaps not reached (the caller checks).

        Raises:
            IllegalState: the engine is busy on another event loop, or the caller is this
                engine's device work and the signal is reached only after that work ends
                (work queued behind it on its hardware queue, or waiting for such work).
        """
        if signal._value > 0:
            self.claim()  # park only on the loop that runs the work (or raise)
            await park_refusable(
                functools.partial(signal.wait, 0, gone),
                functools.partial(self._refuse_signal_wait, signal=signal),
            )
            if signal._value > 0:  # ended by ``gone``: the host saw nothing of the device
                return
        self._clock.observe(signal._time)

    def _refuse_signal_wait(self, work: HardwareQueue, signal: Signal) -> None:
        """Refuse a wait by this engine's device work ``work`` for ``signal`` when it is
        reached only after that work ends."""
        if work._engine is self and waits_for_head(work, (signal,)):
            raise IllegalState(
                f"device {self._device.ordinal}: device work (an async kernel body or host "
                f"function) waited for work queued behind it on hardware queue "
                f"{work._index}, which runs only after that work ends"
            )

    def next_queue(self) -> HardwareQueue:
        """Round-robin queue assignment for new streams."""
        with self._lock:
            queue = self._queues[self._next_queue % len(self._queues)]
            self._next_queue += 1
        return queue

    # -- the asyncio seam -------------------------------------------------------------------------

    @staticmethod
    def current_loop() -> asyncio.AbstractEventLoop | None:
        """The caller's running loop, or None (never raises)."""
        return current_loop()

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """Call ``callback(*args)`` on the owner loop's next turn (device work only)."""
        loop = self._loop
        assert loop is not None
        loop.call_soon(callback, *args)

    def start(
        self, awaitable: Awaitable[Any] | InContext, queue: HardwareQueue
    ) -> asyncio.Future[Any]:
        """Run an async kernel or host body on the owner loop; its future tells when it ends.

        ``queue`` is the hardware queue whose head packet runs the body (it waits for it). A
        host function's result comes with the context it runs in (``InContext``): the task
        is made inside that context, so it starts with a copy of it.
        """
        if isinstance(awaitable, InContext):
            context, ended, awaitable = awaitable.context, awaitable.ended, awaitable.awaitable
        else:
            context, ended = copy_context(), None
        return context.run(self._start_in_context, awaitable, queue, ended)

    def _start_in_context(
        self,
        awaitable: Awaitable[Any],
        queue: HardwareQueue,
        ended: Callable[[], None] | None = None,
    ) -> asyncio.Future[Any]:
        """Start ``awaitable`` as a task of the current context, marked as the work of
        ``queue``'s head packet (see :meth:`wait_idle` and :meth:`_wait_signal`); ``ended``
        is called when it ends (a host function's call is then over)."""
        cell: list[HardwareQueue | None] = [queue]
        _DEVICE_WORK.set(cell)
        if isinstance(awaitable, asyncio.Task):  # a task made elsewhere, now this work
            cells = _HANDED.get(awaitable)
            if cells is None:
                _HANDED[awaitable] = [cell]
            else:  # another host function's too: the cells of ended work go
                cells[:] = [*(c for c in cells if c[0] is not None), cell]
            _wake_handed(awaitable, self._loop)  # a wait it is parked in re-checks
        # Awaited by a coroutine of ours: a future or an object with __await__ that cannot be
        # a task here (a future of another loop) then fails its op, instead of raising out of
        # the queue's run and leaving the queue parked for good; and a cancelled body is judged
        # as its cancellation reaches it (see _awaiting).
        started: list[bool] = []
        body = _awaiting(awaitable, started, self)
        future: asyncio.Future[Any] = asyncio.ensure_future(body, loop=self._loop)
        # The loop may close before it ever runs the task: a pump turn in the last turns of
        # ``asyncio.run`` (after it cancelled what was left) starts the next body. The work is
        # then abandoned like all its loop left behind (the next loop fails it), so asyncio's
        # "Task was destroyed but it is pending!" about a task of the runtime's own would be
        # noise, as would the "never awaited" warnings for the body and the user's coroutine:
        # the guard closes both when the task goes without having run.
        # Once the body runs, the guard goes (``_awaiting``), and with it its hold on the body.
        future._log_destroy_pending = False  # type: ignore[attr-defined]
        _UNSTARTED[id(started)] = weakref.ref(
            future, functools.partial(_never_ran, body, awaitable, started)
        )

        def done(task: asyncio.Future[Any]) -> None:
            _UNSTARTED.pop(id(started), None)
            cell[0] = None
            if ended is not None:
                ended()
            if not started:  # cancelled before its first step: the body never ran
                if asyncio.iscoroutine(awaitable):
                    awaitable.close()  # made, never awaited: it must not warn of it
                if all(t.done() or t.cancelling() for t in asyncio.all_tasks(task.get_loop())):
                    CUT_SHORT_BY_LOOP.add(task)

        future.add_done_callback(done)
        return future

    def report_exception(self, context: dict[str, Any]) -> bool:
        """Give an error of device-run user code to the owner loop's exception handler.

        Returns False when no open loop owns the engine (the caller reports it otherwise).
        """
        loop = self._loop
        if loop is None or loop.is_closed():
            return False
        loop.call_exception_handler(context)
        return True

    def __repr__(self) -> str:
        return (
            f"<Engine device={self._device.ordinal} in_flight={self._in_flight} "
            f"queues={len(self._queues)} ready={len(self._ready)}>"
        )


# Guards of body tasks that have not run yet (see Engine._start_in_context), by the id of the
# body's ``started`` list: a weak reference whose callback closes a body that never ran. Held
# here, so the guard outlives its task; dropped as the body starts (see ``_awaiting``), so a
# running body is never held by it (a body task collected while pending is reported again).
_UNSTARTED: dict[int, weakref.ref[asyncio.Future[Any]]] = {}


def _never_ran(
    body: Coroutine[Any, Any, Any],
    awaitable: Awaitable[Any],
    started: list[bool],
    _guard: weakref.ref[asyncio.Future[Any]],
) -> None:
    """A body's task went away without finishing (its loop closed): if it never ran, close
    what it was to await, which was made and is now never awaited. Only a coroutine that never
    started is closed: that runs none of its code, wherever the collector calls this from.
    """
    _UNSTARTED.pop(id(started), None)
    if not started:
        body.close()
        if inspect.iscoroutine(awaitable) and (
            inspect.getcoroutinestate(awaitable) == inspect.CORO_CREATED
        ):
            awaitable.close()


CUT_SHORT_BY_LOOP: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()
"""The tasks of async bodies that their event loop cancelled as it shut down."""


class HeldInterrupt(Exception):
    """A ``KeyboardInterrupt`` or ``SystemExit`` an async body raised while its loop shut down
    for an earlier one (see :meth:`Engine.interrupt_escapes`): an ordinary error, so its task
    does not re-raise it out of the loop, and the program fails with the original."""

    def __init__(self, interrupt: BaseException) -> None:
        super().__init__(repr(interrupt))
        self.interrupt = interrupt


async def _awaiting(awaitable: Awaitable[Any], started: list[bool], engine: Engine) -> Any:
    """Await a body; note its task in :data:`CUT_SHORT_BY_LOOP` if its loop cut it short.

    A loop shutting down (``asyncio.run``, a test runner's teardown) cancels every task it has
    left in one sweep, before any of them runs again: when the cancellation reaches the body,
    every task of the loop is already being cancelled. It is judged then, not when the task's
    done callbacks run: by then user code may have cancelled another task (a task group whose
    child failed cancels its parent), and a body user code cancelled would pass for one the
    loop cut short.

    A ``KeyboardInterrupt`` or ``SystemExit`` raised while the loop shuts down for an earlier
    one is handed back as a :class:`HeldInterrupt`, which only fails the launch.
    """
    started.append(True)
    _UNSTARTED.pop(id(started), None)
    running: Any = asyncio.current_task()
    running._log_destroy_pending = True  # from here on, asyncio reports it destroyed pending
    del running  # the frame must not hold its own task
    try:
        return await awaitable
    except (KeyboardInterrupt, SystemExit) as interrupt:
        if engine.interrupt_escapes():
            raise  # asyncio re-raises it out of the loop
        raise HeldInterrupt(interrupt) from None
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            others = asyncio.all_tasks(task.get_loop())
            if all(other.done() or other.cancelling() for other in others):
                CUT_SHORT_BY_LOOP.add(task)
        raise
