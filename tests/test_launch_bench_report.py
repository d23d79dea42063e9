"""`bench/launch.py`'s report has a fixed shape.

`{"loops": {"asyncio": R, "uvloop": R}}`, where R has `launch_host_us`, `graph_per_node_us`,
`eager_per_node_us` and `floor_per_node_us` keyed by node count "10" ... "10000",
`instantiate_us_per_node` keyed "1000" and "10000", the capture figures `capture_us_per_op`
and `capture_instantiate_us_per_node` keyed the same, and `steady_state` with `launches`,
`new_signal_sets`, `new_arena_chunks` and `bytes_delta`. Only shapes and the steady state's
allocation counts are checked; timings stay in the bench.
"""

from __future__ import annotations

import json
import sys
from types import ModuleType
from typing import Any

import pytest

import ahipgraph as ahg
from benches import BENCH, load_bench

PER_SIZE = ("launch_host_us", "graph_per_node_us", "eager_per_node_us", "floor_per_node_us")
PER_OPERATIONS = ("instantiate_us_per_node", "capture_us_per_op", "capture_instantiate_us_per_node")
STEADY = {"launches", "new_signal_sets", "new_arena_chunks", "bytes_delta"}


def _bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))  # launch.py imports scale.py from next to it
    return load_bench("launch.py", "launch_bench_report")


def _check_loop_report(
    report: dict[str, Any], sizes: tuple[str, ...], inst: tuple[str, ...]
) -> None:
    for figure in PER_SIZE:
        assert set(report[figure]) == set(sizes), figure
        assert all(value > 0 for value in report[figure].values()), figure
    for figure in PER_OPERATIONS:
        assert set(report[figure]) == set(inst), figure
        assert all(value > 0 for value in report[figure].values()), figure
    assert set(report["steady_state"]) == STEADY


def test_the_recorded_report_has_every_promised_figure() -> None:
    recorded = json.loads((BENCH / "results" / "launch.json").read_text())
    assert set(recorded["loops"]) == {"asyncio", "uvloop"}
    for report in recorded["loops"].values():
        _check_loop_report(report, ("10", "100", "1000", "10000"), ("1000", "10000"))
        steady = report["steady_state"]
        assert steady["launches"] == 10_000
        assert steady["new_signal_sets"] == steady["new_arena_chunks"] == steady["bytes_delta"] == 0


def test_a_small_measurement_reports_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(monkeypatch)
    monkeypatch.setattr(bench, "SIZES", (10, 20))
    monkeypatch.setattr(bench, "INSTANTIATE_SIZES", (10,))
    monkeypatch.setattr(bench, "STEADY_LAUNCHES", 64)
    monkeypatch.setattr(bench, "rounds_for", lambda size: 2)
    monkeypatch.setattr(bench, "reps_for", lambda size: 2)
    try:
        report = ahg.run(lambda: bench.measure("asyncio"))
    finally:
        sys.modules.pop("scale", None)  # launch.py imported bench/scale.py as a top-level module
    _check_loop_report(report, ("10", "20"), ("10",))
    assert report["steady_state"] == {
        "launches": 64,
        "new_signal_sets": 0,
        "new_arena_chunks": 0,
        "bytes_delta": 0,
    }
