"""`bench/eager.py` stays runnable and reports the eager baseline's figures for each loop.

Only the report's shape is checked here; the figures themselves are timings, which live in the
bench, never in tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benches import load_bench


def test_eager_bench_reports_host_and_end_to_end_cost_per_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eager.json"
    argv = ["--json", str(out), "--launches", "20", "--ops", "10", "--rounds", "1"]
    assert load_bench("eager.py", "eager_bench").main(argv) == 0
    report = json.loads(out.read_text())
    assert report["ops"] == 10
    assert set(report["loops"]) == {"asyncio", "uvloop"}
    for figures in report["loops"].values():
        assert figures["launch_host_us"] > 0
        assert figures["end_to_end_per_op_us"] > 0
    table = capsys.readouterr().out
    assert "asyncio" in table
    assert "uvloop" in table
