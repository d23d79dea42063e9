"""The dynamic checker's cheap per-op bookkeeping gives the reports the full bookkeeping gave.

Sites are kept as code and offset and made text only for a report; a common eager op on a
known non-blocking stream is planned in one pass; a kernel pointer's allocation is found once
for its range and its shadow list. Each must name the same lines and see the same bytes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.race_reports import user_site
from ahipgraph.testing import HeldKernel, fresh_devices
from ahipgraph.tools.race_sites import capture, site_text, text
from cleanup import destroy

SOURCE = Path(__file__).read_text().splitlines()
# Under AHIPGRAPH_RACE_CHECK the whole run is one outer check: its tables hold other tests' too.
WHOLE_RUN = bool(os.environ.get("AHIPGRAPH_RACE_CHECK", "").strip("0 "))


def line_of(marker: str) -> str:
    """``test_race_sites.py:N`` of the one line ending with ``# <marker>``."""
    (number,) = [i + 1 for i, text in enumerate(SOURCE) if text.endswith(f"# {marker}")]
    return f"test_race_sites.py:{number}"


def both() -> tuple[str | None, str | None]:
    """The caller's line, lazily and eagerly (the caller is this file: user code)."""
    return site_text(capture(1)), user_site(2)


@ahg.kernel
def scribble(t: ahg.Threads, out: ahg.Ptr[ahg.uint8]) -> None:
    out[0] = 1


def test_a_site_names_the_line_user_site_names() -> None:
    lazy, eager = both()  # plain
    assert lazy == eager
    assert (lazy or "").endswith(line_of("plain"))
    sites = [both() for _ in range(3)]  # comprehension
    assert {lazy for lazy, _ in sites} == {eager for _, eager in sites}
    assert (sites[0][0] or "").endswith(line_of("comprehension"))
    lazy, eager = both(
        # a call over several lines
    )  # continued
    assert lazy == eager
    late = (lambda: both())()  # lambda
    assert late[0] == late[1]
    assert (late[0] or "").endswith(line_of("lambda"))

    def generator() -> Any:
        yield both()  # generator
        yield both()  # resumed

    first, second = generator()
    assert first[0] == first[1]
    assert second[0] == second[1]
    assert (second[0] or "").endswith(line_of("resumed"))
    assert site_text(None) is None


def test_a_capture_deeper_than_the_stack_fails_as_getframe_does() -> None:
    frames = 0
    frame: Any = sys._getframe()
    while frame is not None:
        frames += 1
        frame = frame.f_back
    with pytest.raises(ValueError):
        capture(frames + 1)


def test_a_reason_is_joined_from_its_parts_when_shown() -> None:
    site = capture(0)  # reason
    where = ("event #", 3, " recorded at ", site)
    assert text(where) == f"event #3 recorded at {site_text(site)}"
    assert text((where, ", waited at ", None)) == f"{text(where)}, waited at None"
    assert text(where).endswith(line_of("reason"))
    assert text("plain") == "plain"
    assert text(7) == "7"


@pytest.mark.asyncio
async def test_a_report_names_each_ops_line_and_the_events_lines(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        buf = device.malloc(64)  # allocated
        await s1.memset(buf, 0, 8)
        await s2.memset(buf + 32, 0, 8)  # both lanes known: the one-pass plan from here on
        await device.synchronize()
        await s1.launch_kernel(scribble, 1, 1, (buf,))  # ordered
        await s1.record_event(event)  # recorded
        await s2.wait_event(event)  # waited
        await s1.launch_kernel(scribble, 1, 1, (buf,))  # first
        await s2.memset(buf, 0, 64)  # second
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "write-after-write"
    assert (report.first.source or "").endswith(line_of("first"))
    assert (report.second.source or "").endswith(line_of("second"))
    assert f"recorded on stream #{s1.hid.slot} at " in report.why
    assert f"{line_of('recorded')}, waited at " in report.why
    assert f"{line_of('waited')}); op #" in report.why
    assert line_of("first") in report.fix
    assert line_of("second") in report.fix
    assert (report.first.precision, report.second.precision) == ("conservative", "exact")
    assert line_of("allocated") in report.allocation
    destroy(s1, s2, event)
    device.free(buf)


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_racing_op_of_known_streams(device: ahg.Device) -> None:
    buf = device.malloc(64)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="raise") as rc:
        await s1.memset(buf, 0, 32)
        await s2.memset(buf + 32, 0, 32)  # disjoint: both lanes now known
        await device.synchronize()
        await s1.launch_kernel(scribble, 1, 1, (buf,))
        before = rc.statistics()
        submitted = s2.submitted
        with pytest.raises(ahg.RaceError) as caught:
            await s2.memset(buf + 40, 0, 8)  # refused
        after = rc.statistics()  # the clocks and shadow did not move (a memo may grow)
        assert replace(after, cached_footprints=0) == replace(
            before, reports=1, cached_footprints=0
        )
        assert s2.submitted == submitted  # nothing enqueued
        (report,) = caught.value.reports
        assert (report.second.source or "").endswith(line_of("refused"))
        await device.synchronize()
    destroy(s1, s2)
    device.free(buf)


async def racing_kernel_and_fill(device: ahg.Device, nbytes: int) -> ahg.DevicePtr:
    """A kernel over a new ``nbytes`` allocation and a fill of its last bytes, unordered."""
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(nbytes)
    await s1.memset(buf, 0, 8)
    await s2.memset(buf + nbytes - 8, 0, 8)  # both lanes known: the one-pass plan
    await device.synchronize()
    await s1.launch_kernel(scribble, 1, 1, (buf,))  # reaches the end of the allocation
    await s2.memset(buf + nbytes - 8, 0, 8)
    await device.synchronize()
    destroy(s1, s2, buf)
    return buf


@pytest.mark.leaks_allowed("replaces the devices inside the test")
def test_an_address_handed_out_again_is_seen_at_its_new_size() -> None:
    with ahg.race_check(on_race="collect") as rc:
        with fresh_devices(1) as (first,):
            small = asyncio.run(racing_kernel_and_fill(first, 256))
        with fresh_devices(1) as (second,):  # a new memory: the same addresses again
            big = asyncio.run(racing_kernel_and_fill(second, 4096))
    assert small.address == big.address
    assert [(r.first.start, r.first.end, r.second.start) for r in rc.reports] == [
        (small.address, small.address + 256, small.address + 248),
        (big.address, big.address + 4096, big.address + 4088),
    ]
    assert ["256 B" in rc.reports[0].allocation, "4096 B" in rc.reports[1].allocation] == [
        True,
        True,
    ]


@pytest.mark.asyncio
async def test_a_redeclared_kernel_is_seen_with_its_new_annotations(device: ahg.Device) -> None:
    buf = device.malloc(64)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)

    @ahg.kernel
    def look(t: ahg.Threads, src: ahg.Ptr[ahg.uint8]) -> None:
        pass

    reports = []
    for _ in range(2):
        with ahg.race_check(on_race="collect") as rc:
            await s1.memset(buf, 0, 8)
            await s2.memset(buf + 32, 0, 8)
            await device.synchronize()
            await s1.launch_kernel(look, 1, 1, (buf,))
            await s2.launch_kernel(look, 1, 1, (buf,))
            await device.synchronize()
        reports.append(len(rc.reports))

        @ahg.kernel  # the same name, now read-only: two readers never race
        def look(t: ahg.Threads, src: ahg.ConstPtr[ahg.uint8]) -> None:  # type: ignore[no-redef]
            pass

    assert reports == [1, 0]
    destroy(s1, s2)
    device.free(buf)


@pytest.mark.asyncio
async def test_a_host_source_changed_in_flight_is_caught_on_a_known_stream(
    device: ahg.Device,
) -> None:
    buf = device.malloc(64)
    stream = device.create_stream(non_blocking=True)
    host = np.zeros(16, np.float32)
    held = HeldKernel()
    with ahg.race_check(on_race="collect") as rc:
        await stream.memset(buf, 0, 64)  # the lane is known: the copy takes the one-pass plan
        await held.launch(stream)
        await stream.memcpy(buf, host)  # copy
        host[0] = 5.0  # the copy has not run yet
        held.release()
        await stream.synchronize()
    (report,) = rc.reports
    assert report.kind == "host-write-during-copy"
    assert (report.first.source or "").endswith(line_of("copy"))
    destroy(stream)
    device.free(buf)


@pytest.mark.asyncio
async def test_kept_footprints_are_dropped_when_the_memory_frees_anything(
    device: ahg.Device,
) -> None:
    a, b, spare = device.malloc(256), device.malloc(256), device.malloc(64)
    s1 = device.create_stream(non_blocking=True)
    host = np.zeros(16, np.uint8)
    with ahg.race_check(on_race="raise") as rc:
        await s1.memset(a, 0, 8)  # the lane's first op: planned the general way
        kept = 0
        for round in range(3):
            await s1.launch_kernel(scribble, 1, 1, (a,))
            await s1.launch_kernel(scribble, 1, 1, (a + 16,))  # another range
            await s1.memset(b, 0, 8)
            await s1.memcpy(b + 8, host)
            if round == 0:
                kept = rc.statistics().cached_footprints  # (an outer check keeps others)
        assert kept >= 4
        assert rc.statistics().cached_footprints == kept  # made once each
        await s1.synchronize()
        device.free(spare)  # any free: extents may have changed
        await s1.launch_kernel(scribble, 1, 1, (a,))
        assert rc.statistics().cached_footprints == kept - 3  # this device's: made again
        await s1.synchronize()
    destroy(s1, a, b)


@pytest.mark.asyncio
async def test_a_kept_footprint_gives_the_report_the_full_plan_gives(device: ahg.Device) -> None:
    buf = device.malloc(256)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    host = np.zeros(32, np.uint8)
    with ahg.race_check(on_race="collect") as rc:
        await s1.memset(buf, 0, 8)
        await s2.memset(buf + 128, 0, 8)
        await device.synchronize()
        for _ in range(2):  # the second round's footprints are the kept ones
            await s1.launch_kernel(scribble, 1, 1, (buf + 64,))
            await s2.memcpy(buf + 96, host)
            await device.synchronize()
    first, second = rc.reports
    for report in (first, second):
        assert report.kind == "write-after-write"
        assert (report.first.start, report.first.end) == (buf.address + 64, buf.address + 256)
        assert report.first.precision == "conservative"
        assert (report.second.start, report.second.end) == (buf.address + 96, buf.address + 128)
        assert report.second.precision == "exact"
    destroy(s1, s2, buf)


@pytest.mark.asyncio
async def test_the_nowait_forms_name_the_users_lines_too(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    event = device.create_event()
    buf = device.malloc(64)
    with ahg.race_check(on_race="collect") as rc:
        s1.memset_nowait(buf, 0, 8)
        s2.memset_nowait(buf + 32, 0, 8)
        await device.synchronize()
        s1.launch_kernel_nowait(scribble, 1, 1, (buf,))
        s1.record_event_nowait(event)  # nowait recorded
        s2.wait_event_nowait(event)  # nowait waited
        s1.launch_kernel_nowait(scribble, 1, 1, (buf,))  # nowait first
        s2.memset_nowait(buf, 0, 64)  # nowait second
        await device.synchronize()
    (report,) = rc.reports
    assert (report.first.source or "").endswith(line_of("nowait first"))
    assert (report.second.source or "").endswith(line_of("nowait second"))
    assert f"{line_of('nowait recorded')}, waited at " in report.why
    assert f"{line_of('nowait waited')}); op #" in report.why
    destroy(s1, s2, event, buf)


@pytest.mark.asyncio
async def test_completions_the_host_knows_are_forgotten_at_a_synchronisation(
    device: ahg.Device,
) -> None:
    a, b = device.malloc(64), device.malloc(64)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="raise") as rc:
        for _ in range(100):
            await s1.memset(a, 1, 64)
        last = None
        for _ in range(70):
            last = await s2.memset(b, 2, 64)
        pending = rc.statistics().pending_completions  # (an outer check keeps others)
        await s1.synchronize()  # the host knows s1's ops now, not s2's
        if not WHOLE_RUN:  # a fresh table: the scan's counts are exact
            assert pending == 170
            assert rc.statistics().pending_completions == 70
        assert last is not None
        await last  # still known: awaiting it orders the host after s2's fills
        assert int(device.view(b, "uint8", 1, readonly=True)[0]) == 2  # no race
        for _ in range(100):
            await s1.memset(a, 1, 64)
        await device.synchronize()  # a scan once the table doubled since the last one
        if not WHOLE_RUN:
            assert rc.statistics().pending_completions == 0
        await last  # forgotten: awaiting it teaches the host nothing, and fails nothing
        assert int(device.view(a, "uint8", 1, readonly=True)[0]) == 1
    assert rc.reports == []
    destroy(s1, s2, a, b)


def test_an_enqueue_that_fails_after_its_plan_changes_no_clock(device: ahg.Device) -> None:
    buf = device.malloc(64)
    s1 = device.create_stream(non_blocking=True)

    async def warm() -> None:
        await s1.memset(buf, 0, 8)
        await s1.memset(buf, 0, 8)  # the lane is known: the one-pass plan from now on
        await s1.synchronize()

    with ahg.race_check(on_race="raise") as rc:
        asyncio.run(warm())
        before = rc.statistics()
        with pytest.raises(RuntimeError):  # no running event loop: the submit fails
            s1.memset_nowait(buf, 0, 8)
        after = rc.statistics()
        assert replace(after, cached_footprints=0) == replace(before, cached_footprints=0)
        asyncio.run(warm())  # and the checker goes on from where it was
    assert rc.reports == []
    destroy(s1, buf)


@pytest.mark.asyncio
async def test_a_plan_overtaken_before_its_commit_is_made_again(device: ahg.Device) -> None:
    from ahipgraph.runtime.params import MemsetParams
    from ahipgraph.tools.race import _CHECKER

    buf = device.malloc(64)
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        await s1.memset(buf, 0, 8)
        await s2.memset(buf + 32, 0, 8)
        await device.synchronize()
        params = MemsetParams.make(buf, 1, 8)

        def submit() -> Any:  # another call changes the clocks between plan and commit
            s2.record_event_nowait(event)
            return s1._submit_op(params.op(device))

        _CHECKER.enqueue(s1, params, submit)  # overtaken
        await s2.memset(buf, 2, 8)  # unordered with the overtaken op
        await device.synchronize()
    (report,) = rc.reports
    assert report.first.op.endswith("Memset")
    assert (report.first.source or "").endswith(line_of("overtaken"))
    assert (report.second.source or "").endswith(line_of("unordered with the overtaken op"))
    destroy(s1, s2, event, buf)
