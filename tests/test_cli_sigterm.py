"""``ahipgraph stress`` and ``ahipgraph trace`` end on SIGTERM the way they end on Ctrl-C.

SIGTERM (``timeout``, ``kill``, a CI job cancelled) killed the command on the spot: ``trace``
wrote no trace of the run it was recording, and ``stress`` printed no seed and no report. Now
SIGTERM is handed on as Ctrl-C (the event loop's runner cancels the main task, then raises
``KeyboardInterrupt``): the run is cleaned up, the trace is written, and the status is the
shell's 143 (128 + SIGTERM).

Each command runs in a process of its own; the test sends the signal once the command has
said it is running (a line read from its output), never after a sleep.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import ahipgraph
from ahipgraph import cli

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

FOREVER = """\
import asyncio
import ahipgraph as ahg


async def main():
    device = ahg.get_device(0)
    stream = device.create_stream()
    out = device.malloc(8)
    await (await stream.memset(out, 0, 8))
    print("running", flush=True)
    while True:
        await (await stream.memset(out, 0, 8))
        await asyncio.sleep(0)


ahg.run(main())
"""


def _command(cwd: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(ahipgraph.__file__).parents[1]))
    return subprocess.Popen(
        [sys.executable, "-m", "ahipgraph", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _terminate_once(process: subprocess.Popen[str], ready: str) -> tuple[str, str]:
    """Send SIGTERM once ``ready`` was printed; return everything printed."""
    assert process.stdout is not None
    first = process.stdout.readline()
    assert ready in first, first
    process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return first + out, err


def test_sigterm_ends_a_trace_with_the_trace_written_and_status_143(tmp_path: Path) -> None:
    (tmp_path / "forever.py").write_text(FOREVER)
    process = _command(tmp_path, "--plain", "trace", "-o", "run.json", "forever.py")
    out, err = _terminate_once(process, "running")
    assert process.returncode == 143
    assert "KeyboardInterrupt" in err  # the script's traceback, as for Ctrl-C
    assert re.search(r"wrote run\.json: [1-9][0-9]* ops", out), out
    assert json.loads((tmp_path / "run.json").read_text())["traceEvents"]


def test_sigterm_ends_a_stress_run_with_its_seed_and_status_143(tmp_path: Path) -> None:
    process = _command(tmp_path, "--plain", "stress", "--seed", "5", "--duration", "600")
    out, err = _terminate_once(process, "stress seed 5")
    assert process.returncode == 143
    assert "interrupted: stress seed 5" in out
    assert "Traceback" not in err


def test_the_sigterm_handler_is_given_back_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "noop.py"
    script.write_text("")
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["--plain", "trace", "-o", str(tmp_path / "t.json"), str(script)]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_off_the_main_thread_the_command_leaves_sigterm_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signal handler can only be set on the main thread: elsewhere the command still runs."""
    script = tmp_path / "noop.py"
    script.write_text("")
    status: list[int] = []
    argv = ["--plain", "trace", "-o", str(tmp_path / "t.json"), str(script)]
    thread = threading.Thread(target=lambda: status.append(cli.main(argv)))
    thread.start()
    thread.join()
    assert status == [0]
