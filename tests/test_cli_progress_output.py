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
    """On a terminal with rich installed, a stress run that raised (Ctrl-C, say) left the
    bar's refresh thread drawing over the traceback, and the cursor hidden."""
    pytest.importorskip("rich")
    harness = sys.modules["ahipgraph.testing.stress"]

    def failing(**options: Any) -> None:
        options["progress"](harness.StressReport(0))
        raise KeyboardInterrupt

    monkeypatch.setattr(harness, "stress", failing)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    threads = set(threading.enumerate())
    with pytest.raises(KeyboardInterrupt):
        main(["stress", "--ops", "5"])
    for thread in set(threading.enumerate()) - threads:  # the bar's refresh thread ends
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert capsys.readouterr().out.endswith("\x1b[?25h")  # the cursor is shown again
