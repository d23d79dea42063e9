"""``stress()`` whose user code raises ``BaseException``: it surfaces as itself, promptly, and
leaves the devices table and the registries as they were."""

from __future__ import annotations

import random
import threading
import time

import pytest

import ahipgraph as ahg
from ahipgraph.testing import StressReport, leak_report, snapshot, stress
from ahipgraph.testing.stress import Builder


class Halt(BaseException):
    """Not an Exception: what a builder might raise to stop everything."""


def _halting_after(calls: int, error: type[BaseException]) -> Builder:
    made = [0]

    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        made[0] += 1
        if made[0] > calls:
            raise error("stop")
        graph = ahg.Graph()
        graph.add_memset_node(buffer, rng.randrange(256), 8)
        return graph

    return builder


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


@pytest.mark.parametrize("error", [Halt, KeyboardInterrupt, SystemExit, RuntimeError])
@pytest.mark.parametrize(("tasks", "threads"), [(2, 0), (0, 2), (2, 2)])
def test_a_builder_that_raises_ends_the_run_with_its_exception(
    error: type[BaseException], tasks: int, threads: int
) -> None:
    """Thread workers left their executable to the collector (a ``ForgottenHandleWarning``
    later, in whatever the process did next), and a ``KeyboardInterrupt`` or ``SystemExit``
    from a builder stopped the event loop before the run was drained."""
    device = ahg.get_device(0)
    before = snapshot()
    started = time.monotonic()
    with pytest.raises(BaseException) as raised:
        stress([_halting_after(3, error)], duration=30.0, tasks=tasks, threads=threads)
    assert time.monotonic() - started < 20  # not the 30 s the run was given
    if error in (KeyboardInterrupt, SystemExit):
        assert type(raised.value) is error  # as itself, whichever worker raised it
    leaves = _leaves(raised.value)  # several workers failing alike make a group of them
    assert {type(leaf) for leaf in leaves} == {error}
    assert all(str(leaf) == "stop" for leaf in leaves)
    assert ahg.get_device(0) is device  # the devices table is given back
    assert leak_report(before, snapshot(collect=False)) is None  # nothing left to collect


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_a_progress_callback_that_interrupts_ends_the_run_as_itself(
    error: type[BaseException],
) -> None:
    def progress(report: StressReport) -> None:
        raise error("stop")

    before = snapshot()
    with pytest.raises(error, match="stop"):
        stress(duration=30.0, tasks=1, threads=1, progress=progress)
    assert leak_report(before, snapshot(collect=False)) is None


@pytest.mark.parametrize("tasks", [0, 1])
def test_a_failure_outside_the_workers_stops_the_thread_workers_too(tasks: int) -> None:
    """A progress callback raising (like Ctrl-C cancelling the run) ended the task workers
    but not the thread workers, which ran on until the deadline: 30 s here."""
    calls = [0]

    def progress(report: StressReport) -> None:
        calls[0] += 1
        if calls[0] > 2:
            raise RuntimeError("stop")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="stop"):
        stress(duration=30.0, tasks=tasks, threads=1, progress=progress)
    assert time.monotonic() - started < 15


@pytest.mark.parametrize("error", [Halt, KeyboardInterrupt, RuntimeError])
def test_no_worker_starts_a_cycle_once_a_builder_raised(error: type[BaseException]) -> None:
    """The failing worker stopped the run only once the task group heard of it: the other
    workers between two cycles (tasks the loop ran first; threads too) started new ones.
    Tasks alone, so the interleaving is the same every run."""
    lock = threading.Lock()
    shapes: set[object] = set()
    calls, raised, started_after = [0], [False], [0]

    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        shape = rng.getstate()  # a cycle builds its shape twice: the first build starts it
        with lock:
            calls[0] += 1
            if raised[0] and shape not in shapes:
                started_after[0] += 1
            shapes.add(shape)
            if calls[0] == 5:
                raised[0] = True
                raise error("stop")
        graph = ahg.Graph()
        graph.add_memset_node(buffer, rng.randrange(256), 8)
        return graph

    with pytest.raises(BaseException) as caught:
        stress([builder], ops=10**6, tasks=10, threads=0, faults=False)
    assert {type(leaf) for leaf in _leaves(caught.value)} == {error}
    assert started_after[0] == 0
