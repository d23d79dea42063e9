"""The releaser ends a forgotten origin's capture on its own thread, at any moment: between a
fork stream's call reading that its stream captures and that call taking the capture lock.

The window is made deterministic by a stand-in for the capture lock whose first acquire, on
the calling thread, first lets the origin be collected and released (as the releaser thread
would at that moment), then takes the real lock.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime import capture_fork, capture_lifecycle, capture_nodes, capture_rules
from capture_helpers import no_capture_left
from cleanup import destroy


@ahg.kernel
def add_to(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] += value


class _ReleaseFirst:
    """The capture lock, whose first acquire on ``thread`` runs ``before`` outside it."""

    def __init__(self, lock: Any, before: Callable[[], None]) -> None:
        self._lock = lock
        self._before: Callable[[], None] | None = before
        self._thread = threading.current_thread()

    def acquire(self, *args: Any) -> bool:
        before, self._before = self._before, None
        if before is not None and threading.current_thread() is self._thread:
            before()
        return bool(self._lock.acquire(*args))

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


async def _fork_of_a_forgotten_origin(
    device: ahg.Device, graph: ahg.Graph | None = None
) -> tuple[ahg.Stream, ahg.Event, list[ahg.Stream]]:
    box = [device.create_stream()]
    if graph is None:
        box[0].begin_capture(ahg.CaptureMode.RELAXED)
    else:
        box[0].begin_capture_to_graph(graph, mode=ahg.CaptureMode.RELAXED)
    event = device.create_event()
    await box[0].record_event(event)
    fork = device.create_stream()
    await fork.wait_event(event)
    return fork, event, box


def _release_at_first_lock(monkeypatch: pytest.MonkeyPatch, box: list[ahg.Stream]) -> None:
    """Every capture module's name for the one capture lock, replaced by one stand-in."""
    stand_in = _ReleaseFirst(capture_nodes._LOCK, _forget(box))
    for module in (capture_fork, capture_lifecycle, capture_nodes, capture_rules):
        monkeypatch.setattr(module, "_LOCK", stand_in)


def _forget(box: list[ahg.Stream]) -> Callable[[], None]:
    def run() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
            box.clear()
            ahg.collect_forgotten()

    return run


@pytest.mark.asyncio
async def test_capture_info_racing_the_release_says_the_stream_no_longer_captures(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    fork, event, box = await _fork_of_a_forgotten_origin(device)
    _release_at_first_lock(monkeypatch, box)
    info = fork.capture_info()
    monkeypatch.undo()
    assert info.status is ahg.CaptureStatus.NONE
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    fork.destroy()
    event.destroy()
    no_capture_left()


@pytest.mark.asyncio
@pytest.mark.parametrize("users_graph", [False, True], ids=["own graph", "user's graph"])
async def test_a_launch_racing_the_release_is_not_lost(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch, users_graph: bool
) -> None:
    x = device.malloc(8)
    device.view(x, np.int64, 1)[0] = 0
    graph = ahg.Graph() if users_graph else None
    fork, event, box = await _fork_of_a_forgotten_origin(device, graph)
    _release_at_first_lock(monkeypatch, box)
    try:
        work = await fork.launch_kernel(add_to, 1, 1, (x, 5))
    except ahg.HipError:
        work = None  # refused: the caller knows the kernel did not run
    monkeypatch.undo()
    await fork.synchronize()
    if work is not None:  # accepted: then it ran, as on any stream not capturing
        await work
        assert int(device.view(x, np.int64, 1)[0]) == 5
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    if graph is not None:
        assert len(graph.nodes()) == 0  # nothing reached the user's graph after its capture
        graph.destroy()
    fork.destroy()
    event.destroy()
    device.free(x)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_wait_racing_the_release_is_a_real_wait(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    fork, event, box = await _fork_of_a_forgotten_origin(device)
    later = device.create_event()
    other = device.create_stream()
    await other.record_event(later)  # recorded outside any capture
    _release_at_first_lock(monkeypatch, box)
    await fork.wait_event(later)  # the stream no longer captures: an ordinary wait
    monkeypatch.undo()
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    await fork.synchronize()
    destroy(fork, other, event, later)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_synchronize_racing_the_release_synchronizes(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    fork, event, box = await _fork_of_a_forgotten_origin(device)
    _release_at_first_lock(monkeypatch, box)
    await fork.synchronize()  # the stream no longer captures: an ordinary synchronize
    monkeypatch.undo()
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    destroy(fork, event)
    no_capture_left()
