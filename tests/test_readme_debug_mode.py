"""The README's example runs clean under ``python -X dev``: asyncio's debug mode finds no slow
callback (no step that runs device work inline or loops without yielding), no coroutine left
unawaited, no forgotten handle and no other warning.

A slow step is one over a second here, not debug mode's 100 ms: a step that ran device work
inline or looped without yielding would take far longer, while a collector pass or a busy
machine can stretch an ordinary step past 100 ms (this is a test of structure, not of speed).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs the example as its own __main__, with every event loop's slow-step threshold at 1 s.
_RUNNER = """\
import asyncio.base_events
import runpy

_init = asyncio.base_events.BaseEventLoop.__init__


def _init_with_threshold(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.slow_callback_duration = 1.0


asyncio.base_events.BaseEventLoop.__init__ = _init_with_threshold
runpy.run_path({script!r}, run_name="__main__")
"""


def test_the_readme_example_runs_clean_under_python_dev_mode(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme, re.S)
    assert match is not None
    script = tmp_path / "readme_example.py"
    script.write_text(match.group(1))
    runner = tmp_path / "run_readme_example.py"
    runner.write_text(_RUNNER.format(script=str(script)))
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(runner)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    # Debug mode logs "Executing <Handle ...> took 1.234 seconds" for a step over the threshold.
    assert "Executing" not in result.stderr
    assert "never awaited" not in result.stderr
    assert "Exception ignored" not in result.stderr
    assert result.stderr == ""
