"""The stress harness: many tasks and threads creating, launching, updating and destroying graphs.

Design. :func:`stress` runs on fresh simulated devices under anyio (asyncio backend):

* a **task group** runs ``tasks`` async workers and ``threads`` thread workers (each an
  ``anyio.to_thread.run_sync`` call); a worker that finds a violation raises, and the task group
  cancels every other worker at once — structured concurrency is what turns "one worker saw a
  broken invariant" into "the run stops and says so";
* a **cancel scope** ends a timed run: when ``duration`` is up, workers are cancelled wherever
  they are (mid-launch, parked on a pool), which exercises cancellation safety too; a shielded
  scope then drains the device before the final checks, for at most :data:`DRAIN_TIMEOUT_S`
  (work that never finishes is a violation, not a run that never ends);
* a **watchdog** bounds a run by operations too: when no operation completes anywhere for
  :data:`STALL_TIMEOUT_S` (wall-clock: the simulated clock stands still while a host function
  waits), the run stops with a :class:`StressViolation` naming the workers still in a cycle.
  Synchronous user code on the loop (a task worker's builder, the progress callback) keeps the
  watchdog from running: once it returns after that long, the violation names it instead;
* thread workers build, instantiate, update and destroy from their own threads and reach the
  loop through ``_Run.in_loop`` to launch, so destroys race launches for real. They
  cannot be cancelled: whatever cancels the workers (a failure, the deadline, Ctrl-C) sets
  the run's stop flag, and they stop at their next cycle. Only a stall cancels their loop
  calls, and abandons a thread stuck in a builder; the run waits (bounded) for every thread
  worker before it returns, even when its loop stopped on the spot.

Every cycle builds a graph with a *builder*, instantiates it, replays it, updates it with a
fresh build while launches are in flight, destroys it (sometimes with launches still in
flight), and checks the invariants of ``docs/design.md`` as it goes:

1. replays after warm-up add no signal set and no argument chunk;
3. no launch observes arguments written after it was enqueued (the default builder's graphs add
   known values, so the final memory says which arguments each launch saw);
4. a destroyed executable refuses to launch with ``InvalidValue``;
5. graph results equal the same work run eagerly on a stream;
8. injected kernel failures, hangs and allocation failures give their ``HipError`` and the
   runtime keeps working.

At the end (2) everything is back at baseline and every user-object destructor ran exactly
once, (6) the same graph traced twice gives the same timeline, and (7) a failed instantiate
changes nothing. A violation raises :class:`StressViolation` with the seed and a minimal report.

The seed fixes every random choice; with ``threads=0`` and ``ops`` given, a run is also the
same interleaving every time. With threads the OS decides the interleaving — that is the point.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import itertools
import math
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import numpy as np

from ..core.errors import (
    GraphExecUpdateFailure,
    HipError,
    InvalidValue,
    LaunchFailure,
    OutOfMemory,
)
from ..core.ints import as_int, as_optional_int, is_bool
from ..device.kernel import Kernel, Threads, kernel
from ..device.kernel_args import Ptr, int32
from ..device.pointer import DevicePtr
from ..exec.graph_exec import GraphExec
from ..graph.graph import Graph
from ..graph.node import GraphNode
from ..lifetime.user_object import UserObject
from ..runtime.completion import Completion
from ..runtime.device import Device, get_device
from ..runtime.stream import Stream
from ..tools.trace import tracing
from .faults import fail_allocations, fail_kernels, hang_kernels
from .leaks import fresh_devices, leak_report, snapshot

__all__ = [
    "CELLS",
    "MAX_TASKS",
    "MAX_THREADS",
    "STALL_TIMEOUT_S",
    "Builder",
    "StressReport",
    "StressViolation",
    "random_graph",
    "stress",
]

CELLS = 8
"""How many int32 cells the buffer a :data:`Builder` is given holds (on device 0)."""
DEFAULT_OPS, DEFAULT_TASKS, DEFAULT_THREADS = 2_000, 8, 2
"""What :func:`stress` and the ``ahipgraph stress`` command run when not told otherwise."""

MAX_TASKS = 10_000
"""At most this many async workers: each holds a stream and a buffer, and a mistyped count (an
extra digit or ten) otherwise spent minutes, or for ever, starting workers before the first op."""
MAX_THREADS = 256
"""At most this many thread workers (anyio runs 40 at once by default; the rest wait a turn)."""
DRAIN_TIMEOUT_S = 30.0
"""How long (wall-clock seconds) the device may take to finish its work once the workers have
stopped; past that the run ends with a :class:`StressViolation` rather than waiting for ever."""
STALL_TIMEOUT_S = 60.0
"""How long (wall-clock seconds) a run may go without any operation completing; past that it
stops with a :class:`StressViolation` naming the stall. A run bounded by ``ops`` alone, whose
builder's graph never finishes (a host function waiting for an event nobody sets), otherwise
waited for ever. Real monotonic time, not the simulated clock, which stands still while a host
function waits. A healthy run completes operations many times a second, so it never fires.
Read at each check: a test may monkeypatch it."""

_LOOP_POLL_S = 0.05
"""How often a thread worker waiting for a loop call checks that the loop is still there."""

_T = TypeVar("_T")

Builder = Callable[[random.Random, DevicePtr], Graph]
"""``builder(rng, buffer) -> Graph``: a graph whose work touches only ``buffer``
(``CELLS`` int32 cells on device 0). Two calls with equally seeded ``rng`` must give graphs of
the same shape (the harness updates executables with them). Each call makes a new graph, which
the harness destroys: one returned again is refused with ``ValueError``."""


@kernel
def _add(t: Threads, cell: int32, value: int32, x: Ptr[int32]) -> None:
    x[cell] += value


class StressViolation(AssertionError):
    """An invariant was broken. ``str()`` has the seed and a minimal report."""

    def __init__(
        self, seed: int, worker: str, invariant: str, detail: str, reproduce: str | None = None
    ) -> None:
        """``reproduce`` is the command (or call) that runs the same run again; by default the
        command's own defaults with ``seed``."""
        self.seed, self.worker, self.invariant, self.detail = seed, worker, invariant, detail
        self.reproduce = reproduce if reproduce is not None else f"ahipgraph stress --seed {seed}"
        super().__init__(
            f"invariant broken: {invariant}\n  seed: {seed}\n  worker: {worker}\n  {detail}\n"
            f"  reproduce: {self.reproduce}"
        )

    def __reduce__(self) -> tuple[type[StressViolation], tuple[int, str, str, str, str]]:
        # An exception is copied and pickled by calling its class with ``args``, here the
        # message alone, which this constructor refuses: a violation raised in a worker process
        # or copied by a test tool must come back as itself.
        return (type(self), (self.seed, self.worker, self.invariant, self.detail, self.reproduce))


def _reproduce(
    seed: int,
    default_builders: bool,
    ops: int | None,
    duration: float | None,
    tasks: int,
    threads: int,
    faults: bool,
) -> str:
    """What runs a run of these arguments again: the ``ahipgraph stress`` command, with every
    option that differs from its defaults (the seed alone would run 8 tasks, 2 threads and
    faults, whatever the failing run had), or the call, for what the command cannot run
    (builders of the caller's own, or both limits at once)."""
    duration = None if duration is None else float(duration)  # numpy's float as Python's
    if not default_builders or (ops is not None and duration is not None):
        arguments = [] if default_builders else ["the same builders"]
        arguments.append(f"seed={seed}")
        limits = (("ops", ops), ("duration", duration))
        arguments += [f"{name}={value!r}" for name, value in limits if value is not None]
        arguments += [f"tasks={tasks}", f"threads={threads}", f"faults={faults}"]
        return f"stress({', '.join(arguments)})"
    options = [f"--seed {seed}"]
    if duration is not None:
        options.append(f"--duration {duration!r}")
    elif ops is not None and ops != DEFAULT_OPS:
        options.append(f"--ops {ops}")
    if tasks != DEFAULT_TASKS:
        options.append(f"--tasks {tasks}")
    if threads != DEFAULT_THREADS:
        options.append(f"--threads {threads}")
    if not faults:
        options.append("--no-faults")
    return "ahipgraph stress " + " ".join(options)


@dataclass(slots=True)
class StressReport:
    """What a run did: operations performed and invariant checks passed."""

    seed: int
    ops: int = 0
    checks: int = 0
    cycles: int = 0
    launches: int = 0
    faults: int = 0
    elapsed_s: float = 0.0
    by_worker: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        return (
            f"seed {self.seed}: {self.ops} operations, {self.checks} invariant checks, "
            f"{self.cycles} graph lifecycles, {self.launches} launches, {self.faults} injected "
            f"faults in {self.elapsed_s:.1f}s"
        )


def random_graph(rng: random.Random, buffer: DevicePtr) -> Graph:
    """The default builder: a random DAG of kernels that each add a value to a cell.

    Additions commute, so the result of a launch is known whatever order the planner picks:
    ``expected(graph)`` of the executable's current parameters.

    Raises:
        TypeError: ``rng`` is not a ``random.Random`` (checked before a graph is made).
    """
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {rng!r}")
    graph = Graph()
    nodes: list[GraphNode] = []
    for _ in range(rng.randint(1, 12)):
        deps = rng.sample(nodes, k=min(len(nodes), rng.randint(0, 2)))
        cell, value = rng.randrange(CELLS), rng.randint(1, 9)
        nodes.append(graph.add_kernel_node(_add, 1, 1, (cell, value, buffer), deps=deps))
    return graph


def _expected(graph: Graph) -> np.ndarray[Any, np.dtype[np.int64]]:
    """What one launch of ``graph`` adds to each cell (default builder only)."""
    total = np.zeros(CELLS, dtype=np.int64)
    for node in graph.nodes():
        cell, value, _ = node.params.args
        total[cell] += value
    return total


class _Run:
    """Shared state of one stress run."""

    def __init__(
        self,
        seed: int,
        builders: Sequence[Builder],
        ops: int | None,
        deadline: float | None,
        faults: bool,
    ) -> None:
        self.seed = seed
        self.builders = builders
        self.default = list(builders) == [random_graph]
        self.max_ops = ops
        self.deadline = deadline
        self.faults = faults
        self.report = StressReport(seed)
        self.reproduce = f"ahipgraph stress --seed {seed}"  # what runs this run again
        self.stop = threading.Event()
        # Why it stopped: the operation budget spent, or anything else (a violation, the
        # deadline, the run cancelled), which ends every worker at once (see keep_going).
        self.budget_spent = False
        self.halted = False
        self.lock = threading.Lock()
        self.destructed: dict[int, int] = {}
        # Every graph a builder returned (see _Cycle.build): one returned again is refused.
        self.built: weakref.WeakSet[Graph] = weakref.WeakSet()
        self.owners = itertools.count()
        self.to_free: list[_Cycle] = []  # freed once the device has drained
        # Workers not yet returned, and the cancel scopes of what waits for thread workers
        # (their loop calls, see _Run.in_loop; their tasks, see _in_thread): what the
        # watchdog names, and cancels, on a stall.
        self.active: set[str] = set()
        self.loop_calls: set[anyio.CancelScope] = set()
        self.stalled = False
        # User code ran on the loop past the stall bound (see _check_blocking): its violation
        # names it, the watchdog's would only name every worker.
        self.blocked = False
        self.loop: asyncio.AbstractEventLoop | None = None  # the run's, once it runs
        # Thread workers whose function is running, and the condition their end notifies.
        self.threads_running = 0
        self.threads_ended = threading.Condition(self.lock)

    @property
    def device(self) -> Device:
        return get_device(0)

    def count(self, worker: str, ops: int = 1, checks: int = 0) -> None:
        with self.lock:
            report = self.report
            report.ops += ops
            report.checks += checks
            report.by_worker[worker] = report.by_worker.get(worker, 0) + ops
            if self.max_ops is not None and report.ops >= self.max_ops:
                self.budget_spent = True
                self.stop.set()
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self.halted = True
                self.stop.set()

    def keep_going(self, started: bool) -> bool:
        """Whether a worker starts another cycle: none once the run stopped, except that a
        worker that has run no cycle yet runs one when only the operation budget stopped the
        run. A thread can start after the tasks spent a small budget; every worker asked for
        then still takes part."""
        if not self.stop.is_set():
            return True
        return not started and self.budget_spent and not self.halted

    def halt(self) -> None:
        """Stop the run for good: no worker starts another cycle (see keep_going)."""
        self.halted = True
        self.stop.set()

    def in_loop(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``call()`` on the run's loop from a thread worker, in a scope a stall cancels.

        A thread worker's loop calls run shielded (its task waits for the thread, shielded),
        so nothing else can cancel one that waits for work that never finishes.

        Not ``anyio.from_thread.run``: it waits for the call without a bound, and a loop that
        stopped on the spot (a ``KeyboardInterrupt`` from a host function) closed with the call
        scheduled and never run, so the thread waited for ever. This wait gives up once the
        loop is closed; a call that is done returns at once, whatever the poll interval.

        Raises:
            _Stalled: the watchdog cancelled the call, or the loop closed before it ended.
            Whatever ``call()`` raised.
        """

        if self.stalled:  # an abandoned thread worker (see _in_thread): the loop may be gone
            raise _Stalled()

        async def guarded() -> _T:
            with anyio.CancelScope() as scope:
                self.loop_calls.add(scope)
                try:
                    if self.stalled:
                        scope.cancel()
                    return await call()
                finally:
                    self.loop_calls.discard(scope)
            raise _Stalled()  # only a cancelled scope gets here

        loop = self.loop
        assert loop is not None
        coroutine = guarded()
        try:
            future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        except RuntimeError as error:  # the loop closed already
            coroutine.close()  # never started: no "never awaited" warning
            raise _Stalled() from error
        while True:
            try:
                return future.result(timeout=_LOOP_POLL_S)
            except concurrent.futures.TimeoutError:
                if loop.is_closed():
                    future.cancel()
                    if inspect.getcoroutinestate(coroutine) == inspect.CORO_CREATED:
                        coroutine.close()  # the loop closed before it ran
                    raise _Stalled() from None

    def join_threads(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until no thread worker's function is running.

        The loop can end while thread workers still run: a ``KeyboardInterrupt`` or
        ``SystemExit`` from device work (a host function) stops it on the spot, without the
        task group waiting for the threads. A worker then stopped later, destroying its stream
        after :func:`stress` had returned (a leak report taken then named it) and using the
        run's device after the devices table was given back. Returns whether they all ended.
        """
        self.halt()
        with self.threads_ended:
            return self.threads_ended.wait_for(lambda: not self.threads_running, timeout)

    def stall(self) -> None:
        """The watchdog saw no operation complete: stop everything the run is waiting for."""
        self.stalled = True
        self.halt()
        for scope in list(self.loop_calls):
            scope.cancel()

    def check(self, ok: bool, worker: str, invariant: str, detail: str) -> None:
        if not ok:
            self.halt()
            raise StressViolation(self.seed, worker, invariant, detail, self.reproduce)
        with self.lock:
            self.report.checks += 1

    def owner(self) -> UserObject:
        key = next(self.owners)
        with self.lock:
            self.destructed[key] = 0

        def destroyed(k: int) -> None:
            with self.lock:
                self.destructed[k] += 1

        return UserObject(destroyed, data=key)


class _Cycle:
    """One graph lifecycle on one worker's stream and buffer."""

    def __init__(
        self, run: _Run, name: str, rng: random.Random, stream: Stream, on_loop: bool
    ) -> None:
        self.run, self.name, self.rng, self.stream = run, name, rng, stream
        self.on_loop = on_loop  # a task worker's: its builder runs on the event loop
        self.buffer = stream.device.malloc(4 * CELLS)
        self.expected = np.zeros(CELLS, dtype=np.int64)
        self.poison = Kernel(_add.body, name=f"stress-{name}")

    def close(self) -> None:
        self.stream.device.free(self.buffer)

    def build(self, shape_seed: int) -> Graph:
        builder = self.run.builders[shape_seed % len(self.run.builders)]
        started = time.monotonic()
        with _carried_interrupts():
            built: object = builder(random.Random(shape_seed), self.buffer)  # user code
        if self.on_loop and time.monotonic() - started >= STALL_TIMEOUT_S:
            if isinstance(built, Graph) and not built.destroyed:
                built.destroy()
            name = getattr(builder, "__qualname__", repr(builder))
            _check_blocking(self.run, self.name, f"builder {name}", started)
        if self.run.stalled:  # a thread worker abandoned while the builder ran: it is over
            if isinstance(built, Graph) and not built.destroyed:
                built.destroy()
            raise _Stalled()
        if not isinstance(built, Graph):
            # Say which builder broke its contract, rather than an AttributeError from the
            # harness's own use of the graph.
            name = getattr(builder, "__qualname__", repr(builder))
            raise TypeError(f"stress builder {name} returned {built!r}, not an ahg.Graph")
        if built.destroyed:
            # The harness's InvalidValue was reported as the runtime failing ("8: the runtime
            # keeps working"), with a seed that pointed at the runtime, not the builder.
            name = getattr(builder, "__qualname__", repr(builder))
            raise ValueError(f"stress builder {name} returned a destroyed graph")
        with self.run.lock:
            again = built in self.run.built
            self.run.built.add(built)
        if again:
            # A graph another cycle still uses (a builder caching its graph): the other cycle
            # destroyed it under this one, reported as the runtime failing ("8: the runtime
            # keeps working", IllegalState), with a seed that pointed at the runtime.
            name = getattr(builder, "__qualname__", repr(builder))
            raise ValueError(
                f"stress builder {name} returned a graph it had returned before: each call "
                "must make a new graph (the harness destroys every graph it is given)"
            )
        graph = built
        owner = self.run.owner()
        try:
            graph.retain_user_object(owner)
        finally:
            owner.release()  # a failed retain must not leave the owner to the collector
        return graph

    def launched(self, graph_exec_graph: Graph | None) -> None:
        if self.run.default and graph_exec_graph is not None:
            self.expected += _expected(graph_exec_graph)
        self.run.count(self.name)
        with self.run.lock:
            self.run.report.launches += 1

    def verify(self, what: str) -> None:
        """Invariants 3 and 5: memory holds exactly what the launches enqueued must add."""
        if not self.run.default:
            return
        got = self.stream.device.view(self.buffer, np.int32, CELLS).astype(np.int64)
        self.run.check(
            bool((got == self.expected).all()),
            self.name,
            "3/5: results equal the arguments each launch was enqueued with",
            f"{what}: memory {got.tolist()} != expected {self.expected.tolist()}",
        )

    def steady(self, graph_exec: GraphExec, before: Any) -> None:
        after = graph_exec.statistics()
        self.run.check(
            (after.signal_pool.sets, after.arena.chunks)
            == (before.signal_pool.sets, before.arena.chunks),
            self.name,
            "1: replays after warm-up allocate nothing",
            f"signal sets {before.signal_pool.sets}->{after.signal_pool.sets}, "
            f"arena chunks {before.arena.chunks}->{after.arena.chunks}",
        )

    def stale(self, graph_exec: GraphExec) -> None:
        try:
            graph_exec.launch_nowait(self.stream)
        except InvalidValue:
            self.run.check(True, self.name, "", "")
        else:
            self.run.check(False, self.name, "4: destroyed handles refuse", "a launch succeeded")


async def _eager_check(cycle: _Cycle, graph: Graph) -> None:
    """Invariant 5: the same nodes run eagerly give the same increments."""
    if not cycle.run.default:
        return
    for node in graph.nodes():
        await cycle.stream.launch_kernel(_add, 1, 1, node.params.args)
        cycle.run.count(cycle.name)
    cycle.expected += _expected(graph)
    await cycle.stream.synchronize()
    cycle.verify("eager")


async def _async_cycle(cycle: _Cycle) -> None:
    run, rng = cycle.run, cycle.rng
    shape = rng.randrange(1 << 30)
    graph = cycle.build(shape)
    try:
        graph_exec = graph.instantiate()
    except BaseException:
        graph.destroy()
        raise
    run.count(cycle.name, 2)
    current = graph
    try:
        await (await graph_exec.launch(cycle.stream))  # warm-up
        cycle.launched(current)
        before = graph_exec.statistics()
        for step in range(rng.randint(2, 8)):
            if step == 2:  # update while earlier launches may be in flight
                fresh = cycle.build(shape)
                try:
                    graph_exec.update(fresh)
                except GraphExecUpdateFailure:
                    fresh.destroy()
                else:
                    replaced, current = current, fresh  # kept even if a destructor raises
                    if replaced is not graph:
                        replaced.destroy()
                run.count(cycle.name)
                before = graph_exec.statistics()  # an update may take argument space
            await graph_exec.launch(cycle.stream)
            cycle.launched(current)
            if rng.random() < 0.3:
                await anyio.lowlevel.checkpoint()  # let other workers interleave here
        await cycle.stream.synchronize()
        cycle.steady(graph_exec, before)
        cycle.verify("replays")
        await _eager_check(cycle, current)
    finally:
        _destroy_all(graph_exec, graph, None if current is graph else current)
    run.count(cycle.name, 2)
    cycle.stale(graph_exec)
    with run.lock:
        run.report.cycles += 1


async def _fault_cycle(cycle: _Cycle) -> None:
    """Invariant 8: injected faults give their HipError and the runtime keeps working."""
    run, rng, stream = cycle.run, cycle.rng, cycle.stream
    kind = rng.choice(("fail", "hang", "oom"))
    if kind == "oom":
        size = 4 * CELLS + 8 + len(cycle.name)  # a size only this worker asks for
        with fail_allocations(1, nbytes=size) as oom, contextlib.suppress(OutOfMemory):
            stream.device.malloc(size)
        run.check(oom.hits == 1, cycle.name, "8: an allocation fault gives OutOfMemory", "")
    else:
        args = (0, 1000, cycle.buffer)
        if kind == "fail":
            with fail_kernels(1, name=cycle.poison.name):
                done = await stream.launch_kernel(cycle.poison, 1, 1, args)
                failed = await _failed(done)
        else:
            with hang_kernels(1, name=cycle.poison.name) as hang:
                done = await stream.launch_kernel(cycle.poison, 1, 1, args)
                await hang.started.wait()
                hang.cancel()
                failed = await _failed(done)
        run.check(failed, cycle.name, "8: an injected fault gives LaunchFailure", kind)
        with contextlib.suppress(LaunchFailure):  # sticky for the stream until observed
            await stream.synchronize()
        await stream.launch_kernel(_add, 1, 1, (0, 1, cycle.buffer))
        cycle.expected[0] += 1
        await stream.synchronize()
        cycle.verify(f"after an injected {kind}")
    run.count(cycle.name, 2)
    with run.lock:
        run.report.faults += 1


async def _failed(done: Completion) -> bool:
    try:
        await done
    except LaunchFailure:
        return True
    return False


async def _task_worker(run: _Run, index: int) -> None:
    name = f"task-{index}"
    rng = random.Random(f"{run.seed}/{name}")
    stream = run.device.create_stream(non_blocking=index % 2 == 0)
    cycle = _Cycle(run, name, rng, stream, on_loop=True)
    started = False
    with run.lock:
        run.active.add(name)
    try:
        while run.keep_going(started):
            started = True
            if run.faults and rng.random() < 0.15:
                await _fault_cycle(cycle)
            else:
                await _async_cycle(cycle)
    except HipError as error:  # the runtime raised where it should not have
        run.check(False, name, "8: the runtime keeps working", repr(error))
    except (KeyboardInterrupt, SystemExit) as error:  # a user destructor's: see _destroy_all
        run.halt()
        raise _Interrupt(error) from error
    except BaseException:  # a builder's error, Ctrl-C, a cancellation: no worker starts again
        run.halt()
        raise
    finally:
        with run.lock:
            run.active.discard(name)
        stream.destroy()
        # Memory is freed once the device drained (see _drain); a dying launch may still use it.
        run.to_free.append(cycle)


def _destroy_all(*handles: Graph | GraphExec | None) -> None:
    """Destroy every handle given, even when one's destroy raises, then raise the first error.

    A destroy that releases a user object runs its destructor, user code that may raise
    anything; ``destroy()`` finishes first, then raises it. One after another in a
    ``finally``, the first destructor's ``KeyboardInterrupt`` skipped the destroys after it,
    and those graphs stayed alive after the run. The workers carry such an interrupt as
    :class:`_Interrupt`: raised in a task, it stopped the loop, and the next worker's raised
    the same during the shutdown, which then never ran the other workers' cleanup.
    """
    error: BaseException | None = None
    for handle in handles:
        if handle is None:
            continue
        try:
            handle.destroy()
        except BaseException as exc:  # user code's, re-raised below once all are destroyed
            if error is None:
                error = exc
    if error is not None:
        raise error


def _thread_worker(run: _Run, index: int) -> None:
    """Build, instantiate, update and destroy on this thread; launch through the loop."""
    with run.lock:
        run.threads_running += 1
    try:
        _thread_cycles(run, index)
    finally:
        with run.lock:
            run.threads_running -= 1
            run.threads_ended.notify_all()


def _thread_cycles(run: _Run, index: int) -> None:
    """The cycles of thread worker ``index`` (see :func:`_thread_worker`)."""
    name = f"thread-{index}"
    rng = random.Random(f"{run.seed}/{name}")

    async def create_stream() -> Stream:
        return run.device.create_stream()

    stream = run.in_loop(create_stream)
    cycle = _Cycle(run, name, rng, stream, on_loop=False)
    started = False
    with run.lock:
        run.active.add(name)
    try:
        while run.keep_going(started):
            started = True
            shape = rng.randrange(1 << 30)
            graph = cycle.build(shape)
            try:
                graph_exec = graph.instantiate()
            finally:
                graph.destroy()  # the executable keeps running without its graph
            launches = rng.randint(1, 6)

            async def launch_all(graph_exec: GraphExec = graph_exec, n: int = launches) -> None:
                for _ in range(n):
                    await graph_exec.launch(stream)

            # However the cycle ends (a builder raising, the run cancelled while the loop
            # launches), its executable is destroyed here rather than left to the collector.
            try:
                run.in_loop(launch_all)
                twin = cycle.build(shape)
                try:
                    if run.default:
                        cycle.expected += launches * _expected(twin)
                finally:
                    twin.destroy()
            finally:
                graph_exec.destroy()  # from this thread, with launches likely still in flight
            run.count(name, 3 + launches)
            with run.lock:
                run.report.launches += launches
                run.report.cycles += 1
            cycle.stale(graph_exec)
            run.in_loop(stream.synchronize)
            cycle.verify("thread replays")
    except HipError as error:
        run.check(False, name, "8: the runtime keeps working", repr(error))
    except (KeyboardInterrupt, SystemExit) as error:  # a user destructor's: see _destroy_all
        run.halt()
        raise _Interrupt(error) from error
    except BaseException:  # stopped here, not once the loop hears of it
        run.halt()
        raise
    finally:
        with run.lock:
            run.active.discard(name)
        stream.destroy()
        run.to_free.append(cycle)


async def _final_checks(run: _Run) -> None:
    """Invariants 6 and 7 on a quiet device, then 2."""
    device = run.device
    stream = device.create_stream()
    scratch = device.malloc(4 * CELLS)
    timelines = []
    for _ in range(2):
        graph = random_graph(random.Random(run.seed), scratch)
        graph_exec = graph.instantiate()
        with tracing() as trace:
            await (await graph_exec.launch(stream))
        timelines.append([(op.kind, op.name, op.duration_ns, op.queue) for op in trace.ops])
        graph_exec.destroy()
        graph.destroy()
    run.check(timelines[0] == timelines[1], "final", "6: same program, same timeline", "")
    graph = random_graph(random.Random(run.seed), scratch)
    before = snapshot()
    with fail_allocations(1, device=0), contextlib.suppress(HipError):
        graph.instantiate()
    run.check(snapshot() == before, "final", "7: a failed instantiate changes nothing", "")
    graph.destroy()
    device.free(scratch)
    stream.destroy()


def stress(
    builders: Sequence[Builder] = (random_graph,),
    *,
    seed: int = 0,
    ops: int | None = None,
    duration: float | None = None,
    tasks: int = DEFAULT_TASKS,
    threads: int = DEFAULT_THREADS,
    faults: bool = True,
    progress: Callable[[StressReport], None] | None = None,
) -> StressReport:
    """Run the stress harness; return what it did, or raise :class:`StressViolation`.

    Args:
        builders: graph builders (see :data:`Builder`); the default one also lets the harness
            check every result.
        seed: fixes every random choice.
        ops / duration: stop after this many operations / seconds (default: 2,000 ops).
            Every worker runs at least one cycle, however soon the others spend ``ops``.
        tasks / threads: async and thread workers.
        faults: inject kernel failures, hangs and allocation failures.
        progress: called about five times a second with the report so far.

    Runs on fresh simulated devices (the devices table is replaced, and replaced again at the
    end). Must be called outside a running event loop. A run in which no operation completes
    for :data:`STALL_TIMEOUT_S` stops with a :class:`StressViolation` (work that never
    finishes), however it is bounded.

    Raises:
        TypeError / ValueError: a count that is not an int (bools included), ``ops`` below 1,
            ``duration`` not a positive finite number, negative ``tasks`` or ``threads``, more
            than :data:`MAX_TASKS` tasks or :data:`MAX_THREADS` threads, or no worker at all;
            checked before anything runs.
        RuntimeError: called in a running event loop, or while another ``stress`` run is in
            progress (from another thread): checked before anything runs.
        Whatever a builder or ``progress`` raises, as itself, once the run is cleaned up
        (``KeyboardInterrupt``, ``SystemExit`` and ``CancelledError`` included).
    """
    seed, ops, tasks, threads = _check_limits(seed, ops, duration, tasks, threads)
    _check_callables(builders, faults, progress)
    faults = bool(faults)  # numpy's bool too (a switch: see core.ints.flag_or_none)
    if not _RUNNING.acquire(blocking=False):
        # Each run replaces the process-wide devices table: a second run (from another
        # thread) took the first one's devices away, and both reported a broken invariant
        # of the runtime, with a seed that reproduced nothing.
        raise RuntimeError(
            "another stress() run is in progress in this process; runs replace the "
            "process-wide devices table, so they cannot overlap"
        )
    try:
        return _stress(list(builders), seed, ops, duration, tasks, threads, faults, progress)
    finally:
        _RUNNING.release()


_RUNNING = threading.Lock()
"""Held while a :func:`stress` run is in progress (one at a time per process)."""


def _stress(
    builders: list[Builder],
    seed: int,
    ops: int | None,
    duration: float | None,
    tasks: int,
    threads: int,
    faults: bool,
    progress: Callable[[StressReport], None] | None,
) -> StressReport:
    """:func:`stress`, its arguments checked and the run's lock held."""
    if ops is None and duration is None:
        ops = DEFAULT_OPS
    deadline = None if duration is None else time.monotonic() + duration
    run = _Run(seed, builders, ops, deadline, faults)
    run.reproduce = _reproduce(seed, run.default, ops, duration, tasks, threads, faults)
    started = time.monotonic()
    with fresh_devices(1, check=False):
        baseline = snapshot()
        try:
            try:
                anyio.run(_main, run, tasks, threads, progress, backend="asyncio")
            finally:
                run.join_threads(DRAIN_TIMEOUT_S)
                if run.device.in_flight:
                    asyncio.run(_reclaim(run))
        except BaseExceptionGroup as group:
            violations, _ = group.split(StressViolation)
            if violations is None:
                leaves = _leaves(group)
                for leaf in leaves:  # Ctrl-C or an exit from user code: as itself, first
                    if isinstance(leaf, _Interrupt):
                        raise leaf.error from None
                if len(leaves) == 1:  # one error (a progress callback's, say) surfaces as itself
                    raise leaves[0] from None
                raise
            first: BaseException = violations
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        run.report.elapsed_s = time.monotonic() - started
        report = leak_report(baseline)
        run.check(report is None, "final", "2: everything back at baseline", report or "")
        unbalanced = {k: n for k, n in run.destructed.items() if n != 1}
        run.check(not unbalanced, "final", "2: every destructor ran exactly once", f"{unbalanced}")
    return run.report


def _check_limits(
    seed: int, ops: int | None, duration: float | None, tasks: int, threads: int
) -> tuple[int, int | None, int, int]:
    """Refuse limits that would run something other than what was asked (a negative count
    used to mean "none", a zero budget still ran a cycle, a NaN duration ran briefly).

    Returns the counts as plain ints (numpy ints are accepted), ``ops`` None when not given.
    """
    seed, ops = as_int(seed, "seed"), as_optional_int(ops, "ops")
    tasks, threads = as_int(tasks, "tasks"), as_int(threads, "threads")
    if ops is not None and ops < 1:
        raise ValueError(f"ops must be at least 1, got {ops}")
    if duration is not None:
        if isinstance(duration, bool) or not isinstance(duration, int | float):
            raise TypeError(f"duration must be a number of seconds, got {duration!r}")
        if not (0 < duration < math.inf):
            raise ValueError(f"duration must be a positive finite number of seconds: {duration}")
    if tasks < 0 or threads < 0:
        raise ValueError(f"tasks and threads must not be negative, got {tasks} and {threads}")
    if tasks > MAX_TASKS or threads > MAX_THREADS:
        raise ValueError(
            f"at most {MAX_TASKS} tasks and {MAX_THREADS} threads, got {tasks} and {threads}"
        )
    if tasks + threads == 0:
        raise ValueError("stress needs at least one task or thread")
    return seed, ops, tasks, threads


def _check_callables(builders: object, faults: object, progress: object) -> None:
    """An empty or non-callable builder list, a truthy non-bool ``faults`` ("no") and a
    non-callable ``progress`` used to fail inside a worker, or not at all."""
    if isinstance(builders, str | bytes | bytearray) or not isinstance(builders, Sequence):
        # Bytes are a sequence too, of ints: "a graph builder must be callable, got 120".
        raise TypeError(f"builders must be a sequence of graph builders, got {builders!r}")
    if not builders:
        raise ValueError("stress needs at least one graph builder")
    for builder in builders:
        if not callable(builder):
            raise TypeError(f"a graph builder must be callable, got {builder!r}")
    if not is_bool(faults):
        raise TypeError(f"faults must be a bool, got {faults!r}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None, got {progress!r}")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError("stress() runs its own event loop: call it outside a running one")


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for error in group.exceptions:
        leaves.extend(_leaves(error) if isinstance(error, BaseExceptionGroup) else [error])
    return leaves


async def _main(
    run: _Run, tasks: int, threads: int, progress: Callable[[StressReport], None] | None
) -> None:
    run.loop = asyncio.get_running_loop()
    try:
        async with anyio.create_task_group() as outer:
            if progress is not None:
                outer.start_soon(_progress, run, progress)
            # With an operation budget, workers finish the cycle they are in and return, so a
            # run without threads is the same every time; with a duration, the deadline
            # cancels them wherever they are. The deadline runs beside the workers, not among
            # them, so a budget spent first ends the run without waiting for the deadline.
            async with anyio.create_task_group() as workers:
                working = _Working(run, tasks + threads)
                workers.start_soon(working.stop_threads_when_cancelled)
                for index in range(tasks):
                    workers.start_soon(working.run, _task_worker, run, index)
                for index in range(threads):
                    workers.start_soon(working.run, _in_thread, run, index)
                if run.deadline is not None:
                    outer.start_soon(_deadline, run, workers.cancel_scope)
                outer.start_soon(_watchdog, run)
            outer.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _drain(run)
    await _final_checks(run)


class _Working:
    """Stops the thread workers whenever the workers' task group is cancelled.

    A thread worker cannot be cancelled (its task waits, shielded, for the thread), and the
    loop calls it makes run in that shielded scope too, so it stops only when it sees
    ``run.stop`` between cycles. Violations and the deadline set that flag; a worker failing
    otherwise, a progress callback raising or Ctrl-C (the run's task cancelled) did not, and
    the run went on with its threads until the deadline or the budget.
    """

    def __init__(self, run: _Run, workers: int) -> None:
        self.state = run
        self.stop = run.stop
        self.left = workers
        self.all_done = anyio.Event()

    async def run(self, work: Callable[..., Awaitable[object]], *args: object) -> None:
        try:
            await work(*args)
        finally:
            self.left -= 1
            if not self.left:
                self.all_done.set()

    async def stop_threads_when_cancelled(self) -> None:
        try:
            await self.all_done.wait()  # every worker returned: nothing to stop
        finally:
            self.state.halted = True
            self.stop.set()  # cancelled: thread workers stop at their next cycle


async def _deadline(run: _Run, scope: anyio.CancelScope) -> None:
    assert run.deadline is not None
    await anyio.sleep(max(0.0, run.deadline - time.monotonic()))
    run.halted = True
    run.stop.set()  # thread workers stop at their next cycle
    scope.cancel()  # task workers stop where they are


async def _in_thread(run: _Run, index: int) -> None:
    """Run thread worker ``index``, waiting for it however the workers are cancelled, but not
    after a stall.

    A thread cannot be cancelled, so a worker's task waits for it (shielded) and the thread
    stops at its next cycle. A thread stuck in user code (a builder that never returns) never
    gets there: after a stall the watchdog cancels this scope and the thread is abandoned,
    rather than the run waiting for it for ever. An abandoned thread that comes back does
    nothing more (see :meth:`_Run.in_loop` and :meth:`_Cycle.build`).
    """
    with anyio.CancelScope(shield=True) as scope:
        run.loop_calls.add(scope)
        try:
            if run.stalled:
                scope.cancel()
            await anyio.to_thread.run_sync(_thread_worker, run, index, abandon_on_cancel=True)
        finally:
            run.loop_calls.discard(scope)


async def _watchdog(run: _Run) -> None:
    """Stop the run when no operation completes for :data:`STALL_TIMEOUT_S` (wall-clock).

    Wakes a few times per bound (at most once a second): nothing a run would notice. The
    violation it raises cancels the task workers where they wait; thread workers' loop calls
    are cancelled by :meth:`_Run.stall`, and they stop there.

    Raises:
        StressViolation: the stall, with the workers still in a cycle and the ops done.
    """
    done, since = -1, time.monotonic()
    while True:
        bound = STALL_TIMEOUT_S
        await anyio.sleep(min(bound / 4, 1.0))
        now = time.monotonic()
        if run.blocked:  # the code that blocked the loop is named by its own violation
            return
        if run.report.ops != done:
            done, since = run.report.ops, now
            continue
        if now - since < bound:
            continue
        with run.lock:
            stuck = sorted(run.active, key=_worker_order)
            by_worker = dict(run.report.by_worker)
        run.stall()
        raise StressViolation(
            run.seed,
            ", ".join(stuck) or "none",
            "a stress run makes progress (stall)",
            f"no operation completed for {now - since:.1f}s (STALL_TIMEOUT_S={bound:g}); "
            f"workers stuck in a cycle: {', '.join(stuck) or 'none'}; "
            f"{done} operations done ({by_worker or 'none'}): a kernel or host function that "
            "never returns, or work that never completes",
            run.reproduce,
        )


def _worker_order(name: str) -> tuple[str, int]:
    kind, _, index = name.partition("-")
    return kind, int(index) if index.isdigit() else 0


class _Stalled(Exception):
    """A thread worker's loop call cancelled by the watchdog (see :meth:`_Run.in_loop`): the
    watchdog's :class:`StressViolation` says why, this only ends the worker."""


async def _progress(run: _Run, report: Callable[[StressReport], None]) -> None:
    """Call ``report`` with a copy of the report so far, about five times a second.

    A copy, taken under the run's lock: the callback was handed the live report, so one that
    changed it changed the run (``ops`` set back kept an ``ops``-bounded run going for good,
    ``by_worker`` replaced failed every worker's count), and thread workers added to
    ``by_worker`` while the callback iterated it.
    """
    while True:
        with run.lock:
            seen = replace(run.report, by_worker=dict(run.report.by_worker))
        started = time.monotonic()
        with _carried_interrupts():
            report(seen)  # user code
        if time.monotonic() - started >= STALL_TIMEOUT_S:
            name = getattr(report, "__qualname__", repr(report))
            _check_blocking(run, "progress", f"progress callback {name}", started)
        await anyio.sleep(0.2)


def _check_blocking(run: _Run, worker: str, what: str, started: float) -> None:
    """User code that runs on the event loop (a task worker's builder, the progress callback)
    ran at least :data:`STALL_TIMEOUT_S`: end the run with a violation that names it.

    While it runs nothing else does, the watchdog included, so the stall bound cannot fire:
    the run only went on, or ended with a stall report naming every worker, once it returned.
    (Code that never returns still holds the loop for good: nothing on the loop can stop it.)

    Raises:
        StressViolation: always.
    """
    seconds = time.monotonic() - started
    run.blocked = True  # the watchdog, which runs next, would report the same gap
    run.check(
        False,
        worker,
        "a stress run makes progress (stall)",
        f"the {what} ran {seconds:.1f}s on the event loop (STALL_TIMEOUT_S="
        f"{STALL_TIMEOUT_S:g}), blocking every task worker and the stall bound meanwhile: "
        "synchronous user code on the loop must return promptly (use thread workers for "
        "slow builders)",
    )


class _Interrupt(Exception):
    """A ``KeyboardInterrupt`` or ``SystemExit`` that user code (a builder, the progress
    callback) raised in a worker, carried through the task groups as an ordinary error.

    Raised in an asyncio task (or handed to one by a worker thread), those two stop the event
    loop on the spot: the drain never ran, handles were left to the collector, and asyncio
    logged the unfinished run. Carried, they end the run like any failure, and :func:`stress`
    raises the original once everything is cleaned up.

    A ``CancelledError`` is carried too: synchronous user code is never cancelled, so one it
    raises is its own error, but in a task (or handed to one by a worker thread) it read as
    that worker's cancellation: the worker ended quietly and the run reported success, with
    no cycle run.

    So is a ``StopIteration`` (a builder calling ``next()`` on an exhausted iterator): leaving
    a coroutine it becomes ``RuntimeError("coroutine raised StopIteration")`` (PEP 479), and
    handed over by a worker thread that ``RuntimeError`` came without it as its cause.
    """

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


@contextlib.contextmanager
def _carried_interrupts() -> Iterator[None]:
    try:
        yield
    except (KeyboardInterrupt, SystemExit, asyncio.CancelledError, StopIteration) as error:
        raise _Interrupt(error) from error


def _free_buffers(run: _Run) -> None:
    """Free the workers' buffers, once: the device no longer runs anything that uses them."""
    while run.to_free:
        run.to_free.pop().close()


async def _reclaim(run: _Run) -> None:
    """Take the device over from the run's closed loop and let its work complete.

    Work that never finishes (a stall, a drain that timed out) was cut short when the run's
    loop shut down, but the shutdown can start the next queued bodies under the closing loop,
    and that work stays in flight until another loop takes the device over. Left so, it held
    the executables (and their user objects, whose destructors never ran) on a device nobody
    would run again. A new loop fails it with ``IllegalState`` and completes it (see the
    engine's owner loop), so everything it borrowed is returned, and the buffers freed.
    Bounded by :data:`DRAIN_TIMEOUT_S` too.
    """
    with anyio.move_on_after(DRAIN_TIMEOUT_S):
        while True:
            try:
                await run.device.synchronize()
            except HipError:
                continue  # the abandoned work's failures, one per call
            _free_buffers(run)
            return


async def _drain(run: _Run) -> None:
    """Let every launch in flight finish, then free the workers' buffers.

    Bounded by :data:`DRAIN_TIMEOUT_S`: the drain is shielded (it runs however the workers
    stopped), so work that never finishes (a builder's kernel that never returns, a launch
    that never completes) kept a timed run, and one stopped by Ctrl-C, running for ever.

    After a stall the work that never finishes is still in flight: the drain gives up as
    bounded, and the watchdog's violation, which already says so, is the run's.

    Raises:
        StressViolation: the device still had work in flight when the time was up.
    """
    device = run.device
    with anyio.move_on_after(DRAIN_TIMEOUT_S):
        while True:
            try:
                await device.synchronize()
            except HipError:
                continue  # a stream's injected failure, reported once per call
            _free_buffers(run)
            return
    if run.stalled:
        return
    run.check(
        False,
        "drain",
        "the device finishes its work once the workers stop",
        f"{device.in_flight} packet(s) still in flight {DRAIN_TIMEOUT_S:g}s after the workers "
        "stopped: a kernel or host function that never returns, or work that never completes",
    )
