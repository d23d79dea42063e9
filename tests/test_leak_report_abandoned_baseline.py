"""``leak_report(baseline)`` and work abandoned on both sides of a loop takeover.

A device's ``abandoned`` count covers its last owner loop only: a loop that takes the device
over starts it again. A baseline taken after one loop abandoned work must not hide the work a
later loop abandons (the same count, or a smaller one, is new work all the same).
"""

from __future__ import annotations

import asyncio
import contextlib

import ahipgraph as ahg
from ahipgraph import testing


async def _leave_running(stream: ahg.Stream) -> None:
    """Start a held kernel on ``stream`` and return with it still running."""
    held = testing.HeldKernel("left_running")
    await held.launch(stream)
    await held.started.wait()


async def _take_over(stream: ahg.Stream, out: ahg.DevicePtr) -> None:
    """Run the device on this loop: the work the last loop abandoned fails here."""
    with contextlib.suppress(ahg.LaunchFailure):
        await stream.synchronize()
    await (await stream.memset(out, 0, 8))  # work on this loop: it runs the device


def test_work_abandoned_after_a_takeover_is_reported_against_an_earlier_baseline() -> None:
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        out = device.malloc(8)
        asyncio.run(_leave_running(stream))
        assert device.statistics().abandoned == 1
        baseline = testing.snapshot()  # holds the first loop's abandoned packet
        assert testing.leak_report(baseline) is None  # nothing new since
        asyncio.run(_leave_running(stream))  # a new loop takes over, and abandons one too
        assert device.statistics().abandoned == 1
        report = testing.leak_report(baseline)
        assert report is not None
        assert "1 packet still in flight when the event loop shut down" in report
        asyncio.run(_take_over(stream, out))
        assert testing.leak_report(baseline) is None  # the program went on: nothing left
        device.free(out)
        stream.destroy()


def test_a_takeover_that_abandons_nothing_reports_nothing() -> None:
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        out = device.malloc(8)
        asyncio.run(_take_over(stream, out))
        first = testing.snapshot()
        asyncio.run(_take_over(stream, out))  # another loop takes the device over
        second = testing.snapshot()
        assert second.owners != first.owners
        assert second.handles == first.handles
        assert [d.abandoned for d in second.devices] == [d.abandoned for d in first.devices]
        assert testing.leak_report(first, second) is None
        device.free(out)
        stream.destroy()
