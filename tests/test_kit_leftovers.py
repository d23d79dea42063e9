"""Leftovers of the testing kit and the trace, each pinned by the behaviour a user expects.

* ``hang_kernels().cancel()`` called before the hung kernel started did nothing: the kernel
  then hung until the block ended. Cancelling now ends the fault, as the block's end does.
* A fault's ``count`` was checked and taken in two steps: devices on two threads could both
  take the last one, and a ``cancel()`` on another thread could miss a hang being listed.
* A trace's counter sample of a host change, stamped at the host's clock, came before an
  earlier-made sample at a later device time: the file's counter track ended on a stale value.
* ``GatedHost.open_all(2**64)`` made gates one by one for ever; ``Interleave`` read an endless
  iterable for ever, holding the interpreter.
* ``run_together`` returned its targets' exceptions in the order raised, naming no target.
* ``Interleave.done(None)`` skipped the next task's turn; ``GatedHost(log)`` took the list for
  its name.
* A trace missed the signal set of an executable destroyed while its launch ran.
* ``GatedHost`` and ``HeldKernel`` runs on two threads at once could share one run number.
* A trace named a stream memory operation ``streammemop`` and ``free_async`` ``free``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from ahipgraph import testing


@ahg.kernel(name="leftover")
def leftover(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


@ahg.kernel(name="leftover_noop")
def leftover_noop(t: ahg.Threads) -> None:
    pass


def _value(device: ahg.Device, x: ahg.DevicePtr) -> int:
    return int(device.view(x, "int32", 1)[0])


# -- hang_kernels().cancel() before the kernel starts -------------------------------------------


@pytest.mark.asyncio
async def test_a_hang_cancelled_after_the_launch_but_before_the_kernel_starts_does_not_hang_it(
    device: ahg.Device,
) -> None:
    x = device.malloc(4)
    device.view(x, "int32", 1)[0] = 0
    stream = device.create_stream()
    with testing.hang_kernels(1, name="leftover") as hang:
        done = await stream.launch_kernel(leftover, 1, 1, (x,))  # enqueued, not started
        assert hang.cancel() == 0  # nothing hung yet
        async with asyncio.timeout(1):
            await done
        assert (hang.hits, hang.hanging, hang.started.is_set()) == (0, 0, False)
    await stream.synchronize()  # no failure was left on the stream
    assert _value(device, x) == 1
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_hang_of_every_kernel_cancelled_hangs_no_later_kernel(device: ahg.Device) -> None:
    x = device.malloc(4)
    device.view(x, "int32", 1)[0] = 0
    stream = device.create_stream()
    with testing.hang_kernels(None, name="leftover") as hang:
        stuck = await stream.launch_kernel(leftover, 1, 1, (x,))
        await hang.started.wait()
        assert hang.cancel() == 1
        with pytest.raises(ahg.LaunchFailure, match="hung kernel cancelled"):
            await stuck
        later = await stream.launch_kernel(leftover, 1, 1, (x,))
        async with asyncio.timeout(1):
            await later  # runs: the cancelled fault hangs nothing more, as after its block
        assert (hang.hits, hang.hanging, hang.remaining) == (1, 0, 0)
        assert repr(hang) == "<KernelHang name='leftover' left=0 hits=1 hanging=0>"
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # the cancelled hang's failure, reported once
    assert _value(device, x) == 1
    stream.destroy()
    device.free(x)


# -- fault counts taken from several threads ---------------------------------------------------


class _MeetingCount(int):
    """A fault's ``remaining`` whose comparison waits for another thread to compare too.

    It opens, on purpose, the window a thread switch (or a free-threaded build) opens at any
    point between a fault's check of what is left and its decrement. A fault that takes its
    count in one locked step lets only one thread in: the other never comes, and the wait ends
    at its timeout. ``remaining - 1`` is a plain int: only the first comparisons meet.
    """

    barrier: threading.Barrier

    def __le__(self, other: int) -> bool:
        # Broken at the timeout: the other thread could not get in (the count is locked).
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait(timeout=0.3)
        return int(self) <= other


def _meeting(count: int, threads: int) -> _MeetingCount:
    remaining = _MeetingCount(count)
    remaining.barrier = threading.Barrier(threads)
    return remaining


def test_exactly_count_allocation_faults_fire_from_two_threads() -> None:
    with testing.fresh_devices(2) as devices:
        refused: list[int] = []
        with testing.fail_allocations(1, nbytes=48) as fault:
            fault._remaining = _meeting(1, 2)

            def allocate(device: ahg.Device) -> None:
                try:
                    ptr = device.malloc(48)
                except ahg.OutOfMemory:
                    refused.append(device.ordinal)
                else:
                    device.free(ptr)

            assert testing.run_together(*(lambda d=d: allocate(d) for d in devices)) == []
        assert (len(refused), fault.hits, fault.remaining) == (1, 1, 0)
        assert [d.memory_info()[0] for d in devices] == [d.memory_info()[1] for d in devices]


def test_exactly_count_kernel_faults_fire_from_devices_on_two_threads() -> None:
    with testing.fresh_devices(2) as devices:
        failed: list[int] = []

        async def launch(device: ahg.Device) -> None:
            stream = device.create_stream()
            try:
                done = await stream.launch_kernel(leftover_noop, 1, 1, ())
                try:
                    await done
                except ahg.LaunchFailure:
                    failed.append(device.ordinal)
                    with pytest.raises(ahg.LaunchFailure):
                        await stream.synchronize()
            finally:
                stream.destroy()

        with testing.fail_kernels(1, name="leftover_noop") as fault:
            fault._remaining = _meeting(1, 2)
            errors = testing.run_together(*(lambda d=d: asyncio.run(launch(d)) for d in devices))
        assert errors == []
        assert (len(failed), fault.hits, fault.remaining) == (1, 1, 0)


# -- trace counters and a host change at an earlier host time ----------------------------------


def _slow_kernel_graph() -> ahg.Graph:
    def body(t: ahg.Threads) -> None:
        pass

    graph = ahg.Graph()
    graph.add_kernel_node(ahg.Kernel(body, name="slow", duration_ns=5000), 1, 1, ())
    return graph


@pytest.mark.asyncio
async def test_a_host_allocation_after_a_later_device_sample_is_the_counters_last_value(
    device: ahg.Device,
) -> None:
    """A launch's completion is sampled at its device time (5 us on); the host, its clock
    still at 0, then allocates and enqueues, sampled at 0. The file sorts by time, so the
    completion's older figure stood last: the memory track ended on a value the device no
    longer had."""
    first, second = device.create_stream(), device.create_stream()
    graph = _slow_kernel_graph()
    graph_exec = graph.instantiate()
    with ahg.tracing() as trace:
        await graph_exec.launch(first)
        await testing.loop_turns()  # the launch completes at its device time
        assert device.clock.now < 5000  # the host has not observed it
        ptr = device.malloc(1024)
        await second.memset(ptr, 0, 1024)  # a host call sampled at the host's time
        await device.synchronize()
        in_use = device.memory.bytes_in_use
    written = [
        e["args"]["value"]
        for e in json.loads(trace.dumps())["traceEvents"]
        if e.get("name") == "device memory in use"
    ]
    assert written[-1] == in_use
    times = [c.time_ns for c in trace.counters]
    assert times == sorted(times)
    assert trace.counters[-1].memory_bytes == in_use
    device.free(ptr)
    graph_exec.destroy()
    graph.destroy()
    first.destroy()
    second.destroy()


# -- counts without a natural end: GatedHost.open_all, Interleave's order ----------------------


@pytest.mark.asyncio
async def test_gated_host_open_all_of_2_to_the_64_opens_every_run_at_once(
    device: ahg.Device,
) -> None:
    """``open_all(runs)`` made the gates of runs 0 .. runs - 1 one by one: 2**64 never returned."""
    stream = device.create_stream()
    gate = testing.GatedHost("g")
    started = time.perf_counter()
    gate.open_all(2**64)
    assert time.perf_counter() - started < 0.1
    for _ in range(3):
        await stream.launch_host_func(gate)
    async with asyncio.timeout(1):
        await stream.synchronize()
    assert repr(gate) == f"<GatedHost 'g' runs=3 open=[0..{2**64 - 1}]>"
    stream.destroy()


@pytest.mark.asyncio
async def test_gated_host_open_all_opens_runs_already_waiting_and_those_to_come(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    gate = testing.GatedHost("g")
    gate.open(5)
    first = await stream.launch_host_func(gate)
    await gate.started(0)
    gate.open_all(3)
    assert repr(gate) == "<GatedHost 'g' runs=1 open=[0, 1, 2, 5]>"
    for _ in range(2):
        await stream.launch_host_func(gate)
    async with asyncio.timeout(1):
        await first
        await stream.synchronize()  # runs 1 and 2, their gates made open when they came
    fourth = await stream.launch_host_func(gate)  # run 3: not covered
    await gate.started(3)
    await testing.loop_turns()
    assert not fourth.done()
    gate.open(3)
    async with asyncio.timeout(1):
        await fourth
    with pytest.raises(ValueError, match="at least 0"):
        gate.open_all(-1)
    with pytest.raises(TypeError):
        gate.open_all(True)
    stream.destroy()


def test_interleave_refuses_an_endless_order_without_reading_it_for_ever() -> None:
    """``Interleave(itertools.cycle(["a", "b"]))`` read its iterable for ever, in one C call
    that held the interpreter: the process only grew. The order is read up to a bound."""
    drawn = 0

    def endless() -> Iterator[str]:
        nonlocal drawn
        while True:
            drawn += 1
            assert drawn <= 2 * testing.Interleave.MAX_TURNS, "read past any bound"
            yield "a"

    with pytest.raises(ValueError, match="at most 1,000,000 turns"):
        testing.Interleave("b", endless())
    assert drawn == testing.Interleave.MAX_TURNS
    with pytest.raises(ValueError, match="at most 1,000,000 turns"):
        testing.Interleave(itertools.cycle(["a", "b"]))
    assert len(testing.Interleave(["a", "b"] * 1000).order) == 2000
    with pytest.raises(TypeError, match="iterables of names, got None"):
        testing.Interleave("a", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="names must be str, got 0"):
        testing.Interleave(range(10**30))  # type: ignore[arg-type]


# -- run_together: which target raised ---------------------------------------------------------


def test_run_together_names_the_target_of_each_exception_in_the_targets_order() -> None:
    """The exceptions came in the order they were raised, which changes from run to run, and
    nothing said which target raised which: a thread race's failure named no side."""
    second_raised = threading.Event()

    def first() -> None:
        second_raised.wait(timeout=5)  # raised after the second target's
        raise KeyError("first")

    def second() -> None:
        try:
            raise ValueError("second")
        finally:
            second_raised.set()

    errors = testing.run_together(first, lambda: None, second)
    assert [type(e) for e in errors] == [KeyError, ValueError]
    assert errors[0].__notes__ == [f"raised by run_together's target 1 of 3: {first!r}"]
    assert errors[1].__notes__ == [f"raised by run_together's target 3 of 3: {second!r}"]
    assert testing.run_together(lambda: None) == []


# -- Interleave: a name that is not a str ------------------------------------------------------


@pytest.mark.asyncio
async def test_interleave_turn_and_done_refuse_a_name_that_is_not_a_str() -> None:
    """``None`` matched the holder of no turn: ``done(None)`` skipped the next task's turn and
    ``turn(None)`` said the turn of None was held by another task."""
    turns = testing.Interleave("a", "b")
    for name in (None, 1, b"a"):
        with pytest.raises(TypeError, match="named by a str"):
            turns.done(name)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="named by a str"):
            await turns.turn(name)  # type: ignore[arg-type]
    assert repr(turns) == "<Interleave at 0/2 holder=None>"
    await turns.turn("a")  # the order is as it was: a's turn first
    turns.done("a")
    await turns.turn("b")
    turns.done("b")
    assert repr(turns) == "<Interleave at 2/2 holder=None>"


def test_gated_host_refuses_a_name_that_is_not_a_str() -> None:
    """``GatedHost(log)`` took the list for the name: the runs then logged nothing."""
    log: list[str] = []
    for name in (log, None, 1):
        with pytest.raises(TypeError, match="name must be a str"):
            testing.GatedHost(name)  # type: ignore[arg-type]
    assert repr(testing.GatedHost("", log)) == "<GatedHost '' runs=0 open=[]>"


@pytest.mark.asyncio
async def test_the_sets_of_an_executable_destroyed_while_its_launch_runs_are_counted(
    device: ahg.Device,
) -> None:
    """An executable destroyed with a launch in flight is gone from the registry, which the
    trace read as tracing began: its set in use read 0, and its completion moved nothing."""
    stream, other = device.create_stream(), device.create_stream()
    ptr = device.malloc(4)
    held = testing.HeldKernel("held")
    graph = ahg.Graph()
    graph.add_kernel_node(held.kernel, 1, 1, ())
    graph_exec = graph.instantiate()
    done = await graph_exec.launch(stream)
    await held.started.wait()
    graph_exec.destroy()  # freed once the launch completes
    with ahg.tracing() as trace:
        await other.memset(ptr, 0, 4)  # a packet: a sample while the launch runs
        held.release()
        await done
        await device.synchronize()
    assert [c.signal_sets_in_use for c in trace.counters] == [1, 0]
    device.free(ptr)
    graph.destroy()
    stream.destroy()
    other.destroy()


class _MeetingRuns(int):
    """A ``GatedHost.runs`` whose increment waits for another thread to increment too (see
    :class:`_MeetingCount`): two runs at once could read one number and share one gate."""

    barrier: threading.Barrier

    def __add__(self, other: int) -> int:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait(timeout=0.3)
        return int(self) + other


def test_a_gated_host_run_on_two_threads_at_once_gets_two_run_numbers() -> None:
    log: list[str] = []
    gate = testing.GatedHost("g", log)
    gate.open_all(2)
    runs = _MeetingRuns(0)
    runs.barrier = threading.Barrier(2)
    gate._runs = runs
    with testing.fresh_devices(2) as devices:

        async def run_once(device: ahg.Device) -> None:
            with device.create_stream() as stream:
                await stream.launch_host_func(gate)
                await stream.synchronize()

        errors = testing.run_together(*(lambda d=d: asyncio.run(run_once(d)) for d in devices))
    assert errors == []
    assert sorted(line for line in log if "start" in line) == ["g start 0", "g start 1"]
    assert gate.runs == 2


def test_a_held_kernel_run_on_two_threads_at_once_counts_two_runs() -> None:
    held = testing.HeldKernel("held")
    held.release()
    runs = _MeetingRuns(0)
    runs.barrier = threading.Barrier(2)
    held._runs = runs
    with testing.fresh_devices(2) as devices:

        async def run_once(device: ahg.Device) -> None:
            with device.create_stream() as stream:
                await held.launch(stream)
                await stream.synchronize()

        errors = testing.run_together(*(lambda d=d: asyncio.run(run_once(d)) for d in devices))
    assert errors == []
    assert held.runs == 2


# -- trace names of stream calls ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_trace_names_stream_memory_operations_and_free_async_by_their_call(
    device: ahg.Device,
) -> None:
    """They were ``marker streammemop`` (a write and a wait alike) and ``marker free``."""
    stream = device.create_stream()
    flag = device.malloc(8)
    with ahg.tracing() as trace:
        scratch = await stream.malloc_async(64)
        await stream.free_async(scratch)
        await stream.write_value_32(flag, 1)
        await stream.wait_value_32(flag, 1, ahg.StreamWaitFlag.EQ)
        await stream.synchronize()
    calls = ["free_async", "write_value_32", "wait_value_32"]
    assert [e.name for e in trace.enqueues] == calls
    assert [(op.kind, op.name) for op in trace.ops] == [
        ("memory", "free_async"),
        ("marker", "write_value_32"),
        ("marker", "wait_value_32"),
    ]
    async with stream.capture() as capture:  # captured, each is a host node
        await stream.write_value_64(flag, 2)
        await stream.wait_value_64(flag, 2, ahg.StreamWaitFlag.EQ)
    with capture.graph as graph, graph.instantiate() as graph_exec, ahg.tracing() as trace:
        await (await graph_exec.launch(stream))
    assert [op.name for op in trace.ops if op.kind == "host"] == ["write_value_64", "wait_value_64"]
    device.free(flag)
    stream.destroy()
