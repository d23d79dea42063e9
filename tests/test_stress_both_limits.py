"""``ahipgraph.testing.stress``: both limits at once.

``stress(ops=N, duration=S)`` is documented as "stop after this many operations / seconds";
with both given the run stopped its workers once the operation budget was spent but then
waited out the whole duration, because the task that enforces the deadline slept until it
was due and nothing ended it early. An hour's duration as a safety net kept a ten-operation
run going for an hour.
"""

from __future__ import annotations

from ahipgraph.testing import stress


def test_stress_with_an_operation_budget_and_a_duration_stops_at_the_budget() -> None:
    report = stress(seed=3, ops=1, duration=3600.0, tasks=1, threads=0, faults=False)
    assert report.ops >= 1
    assert report.elapsed_s < 3600.0  # the budget ended it (the suite's timeout is far less)
