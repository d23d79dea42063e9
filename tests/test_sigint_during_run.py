"""Ctrl-C during ``ahg.run`` while the device works: KeyboardInterrupt, and nothing else.

SIGINT makes ``asyncio.run`` (and ``uvloop.run``) cancel the main task, then cancel what is
left and close the loop. The host function holding the queue is cut short, and the device's
pump, still running in the shutdown's last turns, started the next queued async body as a task
the closed loop never ran: asyncio printed "Task was destroyed but it is pending!" and Python
warned that two coroutines were never awaited (errors under ``-W error``). Run in a
subprocess: the signal goes to the process, and the interpreter's exit is part of what is
checked (no traceback, no hang, no warning), and so is the device, usable from a new loop.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ahipgraph as ahg

SCRIPT = """
import asyncio, contextlib, signal, sys
import ahipgraph as ahg


async def forever():
    await asyncio.Event().wait()


async def step():
    await asyncio.sleep(0)


streams = []


async def main():
    stream = ahg.get_device(0).create_stream()
    streams.append(stream)
    await stream.launch_host_func(forever)
    for _ in range(5):
        await stream.launch_host_func(step)
    signal.raise_signal(signal.SIGINT)  # Ctrl-C while the device works
    await stream.synchronize()


try:
    ahg.run(main, use_uvloop=sys.argv[1] == "uvloop")
except KeyboardInterrupt:
    print("interrupted")


async def afterwards():
    # What the closed loop left fails, and completes on this loop.
    with contextlib.suppress(ahg.LaunchFailure, ahg.IllegalState):
        await streams[0].synchronize()
    await streams[0].synchronize()
    streams[0].destroy()


ahg.run(afterwards)
print("in flight:", ahg.get_device(0).statistics().in_flight)
"""


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_sigint_during_run_with_bodies_queued_is_a_clean_keyboard_interrupt(
    tmp_path: Path, loop: str
) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    script = tmp_path / "interrupted.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(Path(ahg.__file__).parents[1]))
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error", str(script), loop],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines() == ["interrupted", "in flight: 0"]
