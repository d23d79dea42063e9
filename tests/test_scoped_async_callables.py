"""Block objects decorating async code that is not a plain ``async def`` function: an object
with an ``async def __call__``, and a static or class method (the block above the
``@staticmethod`` / ``@classmethod``). Each call runs its whole coroutine inside the block."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph import testing


class Allocate:
    async def __call__(self, device: ahg.Device) -> str:
        with pytest.raises(ahg.OutOfMemory):  # the block is in force while the body runs
            device.malloc(16)
        return "ran"


class Jobs:
    @testing.fail_allocations(None)
    @staticmethod
    async def static(device: ahg.Device) -> None:
        with pytest.raises(ahg.OutOfMemory):
            device.malloc(16)

    @testing.fail_allocations(None)
    @classmethod
    async def of_class(cls, device: ahg.Device) -> type[Jobs]:
        with pytest.raises(ahg.OutOfMemory):
            device.malloc(16)
        return cls


@pytest.mark.asyncio
async def test_an_async_callable_object_runs_inside_the_block(device: ahg.Device) -> None:
    before = device.memory_info()
    job = testing.fail_allocations(None)(Allocate())
    assert await job(device) == "ran"
    assert device.memory_info() == before
    device.free(device.malloc(16))  # the block is over


@pytest.mark.asyncio
async def test_static_and_class_methods_run_inside_the_block(device: ahg.Device) -> None:
    before = device.memory_info()
    await Jobs.static(device)
    await Jobs().static(device)  # still static: no instance passed
    assert await Jobs.of_class(device) is Jobs
    assert await Jobs().of_class(device) is Jobs
    assert device.memory_info() == before
