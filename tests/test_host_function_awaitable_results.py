"""A host function may return an awaitable; one that cannot be awaited here fails its call only.

A future of another event loop cannot become a task of the device's loop: starting it raised
out of the queue's run, and the queue stayed parked for good (every later enqueue on it, and
every synchronize, waited forever). It is now awaited by a coroutine, which fails, so the host
call fails with a LaunchFailure and the queue goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import ahipgraph as ahg


@pytest.fixture
def foreign_future() -> Iterator[asyncio.Future[None]]:
    other = asyncio.new_event_loop()
    try:
        yield other.create_future()
    finally:
        other.close()


@pytest.mark.asyncio
async def test_a_future_of_another_loop_fails_the_host_call_not_the_queue(
    device: ahg.Device, foreign_future: asyncio.Future[None]
) -> None:
    ran: list[int] = []
    with device.create_stream() as stream:
        failed = await stream.launch_host_func(lambda: foreign_future)
        with pytest.raises(ahg.LaunchFailure) as caught:
            await failed
        assert isinstance(caught.value.__cause__, RuntimeError)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
        await stream.launch_host_func(lambda: ran.append(1))
        await stream.synchronize()
    assert ran == [1]
    assert device.statistics().in_flight == 0


@ahg.kernel
def returns_foreign(t: ahg.Threads) -> object:
    return _FOREIGN[0]


_FOREIGN: list[object] = []


@pytest.mark.asyncio
async def test_a_kernel_body_returning_a_future_of_another_loop_fails_its_launch(
    device: ahg.Device, foreign_future: asyncio.Future[None]
) -> None:
    _FOREIGN[:] = [foreign_future]
    try:
        graph = ahg.Graph()
        graph.add_kernel_node(returns_foreign, 1, 1, ())
        with graph.instantiate() as graph_exec, device.create_stream() as stream:
            with pytest.raises(ahg.LaunchFailure):
                await (await graph_exec.launch(stream))
            with pytest.raises(ahg.LaunchFailure):
                await stream.synchronize()
        graph.destroy()
    finally:
        _FOREIGN.clear()
    assert device.statistics().in_flight == 0
