"""The current device (``ahg.set_device``) across ``fresh_devices`` blocks (``testing/leaks.py``).

The choice lives in a context variable that, in a synchronous test, belongs to the thread the
whole session runs in: a block must start on device 0, as a fresh runtime does, whatever the
block before it chose, and give the choice made outside it back when it ends.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from ahipgraph.testing import fresh_devices


def test_a_block_starts_on_device_0_whatever_the_last_block_chose() -> None:
    with fresh_devices(2):
        ahg.set_device(1)  # the block ends without setting it back
        assert ahg.current_device().ordinal == 1
    with fresh_devices(2) as devices:
        assert ahg.current_device() is devices[0]
        assert ahg.get_device() is devices[0]


def test_a_block_gives_the_outer_choice_back(device: ahg.Device) -> None:
    with fresh_devices(3) as outer:
        ahg.set_device(2)
        with fresh_devices(2) as inner:
            assert ahg.current_device() is inner[0]
            ahg.set_device(1)
        assert ahg.current_device() is outer[2]
        ahg.set_device(0)


def test_a_block_that_fails_to_open_changes_no_choice(device: ahg.Device) -> None:
    with fresh_devices(2) as outer:
        ahg.set_device(1)
        with pytest.raises(ValueError), fresh_devices(2, [ahg.DeviceProperties()] * 3):
            pytest.fail("the block must not run")
        assert ahg.current_device() is outer[1]
        ahg.set_device(0)


def test_a_decorated_coroutine_function_runs_on_device_0() -> None:
    seen: list[int] = []

    @fresh_devices(2)
    async def body() -> None:
        seen.append(ahg.current_device().ordinal)
        ahg.set_device(1)

    with fresh_devices(2):
        ahg.set_device(1)
        asyncio.run(body())
        assert ahg.current_device().ordinal == 1
        ahg.set_device(0)
    assert seen == [0]
