"""A capture begun by one task while other tasks and OS threads use its stream.

Capture belongs to the stream: work any task or thread enqueues on a capturing stream becomes
nodes of its capture, in the order the calls were made. What the other callers may not do is
HIP's: synchronise the stream or wait for its captured work (StreamCaptureUnsupported, the
capture invalidated), begin another capture on it (IllegalState, the first untouched), or end
a GLOBAL or THREAD_LOCAL capture they did not begin (StreamCaptureWrongThread, untouched); a
RELAXED capture anyone may end, after which the stream runs work eagerly again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import (
    NBYTES,
    N,
    affine,
    host_view,
    no_capture_left,
    on_thread,
    stream_and_buffer,
)
from cleanup import destroy


@pytest.fixture
def kit(device: ahg.Device) -> Any:
    with stream_and_buffer(device) as kit:
        yield kit


def _step_nowait(stream: ahg.Stream, ptr: ahg.DevicePtr, add: int) -> Any:
    """``ptr = 3 * ptr + add``, order-sensitive."""
    return stream.launch_kernel_nowait(affine, 1, N, (N, 0, add, ptr, ptr))


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_other_tasks_and_threads_work_goes_into_the_capture_in_call_order(
    kit: Any, mode: Any
) -> None:
    stream, ptr = kit
    stream.begin_capture(mode)
    _step_nowait(stream, ptr, 1)

    async def other_task(add: int) -> None:
        await stream.launch_kernel(affine, 1, N, (N, 0, add, ptr, ptr))

    await asyncio.create_task(other_task(2))
    on_thread(lambda: _step_nowait(stream, ptr, 3))
    await asyncio.create_task(other_task(4))
    graph = stream.end_capture()
    assert [len(n.dependencies()) for n in graph.nodes()] == [0, 1, 1, 1]  # one chain
    exec_ = graph.instantiate()
    await stream.memset(ptr, 0, NBYTES)
    await (await exec_.launch(stream))
    assert host_view(stream.device, ptr).tolist() == [((1 * 3 + 2) * 3 + 3) * 3 + 4] * N
    destroy(exec_, graph)
    no_capture_left()


@pytest.mark.asyncio
async def test_another_task_waiting_for_captured_work_invalidates_the_capture(kit: Any) -> None:
    stream, ptr = kit
    stream.begin_capture()
    work = _step_nowait(stream, ptr, 1)

    async def wait_for_it() -> None:
        await work

    with pytest.raises(ahg.StreamCaptureUnsupported):
        await asyncio.create_task(wait_for_it())
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        _step_nowait(stream, ptr, 2)  # async work on an invalidated capture
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    no_capture_left()


@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
def test_a_thread_synchronising_the_stream_invalidates_any_mode(kit: Any, mode: Any) -> None:
    stream, ptr = kit
    stream.begin_capture(mode)
    _step_nowait(stream, ptr, 1)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        on_thread(stream.query)  # the capturing stream itself: whatever the modes
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    no_capture_left()


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_others_may_not_begin_and_may_end_only_a_relaxed_capture(kit: Any, mode: Any) -> None:
    stream, ptr = kit
    stream.begin_capture(mode)
    _step_nowait(stream, ptr, 1)
    info = stream.capture_info()

    async def begin_again() -> None:
        async with stream.capture():
            pytest.fail("a second capture began on a capturing stream")

    with pytest.raises(ahg.IllegalState):
        await asyncio.create_task(begin_again())
    with pytest.raises(ahg.IllegalState):
        on_thread(stream.begin_capture)
    assert stream.capture_info() == info  # the first capture is untouched

    async def end_it() -> ahg.Graph:
        return stream.end_capture()

    if mode is ahg.CaptureMode.RELAXED:
        graph = await asyncio.create_task(end_it())
        assert len(graph.nodes()) == 1
        destroy(graph)
        await (await stream.memset(ptr, 7, NBYTES))  # eager again
        assert (
            host_view(stream.device, ptr).tolist()
            == [int(np.full(8, 7, np.uint8).view(np.int64)[0])] * N
        )
    else:
        with pytest.raises(ahg.StreamCaptureWrongThread):
            await asyncio.create_task(end_it())
        with pytest.raises(ahg.StreamCaptureWrongThread):
            on_thread(stream.end_capture)
        assert stream.capture_info() == info
        stream.end_capture().destroy()  # the beginner still can
    no_capture_left()
