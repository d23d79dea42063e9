"""Misuse of nested ``fresh_devices`` (``testing/leaks.py``) inside the plugin's fixture.

Whatever happens in or around the inner block (an exception, a leak, work left in flight, a
Ctrl-C while it opens), the outer block gets its own device objects back, and they still work.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from types import FrameType
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import LeakError, fresh_devices


def test_ctrl_c_while_the_inner_block_opens_gives_the_outer_devices_back(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()  # something alive: opening the block collects

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and arg is gc.collect:
            sys.setprofile(None)
            raise KeyboardInterrupt

    sys.setprofile(profile)
    try:
        with pytest.raises(KeyboardInterrupt), fresh_devices():
            pytest.fail("the block must not run")
    finally:
        sys.setprofile(None)
    assert ahg.get_device(0) is device
    stream.destroy()


def test_an_exception_in_the_inner_block(device: ahg.Device) -> None:
    seen: list[object] = []

    def block() -> None:
        with fresh_devices(2) as inner:
            seen.extend([ahg.device_count(), inner[0] is device])
            raise ValueError("inner")

    with pytest.raises(ValueError, match="inner"):
        block()
    assert seen == [2, False]
    assert ahg.device_count() == 1
    assert ahg.get_device(0) is device


def test_a_leak_in_the_inner_block_is_its_own(device: ahg.Device) -> None:
    with pytest.raises(LeakError, match="stream"), fresh_devices() as (inner,):
        leaked = inner.create_stream()
    assert ahg.get_device(0) is device
    leaked.destroy()


def test_work_left_in_flight_by_the_inner_block(device: ahg.Device) -> None:
    ran: list[int] = []

    async def leave_work(inner: ahg.Device) -> ahg.Stream:
        stream = inner.create_stream()
        await stream.launch_host_func(ran.append, 1)
        return stream

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(LeakError, match="in flight"), fresh_devices() as (inner,):
            stream = loop.run_until_complete(leave_work(inner))
        assert ahg.get_device(0) is device

        async def outer_work() -> None:
            with device.create_stream() as own:
                await own.launch_host_func(ran.append, 2)
                await own.synchronize()

        loop.run_until_complete(outer_work())
        assert 2 in ran
        stream.destroy()
    finally:
        loop.close()


def test_nested_twice_in_a_thread(device: ahg.Device) -> None:
    import threading

    seen: list[bool] = []

    def body() -> None:
        with fresh_devices() as (a,):
            with fresh_devices() as (b,):
                seen.append(ahg.get_device(0) is b)
            seen.append(ahg.get_device(0) is a)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join(30)
    assert seen == [True, True]
    assert ahg.get_device(0) is device


def test_ctrl_c_while_the_inner_block_checks_for_leaks_gives_the_outer_devices_back(
    device: ahg.Device,
) -> None:
    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and arg is gc.collect:
            sys.setprofile(None)
            raise KeyboardInterrupt

    leaked: list[ahg.Stream] = []

    def block() -> None:
        with fresh_devices() as (inner,):
            leaked.append(inner.create_stream())  # a leak: the exit check collects to confirm
            sys.setprofile(profile)

    try:
        with pytest.raises(KeyboardInterrupt):
            block()
    finally:
        sys.setprofile(None)
    assert ahg.get_device(0) is device
    leaked[0].destroy()


@pytest.mark.parametrize(("count", "error"), [(0, ValueError), (True, TypeError), (1.0, TypeError)])
def test_a_bad_inner_configuration_changes_nothing(
    device: ahg.Device, count: Any, error: type[Exception]
) -> None:
    with pytest.raises(error), fresh_devices(count):
        pytest.fail("the block must not run")
    assert ahg.device_count() == 1
    assert ahg.get_device(0) is device
