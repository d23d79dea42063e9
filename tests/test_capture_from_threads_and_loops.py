"""Capture from OS threads and from a second event loop (modes are task-aware).

A capturing stream adds nodes, never packets, so capturing needs no event loop at all: an OS
thread builds a whole fork/join capture with the ``*_nowait`` twins, and a second loop in
another thread captures while the device's own loop has work in flight. The graphs replay on
the device's loop and equal numpy. Ownership follows HIP's thread rule: the beginner ends a
GLOBAL or THREAD_LOCAL capture, anyone else is refused with WrongThread and changes nothing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left, on_thread
from cleanup import destroy


def _record_diamond(
    s0: ahg.Stream,
    s1: ahg.Stream,
    events: tuple[ahg.Event, ahg.Event],
    ptrs: tuple[ahg.DevicePtr, ahg.DevicePtr, ahg.DevicePtr],
) -> None:
    """A fork/join over two streams through the ``*_nowait`` twins: no loop needed."""
    a, b, c = ptrs
    fork, join = events
    s0.memcpy_nowait(a, np.arange(N, dtype=np.int64))
    s0.memset_nowait(b, 0, NBYTES)
    s0.record_event_nowait(fork)
    s1.wait_event_nowait(fork)
    s1.memset_nowait(c, 0, NBYTES)
    s1.launch_kernel_nowait(affine, 1, N, (N, 2, 0, a, c))
    s0.launch_kernel_nowait(affine, 1, N, (N, 1, 0, a, b))
    s1.record_event_nowait(join)
    s0.wait_event_nowait(join)
    s0.launch_kernel_nowait(affine, 1, N, (N, 1, 0, c, b))


async def _replays_as_numpy(graph: ahg.Graph, stream: ahg.Stream, b: ahg.DevicePtr) -> None:
    assert len(graph.nodes()) == 6
    graph_exec = graph.instantiate()
    for _ in range(2):  # not idempotent unless every node ran in order each time
        await (await graph_exec.launch(stream))
        x = np.arange(N)
        assert host_view(stream.device, b).tolist() == (3 * x + 2 * x).tolist()
    destroy(graph_exec, graph)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_an_os_thread_captures_a_fork_join_with_the_nowait_twins(
    device: ahg.Device, mode: Any
) -> None:
    s0, s1 = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    ptrs = (device.malloc(NBYTES), device.malloc(NBYTES), device.malloc(NBYTES))

    def capture() -> ahg.Graph:
        s0.begin_capture(mode)
        _record_diamond(s0, s1, events, ptrs)
        return s0.end_capture()

    graph = on_thread(capture)
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    no_capture_left()
    await _replays_as_numpy(graph, s0, ptrs[1])
    destroy(s0, s1, *events, *ptrs)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_a_thread_capture_is_ended_only_by_its_thread_unless_relaxed(
    device: ahg.Device, mode: Any
) -> None:
    """The beginning thread stays alive; this task and a third thread try to end its capture
    first: WrongThread, and the capture is untouched, unless it is RELAXED."""
    s0, s1 = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    ptrs = (device.malloc(NBYTES), device.malloc(NBYTES), device.malloc(NBYTES))
    begun, finish = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    def beginner() -> None:
        s0.begin_capture(mode)
        _record_diamond(s0, s1, events, ptrs)
        begun.set()
        finish.wait(timeout=30)
        try:
            box["graph"] = s0.end_capture()
        except ahg.HipError as error:
            box["error"] = error

    thread = threading.Thread(target=beginner)
    thread.start()
    begun.wait(timeout=30)
    info = s0.capture_info()
    if mode is ahg.CaptureMode.RELAXED:
        graph = s0.end_capture()
    else:
        with pytest.raises(ahg.StreamCaptureWrongThread):
            s0.end_capture()
        with pytest.raises(ahg.StreamCaptureWrongThread):
            on_thread(s0.end_capture)
        assert s0.capture_info() == info
        assert s1.capture_info().id == info.id  # the fork is still in it
    finish.set()
    thread.join()
    if mode is ahg.CaptureMode.RELAXED:
        assert isinstance(box.get("error"), ahg.IllegalState)  # already ended here
    else:
        graph = box["graph"]
    no_capture_left()
    await _replays_as_numpy(graph, s0, ptrs[1])
    destroy(s0, s1, *events, *ptrs)


@pytest.mark.asyncio
async def test_a_second_event_loop_captures_while_the_device_loop_has_work_in_flight(
    device: ahg.Device,
) -> None:
    """The device belongs to this loop and a host function holds it busy; a loop in another
    thread captures (it adds nodes, never packets, so the device's owner is never asked), then
    the graph replays here. The other loop's enqueue to a stream that does not capture is
    refused as IllegalState (the device is busy elsewhere) and changes nothing."""
    s0, s1 = device.create_stream(), device.create_stream()
    busy = device.create_stream()
    events = (device.create_event(), device.create_event())
    ptrs = (device.malloc(NBYTES), device.malloc(NBYTES), device.malloc(NBYTES))
    before = Baseline.take(device)
    gate = threading.Event()
    held = await busy.launch_host_func(lambda: gate.wait(timeout=30))

    async def capture_on_second_loop() -> ahg.Graph:
        async with s0.capture() as scope:
            _record_diamond(s0, s1, events, ptrs)
            await s0.launch_host_func(lambda: None)
        submitted = busy.submitted
        with pytest.raises(ahg.IllegalState):
            await busy.memset(ptrs[0], 0, NBYTES)  # eager, on a device busy on another loop
        assert busy.submitted == submitted
        assert scope.graph is not None
        return scope.graph

    graph = on_thread(lambda: asyncio.run(capture_on_second_loop()))
    gate.set()
    await held
    no_capture_left()
    assert len(graph.nodes()) == 7
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(s0))
    x = np.arange(N)
    assert host_view(device, ptrs[1]).tolist() == (3 * x + 2 * x).tolist()
    destroy(graph_exec, graph)
    assert Baseline.take(device) == before
    destroy(s0, s1, busy, *events, *ptrs)
