"""The tooling as a user meets it: traces read back as Perfetto reads them, and the test kit."""

from __future__ import annotations

import asyncio
import functools
import gc
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import cli, testing
from ahipgraph.device import hooks
from ahipgraph.testing import loop_turns, run_together
from ahipgraph.tools import launch_bench, race
from ahipgraph.tools.launch_bench import measure_launch_host

LAUNCH = ahg.CostModel().kernel_launch_ns


def _kernel(name: str, duration_ns: int) -> ahg.Kernel:
    def body(t: ahg.Threads) -> None:
        pass

    return ahg.Kernel(body, name=name, duration_ns=duration_ns)


def _perfetto_ns(microseconds: float) -> int:
    """A ``ts`` or ``dur`` as Perfetto's JSON importer reads it: ``int64(value * 1000.0)``,
    a truncation, not a rounding."""
    return int(microseconds * 1000.0)


@pytest.mark.asyncio
async def test_perfetto_reads_every_slice_at_its_exact_nanosecond(device: ahg.Device) -> None:
    """``ts`` and ``dur`` were ``ns / 1000``: Perfetto truncates ``value * 1000.0``, and for
    about one nanosecond value in a hundred and thirty (1001, 2002, ...) the product falls
    just below the whole number, so a slice began a nanosecond early, inside the one before
    it on its queue, and Perfetto nested or dropped it."""
    stream = device.create_stream()
    # Back to back on one queue, the kernels end (and the next begins) at 2002, 4004, 8008
    # ns and more: values whose ``/ 1000 * 1000.0`` is below them.
    kernels = [_kernel(f"k{n}", 2002 - LAUNCH) for n in range(8)]
    with ahg.tracing() as trace:
        for kernel in kernels:
            await stream.launch_kernel(kernel, 1, 1, ())
        await stream.synchronize()
    events = [e for e in json.loads(trace.dumps())["traceEvents"] if e["ph"] == "X"]
    ops = [op for op in trace.ops if op.kind == "kernel"]
    assert [op.start_ns for op in ops] == [2002 * n for n in range(8)]
    read = [(_perfetto_ns(e["ts"]), _perfetto_ns(e["dur"])) for e in events if e["cat"] == "kernel"]
    assert read == [(op.start_ns, op.duration_ns) for op in ops]
    for (start, length), (next_start, _) in itertools.pairwise(read):
        assert start + length <= next_start  # no slice begins inside the one before it
    stream.destroy()


async def _loop_name() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def test_run_takes_numpy_s_bool_for_use_uvloop() -> None:
    """A numpy comparison's ``numpy.bool_`` was refused as "not a bool", where the kit's other
    switches (``stress(faults=...)``, ``fresh_devices(check=...)``) take it."""
    pytest.importorskip("uvloop")
    assert ahg.run(_loop_name, use_uvloop=np.True_) == "uvloop"
    assert ahg.run(_loop_name, use_uvloop=np.False_) == "asyncio"


def test_sigterm_ends_a_bench_run_with_status_143_and_no_traceback(tmp_path: Path) -> None:
    """``stress`` and ``trace`` ended on Ctrl-C and SIGTERM with the signal's status; ``bench``
    let the ``KeyboardInterrupt`` out of the command: a traceback, and 130 for SIGTERM."""
    env = dict(os.environ, PYTHONPATH=str(Path(ahg.__file__).parents[1]))
    process = subprocess.Popen(
        [sys.executable, "-m", "ahipgraph", "--plain", "bench", "--rounds", "100000"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    first = process.stdout.readline()  # a round ran: the measurement is under way
    assert first.startswith("bench: tracing off"), first
    process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    assert process.returncode == 143, err
    assert "interrupted: bench" in out
    assert "Traceback" not in err


def test_ctrl_c_in_a_bench_run_is_status_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(rounds: int, progress: object) -> dict[str, float]:
        raise KeyboardInterrupt

    monkeypatch.setattr(launch_bench, "measure_launch_host", interrupted)
    try:
        status = cli.main(["--plain", "bench", "--rounds", "1"])
    except KeyboardInterrupt:  # left to pytest, it would end the whole run
        pytest.fail("the command let the KeyboardInterrupt out")
    assert status == 130
    assert "interrupted: bench" in capsys.readouterr().out


def test_measure_launch_host_leaves_the_collector_as_it_found_it() -> None:
    """The benchmark paused the collector for its rounds and enabled it at the end, also for
    a caller that had disabled it."""
    gc.disable()
    try:
        measure_launch_host(rounds=1)
        assert not gc.isenabled()
    finally:
        gc.enable()
    measure_launch_host(rounds=1)
    assert gc.isenabled()


@pytest.mark.asyncio
async def test_every_track_s_events_are_written_in_time_order(device: ahg.Device) -> None:
    """Events were written in the order records were made: a packet's completion, sampled at
    its device time (ahead of the host's), came before the samples of the host's next calls
    at its earlier time, so a counter track's timestamps went back and forth; flows came
    after every slice, whatever their time."""
    first, second = device.create_stream(), device.create_stream()
    event = device.create_event()
    slow, short = _kernel("slow", 5000), _kernel("short", 10)
    with ahg.tracing() as trace:
        for _ in range(3):
            await first.launch_kernel(slow, 1, 1, ())
            await second.launch_kernel(short, 1, 1, ())
            scratch = await second.malloc_async(256)  # the memory counter moves
            await second.free_async(scratch)
            await loop_turns()  # the device runs ahead of the host's clock
        await first.record_event(event)
        await second.wait_event(event)
        await second.launch_kernel(short, 1, 1, ())
        await device.synchronize()
    events = [e for e in json.loads(trace.dumps())["traceEvents"] if e["ph"] != "M"]
    assert {"C", "s", "f", "X", "i"} <= {e["ph"] for e in events}
    last: dict[tuple[int, int], float] = {}
    for written in events:
        track = (written["pid"], written["tid"])
        assert written["ts"] >= last.get(track, 0.0), written
        last[track] = written["ts"]
    event.destroy()
    first.destroy()
    second.destroy()


def _if_graph(kernel: ahg.Kernel) -> ahg.Graph:
    """An IF node whose handle defaults to 1, so its body (one ``kernel`` node) runs."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_kernel_node(kernel, 1, 1, ())
    return graph


@pytest.mark.asyncio
async def test_injected_faults_reach_the_kernels_of_a_conditional_body(device: ahg.Device) -> None:
    """A conditional node runs its body's ops itself, and they were never offered to the
    observers: ``fail_kernels`` and ``hang_kernels`` left a body's kernels alone (``hits``
    stayed 0) and the launch succeeded, as if the test's fault had fired nowhere."""
    stream = device.create_stream()
    graph = _if_graph(_kernel("in_body", 100))
    graph_exec = graph.instantiate()
    with (
        testing.fail_kernels(1, name="in_body") as fault,
        pytest.raises(ahg.LaunchFailure, match="in_body"),
    ):
        await (await graph_exec.launch(stream))
    assert fault.hits == 1
    stream.destroy()
    stream = device.create_stream()
    with testing.hang_kernels(1, name="in_body") as hang:
        done = await graph_exec.launch(stream)
        async with asyncio.timeout(5):
            await hang.started.wait()
        assert not done.done()
        assert hang.cancel() == 1
        with pytest.raises(ahg.LaunchFailure, match="hung kernel cancelled"):
            await done
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


async def _never_run(ran: list[str]) -> None:
    ran.append("ran")


def test_run_together_refuses_a_target_that_would_run_nothing() -> None:
    """A coroutine function as a target was called on its thread, made a coroutine nobody
    awaited, and ``run_together`` returned ``[]``: a race test passed having run nothing."""
    ran: list[str] = []

    def generator() -> Iterator[None]:
        ran.append("ran")
        yield

    for target in (_never_run, functools.partial(_never_run, ran), generator):
        with pytest.raises(TypeError, match="would run nothing"):
            run_together(target)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the coroutine is closed, not left to warn
        (error,) = run_together(lambda: _never_run(ran))
    assert isinstance(error, TypeError)
    assert "returned a coroutine, never run" in str(error)
    assert ran == []
    assert run_together(lambda: asyncio.run(_never_run(ran))) == []
    assert ran == ["ran"]


@ahg.kernel
def _store(t: ahg.Threads, x: ahg.Ptr[ahg.float32], value: ahg.float32) -> None:
    x[0] = value


async def _unordered_writes(device: ahg.Device) -> None:
    """Two streams write one buffer with nothing ordering them: a race."""
    first, second = device.create_stream(), device.create_stream()
    buffer = device.malloc(64)
    await first.launch_kernel(_store, 1, 1, (buffer, 1.0))
    await second.launch_kernel(_store, 1, 1, (buffer, 2.0))
    await device.synchronize()
    device.free(buffer)
    first.destroy()
    second.destroy()


def _blocks_left_on() -> tuple[str, ahg.RaceCheck]:
    """A devices block in which a race check and a tracing block are entered, never left:
    the block's leak report, and the check."""
    block = testing.fresh_devices(1)
    block.__enter__()
    check = ahg.race_check().__enter__()
    ahg.tracing().__enter__()
    with pytest.raises(testing.LeakError) as left:
        block.__exit__(None, None, None)
    return str(left.value), check


@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="it races on purpose with no check of its own on: the environment's check reports it",
)
@pytest.mark.asyncio
async def test_a_race_check_or_tracing_left_on_is_reported_and_ended_with_its_devices() -> None:
    """A fault's block entered and never left was disarmed and reported at the end of the
    devices block (or test); a race check's or a tracing block's stayed on for the rest of
    the process, unreported: every later test's calls were checked (in raise mode, a later
    test's race failed it far from the cause) and recorded."""
    with ahg.race_check(on_race="collect") as kept:  # on before the block: left on
        report, check = _blocks_left_on()
        assert kept.active
    assert "race check still on (its block was never left)" in report
    assert "tracing still on (its block was never left)" in report
    assert not check.active
    assert hooks.observers is None
    with testing.fresh_devices(1) as (device,):
        await _unordered_writes(device)  # no RaceError: nothing checks any more


def test_a_race_check_entered_twice_and_never_left_is_reported_once_and_ended() -> None:
    """One check object entered twice (a nested ``with`` of it, a function it decorates)
    and left neither time: the block's report named it twice, and ending it once left it on
    for its second entry, checking every later test."""
    block = testing.fresh_devices(1)
    block.__enter__()
    scoped = ahg.race_check(on_race="collect")
    check = scoped.__enter__()
    assert scoped.__enter__() is check
    with pytest.raises(testing.LeakError) as left:
        block.__exit__(None, None, None)
    assert str(left.value).count("race check still on") == 1
    assert not check.active
    assert check not in race.race_checks_on()


def _outside_the_buffer(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
    """A builder that breaks its contract: its node writes past the harness's buffer."""
    graph = ahg.Graph()
    try:
        graph.add_memset_node(buffer + 10**6, 0, 8)
    except ahg.HipError:
        graph.destroy()
        raise
    return graph


def _violation(**arguments: Any) -> str:
    with pytest.raises(testing.StressViolation) as raised:
        testing.stress(seed=7, **arguments)
    return str(raised.value)


def test_a_stress_violation_says_how_to_run_the_same_run_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report's ``reproduce:`` line was ``ahipgraph stress --seed N`` whatever the run:
    a run of one task, no thread and no faults was "reproduced" by 8 tasks, 2 threads and
    faults, and a run of the caller's own builders by the default one."""
    report = _violation(builders=[_outside_the_buffer], ops=5, tasks=1, threads=0, faults=False)
    assert report.endswith(
        "reproduce: stress(the same builders, seed=7, ops=5, tasks=1, threads=0, faults=False)"
    )

    def broken(run: Any, ok: bool, worker: str, invariant: str, detail: str) -> None:
        raise testing.StressViolation(run.seed, worker, invariant, detail, run.reproduce)

    harness = sys.modules["ahipgraph.testing.stress"]  # the module, not the function
    monkeypatch.setattr(harness._Run, "check", broken)  # the first check fails
    report = _violation(ops=500, tasks=1, threads=0, faults=False)
    assert report.endswith(
        "reproduce: ahipgraph stress --seed 7 --ops 500 --tasks 1 --threads 0 --no-faults"
    )
    assert _violation(duration=np.float64(30.0)).endswith(
        "reproduce: ahipgraph stress --seed 7 --duration 30.0"
    )
    assert _violation().endswith("reproduce: ahipgraph stress --seed 7")


@pytest.mark.asyncio
async def test_a_turn_asked_under_another_name_ends_the_turn_the_task_holds() -> None:
    """``turn`` "ends the task's current turn (if it holds one)": only a turn held under the
    same name was ended, so a task holding ``a``'s turn that asked for ``b``'s, next in the
    order, waited for ever behind its own turn."""
    turns = testing.Interleave("a", "b", "c")
    log: list[str] = []

    async def two_names() -> None:
        await turns.turn("a")
        log.append("a")
        await turns.turn("b")
        log.append("b")

    async def third() -> None:
        await turns.turn("c")
        log.append("c")

    async with asyncio.timeout(5):
        await asyncio.gather(two_names(), third())
    assert log == ["a", "b", "c"]
