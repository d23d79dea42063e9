"""Hostile inputs to the tooling: the command, the trace, the race checker and the test kit."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import threading
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

import ahipgraph as ahg
from ahipgraph.cli import main
from ahipgraph.testing import (
    GatedHost,
    HeldKernel,
    leak_report,
    random_graph,
    run_together,
    snapshot,
)
from ahipgraph.tools.launch_bench import measure_launch_host
from ahipgraph.tools.race import race_check


def test_the_cli_trace_writes_where_it_was_told_when_the_script_changes_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative ``-o`` was opened only after the script ran, so a script that called
    ``os.chdir`` had its trace written into its own new working directory (or failed there),
    not where the command was told and checked it could write."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = tmp_path / "script.py"
    script.write_text(f"import os\nos.chdir({str(elsewhere)!r})\n")
    try:
        status = main(["--plain", "trace", "-o", "out.json", str(script)])
    finally:
        os.chdir(tmp_path)
    assert status == 0
    assert "wrote out.json" in capsys.readouterr().out
    assert not (elsewhere / "out.json").exists()
    assert json.loads((tmp_path / "out.json").read_text())["traceEvents"] == []


def test_run_together_lets_the_started_threads_go_when_one_cannot_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A thread that could not start (the process's thread limit) left the ones already
    started waiting at the barrier for ever: the process never exited."""
    before = set(threading.enumerate())
    start = threading.Thread.start
    calls = 0

    def failing_second_start(thread: threading.Thread) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", failing_second_start)
    ran: list[int] = []
    with pytest.raises(RuntimeError, match="can't start new thread"):
        run_together(lambda: ran.append(1), lambda: ran.append(2), lambda: ran.append(3))
    monkeypatch.undo()
    assert set(threading.enumerate()) == before  # joined, none left waiting
    assert ran == []  # all or none: no target ran alone


class _AgreeingMode(str):
    """A str that says it equals anything, and prints as "raise"."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    def __str__(self) -> str:
        return "raise"


def test_race_check_refuses_a_str_subclass_that_only_claims_to_be_a_mode() -> None:
    """``on_race`` was checked with the subclass's own ``__eq__`` and then kept as its
    ``__str__``: "bogus" passed, and a "collect" became a "raise"."""
    with pytest.raises(ValueError, match="'bogus'"):
        race_check(_AgreeingMode("bogus"))
    with race_check(_AgreeingMode("collect")) as check:
        assert check.on_race == "collect"
        assert type(check.on_race) is str


class _ProgressStopped(Exception):
    pass


def _stop(done: float, detail: str) -> None:
    raise _ProgressStopped(detail)


def test_measure_launch_host_frees_what_it_made_when_its_progress_raises() -> None:
    """A progress callback that raised (the CLI's, on Ctrl-C) left the benchmark's memory
    allocated and its stream, graph and executable to the finalizers, on the device it had
    put in the table."""
    before = snapshot()  # what other tests of the process hold is theirs
    with pytest.raises(_ProgressStopped):
        measure_launch_host(rounds=1, progress=_stop)
    assert leak_report(before) is None


def test_measure_launch_host_refuses_a_progress_that_is_not_callable() -> None:
    device = ahg.get_device(0)
    with pytest.raises(TypeError, match="progress must be callable"):
        measure_launch_host(rounds=1, progress=5)  # type: ignore[arg-type]
    assert ahg.get_device(0) is device  # refused before the devices table was touched


@pytest.mark.asyncio
async def test_measure_launch_host_in_a_running_loop_makes_no_coroutine() -> None:
    """The refusal came from ``asyncio.run``, after the benchmark's coroutine was made: it
    warned "never awaited" when collected (an error under ``-W error``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeError, match="running event loop"):
            measure_launch_host(rounds=1)
        gc.collect()


@ahg.kernel
def _nothing(t: ahg.Threads) -> None:
    pass


async def _one_kernel_per_stream(streams: int) -> None:
    device = ahg.get_device(0)
    made = [device.create_stream() for _ in range(streams)]
    for stream in made:
        await stream.launch_kernel(_nothing, 1, 1)
    await device.synchronize()
    for stream in made:
        stream.destroy()


def test_a_trace_names_every_queue_of_a_device_reconfigured_with_more_queues() -> None:
    """The trace kept the queue count of the first device it saw under an ordinal: work of
    a device configured in the block with more queues landed on tracks the file never
    named."""
    with ahg.tracing() as trace:
        ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=1))
        ahg.run(_one_kernel_per_stream(1))
        ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=4))
        ahg.run(_one_kernel_per_stream(4))
    events = json.loads(trace.dumps())["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] in ("X", "i")}
    assert len({op.queue for op in trace.ops}) == 4
    assert used <= named


@pytest.mark.parametrize("raised", ["ValueError", "KeyboardInterrupt"])
def test_the_cli_trace_is_written_when_the_script_exits_with_an_unprintable_object(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    raised: str,
) -> None:
    """``sys.exit(obj)`` prints ``obj``; one whose ``__str__`` raised crashed the command in
    that print, with no trace written. Python prints nothing and exits 1."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        "class Unprintable:\n"
        "    def __str__(self):\n"
        f"        raise {raised}('str')\n"
        "sys.exit(Unprintable())\n"
    )
    output = tmp_path / "out.json"
    try:
        status = main(["--plain", "trace", "-o", str(output), str(script)])
    except BaseException as escaped:  # not left to end the test session
        pytest.fail(f"the command raised {type(escaped).__name__}")
    assert status == 1
    assert "wrote" in capsys.readouterr().out
    assert json.loads(output.read_text())["traceEvents"] == []


def _run_on_another_loop(
    enqueue: Callable[[ahg.Stream], Awaitable[object]],
    release: Callable[[], None],
    seen: threading.Event,
    test_loop: asyncio.AbstractEventLoop,
    never_woken: list[str],
) -> None:
    """On a loop of its own, enqueue the fake; once it runs, wait for the test's loop to say
    it saw ``started`` (a watchdog: that loop sleeps in its selector until something wakes
    it, and without the fix only this wake-up did)."""

    async def run() -> None:
        stream = ahg.get_device(0).create_stream()
        await enqueue(stream)
        if not await asyncio.to_thread(seen.wait, 20):
            never_woken.append("the test's loop was never woken by started")
            test_loop.call_soon_threadsafe(lambda: None)
        release()
        await stream.synchronize()
        stream.destroy()

    asyncio.run(run())


@pytest.mark.asyncio
async def test_held_kernel_started_wakes_a_test_waiting_on_another_loop() -> None:
    """``started`` was a plain ``asyncio.Event`` set by the kernel's run on its device's
    loop: a test awaiting it on another loop (thread) was marked done but never woken."""
    held = HeldKernel()
    seen = threading.Event()
    never_woken: list[str] = []
    thread = threading.Thread(
        target=_run_on_another_loop,
        args=(held.launch, held.release, seen, asyncio.get_running_loop(), never_woken),
    )
    thread.start()
    await held.started.wait()
    seen.set()
    await asyncio.to_thread(thread.join)
    assert never_woken == []


@pytest.mark.asyncio
async def test_gated_host_started_wakes_a_test_waiting_on_another_loop() -> None:
    gate = GatedHost()
    seen = threading.Event()
    never_woken: list[str] = []

    async def enqueue(stream: ahg.Stream) -> object:
        return await stream.launch_host_func(gate)

    thread = threading.Thread(
        target=_run_on_another_loop,
        args=(enqueue, gate.open, seen, asyncio.get_running_loop(), never_woken),
    )
    thread.start()
    await gate.started(0)
    seen.set()
    await asyncio.to_thread(thread.join)
    assert never_woken == []


@pytest.mark.parametrize("rng", [None, 0, "seed"])
def test_random_graph_refuses_an_rng_that_is_not_a_random(rng: object) -> None:
    """It failed with an AttributeError from its first draw."""
    buffer = ahg.get_device(0).malloc(1024)
    try:
        with pytest.raises(TypeError, match=r"rng must be a random\.Random"):
            random_graph(rng, buffer)  # type: ignore[arg-type]
    finally:
        ahg.get_device(0).free(buffer)
