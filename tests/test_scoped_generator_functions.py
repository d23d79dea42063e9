"""A block object as a decorator of a generator function (sync or async): refused, since a
call only makes the generator and the block would end before a line of its body ran."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import ahipgraph as ahg
from ahipgraph import testing


def test_async_generator_function_is_refused() -> None:
    with pytest.raises(TypeError, match="generator function"):

        @testing.fail_kernels(None)
        async def kernels() -> AsyncIterator[int]:
            yield 1


def test_generator_function_is_refused() -> None:
    with pytest.raises(TypeError, match="generator function"):

        @ahg.tracing()
        def steps() -> Iterator[int]:
            yield 1


@pytest.mark.asyncio
async def test_coroutine_and_plain_functions_still_decorate(device: ahg.Device) -> None:
    @testing.fail_allocations(None)
    async def allocate() -> None:
        with pytest.raises(ahg.OutOfMemory):
            device.malloc(16)

    @testing.fail_allocations(None)
    def allocate_sync() -> None:
        with pytest.raises(ahg.OutOfMemory):
            device.malloc(16)

    before = device.memory_info()
    await allocate()
    allocate_sync()
    assert device.memory_info() == before
