"""``examples/traced_replay.py DIR`` says at once when DIR is not a directory."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_a_target_that_is_not_a_directory_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It replayed, then failed writing the first file with a FileNotFoundError traceback."""
    missing = tmp_path / "missing"
    monkeypatch.setattr("sys.argv", ["traced_replay.py", str(missing)])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(ROOT / "examples" / "traced_replay.py"), run_name="__main__")
    assert "is not a directory" in str(exit_info.value.code)
    assert "traced" not in capsys.readouterr().out  # nothing ran
