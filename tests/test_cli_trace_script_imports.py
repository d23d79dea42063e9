"""``ahipgraph trace`` of a script that imports its neighbours.

``python script.py`` puts the script's directory first on ``sys.path``, so a script imports
the modules beside it. ``ahipgraph trace script.py`` ran it with ``runpy.run_path``, which does
not, so the same script failed with ``ModuleNotFoundError`` under the command (whose own
``sys.path[0]`` is the console script's directory, or the working directory under
``python -m``). The command also left ``sys.argv`` as the script's when called in-process.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ahipgraph.cli import main
from cli_scripts import one_memset_script


def test_the_cli_trace_lets_the_script_import_the_modules_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not the script's directory
    project = tmp_path / "project"
    project.mkdir()
    (project / "trace_neighbour.py").write_text("VALUE = 7\n")
    script = project / "script.py"
    script.write_text("import trace_neighbour\nprint('neighbour', trace_neighbour.VALUE)\n")
    path_before, argv_before = list(sys.path), list(sys.argv)
    status = main(["--plain", "trace", "-o", str(tmp_path / "t.json"), str(script), "x"])
    captured = capsys.readouterr()
    assert "ModuleNotFoundError" not in captured.err
    assert status == 0
    assert "neighbour 7" in captured.out
    assert sys.path == path_before  # the script's directory is not left behind
    assert sys.argv == argv_before


def test_the_cli_trace_keeps_the_trace_of_a_script_ended_by_a_cancelled_main(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script whose main task is cancelled ends ``asyncio.run`` with ``CancelledError``,
    a ``BaseException`` but not an ``Exception``: it went through the command, and the
    trace of the run was never written."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    script = one_memset_script(
        tmp_path,
        "ahg.run(work)\n",
        inside="    asyncio.current_task().cancel()\n    await asyncio.sleep(0)\n",
    )
    output = tmp_path / "trace.json"
    assert main(["--plain", "trace", "-o", str(output), str(script)]) == 1
    captured = capsys.readouterr()
    assert "CancelledError" in captured.err
    assert "1 ops" in captured.out
    assert output.exists()
