"""The README's example runs clean under ``python -X dev``: asyncio's debug mode finds no slow
callback (no step that runs device work inline or loops without yielding), no coroutine left
unawaited, no forgotten handle and no other warning."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_example_runs_clean_under_python_dev_mode(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"```python\n(.*?)```", readme, re.S)
    assert match is not None
    script = tmp_path / "readme_example.py"
    script.write_text(match.group(1))
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    # Debug mode logs "Executing <Handle ...> took 0.123 seconds" for a step over 100 ms.
    assert "Executing" not in result.stderr
    assert "never awaited" not in result.stderr
    assert "Exception ignored" not in result.stderr
    assert result.stderr == ""
