"""WaitQueue, the one wait primitive: FIFO, hand-off on wake, cancellation on both sides of it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ahipgraph.core.waitqueue import WaitQueue


async def _park_all(queue: WaitQueue, n: int, **kwargs: Any) -> list[asyncio.Task[Any]]:
    tasks = [asyncio.ensure_future(queue.park(**kwargs)) for _ in range(n)]
    await asyncio.sleep(0)  # each task runs up to its park and waits there
    assert len(queue) == n
    return tasks


@pytest.mark.asyncio
async def test_unpark_without_waiters_returns_false() -> None:
    queue = WaitQueue()
    assert queue.unpark("item") is False
    assert queue.unpark_all() == 0
    assert not queue


@pytest.mark.asyncio
async def test_waiters_wake_in_fifo_order_with_the_handed_value() -> None:
    queue = WaitQueue()
    tasks = await _park_all(queue, 3)
    for value in ("first", "second", "third"):
        assert queue.unpark(value) is True
    assert await asyncio.gather(*tasks) == ["first", "second", "third"]
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_unpark_hands_to_exactly_one_waiter() -> None:
    queue = WaitQueue()
    first, second = await _park_all(queue, 2)
    assert queue.unpark(1)
    await asyncio.sleep(0)  # the first waiter resumes with its value
    assert first.done()
    assert first.result() == 1
    assert not second.done()
    assert len(queue) == 1
    assert queue.unpark(2)
    assert await second == 2


@pytest.mark.asyncio
async def test_unpark_all_wakes_everyone_and_counts_them() -> None:
    queue = WaitQueue()
    tasks = await _park_all(queue, 4)
    assert queue.unpark_all("go") == 4
    assert await asyncio.gather(*tasks) == ["go"] * 4
    assert queue.unpark_all() == 0


@pytest.mark.asyncio
async def test_waiter_cancelled_before_hand_off_leaves_the_queue() -> None:
    queue = WaitQueue()
    abandoned: list[Any] = []
    first, second = await _park_all(queue, 2, on_abandon=abandoned.append)
    first.cancel()
    # The cancelled waiter no longer counts, even before its task has run its cleanup.
    assert len(queue) == 1
    await asyncio.sleep(0)  # the first task runs its except-branch and discards its future
    assert first.cancelled()
    # The next hand-off skips it and reaches the live waiter.
    assert queue.unpark("item") is True
    assert await second == "item"
    assert abandoned == []  # nothing was handed to the cancelled waiter
    assert queue.unpark("spare") is False


@pytest.mark.asyncio
async def test_waiter_cancelled_after_hand_off_gives_the_value_back() -> None:
    queue = WaitQueue()
    abandoned: list[Any] = []
    (waiter,) = await _park_all(queue, 1, on_abandon=abandoned.append)
    assert queue.unpark("item") is True  # handed over; the task has not resumed yet
    waiter.cancel()  # cancelled in the window between hand-off and resumption
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert abandoned == ["item"]
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_cancel_after_hand_off_race_passes_the_item_to_the_next_waiter() -> None:
    # A pool whose release hands over and whose abandon re-releases.
    queue = WaitQueue()
    free: list[str] = []

    def release(item: str) -> None:
        if not queue.unpark(item):
            free.append(item)

    first, second = await _park_all(queue, 2, on_abandon=release)
    release("slot")  # goes straight to the first waiter...
    first.cancel()  # ...which is cancelled before it can use it
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0)  # the second waiter resumes with whatever it was handed
    # The abandon hook handed the slot on; it was not lost and did not go back to the free list.
    assert second.done()
    assert second.result() == "slot"
    assert free == []


@pytest.mark.asyncio
async def test_cancel_after_hand_off_without_abandon_hook_still_cancels_cleanly() -> None:
    queue = WaitQueue()
    (waiter,) = await _park_all(queue, 1)
    queue.unpark("ignored")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_statistics_and_repr_count_live_waiters() -> None:
    queue = WaitQueue()
    tasks = await _park_all(queue, 3)
    assert queue.statistics().waiters == 3
    assert repr(queue) == "<WaitQueue waiters=3>"
    tasks[1].cancel()
    assert queue.statistics().waiters == 2
    queue.unpark_all()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert queue.statistics().waiters == 0
    assert repr(queue) == "<WaitQueue waiters=0>"
