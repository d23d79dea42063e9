"""Forgotten capturing streams under misuse: warnings as errors, isolation, queries."""

from __future__ import annotations

import gc
import threading
import warnings
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, N, affine, no_capture_left
from cleanup import destroy


def malloc_works(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    device.free(ptr)


def test_warnings_raised_as_errors_do_not_stop_the_release(device: ahg.Device) -> None:
    seen: list[Any] = []
    old = threading.excepthook

    def hook(args: Any) -> None:
        seen.append(args)

    import sys

    old_unraisable = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        box = [device.create_stream()]
        box[0].begin_capture(ahg.CaptureMode.GLOBAL)
        with pytest.raises(ahg.StreamCaptureUnsupported):
            device.malloc(16)
        with warnings.catch_warnings():
            warnings.simplefilter("error", ahg.ForgottenHandleWarning)
            box.clear()
            ahg.collect_forgotten()
    finally:
        sys.unraisablehook = old_unraisable
        threading.excepthook = old
    assert seen  # the warnings, raised, went to the unraisable hook
    assert all(issubclass(a.exc_type, ahg.ForgottenHandleWarning) for a in seen)
    malloc_works(device)
    no_capture_left()


@pytest.mark.asyncio
async def test_an_event_of_a_collected_capture_waited_on_by_another_capture(
    device: ahg.Device,
) -> None:
    src = device.malloc(NBYTES)
    event = device.create_event()
    box = [device.create_stream()]
    box[0].begin_capture(ahg.CaptureMode.RELAXED)
    await box[0].launch_kernel(affine, 1, N, (N, 2, 1, src, src))
    await box[0].record_event(event)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    other = device.create_stream()
    other.begin_capture(ahg.CaptureMode.RELAXED)
    await other.wait_event(
        event
    )  # the capture ended: as after destroy(), a wait outside any capture
    graph = other.end_capture()
    destroy(graph, other, event, src)
    no_capture_left()


@pytest.mark.asyncio
async def test_queries_on_a_live_fork_while_its_origin_is_collected(device: ahg.Device) -> None:
    src = device.malloc(NBYTES)
    event = device.create_event()
    fork = device.create_stream()
    box = [device.create_stream()]
    box[0].begin_capture(ahg.CaptureMode.RELAXED)
    await box[0].launch_kernel(affine, 1, N, (N, 2, 1, src, src))
    await box[0].record_event(event)
    await fork.wait_event(event)
    info = fork.capture_info()
    assert info.status is ahg.CaptureStatus.ACTIVE
    del info
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        box.clear()
        gc.collect()
        # collected, not yet released (maybe): every query on the fork still answers
        fork.is_capturing()
        fork.capture_info()
        ahg.capture_statistics()
        ahg.collect_forgotten()
    assert not fork.is_capturing()
    with pytest.raises(ahg.IllegalState):
        fork.end_capture()
    with pytest.raises(ahg.IllegalState):
        fork.update_capture_dependencies([], ahg.CaptureDependencies.SET)
    await fork.launch_kernel(affine, 1, N, (N, 2, 1, src, src))
    await fork.synchronize()
    destroy(fork, event, src)
    no_capture_left()


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL])
async def test_a_forgotten_invalidated_capture_ends_and_malloc_works_again(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    src = device.malloc(NBYTES)
    fork = device.create_stream()
    event = device.create_event()
    box = [device.create_stream()]
    box[0].begin_capture(mode)
    await box[0].launch_kernel(affine, 1, N, (N, 2, 1, src, src))
    await box[0].record_event(event)
    await fork.wait_event(event)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(16)  # invalidates the capture, which stays in progress
    assert fork.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    assert fork.is_capturing() is ahg.CaptureStatus.NONE
    malloc_works(device)
    await fork.launch_kernel(affine, 1, N, (N, 2, 1, src, src))  # eager again
    await fork.synchronize()
    destroy(fork, event, src)
    no_capture_left()
