"""The surfaces around the core under misuse: each test is a misuse that once broke them.

The command line with arguments that make no sense, ``ahg.run`` with a truthy non-bool, the
stress harness and the launch benchmark with counts that used to mean something else, and
``Completion`` objects made by hand. Each bad call fails at once with a clear error and runs
nothing.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.cli import main
from ahipgraph.device import hooks
from ahipgraph.testing import (
    exhaust_signal_sets,
    fail_allocations,
    fail_kernels,
    hang_kernels,
    stress,
)
from ahipgraph.tools.launch_bench import measure_launch_host
from cli_scripts import one_memset_script


@ahg.kernel
def _add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["stress", "--ops", "-1"],
        ["stress", "--ops", "0"],
        ["stress", "--ops", "many"],
        ["stress", "--tasks", "-3"],
        ["stress", "--threads", "-1"],
        ["stress", "--tasks", "0", "--threads", "0"],
        ["stress", "--duration", "-1"],
        ["stress", "--duration", "nan"],
        ["stress", "--duration", "inf"],
        ["bench", "--rounds", "0"],
        ["bench", "--rounds", "-1"],
        ["bench", "--full", "--json", "/nonexistent-dir/launch.json"],
        ["trace", "/nonexistent-dir/script.py"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_the_cli_refuses_bad_arguments_with_one_line_and_no_traceback(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative or zero count, a NaN or infinite duration, no worker, a missing script or
    an unwritable output is a usage error (exit status 2) whose last line says what is wrong;
    it used to run anyway (a negative count meant "none") or die with a traceback at the end."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("ahipgraph")
    assert "error:" in err.strip().splitlines()[-1]


def test_the_cli_trace_refuses_a_directory_as_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", "trace", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "no script file" in capsys.readouterr().err


def test_the_cli_trace_refuses_an_output_in_a_missing_directory_before_running_the_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The trace was written only after the script had run, so a bad ``-o`` lost the run."""
    ran = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", "trace", "-o", str(tmp_path / "missing" / "t.json"), str(script)])
    assert exit_info.value.code == 2
    assert not ran.exists()
    with pytest.raises(SystemExit):
        main(["--plain", "trace", "-o", str(tmp_path), str(script)])
    assert "is a directory" in capsys.readouterr().err
    assert not ran.exists()


@pytest.mark.parametrize(
    ("ending", "status"),
    [
        ("raise SystemExit(main())", 0),
        ("main()\nraise SystemExit(3)", 3),
        ("main()\nraise SystemExit('no')", 1),
    ],
)
def test_the_cli_trace_writes_the_trace_of_a_script_that_ends_with_system_exit(
    tmp_path: Path,
    ending: str,
    status: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``raise SystemExit(main())`` ends most scripts; it used to skip writing the trace and
    exit 0 with nothing said. Now the trace is written and the script's status is the
    command's."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command hands the script its own
    script = one_memset_script(
        tmp_path, f"def main():\n    ahg.run(work)\n    return 0\n{ending}\n"
    )
    output = tmp_path / "trace.json"
    assert main(["--plain", "trace", "-o", str(output), str(script)]) == status
    assert output.exists()
    assert "1 ops" in capsys.readouterr().out


# -- the library calls behind it -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"ops": 0}, ValueError),
        ({"ops": -5}, ValueError),
        ({"ops": True}, TypeError),
        ({"ops": 2.5}, TypeError),
        ({"duration": -1.0}, ValueError),
        ({"duration": math.nan}, ValueError),
        ({"duration": math.inf}, ValueError),
        ({"duration": "1"}, TypeError),
        ({"tasks": -1}, ValueError),
        ({"threads": -1}, ValueError),
        ({"tasks": 0, "threads": 0}, ValueError),
        ({"seed": None}, TypeError),
    ],
)
def test_stress_refuses_limits_that_would_run_something_else(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """``stress(ops=0)`` still ran a cycle and ``tasks=-3`` ran as if it were 0: now each is
    refused before the devices table is touched."""
    device_before = ahg.get_device(0)
    with pytest.raises(error):
        stress(**kwargs)
    assert ahg.get_device(0) is device_before


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"builders": []}, ValueError),
        ({"builders": None}, TypeError),
        ({"builders": [5]}, TypeError),
        ({"faults": "no"}, TypeError),
        ({"progress": 5}, TypeError),
    ],
    ids=["no-builder", "builders-none", "builder-not-callable", "faults-str", "progress-int"],
)
def test_stress_refuses_builders_faults_and_progress_that_are_not_what_it_needs(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """An empty builder list and a non-callable builder or progress failed inside a worker as
    an ExceptionGroup; ``faults="no"`` injected faults. Each is refused up front."""
    device_before = ahg.get_device(0)
    with pytest.raises(error):
        stress(**{"ops": 20, "tasks": 1, "threads": 0, **kwargs})
    assert ahg.get_device(0) is device_before


def test_an_error_from_the_stress_progress_callback_surfaces_as_itself() -> None:
    """It used to come out wrapped in an ExceptionGroup from the harness's task group (the
    callback runs once at the start, so the error is certain)."""

    def progress(report: Any) -> None:
        raise LookupError("progress broke")

    with pytest.raises(LookupError, match="progress broke"):
        stress(ops=200, tasks=1, threads=0, faults=False, progress=progress)


@pytest.mark.parametrize("faults", [np.True_, np.False_], ids=str)
def test_stress_takes_numpy_s_bool_for_faults(faults: Any) -> None:
    """``faults`` is a switch, as ``set_node_enabled``'s flag is: numpy's bool (a comparison's
    result) switches it like Python's, where it used to be refused."""
    report = stress(ops=300, tasks=1, threads=0, seed=3, faults=faults)
    assert report.ops >= 300
    assert (report.faults > 0) is bool(faults)


@pytest.mark.asyncio
async def test_stress_inside_a_running_loop_says_why_it_cannot_run() -> None:
    with pytest.raises(RuntimeError, match="outside a running one"):
        stress(ops=20, tasks=1, threads=0)


@pytest.mark.parametrize(
    ("rounds", "error"), [(0, ValueError), (-1, ValueError), (True, TypeError)]
)
def test_the_launch_benchmark_refuses_rounds_that_give_no_median(
    rounds: Any, error: type[Exception]
) -> None:
    device_before = ahg.get_device(0)
    with pytest.raises(error):
        measure_launch_host(rounds=rounds)
    assert ahg.get_device(0) is device_before


# -- ahg.run ---------------------------------------------------------------------------------------


async def _answer() -> int:
    return 42


@pytest.mark.parametrize("flag", ["yes", "no", "", 1, 0, None])
def test_run_refuses_a_use_uvloop_that_is_not_a_bool(flag: Any) -> None:
    """``use_uvloop="no"`` was truthy and picked uvloop; a non-bool is now a TypeError and the
    coroutine handed in is closed, not left to warn that it was never awaited."""
    coroutine = _answer()
    with pytest.raises(TypeError, match="use_uvloop must be a bool"):
        ahg.run(coroutine, use_uvloop=flag)
    assert coroutine.cr_frame is None  # closed
    with pytest.raises(TypeError):
        ahg.run(_answer, use_uvloop=flag)
    assert ahg.run(_answer, use_uvloop=False) == 42


# -- Completion -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [(None, None), (object(), object()), ("signal", None)],
    ids=["nones", "objects", "strings"],
)
def test_a_completion_made_by_hand_from_anything_else_is_refused_at_once(
    args: tuple[Any, Any],
) -> None:
    """A hand-made ``Completion(None, None)`` used to be built and then raise AttributeError
    at ``done()`` or ``await``, far from the mistake."""
    with pytest.raises(TypeError, match="comes from an enqueue or a launch"):
        ahg.Completion(*args)


@pytest.mark.asyncio
async def test_a_completion_awaited_twice_and_from_two_tasks_gives_the_same_outcome(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    completion = await stream.memset(out, 0, 8)
    first, second = await asyncio.gather(completion.wait(), completion.wait())
    assert first is None
    assert second is None
    await completion  # a third time, once done
    assert completion.done()
    assert completion.exception() is None
    stream.destroy()
    device.free(out)


# -- fault injection -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("maker", "kwargs", "error"),
    [
        (fail_kernels, {"count": -1}, ValueError),
        (fail_kernels, {"count": True}, TypeError),
        (fail_kernels, {"count": "x"}, TypeError),
        (fail_kernels, {"count": 2.5}, TypeError),
        (fail_kernels, {"name": 5}, TypeError),
        (hang_kernels, {"count": -1}, ValueError),
        (hang_kernels, {"count": "x"}, TypeError),
        (fail_allocations, {"count": -1}, ValueError),
        (fail_allocations, {"count": "x"}, TypeError),
        (fail_allocations, {"device": "0"}, TypeError),
        (fail_allocations, {"nbytes": -8}, ValueError),
    ],
)
def test_a_fault_maker_refuses_a_filter_that_would_match_nothing_or_break(
    maker: Any, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    """``fail_kernels(count=-1)`` injected nothing, ``count="x"`` failed the kernel with a
    TypeError of the fault's own and ``name=5`` never matched: each is refused on entry, and
    no observer is left installed."""
    observers_before = hooks.observers
    with pytest.raises(error), maker(**kwargs):
        pytest.fail("the block must not run")
    assert hooks.observers == observers_before


def test_exhaust_signal_sets_refuses_what_is_not_an_executable() -> None:
    with pytest.raises(TypeError, match="expected a GraphExec"), exhaust_signal_sets(None):  # type: ignore[arg-type]
        pytest.fail("the block must not run")


@pytest.mark.asyncio
async def test_fail_kernels_with_a_zero_count_fails_nothing(device: ahg.Device) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    with fail_kernels(0) as fault:
        await (await stream.launch_kernel(_add_one, 1, 1, (out,)))
    assert fault.hits == 0
    stream.destroy()
    device.free(out)
