"""Bounds and hand-overs of the testing kit.

* ``stress(ops=N)`` with a builder whose graph never finishes ran for ever: only a timed run,
  and the final drain, had a bound. A run in which no operation completes for
  ``STALL_TIMEOUT_S`` now stops with a ``StressViolation`` naming the stall.
* A task's per-task stream was destroyed by the task's done callback, which asyncio runs
  after the callback that resumes ``await task``: right after ``await task``, statistics and
  leak reports still counted the stream. Reading them now cleans up finished tasks first.
* Work one event loop abandoned as it shut down was forgotten by the leak report as soon as
  another loop took the device over, even when nothing ever reported its failure. A stream
  still holding such a failure is now named.
* Around them: a thread worker stuck in its builder kept a stalled run waiting for ever; a
  thread worker whose loop stopped on a ``KeyboardInterrupt`` from device work waited for ever
  for a loop call, or stopped after ``stress()`` returned; a statistics read from a collector
  hook while the per-task table was locked waited for its own thread.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import random
import threading
from collections.abc import Callable

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.runtime.per_thread import per_thread_statistics
from ahipgraph.testing import StressViolation, leak_report, snapshot, stress
from ahipgraph.testing.stress import Builder

stress_module = importlib.import_module("ahipgraph.testing.stress")


def _never_finishing(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
    """A graph whose host node waits for an event nobody sets."""

    async def wait_for_ever() -> None:
        await asyncio.Event().wait()

    graph = ahg.Graph()
    graph.add_host_node(wait_for_ever)
    return graph


def _run_with_hang_detector(
    call: Callable[[], object], timeout: float = 30.0
) -> BaseException | None:
    """Run ``call()`` in a thread; fail the test if it does not return within ``timeout``."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            call()
        except BaseException as error:  # handed to the test
            outcome.append(error)
        else:
            outcome.append(None)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"still running after {timeout}s: no bound"
    return outcome[0]


@pytest.fixture
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stress_module, "STALL_TIMEOUT_S", 0.5, raising=False)
    monkeypatch.setattr(stress_module, "DRAIN_TIMEOUT_S", 0.5)


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (2, 0), (0, 1), (1, 1)])
def test_a_run_in_which_nothing_completes_stops_with_a_stall_violation(
    short_bounds: None, tasks: int, threads: int
) -> None:
    device = ahg.get_device(0)
    before = snapshot()
    error = _run_with_hang_detector(
        lambda: stress([_never_finishing], ops=50, tasks=tasks, threads=threads, faults=False)
    )
    assert isinstance(error, StressViolation), repr(error)
    assert "stall" in error.invariant
    assert "no operation completed" in str(error)
    for index in range(tasks):
        assert f"task-{index}" in error.detail
    for index in range(threads):
        assert f"thread-{index}" in error.detail
    assert "operations done" in error.detail
    assert ahg.get_device(0) is device  # the devices table is given back
    assert leak_report(before) is None


@pytest.mark.leaks_allowed("the abandoned thread destroys its stream whenever it comes back")
@pytest.mark.parametrize(("tasks", "threads"), [(0, 1), (1, 1)])
def test_a_thread_worker_whose_builder_never_returns_is_abandoned_on_a_stall(
    short_bounds: None, tasks: int, threads: int
) -> None:
    """A thread cannot be cancelled: its task waited for it, so a builder blocked in a
    thread kept the run waiting for ever, stall or not."""
    release = threading.Event()
    runner: list[threading.Thread] = []

    def blocking(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        if threading.current_thread() is not runner[0]:  # a thread worker's build
            release.wait()
            return ahg.Graph()
        return _never_finishing(rng, buffer)

    def run() -> None:
        runner.append(threading.current_thread())  # the loop's thread: task workers build here
        stress([blocking], ops=50, tasks=tasks, threads=threads, faults=False)

    try:
        error = _run_with_hang_detector(run)
    finally:
        release.set()  # the abandoned thread finishes its cycle and stops
    assert isinstance(error, StressViolation), repr(error)
    assert "stall" in error.invariant
    assert "thread-0" in error.detail


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (0, 1)])
def test_a_timed_run_whose_work_never_finishes_still_cleans_up(
    short_bounds: None, tasks: int, threads: int
) -> None:
    """The drain gives up after DRAIN_TIMEOUT_S; the work a thread worker left queued on the
    closed loop held its executable and user object until a loop took the device over."""
    before = snapshot()
    error = _run_with_hang_detector(
        lambda: stress([_never_finishing], duration=0.3, tasks=tasks, threads=threads)
    )
    assert isinstance(error, StressViolation), repr(error)
    assert leak_report(before) is None


@pytest.mark.asyncio
async def test_a_per_task_stream_is_gone_from_the_statistics_when_await_task_returns(
    device: ahg.Device,
) -> None:
    baseline = snapshot()
    implicit = device.statistics().implicit_streams
    out = device.malloc(8)

    async def work() -> ahg.Stream:
        stream = device.per_thread_stream()
        await (await stream.memset(out, 1, 8))
        return stream

    theirs = await asyncio.create_task(work())
    # No turn of the loop in between: the task's done callbacks have not run yet.
    assert per_thread_statistics() == {"tasks": 0, "streams": 0}
    assert device.statistics().implicit_streams == implicit
    assert theirs.state.value == "destroyed"
    device.free(out)
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_a_leak_report_right_after_await_task_does_not_count_its_per_task_stream(
    device: ahg.Device,
) -> None:
    baseline = snapshot()

    async def work() -> None:
        device.per_thread_stream()

    live = testing.registry_statistics()["stream"].live
    await asyncio.create_task(work())
    assert testing.registry_statistics()["stream"].live == live
    now = snapshot()
    assert now.handles == baseline.handles
    assert [d.implicit_streams for d in now.devices] == [
        d.implicit_streams for d in baseline.devices
    ]


async def _leave_running(stream: ahg.Stream) -> None:
    """Start a held kernel on ``stream`` and return with it still running."""
    held = testing.HeldKernel("left_running")
    await held.launch(stream)
    await held.started.wait()


@pytest.mark.leaks_allowed("its loops abandon work on purpose; the test reads the report")
def test_work_an_earlier_loop_abandoned_is_reported_until_its_failure_is() -> None:
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        other = device.create_stream()
        out = device.malloc(8)
        baseline = testing.snapshot()

        async def unrelated_work() -> None:  # takes the device over, never looks at ``stream``
            await (await other.memset(out, 0, 8))

        asyncio.run(_leave_running(stream))
        asyncio.run(unrelated_work())
        assert device.statistics().abandoned == 0  # the new loop's own count
        assert device.statistics().abandoned_earlier == 1
        report = testing.leak_report(baseline)
        assert report is not None
        assert "device 0: 1 stream holds the unreported failure of work an earlier" in report

        async def look() -> None:
            with pytest.raises(ahg.LaunchFailure, match="abandoned"):
                await stream.synchronize()

        asyncio.run(look())
        assert device.statistics().abandoned_earlier == 0
        assert testing.leak_report(baseline) is None
        device.free(out)
        stream.destroy()
        other.destroy()


@pytest.mark.leaks_allowed("its loop leaves work queued on purpose; the test reads the report")
def test_work_a_closed_loop_left_queued_is_reported_once_a_new_loop_failed_it() -> None:
    """Queued behind a held kernel, it is in flight until the next loop fails it with
    IllegalState and completes it; then only the stream's unreported failure is left."""
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        other = device.create_stream()
        out = device.malloc(8)
        scratch = device.malloc(8)  # the other stream's: no race with ``out``
        baseline = testing.snapshot()

        async def queue_behind() -> None:
            await _leave_running(stream)
            await stream.memset(out, 1, 8)  # queued behind the held kernel

        async def unrelated_work() -> None:
            await (await other.memset(scratch, 0, 8))
            await other.synchronize()

        asyncio.run(queue_behind())
        asyncio.run(unrelated_work())
        assert device.statistics().in_flight == 0
        report = testing.leak_report(baseline)
        assert report is not None
        assert "unreported failure of work an earlier event loop abandoned" in report

        async def look() -> None:
            with pytest.raises(ahg.HipError):
                await device.synchronize()

        asyncio.run(look())
        assert testing.leak_report(baseline) is None
        device.free(out)
        device.free(scratch)
        stream.destroy()
        other.destroy()


def test_statistics_read_by_the_collector_while_a_per_task_stream_is_made(
    device: ahg.Device,
) -> None:
    """The collector may run while the per-task table's lock is held; a hook of it that read
    ``device.statistics()`` (which settles finished tasks) waited for that lock for ever."""
    reads = [0]

    def on_collect(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            reads[0] += 1
            device.statistics()

    def make_under_collections() -> None:
        async def use() -> None:
            threshold = gc.get_threshold()
            gc.callbacks.append(on_collect)
            gc.set_threshold(1, 1, 1)  # a collection at nearly every allocation
            try:
                device.per_thread_stream()
            finally:
                gc.set_threshold(*threshold)
                gc.callbacks.remove(on_collect)

        asyncio.run(use())

    error = _run_with_hang_detector(make_under_collections, timeout=20.0)
    assert error is None
    assert reads[0] > 0
    assert per_thread_statistics() == {"tasks": 0, "streams": 0}


def _interrupting(error: type[BaseException]) -> Builder:
    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        def host() -> None:
            raise error("from device work")

        graph = ahg.Graph()
        graph.add_host_node(host)
        return graph

    return builder


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_a_host_function_interrupt_leaves_no_thread_worker_running(
    short_bounds: None, error: type[BaseException]
) -> None:
    """The interrupt stops the loop on the spot; a thread worker waiting for a loop call
    then waited for ever (the call was never run), or stopped after stress() returned,
    destroying its stream after the caller's leak report had named it."""
    before = snapshot()
    for seed in range(6):
        raised = _run_with_hang_detector(
            lambda seed=seed: stress(
                [_interrupting(error)], seed=seed, ops=20, tasks=0, threads=1, faults=False
            )
        )
        assert type(raised) is error
        assert leak_report(before) is None
