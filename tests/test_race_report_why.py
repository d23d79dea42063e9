"""What a report's ``why`` says when the later lane has joined the earlier one, but only at a
point before any of its ops: an event recorded first, then waited on, orders nothing."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy

N = 16


@ahg.kernel(extents={"out": "n"})
def fill(t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.float32]) -> None:
    out[:] = 1.0


def op_number(site: ahg.RaceSite) -> int:
    """The number in a site's "op #14 Kernel 'fill'"."""
    return int(site.op.split()[1].removeprefix("#"))


@pytest.mark.asyncio
async def test_an_event_waited_on_before_the_write_is_not_denied(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(4 * N)
    early = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        await s1.record_event(early)  # before any op of s1: the wait below orders none of them
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s2.wait_event(early)
        await s2.launch_kernel(fill, 1, N, (N, buf))
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "write-after-write"
    a, b = f"stream #{s1.hid.slot}", f"stream #{s2.hid.slot}"
    assert report.why.startswith(f"{b} has no ordering with {a}")
    # There was an event wait; what is missing is one that orders s2 after an op of s1.
    assert "links them" not in report.why
    assert f"orders {b} after one of them" in report.why
    assert report.why.endswith(f"op #{op_number(report.first)} is on {a}")
    destroy(s1, s2, buf, early)


@pytest.mark.asyncio
async def test_a_wait_that_covers_some_ops_names_the_last_one_it_covers(
    device: ahg.Device,
) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf, other = device.malloc(4 * N), device.malloc(4 * N)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        await s1.launch_kernel(fill, 1, N, (N, other))
        await s1.record_event(event)
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s2.wait_event(event)
        await s2.launch_kernel(fill, 1, N, (N, buf))
        await device.synchronize()
    (report,) = rc.reports
    a, b = f"stream #{s1.hid.slot}", f"stream #{s2.hid.slot}"
    racing = op_number(report.first)  # numbered per checker: a run-wide check counts on
    assert report.why.startswith(f"{b} knows {a} only up to op #{racing - 1} (event #")
    assert report.why.endswith(f"op #{racing} is later")
    destroy(s1, s2, buf, other, event)
