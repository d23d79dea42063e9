"""Capture modes are per task (and per OS thread): HIP's "thread" is the asyncio task here.

The hip-test scenarios: a synchronise from another task or thread during a GLOBAL capture
invalidates it; THREAD_LOCAL and RELAXED captures survive. A GLOBAL or THREAD_LOCAL capture ended
from another task or thread is WrongThread (the beginner can still end it); RELAXED ends anywhere.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import no_capture_left, on_thread
from cleanup import destroy

MODES = [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL, ahg.CaptureMode.RELAXED]


def test_exchange_capture_mode_returns_the_previous_mode_and_checks_it() -> None:
    assert ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED) is ahg.CaptureMode.GLOBAL
    assert ahg.exchange_capture_mode(ahg.CaptureMode.THREAD_LOCAL) is ahg.CaptureMode.RELAXED
    with pytest.raises(ahg.InvalidValue):
        ahg.exchange_capture_mode(7)
    assert ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL) is ahg.CaptureMode.THREAD_LOCAL


@pytest.mark.asyncio
async def test_each_task_has_its_own_mode() -> None:
    async def relaxed() -> ahg.CaptureMode:
        ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
        return ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)

    assert await asyncio.create_task(relaxed()) is ahg.CaptureMode.RELAXED
    assert ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL) is ahg.CaptureMode.GLOBAL  # ours


def test_each_thread_starts_global() -> None:
    ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
    try:
        assert on_thread(lambda: ahg.exchange_capture_mode(1)) is ahg.CaptureMode.GLOBAL
    finally:
        ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
async def test_sync_from_another_task_during_capture(device: ahg.Device, mode: Any) -> None:
    capturing, other = device.create_stream(), device.create_stream()
    capturing.begin_capture(mode)

    async def sync_other() -> None:
        await other.synchronize()

    if mode is ahg.CaptureMode.GLOBAL:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            await asyncio.create_task(sync_other())
        with pytest.raises(ahg.StreamCaptureInvalidated):
            capturing.end_capture()
    else:
        await asyncio.create_task(sync_other())
        capturing.end_capture().destroy()
    no_capture_left()
    destroy(capturing, other)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_sync_from_another_thread_during_capture(device: ahg.Device, mode: Any) -> None:
    capturing, other = device.create_stream(), device.create_stream()
    capturing.begin_capture(mode)

    def sync_other() -> bool:
        return other.query()  # the synchronous API, from an OS thread

    if mode is ahg.CaptureMode.GLOBAL:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            on_thread(sync_other)
        with pytest.raises(ahg.StreamCaptureInvalidated):
            capturing.end_capture()
    else:
        assert on_thread(sync_other)
        capturing.end_capture().destroy()
    no_capture_left()
    destroy(capturing, other)


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
async def test_end_from_another_task(device: ahg.Device, mode: Any) -> None:
    stream = device.create_stream()
    stream.begin_capture(mode)

    async def end() -> ahg.Graph:
        return stream.end_capture()

    if mode is ahg.CaptureMode.RELAXED:
        (await asyncio.create_task(end())).destroy()
    else:
        with pytest.raises(ahg.StreamCaptureWrongThread):
            await asyncio.create_task(end())
        assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
        stream.end_capture().destroy()  # the task that began it still can
    no_capture_left()
    destroy(stream)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_end_from_another_thread(device: ahg.Device, mode: Any) -> None:
    stream = device.create_stream()
    stream.begin_capture(mode)
    if mode is ahg.CaptureMode.RELAXED:
        on_thread(stream.end_capture).destroy()
    else:
        with pytest.raises(ahg.StreamCaptureWrongThread):
            on_thread(stream.end_capture)
        stream.end_capture().destroy()
    no_capture_left()
    destroy(stream)


@pytest.mark.asyncio
async def test_a_global_capture_begun_in_a_thread_is_tripped_by_a_task(device: ahg.Device) -> None:
    stream = device.create_stream()
    box: dict[str, Any] = {}
    begun, finish = threading.Event(), threading.Event()

    def thread_main() -> None:
        stream.begin_capture()
        begun.set()
        finish.wait()
        try:
            box["graph"] = stream.end_capture()
        except ahg.HipError as error:
            box["error"] = error

    thread = threading.Thread(target=thread_main)
    thread.start()
    begun.wait()
    with pytest.raises(ahg.StreamCaptureWrongThread):
        stream.end_capture()  # this task is not the thread that began it
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.malloc(8)  # GLOBAL mode here, and a GLOBAL capture exists
    finish.set()
    thread.join()
    assert isinstance(box.get("error"), ahg.StreamCaptureInvalidated)
    no_capture_left()
    destroy(stream)
