"""Attacks on the testing kit, the pytest plugin and the command line that once found a bug.

* A fault whose block was entered and never left (``__enter__`` alone, an ``ExitStack`` never
  closed, a test that failed before it got to the exit) stayed armed for the rest of the
  process: every later test's kernels failed with ``InjectedFault``, far from the cause. A
  ``fresh_devices`` block, and the ``ahg_device``/``ahg_devices`` fixtures at the end of the
  test, now disarm the faults armed in them and report them as a leak; a fault whose ``with``
  is open around a second ``ahg_devices`` call (which replaces the first call's devices
  mid-test) is the test's own and stays armed.
* ``stress()`` with a builder or progress callback that raises ``CancelledError`` returned a
  report of success (no cycle run): raised in a worker's task, or handed to it by a worker
  thread, the error read as that worker's cancellation. It is now raised as itself.
* ``ahipgraph trace -o script.py script.py`` (the two swapped, or a link to the script) ran the
  script and then wrote the trace over it: the user's source was lost. It is a usage error.
* Two ``stress()`` runs at once (from two threads, or a builder on a thread worker) replaced
  each other's devices, and reported a broken runtime invariant with a seed that reproduced
  nothing. A second run is refused with a ``RuntimeError``.
* ``HeldKernel(None)`` and ``HeldKernel("")`` made a kernel named ``"body"`` (a kernel falls
  back to its function's name) while the fake's ``name`` said None or "": a
  ``fail_kernels(name=held.name)`` then faulted every kernel. Such names are refused.
* ``stress(duration=...)`` whose builder's graph never finishes (a kernel that never returns)
  never returned: the drain after the workers stop is shielded and waited for ever (Ctrl-C
  too). The drain is bounded by ``DRAIN_TIMEOUT_S`` and ends the run with a violation.
* A builder that returned a destroyed graph was reported as a broken runtime invariant ("8:
  the runtime keeps working"), and the harness's user object for it was left to the
  collector. It is now a ``ValueError`` naming the builder, and nothing is forgotten.
"""

from __future__ import annotations

import asyncio
import random
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.cli import main

pytest_plugins = ["pytester"]


@ahg.kernel
def _add(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += value


async def _add_one() -> int:
    device = ahg.get_device(0)
    x = device.malloc(4)
    stream = device.create_stream()
    try:
        await (await stream.launch_kernel(_add, 1, 1, (1, x)))
        return int(device.view(x, "int32", 1)[0])
    finally:
        stream.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_a_fault_left_armed_in_a_fresh_devices_block_is_disarmed_and_reported() -> None:
    kernels = testing.fail_kernels(None)
    allocations = testing.fail_allocations(None, nbytes=12345)
    hang = testing.hang_kernels(None, name="nothing-is-called-this")
    block = testing.fresh_devices(1)
    block.__enter__()
    kernels.__enter__()
    allocations.__enter__()
    hang.__enter__()  # never left either
    with pytest.raises(testing.LeakError) as caught:
        block.__exit__(None, None, None)
    text = str(caught.value)
    assert text.count("fault injection still armed") == 3
    for kind in ("KernelFault", "AllocationFault", "KernelHang"):
        assert kind in text
    # Disarmed: the next block's kernels and allocations are not failed.
    with testing.fresh_devices(1):
        assert await _add_one() == 1
        ahg.get_device(0).free(ahg.get_device(0).malloc(12345))


@pytest.mark.asyncio
async def test_a_fault_armed_around_a_fresh_devices_block_stays_armed() -> None:
    with testing.fail_kernels(None, name="_add") as fault:
        with testing.fresh_devices(1), pytest.raises(ahg.LaunchFailure):
            await _add_one()
        # Still the caller's fault, still armed in the next block.
        with testing.fresh_devices(1), pytest.raises(ahg.LaunchFailure):
            await _add_one()
    assert fault.hits == 2


def test_a_fault_left_armed_by_a_failing_test_does_not_fail_the_next_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_suite=textwrap.dedent(
            """
            import pytest
            import ahipgraph as ahg
            from ahipgraph import testing

            @ahg.kernel
            def add(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
                x[0] += value

            KEPT = []

            def test_arms_a_fault_and_fails(ahg_device):
                fault = testing.fail_kernels(None)
                KEPT.append(fault)
                fault.__enter__()  # the exit was to come at the end of the test
                assert False, "the test failed first"

            @pytest.mark.asyncio
            async def test_next(ahg_device):
                x = ahg_device.malloc(4)
                stream = ahg_device.create_stream()
                try:
                    await (await stream.launch_kernel(add, 1, 1, (1, x)))
                finally:
                    stream.destroy()
                    ahg_device.free(x)

            def test_arms_a_fault_and_passes(ahg_device):
                KEPT.append(testing.fail_allocations(None))
                KEPT[-1].__enter__()

            def test_after(ahg_device):
                ahg_device.free(ahg_device.malloc(4))
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=1, errors=2)
    result.stdout.fnmatch_lines(["*fault injection still armed*AllocationFault*"])
    assert "InjectedFault" not in result.stdout.str()


def _cancelling_builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
    raise asyncio.CancelledError  # user code, not a cancellation of the worker


def _cancelling_progress(report: testing.StressReport) -> None:
    raise asyncio.CancelledError


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (0, 1)])
def test_stress_raises_a_cancelled_error_its_builder_raised(tasks: int, threads: int) -> None:
    before = testing.snapshot()
    with pytest.raises(asyncio.CancelledError):
        testing.stress([_cancelling_builder], ops=5, tasks=tasks, threads=threads, faults=False)
    assert testing.leak_report(before) is None


def test_stress_raises_a_cancelled_error_its_progress_callback_raised() -> None:
    with pytest.raises(asyncio.CancelledError):
        testing.stress(ops=5, tasks=1, threads=0, faults=False, progress=_cancelling_progress)


@pytest.mark.parametrize("spelling", ["same", "link", "dotted"])
def test_trace_refuses_to_write_the_trace_over_its_own_script(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    spelling: str,
) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    source = f"open({str(marker)!r}, 'w').close()\n"
    script.write_text(source)
    output = {"same": str(script), "link": "link.py", "dotted": "./script.py"}[spelling]
    if spelling == "link":
        (tmp_path / "link.py").symlink_to(script)
    with pytest.raises(SystemExit) as exit_info:
        main(["--plain", "trace", "-o", output, str(script)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "is the script itself" in err
    assert not marker.exists()
    assert script.read_text() == source


def test_trace_writes_beside_its_script_under_another_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "script.py"
    script.write_text("print('ran')\n")
    assert main(["--plain", "trace", "-o", "script.json", "script.py"]) == 0
    assert "ran" in capsys.readouterr().out
    assert (tmp_path / "script.json").read_text().startswith("{")


def test_a_second_stress_run_started_while_one_runs_is_refused() -> None:
    """A builder on a thread worker (no event loop runs there) starts a second run: it used
    to take the first run's devices away, and one of the two reported a broken invariant."""
    refused: list[BaseException] = []

    def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        if not refused:
            try:
                testing.stress(ops=1, tasks=1, threads=0, faults=False)
            except RuntimeError as error:
                refused.append(error)
        return testing.random_graph(rng, buffer)

    report = testing.stress([builder], ops=3, tasks=0, threads=1, faults=False)
    assert report.cycles >= 1
    assert len(refused) == 1
    assert "another stress() run is in progress" in str(refused[0])
    # The lock is given back: the next run starts.
    assert testing.stress(ops=1, tasks=1, threads=0, faults=False).ops >= 1


@pytest.mark.asyncio
async def test_a_fault_open_around_a_second_ahg_devices_call_stays_armed(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> None:
    """``ahg_devices`` again replaces the devices of its first call: a fault whose ``with``
    is still open around that call is the test's, not a left-over to disarm."""
    with testing.fail_kernels(None, name="_add") as fault:
        ahg_devices(2)
        with pytest.raises(ahg.LaunchFailure):
            await _add_one()
    assert fault.hits == 1


@pytest.mark.parametrize(("name", "error"), [(None, TypeError), ("", ValueError), (5, TypeError)])
def test_held_kernel_refuses_a_name_its_kernel_would_not_have(
    name: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="name"):
        testing.HeldKernel(name)  # type: ignore[arg-type]


def test_held_kernel_name_is_its_kernel_name() -> None:
    held = testing.HeldKernel("mine")
    assert held.kernel.name == held.name == "mine"


async def _never_returns(t: ahg.Threads) -> None:
    await asyncio.Event().wait()


_HUNG = ahg.Kernel(_never_returns, name="never-returns")


def _hanging_builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_kernel_node(_HUNG, 1, 1, ())
    return graph


def test_a_timed_stress_run_whose_work_never_finishes_ends_with_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drain after the workers stop is shielded: a builder's kernel that never returned
    kept a ``duration=`` run (and one stopped by Ctrl-C) waiting for ever."""
    monkeypatch.setattr(sys.modules["ahipgraph.testing.stress"], "DRAIN_TIMEOUT_S", 0.2)
    before = testing.snapshot()
    outcome: list[BaseException | testing.StressReport] = []

    def run() -> None:
        try:
            outcome.append(
                testing.stress([_hanging_builder], duration=0.2, tasks=1, threads=0, faults=False)
            )
        except BaseException as error:  # handed to the test's thread
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=20)  # a hang detector only: the run ends well before
    assert not worker.is_alive(), "stress() never returned"
    (error,) = outcome
    assert isinstance(error, testing.StressViolation)
    assert error.invariant == "the device finishes its work once the workers stop"
    assert "1 packet(s) still in flight" in str(error)
    assert testing.leak_report(before) is None


def _destroyed_graph_builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
    graph = testing.random_graph(rng, buffer)
    graph.destroy()
    return graph


@pytest.mark.parametrize(("tasks", "threads"), [(1, 0), (0, 1)])
def test_stress_names_a_builder_that_returns_a_destroyed_graph(tasks: int, threads: int) -> None:
    """It was reported as the runtime failing (invariant 8), and the harness's user object for
    the graph was left to the collector (a ForgottenHandleWarning, an error here)."""
    before = testing.snapshot()
    with pytest.raises(ValueError, match="_destroyed_graph_builder returned a destroyed graph"):
        testing.stress(
            [_destroyed_graph_builder], ops=3, tasks=tasks, threads=threads, faults=False
        )
    ahg.collect_forgotten()  # a forgotten owner would warn here, naming this test
    assert testing.leak_report(before) is None
