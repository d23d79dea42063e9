"""``ahg.exchange_capture_mode``: bad values, and which task or thread a mode belongs to.

HIP (``hipThreadExchangeStreamCaptureMode``): a mode outside GLOBAL..RELAXED is InvalidValue.
Here the mode is a context variable: each task has its own (a copy of its creator's when it
starts) and each OS thread starts at GLOBAL; a refused exchange changes nothing. The mode in
force is the caller's, whatever mode the capture was begun with.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import no_capture_left, on_thread
from cleanup import destroy


class _OtherEnum(enum.IntEnum):
    TWO = 2


BAD = [-1, 3, 1 << 70, True, False, np.bool_(True), 1.0, "RELAXED", None, [2], object()]


@pytest.mark.parametrize("bad", BAD, ids=repr)
def test_a_bad_mode_is_invalid_value_and_changes_nothing(bad: Any) -> None:
    previous = ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
    try:
        with pytest.raises(ahg.InvalidValue):
            ahg.exchange_capture_mode(bad)
        assert (
            ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL) is ahg.CaptureMode.THREAD_LOCAL
        )
    finally:
        ahg.exchange_capture_mode(previous)


@pytest.mark.parametrize("good", [np.int64(2), _OtherEnum.TWO, 2], ids=repr)
def test_any_integer_in_range_is_a_mode(good: Any) -> None:
    previous = ahg.exchange_capture_mode(good)
    try:
        assert ahg.exchange_capture_mode(previous) is ahg.CaptureMode.RELAXED
    finally:
        ahg.exchange_capture_mode(previous)


def test_a_threads_mode_is_its_own_and_stays_with_the_thread() -> None:
    """A thread's exchange changes neither its creator's mode nor another thread's; a pool
    thread keeps its mode from one job to the next (HIP's mode is per thread)."""
    assert on_thread(lambda: ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)) is (
        ahg.CaptureMode.GLOBAL
    )
    assert on_thread(lambda: ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL)) is (
        ahg.CaptureMode.GLOBAL
    )
    assert ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL) is ahg.CaptureMode.GLOBAL
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(ahg.exchange_capture_mode, 2).result() is ahg.CaptureMode.GLOBAL
        assert pool.submit(ahg.exchange_capture_mode, 0).result() is ahg.CaptureMode.RELAXED


@pytest.mark.asyncio
async def test_the_callers_mode_decides_not_the_captures(device: ahg.Device) -> None:
    """A RELAXED caller may malloc beside a GLOBAL capture; a GLOBAL caller trips the GLOBAL
    capture, and never a RELAXED one, even its own."""
    capturing = device.create_stream()
    capturing.begin_capture(ahg.CaptureMode.GLOBAL)

    async def relaxed_malloc() -> None:
        ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
        device.free(device.malloc(64))

    await asyncio.create_task(relaxed_malloc())
    assert capturing.is_capturing() is ahg.CaptureStatus.ACTIVE
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(64)  # this task is GLOBAL: the GLOBAL capture is tripped
    with pytest.raises(ahg.StreamCaptureInvalidated):
        capturing.end_capture()
    capturing.begin_capture(ahg.CaptureMode.RELAXED)
    device.free(device.malloc(64))  # GLOBAL caller, RELAXED capture (even its own): allowed
    capturing.end_capture().destroy()
    no_capture_left()
    destroy(capturing)


@pytest.mark.asyncio
async def test_a_task_exchanging_its_mode_while_its_capture_runs(device: ahg.Device) -> None:
    """THREAD_LOCAL capture, then the same task turns RELAXED: its malloc is allowed; back to
    THREAD_LOCAL, the same malloc trips its own capture."""
    capturing = device.create_stream()
    capturing.begin_capture(ahg.CaptureMode.THREAD_LOCAL)
    previous = ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
    try:
        device.free(device.malloc(64))
        assert capturing.is_capturing() is ahg.CaptureStatus.ACTIVE
        ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL)
        with pytest.raises(ahg.StreamCaptureUnsupported):
            device.malloc(64)
    finally:
        ahg.exchange_capture_mode(previous)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        capturing.end_capture()
    no_capture_left()
    destroy(capturing)
