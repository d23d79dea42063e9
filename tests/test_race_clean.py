"""No false reports: the examples, the stress harness and big graphs under the race checker;
the pytest fixture that fails a racing test; the environment switch."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import ahipgraph as ahg
from ahipgraph.device import hooks
from ahipgraph.runtime import observe
from ahipgraph.testing import stress

ROOT = Path(__file__).resolve().parent.parent
pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    "script", ["saxpy.py", "graph_replay.py", "capture.py", "traced_replay.py"]
)
def test_examples_run_clean_under_the_check(
    script: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.argv", [script, str(tmp_path)])
    with ahg.race_check(on_race="raise") as rc:
        runpy.run_path(str(ROOT / "examples" / script), run_name="__main__")
    assert rc.reports == []
    if not os.environ.get("AHIPGRAPH_RACE_CHECK"):  # the checker leaves no hook behind
        assert observe.observer is None
        assert hooks.observers is None


def test_stress_harness_runs_clean_under_the_check() -> None:
    with ahg.race_check(on_race="collect") as rc:
        report = stress(ops=300, seed=3)
    assert report.launches > 0
    assert rc.reports == []


def test_deeply_nested_child_graphs_are_checked_without_recursion() -> None:
    device = ahg.get_device(0)
    buf = device.malloc(64)
    top, blank = ahg.Graph(), ahg.Graph()
    inner = top
    for _ in range(2000):  # built by editing each embedded copy in place: linear
        inner = inner.add_child_graph_node(blank).params.graph
    inner.add_memset_node(buf, 1, 64)
    blank.destroy()
    inner = top
    assert inner.check_races() == []
    inner.add_memset_node(buf, 2, 64)  # beside the nest, not after it
    (report,) = inner.check_races()
    assert report.kind == "write-after-write"
    assert report.first.where.startswith("child graph of node")
    inner.destroy()
    device.free(buf)


RACY_SUITE = textwrap.dedent(
    """
    import pytest
    import ahipgraph as ahg


    @pytest.mark.asyncio
    async def test_racy(ahg_device, ahg_race_check):
        s1 = ahg_device.create_stream(non_blocking=True)
        s2 = ahg_device.create_stream(non_blocking=True)
        buf = ahg_device.malloc(64)
        await s1.memset(buf, 0, 64)
        await s2.memset(buf, 1, 64)
        await ahg_device.synchronize()
        for s in (s1, s2):
            s.destroy()
        ahg_device.free(buf)


    @pytest.mark.asyncio
    async def test_ordered(ahg_device, ahg_race_check):
        s1 = ahg_device.create_stream(non_blocking=True)
        buf = ahg_device.malloc(64)
        await s1.memset(buf, 0, 64)
        await s1.memset(buf, 1, 64)
        await s1.synchronize()
        s1.destroy()
        ahg_device.free(buf)
    """
)


def test_fixture_fails_a_racing_test_with_the_report(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user_suite=RACY_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_racy*",
            "*ahipgraph: 1 race(s) found:",
            "*race (write-after-write) on allocation*",
            "*fix:*record_event*wait_event*",
        ]
    )


def test_environment_switch_checks_a_whole_run(tmp_path: Path) -> None:
    script = tmp_path / "racy.py"
    script.write_text(
        textwrap.dedent(
            """
            import ahipgraph as ahg

            async def main():
                device = ahg.get_device(0)
                s1 = device.create_stream(non_blocking=True)
                s2 = device.create_stream(non_blocking=True)
                buf = device.malloc(64)
                await s1.memset(buf, 0, 64)
                await s2.memset(buf, 1, 64)
                await device.synchronize()

            ahg.run(main())
            """
        )
    )
    env = dict(os.environ, AHIPGRAPH_RACE_CHECK="raise")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "RaceError" in done.stderr
    assert "write-after-write" in done.stderr
    env["AHIPGRAPH_RACE_CHECK"] = "0"
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    env["AHIPGRAPH_RACE_CHECK"] = "loud"
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert "AHIPGRAPH_RACE_CHECK" in done.stderr


def test_part_of_the_suite_runs_clean_under_the_environment_switch() -> None:
    """With AHIPGRAPH_RACE_CHECK=warn and the suite's warnings-as-errors, any report fails.

    The subset holds the tests that once raced (and ``make race`` runs the whole suite
    under the switch); tests that free memory in flight on purpose assert the report inside
    their own ``race_check``.
    """
    env = dict(os.environ, AHIPGRAPH_RACE_CHECK="warn")
    files = [
        "tests/test_stream.py",
        "tests/test_exec_update.py",
        "tests/test_capture.py",
        "tests/test_faults.py",
        "tests/test_interrupts.py",
        "tests/test_stream_memops.py",
        "tests/test_event.py::test_same_program_twice_gives_the_same_timeline",
        "tests/test_multi_device.py::test_launch_on_a_peer_devices_stream_orders_both_sides",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout", "60", *files],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout
