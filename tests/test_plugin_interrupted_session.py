"""The plugin's fixtures when a test interrupts the run (Ctrl-C, ``pytest.exit``).

An interrupted test skips its own teardown: pytest tears its fixtures down while the session
finishes. A leak report raised there is no longer a test's failure but an exception out of
pytest's own ``pytest_sessionfinish``: the run crashed with a traceback and status 1 instead
of ending as interrupted. The fixtures now replace the devices and let the interrupt stand.
"""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

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
    pytester: pytest.Pytester, interrupt: str, status: int
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user_suite=SUITE.format(interrupt=interrupt))
    recorder = pytester.inline_run("-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert recorder.ret == status
    passed, skipped, failed = recorder.listoutcomes()
    assert (passed, skipped, failed) == ([], [], [])


@pytest.mark.leaks_allowed("the interrupted user test leaves memory on purpose")
def test_the_devices_are_still_replaced_after_an_interrupt(pytester: pytest.Pytester) -> None:
    """The interrupted test's device is retired: the table has its old devices back."""
    import ahipgraph as ahg

    before = ahg.get_device(0)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        test_user_suite="""
        def test_interrupted(ahg_devices):
            ahg_devices(2)[1].malloc(8)
            raise KeyboardInterrupt
        """
    )
    recorder = pytester.inline_run("-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert recorder.ret == pytest.ExitCode.INTERRUPTED
    assert ahg.device_count() == 1
    assert ahg.get_device(0) is before


@pytest.mark.leaks_allowed("the interrupted user test races on purpose")
def test_a_race_report_does_not_crash_an_interrupted_run(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
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
    recorder = pytester.inline_run("-p", "no:cacheprovider", no_reraise_ctrlc=True)
    assert recorder.ret == pytest.ExitCode.INTERRUPTED
