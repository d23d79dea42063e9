"""``ahg_device`` reports work a test left running, even after the test's loop shut down.

pytest-asyncio and anyio's plugin close a test's event loop before the synchronous
``ahg_device`` fixture tears down, and the loop's shutdown cancels an async kernel body still
running: the packet is cut short (abandoned), so ``in_flight`` is back to zero by teardown.
A test that leaves work running and drops its stream must still fail with the report, which
reads the device's ``statistics().abandoned``.
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest

import ahipgraph as ahg
from ahipgraph import testing

pytest_plugins = ["pytester"]

SUITE = textwrap.dedent(
    """
    import pytest
    from ahipgraph import testing


    @pytest.mark.asyncio
    async def test_leaves_a_held_kernel_running(ahg_device):
        stream = ahg_device.create_stream()  # dropped with the test: freed, not leaked
        held = testing.HeldKernel("left_running")
        await held.launch(stream)
        await held.started.wait()


    @pytest.fixture
    def anyio_backend():
        return "asyncio"


    @pytest.mark.anyio
    async def test_leaves_a_held_kernel_running_under_anyio(ahg_device):
        stream = ahg_device.create_stream()
        held = testing.HeldKernel("left_running")
        await held.launch(stream)
        await held.started.wait()


    @pytest.mark.asyncio
    async def test_next_test_is_clean(ahg_device):
        await ahg_device.synchronize()
    """
)


@pytest.mark.leaks_allowed("the user suite it runs in this process leaves work running on purpose")
def test_work_left_running_fails_the_test_after_its_loop_shut_down(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user_suite=SUITE)
    # The dropped stream is freed by its finalizer with a ForgottenHandleWarning, which this
    # suite's own filters would turn into an error: the user's suite does not.
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "anyio", "-W", "ignore::ahipgraph.ForgottenHandleWarning"
    )
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_a_held_kernel_running *",
            "*ahipgraph: still alive, in flight or allocated at teardown:",
            "*device 0: 1 packet still in flight when the event loop shut down (abandoned)",
            "*ERROR at teardown of test_leaves_a_held_kernel_running_under_anyio*",
            "*device 0: 1 packet still in flight when the event loop shut down (abandoned)",
        ]
    )


async def _leave_running(stream: ahg.Stream) -> None:
    """Start a held kernel on ``stream`` and return with it still running."""
    held = testing.HeldKernel("left_running")
    await held.launch(stream)
    await held.started.wait()


def test_a_loop_shutdown_counts_the_packets_it_abandoned() -> None:
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        assert device.statistics().abandoned == 0
        asyncio.run(_leave_running(stream))  # the runner cancels the held body as it shuts down
        stats = device.statistics()
        assert (stats.in_flight, stats.abandoned) == (0, 1)
        with pytest.raises(ahg.LaunchFailure, match="abandoned"):
            ahg.run(stream.synchronize())
        stream.destroy()
        report = testing.leak_report()
        assert report is not None
        assert "1 packet still in flight when the event loop shut down" in report


def test_a_loop_that_takes_the_device_over_starts_the_count_again() -> None:
    """Once another loop runs the device, the program went on: nothing is left in flight."""
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        out = device.malloc(8)

        async def go_on() -> None:
            with pytest.raises(ahg.LaunchFailure, match="abandoned"):
                await stream.synchronize()
            await (await stream.memset(out, 0, 8))  # work on this loop: it runs the device

        baseline = testing.snapshot()
        asyncio.run(_leave_running(stream))
        assert device.statistics().abandoned == 1
        asyncio.run(go_on())
        assert device.statistics().abandoned == 0
        assert testing.leak_report(baseline) is None
        device.free(out)
        stream.destroy()
