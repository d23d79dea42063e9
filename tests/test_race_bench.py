"""``bench/race.py`` reports every figure the race checker is judged by: the eager program and
the launch with the check off and on, instantiate without and with ``check_races=True``, and
the two ratios with their targets (eager on <= 3x off, instantiate checked <= 2x plain).
Timing targets are the bench's to judge, not this test's: it checks that they are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_race_bench_reports_its_figures_ratios_and_targets(tmp_path: Path) -> None:
    out = tmp_path / "race.json"
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "race.py"), "--repeat", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    figures = data["figures"]
    assert set(figures) == {
        "eager_us_per_op_off",
        "eager_us_per_op_on",
        "launch_host_us_off",
        "launch_host_us_on",
        "instantiate_us_per_node",
        "instantiate_check_us_per_node",
    }
    assert all(value > 0 for value in figures.values())
    ratios = data["ratios"]
    assert ratios["eager_on_over_off"] == round(
        figures["eager_us_per_op_on"] / figures["eager_us_per_op_off"], 2
    )
    assert ratios["instantiate_check_over_plain"] == round(
        figures["instantiate_check_us_per_node"] / figures["instantiate_us_per_node"], 2
    )
    lines = result.stdout.splitlines()
    assert any(line.startswith("eager_on_over_off") and line.endswith("<= 3") for line in lines)
    assert any(
        line.startswith("instantiate_check_over_plain") and line.endswith("<= 2") for line in lines
    )
