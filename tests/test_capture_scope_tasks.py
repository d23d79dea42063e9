"""``async with stream.capture()`` entered in one task and left in another.

An async generator's body runs in whichever task resumes it, so a capture block inside one may
be entered by one task and left by another. HIP ends a GLOBAL or THREAD_LOCAL capture only from
the thread (here: the task) that began it, so the clean exit's end is WrongThread; the block
still owns its capture, and nothing else can end it, so the capture ends there and then, its
graph is destroyed, and nothing stays registered (a GLOBAL capture left in progress refuses
every ``malloc``). A RELAXED capture ends anywhere and gives its graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy


def _capturing_generator(
    stream: ahg.Stream, ptr: ahg.DevicePtr, mode: ahg.CaptureMode
) -> AsyncIterator[Any]:
    async def body() -> AsyncIterator[Any]:
        async with stream.capture(mode) as scope:
            await stream.launch_kernel(affine, 1, N, (N, 2, 1, ptr, ptr))
            yield scope  # the block is left in whichever task resumes the generator
            await stream.launch_kernel(affine, 1, N, (N, 1, 0, ptr, ptr))

    return body()


async def _entered_in_a_task(
    device: ahg.Device, mode: ahg.CaptureMode
) -> tuple[ahg.Stream, ahg.DevicePtr, Baseline, AsyncIterator[Any]]:
    """A stream and buffer, the baseline, and a capture block entered in a task of its own."""
    stream = device.create_stream()
    ptr = device.malloc(NBYTES)
    before = Baseline.take(device)
    gen = _capturing_generator(stream, ptr, mode)
    await asyncio.create_task(gen.__anext__())  # entered, and one kernel captured, there
    return stream, ptr, before, gen


async def _resume_to_the_end(gen: AsyncIterator[Any]) -> None:
    with pytest.raises(StopAsyncIteration):
        await gen.__anext__()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "mode", [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL], ids=lambda m: m.name
)
async def test_a_block_left_in_another_task_is_wrong_thread_and_ends_its_capture(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    stream, ptr, before, gen = await _entered_in_a_task(device, mode)
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    with pytest.raises(ahg.StreamCaptureWrongThread):
        await asyncio.create_task(_resume_to_the_end(gen))  # left here, in another task
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before  # its graph was destroyed with it
    no_capture_left()
    destroy(device.malloc(64))  # a GLOBAL capture left in progress would refuse this
    stream.begin_capture(mode)  # and the stream captures again
    stream.end_capture().destroy()
    destroy(stream, ptr)


@pytest.mark.asyncio
async def test_a_relaxed_block_left_in_another_task_gives_its_graph(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = device.malloc(NBYTES)
    gen = _capturing_generator(stream, ptr, ahg.CaptureMode.RELAXED)
    scope = await asyncio.create_task(gen.__anext__())
    await asyncio.create_task(_resume_to_the_end(gen))
    no_capture_left()
    assert scope.graph is not None
    assert len(scope.graph.nodes()) == 2
    destroy(scope.graph, stream, ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", list(ahg.CaptureMode), ids=lambda m: m.name)
async def test_a_block_closed_from_another_task_aborts_its_capture(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    """``aclose()`` throws GeneratorExit into the block: the exception path, in any task."""
    stream, ptr, before, gen = await _entered_in_a_task(device, mode)
    await asyncio.create_task(gen.aclose())  # type: ignore[attr-defined]
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(stream, ptr)
