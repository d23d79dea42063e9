"""The ``ahipgraph`` command's progress bar ends however its run ends."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

import ahipgraph.testing  # noqa: F401  (loads the stress module)
from ahipgraph.cli import main


def test_a_run_that_raises_stops_the_progress_bar(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal with rich installed, a stress run that raised left the bar's refresh
    thread drawing over the traceback, and the cursor hidden."""
    pytest.importorskip("rich")
    harness = sys.modules["ahipgraph.testing.stress"]

    def failing(**options: Any) -> None:
        options["progress"](harness.StressReport(0))
        raise RuntimeError("the harness failed")

    monkeypatch.setattr(harness, "stress", failing)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    threads = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="the harness failed"):
        main(["stress", "--ops", "5"])
    for thread in set(threading.enumerate()) - threads:  # the bar's refresh thread ends
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert capsys.readouterr().out.endswith("\x1b[?25h")  # the cursor is shown again


def test_ctrl_c_ends_a_stress_run_with_status_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It ended with a traceback; ``trace`` already answered Ctrl-C with the shell's 130."""
    harness = sys.modules["ahipgraph.testing.stress"]

    def interrupted(**options: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(harness, "stress", interrupted)
    assert main(["--plain", "stress", "--seed", "7", "--ops", "5"]) == 130
    captured = capsys.readouterr()
    assert "interrupted: stress seed 7" in captured.out
    assert "Traceback" not in captured.err
