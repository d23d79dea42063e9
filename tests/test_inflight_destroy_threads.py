"""Handles destroyed while work that uses them is in flight, from many tasks, threads and loops.

DESIGN.md §3 *Destroy while in use* and §4: destroying a graph, an executable, a user object, a
stream, an event or device memory while a launch that uses it is queued or running, from any
task or OS thread, on asyncio or uvloop, never crashes, deadlocks, double-frees or runs a
destructor twice; the errors are HIP's; and once the work is done every pool, registry and
allocator is back at its baseline (``statistics()``, the testing kit's leak report).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import leak_report, snapshot
from cleanup import destroy
from fakes import GatedHost, loop_turns, run_together

LOOPS = pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


def diamond(out: ahg.DevicePtr, root: Callable[..., Any] | None = None) -> ahg.Graph:
    """host (or kernel) root -> two kernels on two strands -> a join: signals between strands."""
    graph = ahg.Graph()
    first = (
        graph.add_host_node(root)
        if root is not None
        else graph.add_kernel_node(add_one, 1, 1, (out,))
    )
    left = graph.add_kernel_node(add_one, 1, 1, (out,), deps=[first])
    right = graph.add_kernel_node(add_one, 1, 1, (out,), deps=[first])
    graph.add_empty_node(deps=[left, right])
    return graph


def value(device: ahg.Device, out: ahg.DevicePtr) -> int:
    return int(device.view(out, np.int64, 1)[0])


# -- many loops on many threads, one executable --------------------------------------------------


@LOOPS
def test_loops_on_threads_launching_one_executable_while_a_thread_destroys_it(
    use_uvloop: bool, fast_switching: None
) -> None:
    """Four threads, each running its own loop, launch one executable on their own streams; a
    fifth destroys the executable and its graph part way. A launch either runs, or is refused
    with HIP's code for what it met: the device busy on another loop (IllegalState) or the
    executable destroyed (InvalidValue). Nothing hangs, the destructor runs once, and every
    count is back at its baseline."""
    device = ahg.get_device(0)
    baseline = snapshot()
    ran: list[object] = []
    out = device.malloc(8)
    graph = diamond(out)
    graph.retain_user_object(ahg.UserObject(ran.append, "data"), move=True)
    graph_exec = graph.instantiate()
    outcomes: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    launched = threading.Event()

    async def launching() -> None:
        stream = device.create_stream()
        try:
            outcome = ""
            while outcome != "InvalidValue":  # until this loop meets the destroy
                try:
                    await (await graph_exec.launch(stream))
                    outcome = "ran"
                    launched.set()
                except (ahg.IllegalState, ahg.InvalidValue) as error:
                    outcome = type(error).__name__
                with lock:
                    outcomes[outcome] += 1
                await asyncio.sleep(0)  # one turn: let the other loops at the device
        finally:
            stream.destroy()

    def destroying() -> None:
        launched.wait(10)  # destroys anyway, so no loop waits for it forever
        graph_exec.destroy()
        graph.destroy()

    errors = run_together(*[lambda: ahg.run(launching, use_uvloop=use_uvloop)] * 4, destroying)
    assert errors == []
    assert set(outcomes) <= {"ran", "IllegalState", "InvalidValue"}
    assert outcomes["ran"] >= 1
    assert outcomes["InvalidValue"] == 4  # each loop's last launch, refused
    assert value(device, out) == 3 * outcomes["ran"]
    assert ran == ["data"]
    stats = graph_exec.statistics()
    assert (stats.state, stats.in_flight, stats.launches) == ("closed", 0, outcomes["ran"])
    device.free(out)
    assert leak_report(baseline) is None


# -- updates racing launches ---------------------------------------------------------------------


class Setter:
    """A thread giving an executable the values 1, 2, 3, ... through ``set_value``, as many as
    it is granted; ``finished`` is the last value whose setter returned."""

    def __init__(self, set_value: Callable[[int], object]) -> None:
        self.set_value = set_value
        self.finished = 0
        self.errors: list[BaseException] = []
        self.progressed = threading.Event()
        self._credits = threading.Semaphore(0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        value = 0
        while True:
            while not self._credits.acquire(timeout=0.05):
                if self._stop.is_set():
                    return
            value += 1
            try:
                self.set_value(value)
            except BaseException as error:  # reported on the test's thread
                self.errors.append(error)
                return
            self.finished = value
            self.progressed.set()

    async def grant(self, count: int) -> None:
        """Let it set ``count`` more values, and wait until it has set one: the loop, busy
        launching, could otherwise starve it."""
        self.progressed.clear()
        self._credits.release(count)
        assert await asyncio.to_thread(self.progressed.wait, 10)

    def __enter__(self) -> Setter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.asyncio
async def test_setters_on_a_thread_racing_launches_never_change_an_enqueued_launch(
    device: ahg.Device, fast_switching: None
) -> None:
    """Invariant 3 across threads: a thread sets the kernel's argument to 1, 2, 3, ... while
    the loop launches; each launch writes the value current when it was enqueued, never one
    set after its ``launch`` returned."""
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (0, out))
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    def set_value(value: int) -> None:
        graph_exec.set_kernel_node_params(node, put, 1, 1, (value, out))
        graph_exec.set_node_enabled(node, True)

    windows: list[tuple[int, int, int]] = []
    with Setter(set_value) as setter:
        while len(windows) < 150:
            if len(windows) % 10 == 0:
                await setter.grant(3)
            low = setter.finished
            await graph_exec.launch(stream)
            high = setter.finished + 1  # a setter may have committed and not yet said so
            await stream.synchronize()
            windows.append((low, value(device, out), high))
    assert setter.errors == []
    assert [w for w in windows if not w[0] <= w[1] <= w[2]] == []
    assert len({seen for _, seen, _ in windows}) > 1  # launches saw the setter's values
    stats = graph_exec.statistics()
    assert stats.in_flight == 0
    assert stats.arena.live_slots == 1  # superseded argument slots were all reclaimed
    destroy(graph_exec, graph, stream, out)


@ahg.kernel
def count_value(t: ahg.Threads, value: ahg.int64, counts: ahg.Ptr[ahg.int64]) -> None:
    counts[value] += 1


@pytest.mark.asyncio
async def test_setters_on_a_thread_racing_overlapping_launches_copy_on_write(
    device: ahg.Device, fast_switching: None
) -> None:
    """As above with launches in flight while the thread sets (copy-on-write, retired slots):
    each launch counts the value it was enqueued with, so every counted value lies in some
    launch's window, the counts add up, and every superseded slot is reclaimed."""
    values = 100  # more than the setter is granted
    counts = device.malloc(8 * (values + 1))
    graph = ahg.Graph()
    first = graph.add_kernel_node(count_value, 1, 1, (0, counts))
    second = graph.add_kernel_node(count_value, 1, 1, (0, counts), deps=[first])
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    def set_value(value: int) -> None:
        for node in (first, second):
            graph_exec.set_kernel_node_params(node, count_value, 1, 1, (value, counts))

    windows: list[tuple[int, int]] = []
    in_flight: list[ahg.Completion] = []
    with Setter(set_value) as setter:
        while len(windows) < 600:
            if len(windows) % 25 == 0:
                await setter.grant(3)
            low = setter.finished
            in_flight.append(await graph_exec.launch(stream))
            windows.append((low, setter.finished + 1))
            if len(in_flight) > 6:
                await in_flight.pop(0)
    # Once more with a launch surely in flight (device work runs only on a loop turn, and none
    # comes between the launch and the set), so the copy-on-write checked below happened
    # whatever the thread's timing was.
    await graph_exec.launch(stream)
    windows.append((setter.finished, setter.finished))
    set_value(setter.finished + 1)
    await stream.synchronize()
    assert setter.errors == []
    seen = device.view(counts, np.int64, values + 1)
    assert int(seen.sum()) == 2 * len(windows)
    allowed = {v for low, high in windows for v in range(low, high + 1)}
    assert set(np.nonzero(seen)[0].tolist()) <= allowed
    stats = graph_exec.statistics()
    assert stats.versions > 1  # launches were in flight while it changed
    assert (stats.in_flight, stats.arena.live_slots) == (0, 2)
    destroy(graph_exec, graph, stream, counts)


# -- everything dropped while in flight, then the loop closes ---------------------------------


@LOOPS
def test_everything_dropped_while_a_launch_is_held_then_the_loop_closes(use_uvloop: bool) -> None:
    """The program drops the executable, its graph, its stream and its user object (no
    destroy) while three launches are held by an async host node, and returns. Closing the
    loop cancels the held body: the first launch fails as abandoned. The loop's shutdown may
    start the next launches' bodies and close the loop under them: that work is left to the
    next loop, which fails it (IllegalState) and completes it, so the forgotten handles are
    then freed, the destructor runs once, and each handle warns."""
    device = ahg.get_device(0)
    baseline = snapshot()
    out = device.malloc(8)
    ran: list[object] = []
    handles: list[ahg.Completion] = []

    async def main() -> None:
        gates = GatedHost()
        graph = diamond(out, gates)
        graph.retain_user_object(ahg.UserObject(ran.append, "data"), move=True)
        graph_exec = graph.instantiate()
        stream = device.create_stream()
        for _ in range(3):
            handles.append(await graph_exec.launch(stream))
        await gates.started(0)
        del graph_exec, graph, stream  # dropped, in flight
        gc.collect()
        assert ran == []  # the launches hold the executable

    async def next_loop() -> None:
        # Taking the device over fails the abandoned work, which then completes; the stream's
        # failure (the first launch's) is reported by this synchronize.
        with contextlib.suppress(ahg.LaunchFailure):
            await device.synchronize()
        await device.synchronize()
        for handle in handles:
            with contextlib.suppress(ahg.LaunchFailure, ahg.IllegalState):
                await handle

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ahg.run(main, use_uvloop=use_uvloop)
        first = handles[0].exception()
        assert isinstance(first, ahg.LaunchFailure)
        assert "abandoned" in str(first)
        ahg.run(next_loop, use_uvloop=use_uvloop)
        assert all(handle.done() for handle in handles)
        assert all(isinstance(h.exception(), ahg.LaunchFailure | ahg.IllegalState) for h in handles)
        handles.clear()
        ahg.collect_forgotten()
    assert ran == ["data"]
    forgotten = [w for w in caught if issubclass(w.category, ahg.ForgottenHandleWarning)]
    assert {str(w.message).split(" #")[0] for w in forgotten} == {
        "unclosed graph exec",
        "unclosed graph",
        "unclosed stream",
    }
    assert device.statistics().in_flight == 0
    device.free(out)
    assert leak_report(baseline) is None


# -- cancellation at every await -----------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["completion", "pool", "synchronize", "device sync"])
async def test_a_task_cancelled_at_each_await_of_a_launch_leaves_nothing_behind(
    device: ahg.Device, where: str
) -> None:
    """The launching task is cancelled while it awaits its launch's completion, while its
    launch waits for a signal set, or during a stream or device synchronize; the launches
    already enqueued still run, and the pool and the counts come back."""
    gates = GatedHost()
    out = device.malloc(8)
    graph = diamond(out, gates)
    graph_exec = graph.instantiate(signal_sets=1)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    await gates.started(0)

    async def victim() -> None:
        if where == "completion":
            await first
        elif where == "pool":
            await graph_exec.launch(stream)  # parks: the only set is in use
        elif where == "synchronize":
            await stream.synchronize()
        else:
            await device.synchronize()

    task = asyncio.ensure_future(victim())
    await loop_turns()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gates.open(0)
    await first
    await stream.synchronize()
    assert value(device, out) == 2  # the first launch only: a cancelled parked one never ran
    pool = graph_exec.statistics().signal_pool
    assert (pool.in_use, pool.waiters, pool.free) == (0, 0, 1)
    destroy(graph_exec, graph, stream, out)


# -- device memory freed under a queued launch --------------------------------------------------


@pytest.mark.asyncio
async def test_memory_freed_from_a_thread_under_a_queued_launch_fails_that_launch_only(
    device: ahg.Device,
) -> None:
    """``free`` does not wait for work (documented); a launch queued behind a held one that
    reads memory freed from another thread fails with LaunchFailure caused by
    InvalidDevicePointer, reports it to its stream once, and gives everything back."""
    gates = GatedHost()
    out = device.malloc(8)
    keep = device.malloc(8)
    graph = ahg.Graph()
    first = graph.add_host_node(gates)
    graph.add_kernel_node(add_one, 1, 1, (out,), deps=[first])
    graph.add_kernel_node(add_one, 1, 1, (keep,), deps=[first])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    with ahg.race_check(on_race="collect") as check:  # the use-after-free is the subject
        held = await graph_exec.launch(stream)
        await gates.started(0)
        freed = threading.Thread(target=device.free, args=(out,))
        freed.start()
        freed.join()
    assert [(r.kind, r.second.where) for r in check.reports] == [("write-after-write", "host")]
    gates.open(0)
    with pytest.raises(ahg.LaunchFailure) as caught:
        await held
    assert isinstance(caught.value.__cause__, ahg.InvalidDevicePointer)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # reported once
    await stream.synchronize()
    assert value(device, keep) == 1  # the failed node stopped nothing else
    stats = graph_exec.statistics()
    assert (stats.in_flight, stats.signal_pool.in_use) == (0, 0)
    destroy(graph_exec, graph, stream, keep)


# -- the releaser racing explicit destroys -------------------------------------------------------


def test_collect_forgotten_racing_explicit_destroys_from_threads(fast_switching: None) -> None:
    """Threads make executables of one graph sharing one user object; half destroy theirs,
    half drop them, while another thread keeps calling ``collect_forgotten()`` and a last one
    destroys the graph. The destructor runs once, after the last owner let go."""
    device = ahg.get_device(0)
    baseline = snapshot()
    ran: list[object] = []
    out = device.malloc(8)
    graph = diamond(out)
    obj = ahg.UserObject(ran.append, "data")
    graph.retain_user_object(obj, move=True)
    made = threading.Barrier(10)  # eight owners, the collector, the destroyer

    def owner(index: int) -> None:
        for _ in range(5):
            graph_exec = graph.instantiate()
            if index % 2:
                graph_exec.destroy()
            del graph_exec  # the others are forgotten
        made.wait()

    def collecting() -> None:
        for _ in range(5):
            ahg.collect_forgotten()
        made.wait()

    def destroying() -> None:
        made.wait()
        graph.destroy()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        errors = run_together(*[lambda i=i: owner(i) for i in range(8)], collecting, destroying)
        ahg.collect_forgotten()  # what the last pass of ``collecting`` had not found yet
    assert errors == []
    assert ran == ["data"]
    assert obj.statistics().refcount == 0
    device.free(out)
    assert leak_report(baseline) is None


# -- interrupts from user code while a destroyed executable is in flight --------------------------


@LOOPS
def test_an_interrupt_from_a_host_node_of_a_destroyed_executable_in_flight(
    use_uvloop: bool,
) -> None:
    """A host node raises KeyboardInterrupt in the first of two launches of an executable the
    program already destroyed: the interrupt ends ``ahg.run`` with the second launch queued;
    whatever the loop's shutdown did not run, the next loop runs (or fails), the destructor
    runs once and every count is back at its baseline."""
    device = ahg.get_device(0)
    baseline = snapshot()
    out = device.malloc(8)
    ran: list[object] = []
    calls: list[int] = []

    def interrupting() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise KeyboardInterrupt

    graph = diamond(out, interrupting)
    graph.retain_user_object(ahg.UserObject(ran.append, "data"), move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    stream = device.create_stream()
    handles: list[ahg.Completion] = []

    async def first() -> None:
        handles.append(await graph_exec.launch(stream))
        handles.append(await graph_exec.launch(stream))
        graph_exec.destroy()
        await stream.synchronize()

    with pytest.raises(KeyboardInterrupt):
        ahg.run(first, use_uvloop=use_uvloop)
    # The loop's shutdown may already have run the second launch, and freed the executable.
    assert ran in ([], ["data"])

    async def second() -> None:
        with pytest.raises(ahg.LaunchFailure):
            await handles[0]
        with contextlib.suppress(ahg.HipError):  # run on this loop, or failed: its loop closed
            await handles[1]
        with contextlib.suppress(ahg.HipError):  # the stream's failure, reported once
            await stream.synchronize()
        await stream.synchronize()
        await device.synchronize()

    ahg.run(second, use_uvloop=use_uvloop)
    assert ran == ["data"]
    assert graph_exec.statistics().state == "closed"
    assert device.statistics().in_flight == 0
    stream.destroy()
    device.free(out)
    assert leak_report(baseline) is None
