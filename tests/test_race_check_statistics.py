"""``RaceCheck.statistics()`` is a frozen record, as every other ``statistics()`` is: it
returned a plain dict, which callers could change and whose repr named no type."""

from __future__ import annotations

import dataclasses

import pytest

import ahipgraph as ahg
from cleanup import destroy

FIELDS = (
    "lanes",
    "events",
    "pending_completions",
    "shadow_ranges",
    "ops",
    "cached_footprints",
    "reports",
)


@ahg.kernel
def put(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = 1


@pytest.mark.asyncio
async def test_a_race_checks_statistics_are_a_frozen_record(device: ahg.Device) -> None:
    buf = device.malloc(64)
    a, b = device.create_stream(), device.create_stream()
    with ahg.race_check(on_race="collect") as rc:
        before = rc.statistics()
        assert isinstance(before, ahg.RaceCheckStatistics)
        assert tuple(field.name for field in dataclasses.fields(before)) == FIELDS
        with pytest.raises(dataclasses.FrozenInstanceError):
            before.ops = 0  # type: ignore[misc]
        await a.memset(buf, 0, 64)
        await b.launch_kernel(put, 1, 1, (buf,))  # races with the memset on a
        after = rc.statistics()
        assert after.ops == before.ops + 2
        assert after.reports == before.reports + 1 == len(rc.reports)
        assert repr(after).startswith("RaceCheckStatistics(lanes=")
        assert after == dataclasses.replace(after)  # compares by value
        await a.synchronize()
        await b.synchronize()
    destroy(a, b, buf)


def test_the_record_is_exported_with_the_other_statistics_records() -> None:
    assert "RaceCheckStatistics" in ahg.__all__
    assert ahg.RaceCheckStatistics.__module__ == "ahipgraph"
