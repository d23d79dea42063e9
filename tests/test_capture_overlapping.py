"""Captures in progress at the same time on several streams, from several tasks and OS threads.

Each capture is a fork/join over its own pair of streams; the captures interleave operation by
operation (tasks yield between every step; threads run with a tiny switch interval), and each
graph must come out as if it had been captured alone: its own nodes only, replaying to numpy.
Then the mode matrix with all three modes in progress at once, each begun by its own thread: an
unsafe call trips exactly the captures its caller's mode concerns, and the others end cleanly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, N, affine, host_view, no_capture_left
from cleanup import destroy

TASKS = 4
THREADS = 3


class _Lane:
    """One capture's streams, events and buffers: a diamond ``b = 3*(3b + a + k) + 2a + k``."""

    def __init__(self, device: ahg.Device, k: int) -> None:
        self.k = k
        self.s0, self.s1 = device.create_stream(), device.create_stream()
        self.fork, self.join = device.create_event(), device.create_event()
        self.a, self.b = device.malloc(NBYTES), device.malloc(NBYTES)

    def steps(self) -> list[Callable[[], Any]]:
        """The capture, one ``*_nowait`` operation per step (usable with or without a loop)."""
        s0, s1, a, b, k = self.s0, self.s1, self.a, self.b, self.k
        return [
            lambda: s0.memcpy_nowait(a, np.arange(N, dtype=np.int64)),
            lambda: s0.memset_nowait(b, 0, NBYTES),
            lambda: s0.record_event_nowait(self.fork),
            lambda: s1.wait_event_nowait(self.fork),
            lambda: s1.launch_kernel_nowait(affine, 1, N, (N, 1, k, a, b)),
            lambda: s1.record_event_nowait(self.join),
            lambda: s0.wait_event_nowait(self.join),
            lambda: s0.launch_kernel_nowait(affine, 1, N, (N, 2, k, a, b)),
        ]

    def expected(self) -> list[int]:
        x = np.arange(N)
        return (3 * (x + self.k) + 2 * x + self.k).tolist()

    async def replay(self, graph: ahg.Graph) -> None:
        assert len(graph.nodes()) == 4  # its own nodes, none of another capture's
        kinds = sorted(node.type.name for node in graph.nodes())
        assert kinds == ["Kernel", "Kernel", "Memcpy", "Memset"]
        exec_ = graph.instantiate()
        await (await exec_.launch(self.s0))
        assert host_view(self.s0.device, self.b).tolist() == self.expected()
        destroy(exec_, graph)

    def close(self) -> None:
        destroy(self.s0, self.s1, self.fork, self.join, self.a, self.b)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_tasks_capture_at_once_step_by_step(device: ahg.Device, mode: Any) -> None:
    lanes = [_Lane(device, k) for k in range(TASKS)]

    async def capture(lane: _Lane) -> ahg.Graph:
        async with lane.s0.capture(mode) as scope:
            for step in lane.steps():
                step()
                await asyncio.sleep(0)  # every other task takes a step here
        assert scope.graph is not None
        return scope.graph

    graphs = await asyncio.gather(*(capture(lane) for lane in lanes))
    no_capture_left()
    ids = {graph.id for graph in graphs}
    assert len(ids) == TASKS
    for lane, graph in zip(lanes, graphs, strict=True):
        await lane.replay(graph)
        lane.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_threads_and_tasks_capture_at_once(
    device: ahg.Device, mode: Any, fast_switching: None
) -> None:
    """OS threads capture with the ``*_nowait`` twins while tasks of this loop capture too."""
    thread_lanes = [_Lane(device, 10 + k) for k in range(THREADS)]
    task_lanes = [_Lane(device, k) for k in range(TASKS)]
    start = threading.Barrier(THREADS + 1)
    results: dict[int, Any] = {}

    def thread_capture(index: int, lane: _Lane) -> None:
        try:
            start.wait(timeout=30)
            lane.s0.begin_capture(mode)
            for step in lane.steps():
                step()
            results[index] = lane.s0.end_capture()
        except BaseException as error:  # handed back to the test
            results[index] = error

    threads = [
        threading.Thread(target=thread_capture, args=(i, lane))
        for i, lane in enumerate(thread_lanes)
    ]
    for thread in threads:
        thread.start()

    async def task_capture(lane: _Lane) -> ahg.Graph:
        lane.s0.begin_capture(mode)
        for step in lane.steps():
            step()
            await asyncio.sleep(0)
        return lane.s0.end_capture()

    start.wait(timeout=30)  # the threads begin as the tasks do
    graphs = await asyncio.gather(*(task_capture(lane) for lane in task_lanes))
    for thread in threads:
        thread.join()
    no_capture_left()
    for index, lane in enumerate(thread_lanes):
        result = results[index]
        if isinstance(result, BaseException):
            raise result
        await lane.replay(result)
        lane.close()
    for lane, graph in zip(task_lanes, graphs, strict=True):
        await lane.replay(graph)
        lane.close()


def test_an_unsafe_call_trips_only_the_captures_its_mode_concerns(device: ahg.Device) -> None:
    """Three threads each begin a capture in their own mode and hold it; then:

    * a THREAD_LOCAL thread's ``malloc`` trips only its own THREAD_LOCAL capture;
    * this (GLOBAL) thread's query of an idle stream trips the GLOBAL capture, not the
      THREAD_LOCAL or RELAXED ones, which other threads began;
    * each thread ends its own: GLOBAL and THREAD_LOCAL invalidated, RELAXED gives its graph.
    """
    modes = [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL, ahg.CaptureMode.RELAXED]
    lanes = {mode: _Lane(device, int(mode)) for mode in modes}
    begun = threading.Barrier(len(modes) + 1)
    malloc_now, malloc_done, end_now = threading.Event(), threading.Event(), threading.Event()
    results: dict[ahg.CaptureMode, Any] = {}

    def hold(mode: ahg.CaptureMode) -> None:
        lane = lanes[mode]
        try:
            lane.s0.begin_capture(mode)
            for step in lane.steps():
                step()
            begun.wait(timeout=30)
            if mode is ahg.CaptureMode.THREAD_LOCAL:
                malloc_now.wait(timeout=30)
                ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
                with pytest.raises(ahg.StreamCaptureUnsupported):
                    device.malloc(64)
                malloc_done.set()
            end_now.wait(timeout=30)
            results[mode] = lane.s0.end_capture()
        except BaseException as error:  # handed back to the test
            results[mode] = error

    threads = [threading.Thread(target=hold, args=(mode,)) for mode in modes]
    for thread in threads:
        thread.start()
    begun.wait(timeout=30)
    status = {mode: lanes[mode].s0.is_capturing() for mode in modes}
    assert set(status.values()) == {ahg.CaptureStatus.ACTIVE}

    malloc_now.set()
    malloc_done.wait(timeout=30)
    assert lanes[ahg.CaptureMode.GLOBAL].s0.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert lanes[ahg.CaptureMode.THREAD_LOCAL].s0.is_capturing() is ahg.CaptureStatus.INVALIDATED
    assert lanes[ahg.CaptureMode.RELAXED].s0.is_capturing() is ahg.CaptureStatus.ACTIVE

    idle = device.create_stream()
    with pytest.raises(ahg.StreamCaptureUnsupported):
        idle.query()  # this thread's mode is GLOBAL
    assert lanes[ahg.CaptureMode.GLOBAL].s0.is_capturing() is ahg.CaptureStatus.INVALIDATED
    assert lanes[ahg.CaptureMode.RELAXED].s0.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert lanes[ahg.CaptureMode.RELAXED].s1.is_capturing() is ahg.CaptureStatus.ACTIVE

    end_now.set()
    for thread in threads:
        thread.join()
    assert isinstance(results[ahg.CaptureMode.GLOBAL], ahg.StreamCaptureInvalidated)
    assert isinstance(results[ahg.CaptureMode.THREAD_LOCAL], ahg.StreamCaptureInvalidated)
    graph = results[ahg.CaptureMode.RELAXED]
    assert isinstance(graph, ahg.Graph), graph
    no_capture_left()
    assert len(graph.nodes()) == 4
    destroy(graph, idle)
    for lane in lanes.values():
        lane.close()
