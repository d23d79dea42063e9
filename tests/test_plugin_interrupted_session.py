"""The plugin's fixtures when a test interrupts the run (Ctrl-C, ``pytest.exit``).

An interrupted test skips its own teardown: pytest tears its fixtures down while the session
finishes. A leak report raised there is no longer a test's failure but an exception out of
pytest's own ``pytest_sessionfinish``: the run crashed with a traceback and status 1 instead
of ending as interrupted. The fixtures now replace the devices and let the interrupt stand,
and show the report on the terminal as a note, so what the test left behind is still seen.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import ahipgraph

pytest_plugins = ["pytester"]


def run_interrupted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str
) -> pytest.RunResult:
    """Run the user suite in a process of its own (an interrupt is the whole run's), on this
    checkout's ahipgraph, and check that it ended without a crash of pytest's own."""
    monkeypatch.setenv("PYTHONPATH", str(Path(ahipgraph.__file__).parents[1]))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    output = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in output
    assert "Traceback" not in output
    return result


def note_shown(result: pytest.RunResult, *lines: str) -> None:
    """The report of the interrupted test is on the terminal, under the plugin's title."""
    result.stdout.fnmatch_lines(
        ["*ahipgraph: left behind by the interrupted test test_user_suite.py::test_*", *lines]
    )


SUITE = textwrap.dedent(
    """
    import pytest
    import ahipgraph as ahg
    from ahipgraph import testing

    KEPT = []  # memory kept past the test (dropped, it would still be allocated)


    @pytest.mark.asyncio
    async def test_interrupted_with_work_left_running(ahg_device):
        KEPT.append(ahg_device.malloc(8))
        held = testing.HeldKernel("left_running")
        await held.launch(ahg_device.null_stream)  # the device's own: never a forgotten handle
        await held.started.wait()
        raise {interrupt}


    def test_never_runs(ahg_device):
        raise AssertionError("the run was interrupted before this test")
    """
)


@pytest.mark.leaks_allowed("the interrupted user test leaves memory and work on purpose")
@pytest.mark.parametrize(
    ("interrupt", "status"),
    [
        ("KeyboardInterrupt", pytest.ExitCode.INTERRUPTED),
        ("pytest.exit('stop here')", pytest.ExitCode.INTERRUPTED),
        ("pytest.exit('stop here', returncode=3)", 3),
    ],
)
def test_an_interrupted_test_ends_the_run_as_interrupted_not_as_a_crash(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, interrupt: str, status: int
) -> None:
    pytester.makepyfile(test_user_suite=SUITE.format(interrupt=interrupt))
    result = run_interrupted(pytester, monkeypatch)
    assert result.ret == status
    result.assert_outcomes()  # nothing passed, failed or errored: the run stopped
    note_shown(
        result,
        "ahipgraph: still alive, in flight or allocated at teardown:",
        "device 0: 1 packet still in flight when the event loop shut down (abandoned)",
        "device 0: 1 allocation still allocated, 8 bytes in use",
    )


@pytest.mark.leaks_allowed("the interrupted user test leaves memory on purpose")
def test_the_devices_are_still_replaced_after_an_interrupt(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupted test's devices are retired: the table has its old devices back."""
    pytester.makeconftest(
        """
        from pathlib import Path
        import pytest
        import ahipgraph as ahg


        @pytest.fixture(scope="session", autouse=True)
        def table_comes_back():
            before = ahg.get_device(0)
            yield  # torn down after the interrupted test's fixtures
            back = ahg.device_count() == 1 and ahg.get_device(0) is before
            Path("table.txt").write_text("restored" if back else "not restored")
        """
    )
    pytester.makepyfile(
        test_user_suite="""
        def test_interrupted(ahg_devices):
            ahg_devices(2)[1].malloc(8)
            raise KeyboardInterrupt
        """
    )
    result = run_interrupted(pytester, monkeypatch)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (pytester.path / "table.txt").read_text() == "restored"


@pytest.mark.leaks_allowed("the interrupted user test races on purpose")
def test_a_race_report_does_not_crash_an_interrupted_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_user_suite="""
        import pytest
        import ahipgraph as ahg


        @ahg.kernel
        def add(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
            x[0] += 1


        @pytest.mark.asyncio
        async def test_races_then_interrupted(ahg_race_check, ahg_device):
            x = ahg_device.malloc(4)
            one, two = ahg_device.create_stream(), ahg_device.create_stream()
            await one.launch_kernel(add, 1, 1, (x,))
            await two.launch_kernel(add, 1, 1, (x,))
            await ahg_device.synchronize()
            one.destroy(), two.destroy(), ahg_device.free(x)
            assert ahg_race_check.reports
            raise KeyboardInterrupt
        """
    )
    result = run_interrupted(pytester, monkeypatch)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    note_shown(result, "ahipgraph: 1 race(s) found:")


@pytest.mark.leaks_allowed("the interrupted user test leaves memory on purpose")
def test_the_note_goes_to_stderr_without_the_terminal_reporter(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_user_suite="""
        def test_interrupted(ahg_device):
            ahg_device.malloc(8)
            raise KeyboardInterrupt
        """
    )
    result = run_interrupted(pytester, monkeypatch, "-p", "no:terminal")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stderr.fnmatch_lines(
        [
            "ahipgraph: left behind by the interrupted test test_user_suite.py::test_interrupted",
            "device 0: 1 allocation still allocated, 8 bytes in use",
        ]
    )
