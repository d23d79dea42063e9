"""A host function runs in a fresh context, whichever task woke the device to run it.

The device's pump runs in the context of the task that woke it, and a host function used to
be called right there: it saw that task's context variables (its capture mode, its current
device, the program's own variables), a different task's from one run to the next. As a HIP
host function runs on a runtime thread that never set anything, each call now gets a fresh
context: every variable at its default.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

import pytest

import ahipgraph as ahg

REQUEST: ContextVar[str] = ContextVar("request", default="none")


@pytest.mark.asyncio
async def test_a_host_function_sees_no_variable_of_the_task_that_enqueued_it(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    seen: list[str] = []
    REQUEST.set("enqueuer")
    await stream.launch_host_func(lambda: seen.append(REQUEST.get()))
    await stream.synchronize()
    assert seen == ["none"]
    stream.destroy()


@pytest.mark.asyncio
async def test_an_async_host_function_runs_in_its_own_context_too(device: ahg.Device) -> None:
    stream = device.create_stream()
    seen: list[str] = []

    async def body() -> None:
        seen.append(REQUEST.get())
        REQUEST.set("set inside")  # stays inside the host function's own context
        await asyncio.sleep(0)
        seen.append(REQUEST.get())

    REQUEST.set("enqueuer")
    await stream.launch_host_func(body)
    await stream.synchronize()
    assert seen == ["none", "set inside"]
    assert REQUEST.get() == "enqueuer"
    stream.destroy()


@pytest.mark.asyncio
async def test_a_host_function_starts_on_device_0_whatever_the_task_chose() -> None:
    ahg.configure_devices(2)
    ahg.set_device(1)
    try:
        stream = ahg.get_device(1).create_stream()
        seen: list[int] = []
        await stream.launch_host_func(lambda: seen.append(ahg.current_device().ordinal))
        await stream.synchronize()
        assert seen == [0]  # a runtime thread that never set a device, as in HIP
        stream.destroy()
    finally:
        ahg.set_device(0)


@pytest.mark.asyncio
async def test_a_relaxed_task_does_not_lend_its_mode_to_a_host_function(
    device: ahg.Device,
) -> None:
    """Under another task's GLOBAL capture, a host function's malloc is refused (its mode
    is the default, GLOBAL), even when the task that woke the device is RELAXED."""
    capturing, worker = device.create_stream(), device.create_stream()
    outcome: list[str] = []

    def allocate() -> None:
        try:
            device.free(device.malloc(64))
            outcome.append("allocated")
        except ahg.StreamCaptureUnsupported:
            outcome.append("refused")

    capturing.begin_capture(ahg.CaptureMode.GLOBAL)
    previous = ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
    try:
        await worker.launch_host_func(allocate)
        await worker.synchronize()  # RELAXED: this task may synchronise a stream meanwhile
    finally:
        ahg.exchange_capture_mode(previous)
    assert outcome == ["refused"]
    assert capturing.is_capturing() is ahg.CaptureStatus.INVALIDATED  # HIP's side effect
    with pytest.raises(ahg.StreamCaptureInvalidated):
        capturing.end_capture()
    capturing.destroy()
    worker.destroy()
    assert device.memory_info()[0] == device.memory_info()[1]
