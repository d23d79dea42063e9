"""Fakes that make awkward timings on purpose, and deterministic sequencing of tasks.

The simulated device runs on the event loop, so every race a test wants can be provoked on
purpose instead of hoped for:

* :class:`HeldKernel` — a kernel that, once its queue reaches it, holds the queue until the test
  calls :meth:`~HeldKernel.release`; ``started`` says when the queue is held.
* :class:`GatedHost` — an async host function whose k-th run waits until the test opens gate k.
* :class:`Interleave` — tasks take turns in a fixed order written in the test
  (``Interleave("a", "b", "a")``), so an interleaving is a line of the test, not luck.
* :func:`run_together` — callables on threads released at the same instant (thread races).
* :func:`loop_turns` — let the event loop run a few times, to show blocked work *stays* blocked.
  Whenever work must finish, await its completion instead: no sleeps, no wall-clock time.

Everything here is built on the public API and works under pytest-asyncio and under anyio's
pytest plugin with the asyncio backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from ..core.callables import makes_generator
from ..core.ints import as_int
from ..core.lifecycle import NoCopy
from ..device.engine import running_loop
from ..device.kernel import Kernel, Threads
from ..device.ops import user_repr

if TYPE_CHECKING:
    from ..runtime.completion import Completion
    from ..runtime.stream import Stream

__all__ = ["GatedHost", "HeldKernel", "Interleave", "loop_turns", "run_together"]


class _AnyLoopEvent(asyncio.Event):
    """An ``asyncio.Event`` whose :meth:`set` wakes waiters on any loop, from any thread.

    A fake's ``started`` is set by its run, on the loop that runs its device, and awaited by
    the test, maybe on another loop (thread). A plain ``asyncio.Event`` set there resolves
    the test's waiter from the wrong thread without waking its loop, which may sleep in its
    selector for ever: here each waiting loop waits on an event of its own, which is set on
    that loop's thread.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._waiting: dict[asyncio.AbstractEventLoop, asyncio.Event] = {}

    async def wait(self) -> Literal[True]:
        loop = running_loop()
        with self._lock:
            if self.is_set():
                return True
            mine = self._waiting.get(loop)
            if mine is None:
                mine = self._waiting[loop] = asyncio.Event()
        return await mine.wait()

    def set(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        with self._lock:
            asyncio.Event.set(self)  # nobody waits on this event itself: only its flag
            waiting, self._waiting = self._waiting, {}
        for loop, event in waiting.items():
            if loop is running:
                event.set()
            elif not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # closed meanwhile: nobody waits
                    loop.call_soon_threadsafe(event.set)


class HeldKernel(NoCopy):
    """A kernel whose body waits until the test calls :meth:`release`.

    Args:
        name: the kernel's name (shown in errors and traces).
        log: if given, ``"<name> start"`` and ``"<name> end"`` are appended as the body runs.
    """

    def __init__(self, name: str = "held", log: list[str] | None = None) -> None:
        _check_log(log)
        # A kernel given None or "" is named after its function ("body" here): the fake's
        # ``name`` said otherwise, and ``fail_kernels(name=held.name)`` with None faulted
        # every kernel.
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        if not name:
            raise ValueError("name must not be empty")
        self._name = name
        self._started = _AnyLoopEvent()
        self._runs = 0
        self._gate = _AnyLoopEvent()
        self._loops: list[asyncio.AbstractEventLoop] = []  # the loops its runs wait on
        self._lock = threading.Lock()  # devices of several threads may run it at once

        async def body(t: Threads) -> None:
            _note_loop(self._loops)
            with self._lock:
                self._runs += 1
            if log is not None:
                log.append(f"{name} start")
            self._started.set()
            await self._gate.wait()
            if log is not None:
                log.append(f"{name} end")

        self._kernel = Kernel(body, name=name)

    # What the fake is and how far it got is read-only: ``kernel`` set to another kernel made
    # ``launch`` enqueue that one, which never holds its queue and is not what ``release``
    # lets go, and ``runs`` set by a test no longer said how many runs had begun.

    @property
    def name(self) -> str:
        """The kernel's name (shown in errors and traces)."""
        return self._name

    @property
    def kernel(self) -> Kernel:
        """The held kernel itself, for graphs (``graph.add_kernel_node(held.kernel, 1, 1)``)."""
        return self._kernel

    @property
    def started(self) -> asyncio.Event:
        """Set once a run of the kernel holds its queue."""
        return self._started

    @property
    def runs(self) -> int:
        """How many runs of the kernel have begun."""
        return self._runs

    async def launch(self, stream: Stream) -> Completion:
        """Enqueue the kernel (it starts when its stream reaches it)."""
        return await stream.launch_kernel(self._kernel, 1, 1)

    def release(self) -> None:
        """Let every run of the kernel, present and future, finish. Safe from any thread."""
        _set_event(self._gate, self._loops)

    def __repr__(self) -> str:
        state = "released" if self._gate.is_set() else "held"
        return f"<HeldKernel {self._name!r} runs={self._runs} {state}>"


class GatedHost(NoCopy):
    """An async host function that, on its k-th run, waits until the test opens gate k.

    Args:
        name: shown in its log lines and repr.
        log: if given, ``"<name> start <k>"`` and ``"<name> end <k>"`` are appended as run k
            begins and ends.

    Raises:
        TypeError: ``name`` is not a str, or ``log`` is not a list or None.
    """

    def __init__(self, name: str = "gate", log: list[str] | None = None) -> None:
        _check_log(log)
        # ``GatedHost(log)`` took the list for the name, and the runs logged nothing.
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {name!r}")
        self._name = name
        self._log = log
        self._runs = 0
        self._gates: dict[int, asyncio.Event] = {}
        self._started: dict[int, asyncio.Event] = {}
        self._loops: list[asyncio.AbstractEventLoop] = []  # the loops its runs wait on
        # Gates of runs below this are open, made or not (``open_all`` makes none: a count of
        # 2**64 made gates, one by one, for ever). The lock makes a gate and reads this bound
        # in one step, so a run on another thread never makes a closed gate after it moved.
        self._open_below = 0
        self._lock = threading.Lock()

    @staticmethod
    def _event(table: dict[int, asyncio.Event], run: int) -> asyncio.Event:
        # A run is counted from 0: ``-1``, ``"0"`` or ``True`` named a gate no run ever waits
        # on, so the test waited forever instead of being told.
        run = as_int(run, "run")
        if run < 0:
            raise ValueError(f"run must be at least 0 (runs are counted from 0), got {run}")
        return table.setdefault(run, _AnyLoopEvent())

    def _gate(self, run: int) -> asyncio.Event:
        """Run ``run``'s gate (checked as :meth:`_event`), open if ``open_all`` covered it."""
        with self._lock:
            gate = self._event(self._gates, run)
            if run < self._open_below:
                gate.set()  # a gate made after open_all() covered it (set() wakes any loop)
            return gate

    async def __call__(self) -> None:
        _note_loop(self._loops)
        with self._lock:  # host nodes on devices of several threads run it at once
            run = self._runs
            self._runs += 1
        if self._log is not None:
            self._log.append(f"{self._name} start {run}")
        self._event(self._started, run).set()
        await self._gate(run).wait()
        if self._log is not None:
            self._log.append(f"{self._name} end {run}")

    # Read-only, as a HeldKernel's are: each run waits on the gate numbered by ``runs``, so
    # ``runs`` set back let the next run through a gate already opened, and set ahead made it
    # wait on one the test never opens.

    @property
    def name(self) -> str:
        """The name its log lines start with."""
        return self._name

    @property
    def log(self) -> list[str] | None:
        """The list its runs append ``"<name> start <run>"`` and ``"<name> end <run>"`` to."""
        return self._log

    @property
    def runs(self) -> int:
        """How many runs have begun."""
        return self._runs

    def open(self, run: int = 0) -> None:
        """Let run ``run`` (counted from 0) return. Safe from any thread.

        Raises:
            TypeError / ValueError: ``run`` is not an int of at least 0 (bools refused).
        """
        _set_event(self._gate(run), self._loops)

    def open_all(self, runs: int) -> None:
        """Open the gates of runs ``0 .. runs - 1``, in constant time and memory: a gate not
        made yet is made open when its run comes (``open_all(2**64)`` opens every run).

        Raises:
            TypeError / ValueError: ``runs`` is not an int of at least 0 (bools refused).
        """
        runs = as_int(runs, "runs")
        if runs < 0:
            raise ValueError(f"runs must be at least 0, got {runs}")
        with self._lock:
            self._open_below = max(self._open_below, runs)
            made = [gate for run, gate in self._gates.items() if run < runs]
        for gate in made:
            _set_event(gate, self._loops)

    def __repr__(self) -> str:
        with self._lock:  # a run on another thread may be making its gate
            below = self._open_below
            opened = sorted(r for r, gate in self._gates.items() if r >= below and gate.is_set())
        shown = [str(r) for r in range(below)] if below <= 8 else [f"0..{below - 1}"]
        shown += map(str, opened)
        return f"<GatedHost {self._name!r} runs={self._runs} open=[{', '.join(shown)}]>"

    async def started(self, run: int = 0) -> None:
        """Wait until run ``run`` has begun (its queue is then held).

        Raises:
            TypeError / ValueError: as :meth:`open`, before anything waits.
            RuntimeError: no asyncio loop runs here (under trio: says so).
        """
        event = self._event(self._started, run)
        running_loop()  # an asyncio.Event waited on under trio would only say "no running loop"
        await event.wait()


def _check_log(log: object) -> None:
    """A log that is not a list failed only when the fake ran, as that run's LaunchFailure."""
    if log is not None and not isinstance(log, list):
        raise TypeError(f"log must be a list or None, got {log!r}")


def _note_loop(loops: list[asyncio.AbstractEventLoop]) -> None:
    """Remember the running loop as one a fake's runs wait on (before they wait).

    Raises:
        RuntimeError: no asyncio loop runs here; under trio the error says ahipgraph runs on
            asyncio, not asyncio's bare "no running event loop".
    """
    loop = running_loop()
    if loop not in loops:
        loops.append(loop)


def _set_event(event: asyncio.Event, loops: list[asyncio.AbstractEventLoop]) -> None:
    """Set ``event`` so that its waiters wake, whichever thread the caller is on.

    An ``asyncio.Event`` set from another thread than its waiters' loop marks them done but
    does not wake that loop, which may sleep in its selector forever: a run waiting on
    another loop has the event set on that loop's own thread.
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    handed = False
    for loop in loops:
        if loop is not running and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # closed meanwhile: nobody waits there any more
                continue
            handed = True
    if not handed:  # no run waits elsewhere: set it here (a later run finds it set)
        event.set()


class Interleave(NoCopy):
    """Deterministic interleaving: named tasks take turns in the order given.

    A task calls ``await turns.turn(name)`` at each point where it may be interleaved. The call
    ends the task's current turn (if it holds one) and returns when the next entry of the order
    is ``name``. ``turns.done(name)`` ends a turn without asking for another. Once the order is
    used up, every ``turn`` returns at once.

    Example: ``Interleave("a", "b", "a")`` runs a's first step, then b's, then a's second.

    A turn belongs to the task that took it, so the order survives the ways a test goes wrong:

    * a task cancelled while it waits for its turn leaves the interleaving: its remaining
      entries are dropped from the order, so the others go on instead of waiting for a turn
      that nobody will take;
    * a task that finishes (returns, raises or is cancelled) while it holds a turn ends that
      turn, as ``done`` would: the next name goes on;
    * tasks on different event loops (one per thread) may share one ``Interleave``: a turn is
      handed over with the waiting loop's thread-safe call, never by touching its future from
      another thread.

    Raises:
        TypeError: (at construction) an entry of the order is not a str or an iterable of str;
            (from ``turn`` and ``done``) ``name`` is not a str.
        ValueError: (at construction) the order holds more than :attr:`MAX_TURNS` turns, as
            an endless iterable (``itertools.cycle``) would: it was read for ever, holding the
            interpreter. (From ``turn``) ``name`` has no turn left in the order, so it would
            wait forever; another task already waits under ``name``, or holds ``name``'s turn;
            the test is wrong, and says so instead of hanging.
    """

    MAX_TURNS = 1_000_000
    """The longest order taken: far more turns than a test writes out, and a bound that
    stops an endless iterable at once."""

    def __init__(self, *order: str | Iterable[str]) -> None:
        names: list[str] = []
        for item in order:
            if isinstance(item, str):
                names.append(item)
                continue
            try:
                entries = iter(item)
            except TypeError:
                raise TypeError(
                    f"Interleave takes names (str) and iterables of names, got {item!r}"
                ) from None
            names.extend(itertools.islice(entries, self.MAX_TURNS + 1 - len(names)))
            if len(names) > self.MAX_TURNS:
                break
        for name in names:
            if not isinstance(name, str):  # ``turn`` takes a str: this entry never comes
                raise TypeError(f"Interleave's names must be str, got {name!r}")
        if len(names) > self.MAX_TURNS:
            raise ValueError(
                f"Interleave takes at most {self.MAX_TURNS:,} turns (an endless iterable?)"
            )
        self._order = names
        self._position = 0
        # One lock over the order, the holder and the waiters: tasks of several loops (threads)
        # may take turns; every decision is made under it, the waiting is done outside it.
        self._lock = threading.Lock()
        self._holder: str | None = None
        self._holder_task: asyncio.Task[object] | None = None
        self._waiters: dict[str, asyncio.Future[None]] = {}
        self._watched: weakref.WeakSet[asyncio.Task[object]] = weakref.WeakSet()
        # ^ the tasks whose end releases their turn (each gets one done-callback)

    # Where the order stands changes only with the turns taken: ``position`` set back made
    # a task wait behind a turn already taken, for ever; ``order`` handed out as the list
    # the turns are read from let a test's change to it skip or repeat turns.

    @property
    def order(self) -> list[str]:
        """The names in the order their turns come (a copy: the turns go by the original).

        A task cancelled while it waits leaves it: its remaining entries are dropped."""
        with self._lock:
            return list(self._order)

    @property
    def position(self) -> int:
        """How many turns of :attr:`order` have been taken or ended."""
        return self._position

    async def turn(self, name: str) -> None:
        _check_turn_name(name)
        loop = running_loop()  # under trio: a clear error, not asyncio's bare one
        task = asyncio.current_task()
        with self._lock:
            if self._holder == name:
                if task is not self._holder_task:
                    raise ValueError(f"the turn of {name!r} is held by another task")
                self._advance_locked()
            elif task is not None and self._holder_task is task:
                # The task's turn under another name ends too: waiting with it held, the
                # task waited for a turn that comes only after its own, for ever.
                self._advance_locked()
        while True:
            with self._lock:
                if self._position >= len(self._order) or self._order[self._position] == name:
                    if self._position < len(self._order):
                        self._hold_locked(name, task)
                    return
                left = self._order[self._position :]
                if name not in left:
                    raise ValueError(f"{name!r} has no turn left in {left}")
                if name in self._waiters:
                    raise ValueError(f"another task already waits for {name!r}'s turn")
                future = loop.create_future()
                self._waiters[name] = future
            try:
                await future
            except BaseException:
                self._leave(name, future)
                raise

    def done(self, name: str) -> None:
        """``name`` ends its turn without asking for another.

        Raises:
            TypeError: ``name`` is not a str.
        """
        _check_turn_name(name)
        with self._lock:
            if self._holder == name:
                self._advance_locked()

    def _hold_locked(self, name: str, task: asyncio.Task[object] | None) -> None:
        self._holder = name
        self._holder_task = task
        if task is not None and task not in self._watched:
            self._watched.add(task)
            task.add_done_callback(self._task_finished)

    def _task_finished(self, task: asyncio.Task[object]) -> None:
        """A task that ends while holding a turn has ended that turn."""
        with self._lock:
            self._watched.discard(task)
            if self._holder_task is task:
                self._advance_locked()

    def _leave(self, name: str, future: asyncio.Future[None]) -> None:
        """A cancelled waiter gives up its remaining turns, and whoever is next is woken."""
        with self._lock:
            if self._waiters.get(name) is future:
                del self._waiters[name]
            done, rest = self._order[: self._position], self._order[self._position :]
            self._order = done + [entry for entry in rest if entry != name]
            if self._holder == name:
                self._holder = None
                self._holder_task = None
            if self._holder is None:
                self._wake_current_locked()

    def _advance_locked(self) -> None:
        self._position += 1
        self._holder = None
        self._holder_task = None
        self._wake_current_locked()

    def _wake_current_locked(self) -> None:
        if self._position < len(self._order):
            future = self._waiters.pop(self._order[self._position], None)
            if future is not None:
                _resolve_soon(future)
        else:
            for future in self._waiters.values():
                _resolve_soon(future)
            self._waiters.clear()

    def __repr__(self) -> str:
        return f"<Interleave at {self._position}/{len(self._order)} holder={self._holder!r}>"


def _check_turn_name(name: object) -> None:
    """Refuse a name that is not a str: no entry of an order has it. ``None`` also matched
    the holder of no turn, so ``done(None)`` skipped the next task's turn, and ``turn(None)``
    said the turn of None was held by another task."""
    if not isinstance(name, str):
        raise TypeError(f"an Interleave turn is named by a str, got {name!r}")


async def loop_turns(turns: int = 4) -> None:
    """Let the loop run ``turns`` times.

    Device work moves one hop per turn: a queue's run is a ``call_soon`` callback, an async
    kernel or host body is a task started by that run, and a finished packet wakes the queues
    waiting on it with another ``call_soon``. Four turns are more hops than any unblocked
    operation needs, so work still pending afterwards is blocked, not slow.

    Raises:
        TypeError: ``turns`` is not an int (``True`` would mean one turn by accident).
        ValueError: ``turns`` is negative: it would give no turn, and a test asserting that
            work is blocked would then pass for the wrong reason.
    """
    turns = as_int(turns, "turns")
    if turns < 0:
        raise ValueError(f"turns must be at least 0, got {turns}")
    running_loop()  # under trio a bare asyncio yield would fail with trio's puzzling message
    for _ in range(turns):
        await asyncio.sleep(0)  # one loop iteration: every ready callback and task step runs


def run_together(*targets: Callable[[], object]) -> list[BaseException]:
    """Run each target on its own thread, all released at once; return what they raised.

    The exceptions come in the order of the targets that raised them (not the order they
    were raised in, which changes from run to run), and each carries a note naming its
    target, ``raised by run_together's target 2 of 3: <function ...>``, shown in its
    traceback when the test raises it again.

    A target is called, not awaited: an ``async def`` function runs on its thread's own loop
    when the target says so, as ``lambda: asyncio.run(main())``. A target that returns a
    coroutine anyway ran nothing: its coroutine is closed and a ``TypeError`` saying so is
    among what is returned, so a test expecting ``[]`` does not pass on work never done.

    Raises:
        TypeError: a target is not callable (it would only have failed on its thread, where
            its ``TypeError`` looked like what the target raised), or is a coroutine or
            generator function, whose call only makes a coroutine or generator; checked before
            any thread starts.
        ValueError: no target at all.
    """
    if not targets:
        raise ValueError("run_together needs at least one target")
    for target in targets:
        if not callable(target):
            raise TypeError(f"run_together's targets must be callables, got {target!r}")
        if inspect.iscoroutinefunction(target) or makes_generator(target):
            raise TypeError(
                f"run_together calls its targets and does not iterate or await what they "
                f"return, so {target!r} would run nothing: pass lambda: asyncio.run(...)"
            )
    errors: list[tuple[int, BaseException]] = []  # (target's position, what it raised)
    start = threading.Barrier(len(targets))

    def body(index: int, target: Callable[[], object]) -> None:
        try:
            start.wait()
        except threading.BrokenBarrierError:
            return  # another target's thread could not start: none of them runs
        try:
            result = target()
        except BaseException as exc:
            errors.append((index, exc))
            return
        if inspect.iscoroutine(result):
            result.close()  # never run: closed, so it does not warn "never awaited" later
            errors.append(
                (
                    index,
                    TypeError(
                        f"run_together's target {user_repr(target)} returned a coroutine, never run"
                    ),
                )
            )

    threads = [threading.Thread(target=body, args=(k, t)) for k, t in enumerate(targets)]
    started: list[threading.Thread] = []
    try:
        for thread in threads:
            thread.start()
            started.append(thread)
    except BaseException:
        # The threads already started waited at the barrier for ever, and a process with
        # them left never exits: they are let go without running their targets.
        start.abort()
        for thread in started:
            thread.join()
        raise
    for thread in threads:
        thread.join()
    errors.sort(key=lambda raised: raised[0])
    for index, error in errors:
        error.add_note(
            f"raised by run_together's target {index + 1} of {len(targets)}: "
            f"{user_repr(targets[index])}"
        )
    return [error for _, error in errors]


def _resolve_soon(future: asyncio.Future[None]) -> None:
    """Wake ``future``'s waiter from any thread: directly on its own loop, else through it."""
    loop = future.get_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        _resolve(future)
        return
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to wake
        loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
