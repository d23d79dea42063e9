"""Attacks on the wait queue's items in transit between threads."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ahipgraph.core.waitqueue import WaitQueue, WaitQueueStatistics


def test_an_item_reclaimed_while_its_hand_off_finds_the_loop_closed_is_not_handed_again() -> None:
    """A hand-off from another thread lists the item in transit, then asks the waiter's loop
    to deliver it. If that loop closes in between and ``reclaim`` runs meanwhile on a third
    thread, ``reclaim`` gives the item back; the hand-off then found the loop closed and
    reported the waiter dead, so its caller kept the item too (and handed it to the next
    waiter, or returned it again): one item owned twice. The hand-off now counts as made."""
    queue = WaitQueue()
    given_back: list[object] = []
    loop = asyncio.new_event_loop()
    task = loop.create_task(queue.park(on_abandon=given_back.append))
    loop.run_until_complete(asyncio.sleep(0))  # one turn: the task parks
    deliver = loop.call_soon_threadsafe

    def closed_under_the_hand_off(*args: Any) -> Any:
        loop.close()
        reclaimer = threading.Thread(target=queue.reclaim)
        reclaimer.start()
        reclaimer.join()
        return deliver(*args)  # raises: the loop is closed

    loop.call_soon_threadsafe = closed_under_the_hand_off  # type: ignore[method-assign]
    handed = queue.unpark("item")
    assert given_back == ["item"]
    assert handed  # given back by reclaim: the caller no longer owns it
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=0)
    assert not queue.reclaim()
    task.get_coro().close()  # as when the collector takes the dead task
    assert given_back == ["item"]  # once
    assert not queue.reclaim()


def test_an_item_delivered_to_a_waiter_that_never_resumed_is_given_back_once() -> None:
    """Delivered (the waiter's future resolved on its loop), then the loop stopped and closed
    before the task resumed. ``reclaim`` gave the item back; the collector closing the dead
    coroutine afterwards kept it for ``reclaim`` again, which gave it back a second time (a
    pooled item then listed free twice). Whichever of the two comes first now takes it."""
    queue = WaitQueue()
    given_back: list[object] = []
    loop = asyncio.new_event_loop()
    task = loop.create_task(queue.park(on_abandon=given_back.append))
    loop.run_until_complete(asyncio.sleep(0))  # one turn: the task parks
    assert queue.unpark("item")  # from outside the loop: delivered when it next turns
    loop.call_soon(loop.stop)
    loop.run_forever()  # the delivery runs; the task's resumption would be the next turn
    assert not task.done()
    loop.close()
    assert queue.reclaim()
    assert given_back == ["item"]
    task.get_coro().close()  # as when the collector takes the dead task
    assert not queue.reclaim()
    assert given_back == ["item"]  # once
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=0)
