"""The one wait primitive read and woken from another OS thread while its loop parks and wakes.

DESIGN.md §4: everything synchronous, destroy included, is safe from any thread. A launch
parked for a signal set waits in the executable's pool's ``WaitQueue``; the loop's completions
hand sets to those waiters one by one. ``exec.destroy()`` from another thread asks the pool how
many launches wait, and wakes them with an error; ``statistics()`` counts them. Counting walked
the queue in Python code, so the loop's thread could take a waiter off it half way: the count
raised ``RuntimeError: deque mutated during iteration``, and a destroy that raised it had
already retired the handle and never dropped its reference, so the executable was never freed
and its user objects' destructors never ran.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import ahipgraph as ahg
from ahipgraph.core.waitqueue import WaitQueue, WaitQueueStatistics
from cleanup import destroy

LAUNCHES = 500


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


def one_set_executable(
    device: ahg.Device, ran: list[object]
) -> tuple[ahg.DevicePtr, ahg.Graph, ahg.GraphExec, ahg.Stream]:
    """Memory, a graph, its executable (launches queue up on a pool of one signal set, and
    the executable holds a user object logging to ``ran``), and a stream to launch on."""
    out = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph.retain_user_object(ahg.UserObject(ran.append, "data"), move=True)
    return out, graph, graph.instantiate(signal_sets=1), device.create_stream()


@pytest.mark.asyncio
async def test_statistics_read_from_a_thread_while_parked_launches_are_woken(
    device: ahg.Device, fast_switching: None
) -> None:
    ran: list[object] = []
    out, graph, graph_exec, stream = one_set_executable(device, ran)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def reading() -> None:
        while not stop.is_set():
            try:
                graph_exec.statistics()
                device.statistics()
            except BaseException as error:  # reported on the test's thread
                errors.append(error)
                return
            reads[0] += 1

    reader = threading.Thread(target=reading)
    reader.start()
    try:
        launches = [asyncio.ensure_future(graph_exec.launch(stream)) for _ in range(LAUNCHES)]
        for handle in await asyncio.gather(*launches):
            await handle
    finally:
        stop.set()
        reader.join()
    assert errors == []
    assert reads[0] > 0
    assert int(device.view(out, "int64", 1)[0]) == LAUNCHES
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.in_use, pool.waiters) == (1, 0, 0)
    destroy(graph_exec, graph, stream, out)
    assert ran == ["data"]


@pytest.mark.asyncio
async def test_destroy_from_a_thread_while_parked_launches_are_woken_frees_the_executable(
    device: ahg.Device, fast_switching: None
) -> None:
    ran: list[object] = []
    out, graph, graph_exec, stream = one_set_executable(device, ran)
    graph.destroy()
    errors: list[BaseException] = []
    started = threading.Event()

    def destroying() -> None:
        started.wait()
        try:
            graph_exec.destroy()
        except BaseException as error:  # reported on the test's thread
            errors.append(error)

    destroyer = threading.Thread(target=destroying)
    destroyer.start()
    launches = [asyncio.ensure_future(graph_exec.launch(stream)) for _ in range(LAUNCHES)]
    await asyncio.sleep(0)  # every launch has parked but the first
    started.set()
    results = await asyncio.gather(*launches, return_exceptions=True)
    destroyer.join()
    assert errors == []
    handles = [r for r in results if isinstance(r, ahg.Completion)]
    refused = [r for r in results if not isinstance(r, ahg.Completion)]
    assert all(isinstance(r, ahg.InvalidValue) for r in refused)
    for handle in handles:
        await handle
    await stream.synchronize()
    assert int(device.view(out, "int64", 1)[0]) == len(handles)
    stats = graph_exec.statistics()
    assert (stats.state, stats.in_flight, stats.signal_pool.waiters) == ("closed", 0, 0)
    assert ran == ["data"]  # freed: its last reference went
    destroy(stream, out)


def _parked_on_a_stopped_loop(
    queue: WaitQueue, given_back: list[object]
) -> tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]:
    """A loop, stopped, with one task parked on ``queue`` (giving items back to ``given_back``)."""
    loop = asyncio.new_event_loop()
    task = loop.create_task(queue.park(on_abandon=given_back.append))
    loop.run_until_complete(asyncio.sleep(0))  # one turn: the task parks
    assert queue.statistics() == WaitQueueStatistics(waiters=1, in_transit=0)
    return loop, task


@pytest.mark.parametrize("coroutine_closed_first", [False, True])
def test_an_item_handed_from_another_thread_to_a_loop_closed_before_delivery_is_reclaimed(
    coroutine_closed_first: bool,
) -> None:
    """A hand-off from another thread is a callback on the waiter's loop; a loop closed before
    running it drops the callback. The item was lost: the waiter never had it, and ``reclaim``
    found only a waiter never handed anything. It is now given back once, by ``reclaim``,
    whether the waiter's coroutine was closed first or not."""
    queue = WaitQueue()
    given_back: list[object] = []
    loop, task = _parked_on_a_stopped_loop(queue, given_back)
    assert queue.unpark("item")  # not on the loop's thread (it is not running)
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=1)
    assert "in_transit=1" in repr(queue)
    loop.close()
    if coroutine_closed_first:
        task.get_coro().close()  # as when the collector takes the dead task
    assert queue.reclaim()
    assert given_back == ["item"]
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=0)
    assert not queue.reclaim()
    if not coroutine_closed_first:
        task.get_coro().close()
    assert given_back == ["item"]  # once


def test_an_item_handed_from_another_thread_is_delivered_once_its_loop_runs() -> None:
    """The usual case: the callback runs, the waiter gets the item, nothing is in transit."""
    queue = WaitQueue()
    given_back: list[object] = []
    loop, task = _parked_on_a_stopped_loop(queue, given_back)
    assert queue.unpark("item")
    assert loop.run_until_complete(task) == "item"
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=0)
    assert given_back == []
    assert not queue.reclaim()
    loop.close()


def test_an_item_handed_from_another_thread_to_a_cancelled_waiter_is_given_back() -> None:
    """Cancelled before the delivery ran: the delivery gives the item back, once."""
    queue = WaitQueue()
    given_back: list[object] = []
    loop, task = _parked_on_a_stopped_loop(queue, given_back)
    assert queue.unpark("item")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)
    assert given_back == ["item"]
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=0)
    assert not queue.reclaim()
    loop.close()
