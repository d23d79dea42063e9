"""The signal-set pool: O(1) borrow/return, misses, hand-off and cancellation."""

from __future__ import annotations

import asyncio

import pytest

from ahipgraph.exec.signal_pool import REACHED, SignalSetPool


def test_prepopulated_sets_are_reused_without_misses() -> None:
    pool = SignalSetPool(3, extra=2, num_sets=4)
    sets = [pool.acquire_nowait() for _ in range(4)]
    assert all(s is not None for s in sets)
    assert pool.statistics().free == 0
    for s in sets:
        assert s is not None
        pool.release(s)
    again = pool.acquire_nowait()
    assert again is sets[0]  # FIFO free list, nothing new created
    stats = pool.statistics()
    assert (stats.sets, stats.misses, stats.acquires) == (4, 0, 5)
    assert repr(pool) == "<SignalSetPool count=3 free=3/4 misses=0 waiters=0>"


def test_empty_pool_grows_and_counts_a_miss() -> None:
    pool = SignalSetPool(1, num_sets=1)
    first = pool.acquire_nowait()
    second = pool.acquire_nowait()
    assert first is not None
    assert second is not None
    assert first is not second
    stats = pool.statistics()
    assert (stats.sets, stats.misses, stats.in_use) == (2, 1, 2)


def test_release_rearms_pooled_signals_and_clears_bindings() -> None:
    pool = SignalSetPool(2, extra=1, num_sets=1)
    signal_set = pool.acquire_nowait()
    assert signal_set is not None
    signal_set.signals[0].decrement(10)
    signal_set.signals[2] = signal_set.signals[1]  # a per-launch binding
    pool.release(signal_set)
    assert [s.value for s in signal_set.signals[:2]] == [1, 1]
    assert signal_set.signals[2] is REACHED


@pytest.mark.asyncio
async def test_waiting_pool_hands_a_released_set_to_the_first_waiter() -> None:
    pool = SignalSetPool(1, num_sets=1, wait_when_empty=True)
    held = pool.acquire_nowait()
    assert held is not None
    assert pool.acquire_nowait() is None  # waiting mode: no miss, nothing created
    waiter = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)  # the waiter parks
    assert pool.statistics().waiters == 1
    pool.release(held)  # handed straight to the waiter...
    assert pool.acquire_nowait() is None  # ...so a non-blocking acquire cannot jump the queue
    assert await waiter is held
    stats = pool.statistics()
    assert (stats.sets, stats.misses, stats.waiters, stats.free) == (1, 0, 0, 0)


@pytest.mark.asyncio
async def test_waiter_cancelled_after_hand_off_gives_the_set_back() -> None:
    pool = SignalSetPool(1, num_sets=1, wait_when_empty=True)
    held = pool.acquire_nowait()
    assert held is not None
    waiter = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)  # the waiter parks
    pool.release(held)  # hand-off: the waiter's future now holds the set
    waiter.cancel()  # cancelled before it could resume
    with pytest.raises(asyncio.CancelledError):
        await waiter
    stats = pool.statistics()
    assert (stats.free, stats.waiters, stats.in_use) == (1, 0, 0)
    assert pool.acquire_nowait() is held


@pytest.mark.asyncio
async def test_waiter_cancelled_before_hand_off_leaves_no_trace() -> None:
    pool = SignalSetPool(1, num_sets=1, wait_when_empty=True)
    held = pool.acquire_nowait()
    assert held is not None
    waiter = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)  # the waiter parks
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pool.statistics().waiters == 0
    pool.release(held)
    assert pool.statistics().free == 1


def test_prepopulated_sets_are_made_when_first_needed_and_counted_from_the_start() -> None:
    pool = SignalSetPool(3, extra=1, num_sets=4)
    stats = pool.statistics()
    assert (stats.sets, stats.free, stats.in_use, stats.misses) == (4, 4, 0, 0)
    taken = [pool.acquire_nowait() for _ in range(4)]
    assert all(s is not None for s in taken)
    assert len({id(s) for s in taken}) == 4
    for signal_set in taken:
        assert signal_set is not None
        assert [signal.value for signal in signal_set.signals[:3]] == [1, 1, 1]
        assert signal_set.signals[3] is REACHED
    stats = pool.statistics()
    assert (stats.sets, stats.free, stats.in_use, stats.misses, stats.acquires) == (4, 0, 4, 0, 4)
    extra = pool.acquire_nowait()  # past the prepopulated sets: a miss, as before
    assert extra is not None
    assert (pool.statistics().sets, pool.statistics().misses) == (5, 1)
    for signal_set in [*taken, extra]:
        assert signal_set is not None
        pool.release(signal_set)
    assert pool.statistics().free == 5
    pool.close()
    assert (pool.statistics().free, pool.statistics().in_use) == (0, 0)


@pytest.mark.asyncio
async def test_a_waiting_pool_makes_its_prepopulated_sets_before_anyone_waits() -> None:
    pool = SignalSetPool(2, num_sets=3, wait_when_empty=True)
    sets = [await pool.acquire() for _ in range(3)]
    assert pool.acquire_nowait() is None  # all three made and in use: a launch would wait
    waiter = asyncio.ensure_future(pool.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    pool.release(sets[0])
    assert await waiter is sets[0]
    assert pool.statistics().misses == 0
    assert pool.statistics().sets == 3
