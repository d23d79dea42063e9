"""The README's example and the examples/ scripts run as written."""

from __future__ import annotations

import json
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_readme_example_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme, re.S)
    assert match is not None
    exec(compile(match.group(1), "README.md", "exec"), {"__name__": "readme"})


@pytest.mark.parametrize(
    ("script", "says"),
    [
        ("saxpy.py", "saxpy n=65536: max |error|"),
        ("graph_replay.py", "1000 replays match eager execution and numpy"),
        ("capture.py", "exec.update: Success; results match numpy"),
        ("conditional.py", "converged after 1710 sweeps in one launch; matches numpy"),
        ("two_devices.py", "filtered across devices; matches numpy"),
    ],
)
def test_example_runs(script: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Each script checks its own numbers (it raises if a result is wrong).
    runpy.run_path(str(ROOT / "examples" / script), run_name="__main__")
    assert says in capsys.readouterr().out


def test_traced_replay_writes_a_trace_and_dot_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["traced_replay.py", str(tmp_path)])
    runpy.run_path(str(ROOT / "examples" / "traced_replay.py"), run_name="__main__")
    assert "signal flows" in capsys.readouterr().out
    trace = json.loads((tmp_path / "graph_replay.trace.json").read_text())
    assert any(e.get("cat") == "kernel" for e in trace["traceEvents"])
    assert (tmp_path / "graph_replay.plan.dot").read_text().startswith('digraph "plan"')
    assert "cluster_" in (tmp_path / "graph_replay.graph.dot").read_text()
