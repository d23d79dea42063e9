"""The tooling's exceptions: copied and pickled.

Python copies and pickles an exception by calling its class again with ``args``, which for
these two is the finished message alone. ``StressViolation(message)`` then failed with a
``TypeError`` (its constructor takes seed, worker, invariant and detail), so a violation
could not leave a worker process nor be copied; ``RaceError(message)`` took the message's
characters for reports and came back as "13 races found" followed by one letter a line.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import pytest

import ahipgraph as ahg
from ahipgraph.testing import StressViolation

_ROUND_TRIPS: list[Callable[[BaseException], BaseException]] = [
    copy.copy,
    copy.deepcopy,
    lambda error: pickle.loads(pickle.dumps(error)),
]


@pytest.mark.parametrize("round_trip", _ROUND_TRIPS, ids=["copy", "deepcopy", "pickle"])
def test_a_stress_violation_survives_a_copy(
    round_trip: Callable[[BaseException], BaseException],
) -> None:
    violation = StressViolation(7, "task-2", "3: no stale handle", "detail text")
    again = round_trip(violation)
    assert isinstance(again, StressViolation)
    assert str(again) == str(violation)
    assert (again.seed, again.worker, again.invariant, again.detail) == (
        7,
        "task-2",
        "3: no stale handle",
        "detail text",
    )


@pytest.mark.parametrize("round_trip", _ROUND_TRIPS, ids=["copy", "deepcopy", "pickle"])
def test_a_race_error_survives_a_copy(round_trip: Callable[[BaseException], BaseException]) -> None:
    error = ahg.RaceError([])
    again = round_trip(error)
    assert isinstance(again, ahg.RaceError)
    assert str(again) == str(error) == "0 races found"
    assert again.reports == []


@pytest.mark.asyncio
async def test_a_race_error_with_an_eager_report_survives_pickling(device: ahg.Device) -> None:
    first, second = device.create_stream(), device.create_stream()
    buffer = device.malloc(64)
    with ahg.race_check(on_race="collect") as check:
        await first.memset(buffer, 1, 64)
        await second.memset(buffer, 2, 64)  # nothing orders it after the first
        await first.synchronize()
        await second.synchronize()
    error = ahg.RaceError(check.reports)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error)
    assert str(error).startswith("1 race found")
    assert [report.kind for report in again.reports] == ["write-after-write"]
    first.destroy()
    second.destroy()
    device.free(buffer)
