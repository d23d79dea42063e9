"""Interrupts from device work, under ``stress()`` and under a plain ``ahg.run``.

* Several launches in flight whose host functions raise ``KeyboardInterrupt`` or
  ``SystemExit``: the first stops the loop, and ``asyncio.run`` (``anyio.run`` for
  ``stress()``) cancels what is left and runs it to its end before re-raising it. The pump ran
  the next launch's host function during that shutdown, whose interrupt stopped the shutdown
  too: the loop closed with the cancelled tasks' ``finally`` blocks never run, so a graph, an
  executable and a stream per other launch stayed alive (``stress()`` with N task workers
  leaked N-1 of each, and the user object its builder's graphs retain). A later interrupt in
  that shutdown now only fails its launch.
"""

from __future__ import annotations

import asyncio
import importlib
import random
import threading
import time
from collections.abc import Callable

import pytest

import ahipgraph as ahg
from ahipgraph.testing import (
    StressReport,
    StressViolation,
    leak_report,
    random_graph,
    snapshot,
    stress,
)
from ahipgraph.testing.stress import Builder

stress_module = importlib.import_module("ahipgraph.testing.stress")

INTERRUPTS = [KeyboardInterrupt, SystemExit]


def _host(error: type[BaseException], is_async: bool, tag: str) -> Callable[[], object]:
    if is_async:

        async def async_host() -> None:
            raise error(tag)

        return async_host

    def host() -> None:
        raise error(tag)

    return host


async def _launch_one(index: int, error: type[BaseException], is_async: bool) -> None:
    """One graph whose host function raises, cleaned up however the task ends."""
    device = ahg.get_device(0)
    graph = ahg.Graph()
    graph.add_host_node(_host(error, is_async, f"host {index}"))
    stream = device.create_stream()
    try:
        graph_exec = graph.instantiate()
        try:
            await (await graph_exec.launch(stream))
        finally:
            graph_exec.destroy()
    finally:
        graph.destroy()
        stream.destroy()


async def _take_over() -> None:
    """Take device 0 over on a new loop and report what the closed one abandoned."""
    device = ahg.get_device(0)
    stream = device.create_stream()
    try:
        await (await stream.launch_host_func(lambda: None))
        for _ in range(8):  # one unreported failure per call: the interrupted and abandoned
            try:
                await device.synchronize()
            except ahg.LaunchFailure:
                continue
            break
    finally:
        stream.destroy()


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("launches", [1, 2, 4])
@pytest.mark.parametrize("error", INTERRUPTS)
def test_interrupting_host_functions_of_several_launches_leave_nothing_after_ahg_run(
    error: type[BaseException], launches: int, is_async: bool
) -> None:
    """The second launch's interrupt, raised while ``asyncio.run`` cancelled the tasks after
    the first, closed the loop with their ``finally`` blocks never run."""

    async def main() -> None:
        await asyncio.gather(*(_launch_one(i, error, is_async) for i in range(launches)))

    before = snapshot()
    with pytest.raises(error) as raised:
        ahg.run(main)
    assert str(raised.value) == "host 0"  # the first, as itself, not one from the shutdown
    assert raised.value.__context__ is None
    assert snapshot().handles == before.handles  # every finally block ran
    if is_async and launches > 1:
        # The other bodies' tasks, made in the same pump turn, were cancelled by the shutdown
        # before they ran: work the loop abandoned, reported until another loop takes over.
        assert "abandoned" in (leak_report(before) or "")
        asyncio.run(_take_over())
    assert leak_report(before) is None


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("error", INTERRUPTS)
def test_the_next_launch_queued_behind_an_interrupting_one_does_not_cut_the_shutdown_short(
    error: type[BaseException], is_async: bool
) -> None:
    """The second launch on the stream starts only as the shutdown runs the first one's end:
    its interrupt (an async body's too, which asyncio re-raises out of the loop) replaced
    the first and left the stream's work in flight."""
    calls: list[int] = []

    def record() -> str:
        calls.append(len(calls) + 1)
        return f"call {len(calls)}"

    if is_async:

        async def host() -> None:
            raise error(record())

    else:

        def host() -> None:  # type: ignore[misc]
            raise error(record())

    async def main() -> None:
        stream = ahg.get_device(0).create_stream()
        graph = ahg.Graph()
        graph.add_host_node(host)
        try:
            graph_exec = graph.instantiate()
            try:
                await graph_exec.launch(stream)
                await graph_exec.launch(stream)
                await stream.synchronize()
            finally:
                graph_exec.destroy()
        finally:
            graph.destroy()
            stream.destroy()

    before = snapshot()
    with pytest.raises(error, match="call 1"):
        ahg.run(main)
    assert calls == [1, 2]  # the second ran, and only failed its launch
    assert leak_report(before) is None


def test_an_interrupt_still_propagates_from_a_loop_that_runs_on_after_one() -> None:
    """Only a loop shutting down after an interrupt (its tasks cancelled) holds back the next:
    a caller that catches the first and runs the loop on gets every later one too."""
    device = ahg.get_device(0)
    stream = device.create_stream()
    calls = [0]

    def host() -> None:
        calls[0] += 1
        raise KeyboardInterrupt(f"call {calls[0]}")

    async def twice() -> None:
        for _ in range(2):
            await stream.launch_host_func(host)
            with pytest.raises(ahg.LaunchFailure):  # the launch failed, as well
                await stream.synchronize()

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(twice())
        with pytest.raises(KeyboardInterrupt, match="call 1"):
            loop.run_until_complete(task)
        with pytest.raises(KeyboardInterrupt, match="call 2"):
            loop.run_until_complete(task)  # the same task runs on, not cancelled
        loop.run_until_complete(task)
    finally:
        loop.close()
    stream.destroy()


def _interrupting(error: type[BaseException], is_async: bool) -> Builder:
    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        graph = ahg.Graph()
        graph.add_host_node(_host(error, is_async, "from device work"))
        return graph

    return builder


_WORKERS = [(1, 0), (2, 0), (4, 0), (0, 1), (0, 2), (2, 2)]


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(("tasks", "threads"), _WORKERS)
@pytest.mark.parametrize("error", INTERRUPTS)
def test_stress_whose_host_functions_interrupt_leaves_nothing_behind(
    error: type[BaseException],
    tasks: int,
    threads: int,
    is_async: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With two or more task workers, each other worker's graph, executable, stream and user
    object stayed alive after the interrupt left ``stress()``; with async host functions,
    asyncio logged the body tasks that the cut-short shutdown left behind."""
    before = snapshot()
    with pytest.raises(error, match="from device work"):
        stress([_interrupting(error, is_async)], ops=30, tasks=tasks, threads=threads, faults=False)
    assert leak_report(before) is None
    assert "never retrieved" not in caplog.text
    assert "destroyed but it is pending" not in caplog.text


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (4, 0), (2, 2)])
@pytest.mark.parametrize("error", [GeneratorExit, RuntimeError])
def test_stress_whose_host_functions_fail_reports_it_and_leaves_nothing_behind(
    error: type[BaseException], tasks: int, threads: int
) -> None:
    """Anything but an interrupt is the launch's ``LaunchFailure``: the run reports it."""
    before = snapshot()
    with pytest.raises(StressViolation, match="LaunchFailure"):
        stress([_interrupting(error, False)], ops=30, tasks=tasks, threads=threads, faults=False)
    assert leak_report(before) is None


class _JumpingClock:
    """``time`` for the stress module: wall-clock time that a test moves forward at once,
    standing for user code that blocked the loop that long (no real waiting)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


@pytest.fixture
def jumping_clock(monkeypatch: pytest.MonkeyPatch) -> _JumpingClock:
    clock = _JumpingClock()
    monkeypatch.setattr(stress_module, "time", clock)
    return clock


@pytest.mark.parametrize("tasks", [1, 3])
def test_a_task_workers_builder_that_blocks_the_loop_is_named_by_the_violation(
    jumping_clock: _JumpingClock, tasks: int
) -> None:
    """A task worker's builder runs on the loop: while it blocks, the watchdog cannot run, so
    the stall bound never fired while it did, and once it returned the stall report named
    every worker (or none), not the builder."""
    calls = [0]

    def slow_builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        calls[0] += 1
        if calls[0] == 3:
            jumping_clock.offset += stress_module.STALL_TIMEOUT_S + 5
        return random_graph(rng, buffer)

    before = snapshot()
    with pytest.raises(StressViolation) as raised:
        stress([slow_builder], ops=10**6, tasks=tasks, threads=0, faults=False)
    assert raised.value.invariant == "a stress run makes progress (stall)"
    assert raised.value.worker.startswith("task-")
    assert "builder " in raised.value.detail
    assert "slow_builder ran 65.0s on the event loop" in raised.value.detail
    assert leak_report(before) is None


def test_a_progress_callback_that_blocks_the_loop_is_named_by_the_violation(
    jumping_clock: _JumpingClock,
) -> None:
    def progress(report: StressReport) -> None:
        jumping_clock.offset += stress_module.STALL_TIMEOUT_S + 5

    before = snapshot()
    with pytest.raises(StressViolation) as raised:
        stress(ops=10**6, tasks=2, threads=0, faults=False, progress=progress)
    assert raised.value.worker == "progress"
    assert "progress callback " in raised.value.detail
    assert leak_report(before) is None


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (2, 0), (2, 1)])
def test_a_builder_that_returns_the_same_graph_again_is_refused_as_the_builders_error(
    tasks: int, threads: int
) -> None:
    """The graph still live in another cycle was destroyed under this one, and the run
    reported the runtime failing ("8: the runtime keeps working") with a misleading seed."""
    made: list[ahg.Graph] = []

    def caching(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        if not made:
            made.append(random_graph(rng, buffer))
        return made[0]

    before = snapshot()
    with pytest.raises(BaseException) as raised:
        stress([caching], ops=50, tasks=tasks, threads=threads, faults=False)
    leaves = _leaves(raised.value)
    assert {type(leaf) for leaf in leaves} <= {ValueError}, leaves
    assert all("returned a graph it had returned before" in str(leaf) for leaf in leaves)
    assert leak_report(before) is None


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _exhausted(after: int) -> Builder:
    shapes = iter(range(after))
    lock = threading.Lock()

    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        with lock:
            next(shapes)  # raises StopIteration once they are used up
        return random_graph(rng, buffer)

    return builder


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (3, 0), (0, 1), (0, 2), (2, 2)])
def test_a_builder_raising_stop_iteration_ends_the_run_with_it_as_itself(
    tasks: int, threads: int
) -> None:
    """Python turned it into ``RuntimeError("coroutine raised StopIteration")`` in a task
    worker, and a thread worker's came without its cause."""
    before = snapshot()
    with pytest.raises(StopIteration):
        stress([_exhausted(3)], ops=10**6, tasks=tasks, threads=threads, faults=False)
    assert leak_report(before) is None


def test_a_progress_callback_raising_stop_iteration_ends_the_run_with_it_as_itself() -> None:
    def progress(report: StressReport) -> None:
        raise StopIteration

    with pytest.raises(StopIteration):
        stress(ops=10**6, tasks=1, threads=1, faults=False, progress=progress)


@pytest.mark.parametrize("builders", [b"ab", bytearray(b"ab"), "ab"])
def test_builders_given_as_bytes_are_refused_as_not_a_sequence_of_builders(
    builders: object,
) -> None:
    """Bytes passed the sequence check, and the refusal named the int 97, not the argument."""
    with pytest.raises(TypeError, match="builders must be a sequence of graph builders"):
        stress(builders, ops=5, tasks=1, threads=0)  # type: ignore[arg-type]


def test_a_progress_callback_that_changes_its_report_does_not_change_the_run() -> None:
    """It was handed the live report: ``ops`` set back kept an ``ops``-bounded run going for
    good, and a replaced ``by_worker`` failed every worker's count with AttributeError."""
    seen: list[StressReport] = []

    def progress(report: StressReport) -> None:
        seen.append(report)
        report.ops = -(10**9)
        report.by_worker = None  # type: ignore[assignment]

    result = stress(ops=300, tasks=2, threads=1, faults=False, progress=progress)
    assert result.ops >= 300
    assert isinstance(result.by_worker, dict)
    assert sum(result.by_worker.values()) == result.ops
    assert seen
    assert all(report is not result for report in seen)


def _owning(error: type[BaseException]) -> Builder:
    """Graphs that own a user object whose destructor raises ``error``."""

    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        graph = random_graph(rng, buffer)

        def destructor(data: object) -> None:
            raise error("from a destructor")

        owned = ahg.UserObject(destructor, data=None)
        try:
            graph.retain_user_object(owned)
        finally:
            owned.release()
        return graph

    return builder


@pytest.mark.parametrize(("tasks", "threads"), _WORKERS)
@pytest.mark.parametrize("error", [*INTERRUPTS, RuntimeError])
def test_stress_whose_user_object_destructors_raise_leaves_nothing_behind(
    error: type[BaseException], tasks: int, threads: int
) -> None:
    """A destructor run by a worker's destroy of its executable skipped the destroys after
    it (its graph and the update's), and, raised in a task, its interrupt stopped the loop:
    the next worker's, raised during the shutdown, cut that short too."""
    before = snapshot()
    with pytest.raises(BaseException) as raised:
        stress([_owning(error)], ops=40, tasks=tasks, threads=threads, faults=False)
    if error is not RuntimeError:
        assert type(raised.value) is error
    assert {type(leaf) for leaf in _leaves(raised.value)} == {error}
    assert leak_report(before) is None
