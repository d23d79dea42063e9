"""Misuse of stream capture: cancellation at every await of a forked capture block,
BaseExceptions raised inside it, the capturing stream destroyed from an OS thread while a task
is inside the block, and bad or destroyed arguments to every captured operation. After each
failure path the capture registry, the graph and node registries, the alloc-node reservations
and device memory are back at their baseline (``Baseline``), and the streams capture again.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime import capture
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy

STEPS = 10  # checkpoints in _forked_block, the first right after entering


class _Park:
    """Checkpoints of a capture block: at the chosen one it says so and waits forever."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.reached = asyncio.Event()

    async def __call__(self) -> None:
        here = self.count
        self.count += 1
        if here == self.target:
            self.reached.set()
            await asyncio.Event().wait()  # parked here until cancelled
        await asyncio.sleep(0)  # every checkpoint is a real yield to the loop


async def _forked_block(
    s0: ahg.Stream,
    s1: ahg.Stream,
    events: tuple[ahg.Event, ahg.Event],
    b: ahg.DevicePtr,
    checkpoint: Any,
) -> ahg.Graph:
    """A capture over two streams with stream-ordered memory: a checkpoint after each step."""
    fork, join = events
    async with s0.capture() as scope:
        await checkpoint()
        tmp = await s0.malloc_async(NBYTES)
        await checkpoint()
        await s0.memset(tmp, 1, NBYTES)
        await checkpoint()
        await s0.record_event(fork)
        await checkpoint()
        await s1.wait_event(fork)
        await checkpoint()
        await s1.launch_kernel(affine, 1, N, (N, 2, 0, tmp, b))
        await checkpoint()
        await s1.record_event(join)
        await checkpoint()
        await s0.wait_event(join)
        await checkpoint()
        await s0.free_async(tmp)
        await checkpoint()
        await s0.launch_host_func(lambda: None)
        await checkpoint()
    assert scope.graph is not None
    return scope.graph


@pytest.mark.asyncio
@pytest.mark.parametrize("step", range(STEPS))
async def test_cancelled_at_each_await_of_a_forked_capture_block(
    device: ahg.Device, step: int
) -> None:
    s0, s1 = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    b = device.malloc(NBYTES)
    before = Baseline.take(device)
    park = _Park(step)
    task = asyncio.create_task(_forked_block(s0, s1, events, b, park))
    await park.reached.wait()  # the task is parked inside the block, at checkpoint `step`
    assert s0.is_capturing() is ahg.CaptureStatus.ACTIVE
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert s0.is_capturing() is ahg.CaptureStatus.NONE
    assert s1.is_capturing() is ahg.CaptureStatus.NONE  # a fork ends with its origin
    assert Baseline.take(device) == before
    for event in events:
        assert event.query()  # no event is left linked to the aborted capture
    # both streams capture again, and the same block completes
    graph = await _forked_block(s0, s1, events, b, _yield)
    assert len(graph.nodes()) == 5
    destroy(graph, s0, s1, *events, b)


async def _yield() -> None:
    await asyncio.sleep(0)


class _Escape(BaseException):
    """Not an Exception: a capture block must clean up for it as for any other."""


@pytest.mark.asyncio
@pytest.mark.parametrize("error", [_Escape, KeyboardInterrupt, SystemExit, GeneratorExit])
async def test_a_base_exception_in_a_capture_block_aborts_it(
    device: ahg.Device, error: type[BaseException]
) -> None:
    s0, s1 = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    b = device.malloc(NBYTES)
    before = Baseline.take(device)
    raised = error("from the block")
    calls = 0

    async def raising() -> None:
        nonlocal calls
        calls += 1
        if calls == 6:  # after the fork, before the join
            raise raised

    with pytest.raises(error) as caught:
        await _forked_block(s0, s1, events, b, raising)
    assert caught.value is raised
    assert s0.is_capturing() is ahg.CaptureStatus.NONE
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before
    destroy(s0, s1, *events, b)


@pytest.mark.asyncio
async def test_the_capturing_stream_destroyed_from_an_os_thread_mid_block(
    device: ahg.Device,
) -> None:
    """Another thread destroys the origin while the task sits in the block after the fork:
    the capture ends there (its graph freed, the fork released), the task's next operation
    is ContextIsDestroyed, and leaving the block does not resurrect anything."""
    s0, s1 = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    b = device.malloc(NBYTES)
    before = Baseline.take(device)
    reached, resume = asyncio.Event(), asyncio.Event()

    async def block() -> None:
        fork, _ = events
        async with s0.capture():
            await s0.memset(await s0.malloc_async(NBYTES), 0, NBYTES)
            await s0.record_event(fork)
            await s1.wait_event(fork)
            reached.set()  # s1 is forked into the capture
            await resume.wait()  # the stream is destroyed meanwhile
            await s0.memset(b, 0, NBYTES)

    task = asyncio.create_task(block())
    await reached.wait()
    thread = threading.Thread(target=s0.destroy)
    thread.start()
    thread.join()
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    assert capture.statistics().sessions == 0
    resume.set()
    with pytest.raises(ahg.ContextIsDestroyed):
        await task
    assert Baseline.take(device) == before
    with pytest.raises(ahg.ContextIsDestroyed):
        s0.end_capture()
    s1.begin_capture()  # the fork is an ordinary stream again
    s1.end_capture().destroy()
    destroy(s1, *events, b)


# -- bad and destroyed arguments during capture: refused, and the capture is as it was ------------


@pytest.mark.asyncio
async def test_bad_arguments_to_captured_operations_change_nothing(device: ahg.Device) -> None:
    stream = device.create_stream()
    a, freed = device.malloc(NBYTES), device.malloc(NBYTES)
    device.free(freed)
    dead_event = device.create_event()
    dead_event.destroy()
    before = Baseline.take(device)
    stream.begin_capture()
    first = (await stream.memset(a, 1, NBYTES)).node
    other = ahg.Graph()
    foreign = other.add_empty_node()
    gone = ahg.Graph().add_empty_node()  # a node of a graph that is destroyed next
    gone.graph.destroy()
    info = stream.capture_info()
    attempts: list[tuple[type[BaseException], Any]] = [
        (ahg.InvalidValue, lambda: stream.memset(a, 1, -1)),
        (ahg.InvalidValue, lambda: stream.memset(a, 1, 2**64)),
        (ahg.InvalidDevicePointer, lambda: stream.memset(freed, 1, NBYTES)),
        (ahg.InvalidDevicePointer, lambda: stream.memcpy(a, freed, NBYTES)),
        (ahg.InvalidValue, lambda: stream.memcpy(a, np.zeros(2, np.int64), NBYTES)),
        (TypeError, lambda: stream.memset(a, None, NBYTES)),
        (TypeError, lambda: stream.memset(a, 1, True)),
        (ahg.InvalidValue, lambda: stream.launch_host_func(None)),
        (TypeError, lambda: stream.launch_host_func(7)),
        (ahg.InvalidConfiguration, lambda: stream.launch_kernel(affine, 0, N, (N, 1, 0, a, a))),
        (ahg.InvalidConfiguration, lambda: stream.launch_kernel(affine, 1, -1, (N, 1, 0, a, a))),
        (TypeError, lambda: stream.launch_kernel(affine, 1, N, (N, 1, 0, a))),
        (ahg.InvalidValue, lambda: stream.launch_kernel(None, 1, N, ())),
        (ahg.InvalidHandle, lambda: stream.record_event(dead_event)),
        (ahg.InvalidHandle, lambda: stream.record_event(None)),
        (ahg.InvalidHandle, lambda: stream.wait_event(dead_event)),
        (ahg.OutOfMemory, lambda: stream.malloc_async(2**60)),
        (ahg.InvalidValue, lambda: stream.malloc_async(-1)),
        (TypeError, lambda: stream.malloc_async(None)),
        (ahg.InvalidValue, lambda: stream.free_async(a)),  # not from an alloc node
        (TypeError, lambda: stream.free_async(5)),
    ]
    for error, call in attempts:
        with pytest.raises(error):
            await call()
        assert stream.capture_info() == info, call
    for nodes in ([foreign], [gone], [None], [first, first], None):
        with pytest.raises(ahg.InvalidValue):
            stream.update_capture_dependencies(nodes)  # type: ignore[arg-type]
        assert stream.capture_info() == info
    graph = stream.end_capture()
    assert graph.nodes() == [first]
    destroy(graph, other)
    assert Baseline.take(device) == before
    destroy(stream, a)


@pytest.mark.asyncio
async def test_a_second_free_of_a_captured_allocation_is_refused(device: ahg.Device) -> None:
    """HIP: a MemFree of a pointer that is no unmatched allocation (freed already) is
    InvalidValue; the capture goes on and its graph replays."""
    stream = device.create_stream()
    dst = device.malloc(NBYTES)
    before = Baseline.take(device)
    stream.begin_capture()
    tmp = await stream.malloc_async(NBYTES)
    await stream.memset(tmp, 3, NBYTES)
    await stream.memcpy(dst, tmp, NBYTES)
    await stream.free_async(tmp)
    info = stream.capture_info()
    with pytest.raises(ahg.InvalidValue):
        await stream.free_async(tmp)
    assert stream.capture_info() == info
    graph = stream.end_capture()
    graph_exec = graph.instantiate()
    for _ in range(2):
        await (await graph_exec.launch(stream))
    assert device.view(dst, "u1", NBYTES).tolist() == [3] * NBYTES
    destroy(graph_exec, graph)
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(stream, dst)
