"""Calls parked on a stream that is destroyed (or whose device is replaced) meanwhile.

A stream enqueue that finds its ring full parks for room; a graph launch parks for a signal
set; ``malloc_async`` parks for a pending free on its stream. Each once stayed parked after
its stream was destroyed, until what it waited for came (never, behind a kernel that never
ends), only to be refused then. Now the destroy wakes them at once: each is refused as a call
made after the destroy is (``ContextIsDestroyed``; ``InvalidDevice`` for a replaced device)
and takes nothing. Work enqueued before the destroy still runs.

Also: a ``__del__`` or ``gc.callbacks`` hook that asks for the per-task stream while this
thread is inside the per-task stream table's lock once deadlocked on that lock.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, leak_report, loop_turns, snapshot
from cleanup import destroy
from rings import CAPACITY, fill_ring, ring_of

HANG = 10  # seconds: a hang detector only; everything here is woken at once


async def _parked(
    device: ahg.Device, stream: ahg.Stream, calls: list[Callable[[], Awaitable[Any]]]
) -> list[asyncio.Task[Any]]:
    """Start ``calls`` as tasks and wait until each is parked for room in ``stream``'s ring."""
    waiting = ring_of(device, stream).waiting_for_room
    tasks = [asyncio.ensure_future(call()) for call in calls]
    await loop_turns()
    assert ring_of(device, stream).waiting_for_room == waiting + len(calls)
    assert not any(task.done() for task in tasks)
    return tasks


async def _refused(
    tasks: list[asyncio.Task[Any]], kind: type[BaseException] = ahg.ContextIsDestroyed
) -> list[BaseException]:
    """Each task's exception, every one a ``kind`` (by default what a call on a destroyed
    stream gets), failing the test if one still waits (the held kernel is not released:
    nothing else could wake them)."""
    results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), HANG)
    assert all(isinstance(result, kind) for result in results), results
    return results


@pytest.mark.asyncio
async def test_destroy_wakes_every_enqueue_parked_for_ring_room_and_none_takes_anything(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    baseline = snapshot()
    stream, other = device.create_stream(), device.create_stream()
    assert stream.statistics().queue != other.statistics().queue
    gate = HeldKernel("gate")
    pending_event, recorded = device.create_event(), device.create_event()
    await gate.launch(other)
    await other.record_event(pending_event)  # pending for as long as the gate holds
    ptr, freed = device.malloc(64), device.malloc(64)
    host = np.zeros(16, np.uint8)
    ran: list[str] = []
    held = await fill_ring(device, stream)
    submitted = stream.statistics().submitted
    before = ring_of(device, stream)
    memory = device.memory_info()
    tasks = await _parked(
        device,
        stream,
        [
            lambda: stream.launch_kernel(held.kernel, 1, 1),
            lambda: stream.memcpy(ptr, host, 16),
            lambda: stream.memcpy(host, ptr, 16),
            lambda: stream.memset(ptr, 1, 8),
            lambda: stream.launch_host_func(ran.append, "host"),
            lambda: stream.record_event(recorded),
            lambda: stream.wait_event(pending_event),
            lambda: stream.free_async(freed),
            lambda: stream.write_value_32(ptr, 5),
        ],
    )
    stream.destroy()
    assert ring_of(device, stream).waiting_for_room == 0  # they left the ring's waiters at once
    errors = await _refused(tasks)
    assert len(errors) == 9
    # The same error a call made now gets.
    with pytest.raises(ahg.ContextIsDestroyed) as late:
        await stream.launch_host_func(ran.append, "late")
    assert str(errors[0]) == str(late.value)
    # Nothing was taken: no packet, no recorded event, no claimed free, no memory.
    assert stream.statistics().submitted == submitted
    assert ring_of(device, stream).submitted == before.submitted
    assert ring_of(device, stream).pending == before.pending == CAPACITY
    assert repr(recorded).endswith("unrecorded>")
    assert device.memory_info() == memory
    assert held.runs == 1
    # Work enqueued before the destroy still runs.
    held.release()
    gate.release()
    await asyncio.wait_for(device.synchronize(), HANG)
    assert held.runs == 1
    assert not ran
    assert not host.any()
    assert ring_of(device, stream).completed == before.submitted
    device.free(freed)  # still the caller's memory: the refused free claimed nothing
    device.free(ptr)
    destroy(other, pending_event, recorded)
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_destroy_leaves_other_streams_parked_on_the_same_ring_in_their_order(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream, spare, other = (device.create_stream() for _ in range(3))
    assert stream.statistics().queue == other.statistics().queue != spare.statistics().queue
    log: list[str] = []
    held = await fill_ring(device, stream)
    mine = await _parked(
        device, stream, [lambda i=i: stream.launch_host_func(log.append, f"s{i}") for i in range(2)]
    )
    theirs = await _parked(
        device, other, [lambda i=i: other.launch_host_func(log.append, f"o{i}") for i in range(3)]
    )
    stream.destroy()
    await _refused(mine)
    assert ring_of(device, other).waiting_for_room == 3  # still waiting: their stream is open
    assert not any(task.done() for task in theirs)
    held.release()
    await asyncio.wait_for(asyncio.gather(*theirs), HANG)
    await other.synchronize()
    assert log == ["o0", "o1", "o2"]
    destroy(spare, other)


@pytest.mark.asyncio
@pytest.mark.parametrize("order", ["destroy, then cancel", "cancel, then destroy"])
async def test_destroy_racing_a_cancel_of_a_parked_enqueue_leaves_the_ring_room_exact(
    small_ring: ahg.Device, order: str
) -> None:
    """The woken call was handed no room: cancelled before it resumes, it gives none back (a
    ring that counted a slot twice would then take one packet too many)."""
    device = small_ring
    stream, spare, other = (device.create_stream() for _ in range(3))
    held = await fill_ring(device, stream)
    (task,) = await _parked(device, stream, [lambda: stream.launch_host_func(int)])
    if order == "destroy, then cancel":
        stream.destroy()
        task.cancel()
    else:
        task.cancel()
        stream.destroy()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, HANG)
    held.release()
    await device.synchronize()
    # ``other`` shares the ring: exactly CAPACITY packets fit behind a new held kernel.
    again = HeldKernel("again")
    await again.launch(other)
    for _ in range(CAPACITY - 1):
        other.launch_host_func_nowait(int)
    with pytest.raises(ahg.NotReady):
        other.launch_host_func_nowait(int)
    again.release()
    await other.synchronize()
    destroy(spare, other)


@pytest.mark.asyncio
async def test_destroy_from_a_host_function_wakes_the_enqueues_parked_on_the_stream(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream, other = device.create_stream(), device.create_stream()
    held = await fill_ring(device, stream)
    tasks = await _parked(device, stream, [lambda: stream.launch_host_func(int)] * 2)
    await (await other.launch_host_func(stream.destroy))
    await _refused(tasks)
    held.release()
    await device.synchronize()
    destroy(other)


@pytest.mark.asyncio
async def test_destroy_from_an_os_thread_wakes_the_enqueues_parked_on_the_stream(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    held = await fill_ring(device, stream)
    tasks = await _parked(device, stream, [lambda: stream.launch_host_func(int)] * 3)
    errors: list[BaseException] = []

    def destroy_there() -> None:
        try:
            stream.destroy()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=destroy_there)
    thread.start()
    await asyncio.wait_for(asyncio.to_thread(thread.join), HANG)
    assert not errors
    await _refused(tasks)
    held.release()
    await device.synchronize()


@pytest.mark.asyncio
async def test_destroy_from_a_del_run_by_the_collector_wakes_the_parked_enqueues(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    held = await fill_ring(device, stream)
    tasks = await _parked(device, stream, [lambda: stream.launch_host_func(int)] * 2)

    class Owner:
        def __init__(self) -> None:
            self.cycle = self

        def __del__(self) -> None:
            stream.destroy()

    Owner()
    gc.collect()
    await _refused(tasks)
    held.release()
    await device.synchronize()


@pytest.mark.asyncio
async def test_a_parked_enqueue_handed_to_a_host_function_that_destroys_its_stream_is_refused(
    small_ring: ahg.Device,
) -> None:
    """A host function that returns a task parked for room makes its queue wait for the task,
    which re-checks its wait (``park_refusable``): the stream it parks for is gone by then,
    and it must not park again."""
    device = small_ring
    stream, other = device.create_stream(), device.create_stream()
    held = await fill_ring(device, stream)
    (task,) = await _parked(device, stream, [lambda: stream.launch_host_func(int)])

    def hand_over() -> asyncio.Task[Any]:
        stream.destroy()
        return task

    done = await other.launch_host_func(hand_over)
    with pytest.raises(ahg.ContextIsDestroyed):
        await asyncio.wait_for(task, HANG)
    # The host function's call is the task (it returned it), which failed.
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(done, HANG)
    with pytest.raises(ahg.LaunchFailure):
        await other.synchronize()
    held.release()
    await device.synchronize()
    destroy(other)


@pytest.mark.asyncio
async def test_a_graph_launch_parked_for_a_signal_set_is_refused_when_its_stream_is_destroyed(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    graph = ahg.Graph()
    graph.add_kernel_node(held.kernel, 1, 1)
    exec_ = graph.instantiate(signal_sets=1)
    a, b = device.create_stream(), device.create_stream()
    first = await exec_.launch(a)
    await held.started.wait()
    parked = asyncio.ensure_future(exec_.launch(b))  # the only signal set is in use
    await loop_turns()
    assert exec_.statistics().signal_pool.waiters == 1
    b.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await asyncio.wait_for(parked, HANG)  # the held kernel still holds the set
    stats = exec_.statistics()
    assert (stats.launches, stats.signal_pool.waiters, stats.signal_pool.in_use) == (1, 0, 1)
    held.release()
    await first
    assert exec_.statistics().signal_pool.in_use == 0
    await (await exec_.launch(a))  # the set is usable again
    assert exec_.statistics().launches == 2
    destroy(exec_, graph, a)


@pytest.mark.asyncio
async def test_a_parked_graph_launch_cancelled_as_its_stream_is_destroyed_gives_back_no_set(
    device: ahg.Device,
) -> None:
    """Woken by the destroy with no set, then cancelled before it resumes: it has nothing to
    give back (the pool's give-back once got the destroy's wake-up token for a set)."""
    held = HeldKernel()
    graph = ahg.Graph()
    graph.add_kernel_node(held.kernel, 1, 1)
    exec_ = graph.instantiate(signal_sets=1)
    a, b = device.create_stream(), device.create_stream()
    first = await exec_.launch(a)
    await held.started.wait()
    parked = asyncio.ensure_future(exec_.launch(b))
    await loop_turns()
    b.destroy()
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(parked, HANG)
    held.release()
    await first
    pool = exec_.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use, pool.waiters) == (1, 1, 0, 0)
    await (await exec_.launch(a))
    destroy(exec_, graph, a)


@pytest.mark.asyncio
async def test_malloc_async_waiting_for_a_pending_free_is_refused_when_its_stream_is_destroyed(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    total = device.memory_info().total
    ptr = await stream.malloc_async(total)
    held = HeldKernel()
    await held.launch(stream)
    await stream.free_async(ptr)  # pending behind the held kernel
    parked = asyncio.ensure_future(stream.malloc_async(total))
    await loop_turns()
    assert not parked.done()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await asyncio.wait_for(parked, HANG)
    held.release()
    await device.synchronize()
    assert device.memory_info() == (total, total)  # the free ran; nothing else was taken


@pytest.mark.asyncio
async def test_configure_devices_wakes_the_calls_parked_on_the_replaced_device(
    small_ring: ahg.Device,
) -> None:
    """The replaced device takes no new work: calls parked on its streams are refused at
    once with ``InvalidDevice`` (user streams) or ``ContextIsDestroyed`` (its per-task
    stream, which goes with it), as calls made afterwards are."""
    device = small_ring
    stream = device.create_stream()
    own = device.per_thread_stream()
    assert stream.statistics().queue != own.statistics().queue
    held = await fill_ring(device, stream)
    gate = await fill_ring(device, own)
    tasks = await _parked(device, stream, [lambda: stream.launch_host_func(int)] * 2)
    tasks += await _parked(device, own, [lambda: own.launch_host_func(int)])
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=CAPACITY)
    ahg.configure_devices(1, properties)
    errors = await _refused(tasks, BaseException)
    kinds = (ahg.InvalidDevice, ahg.InvalidDevice, ahg.ContextIsDestroyed)
    assert all(isinstance(error, kind) for error, kind in zip(errors, kinds, strict=True))
    with pytest.raises(ahg.InvalidDevice):
        await stream.launch_host_func(int)
    held.release()
    gate.release()
    await asyncio.wait_for(device.synchronize(), HANG)
    stream.destroy()


@pytest.mark.asyncio
async def test_configure_devices_wakes_graph_launches_parked_for_a_signal_set(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    graph = ahg.Graph()
    graph.add_kernel_node(held.kernel, 1, 1)
    exec_ = graph.instantiate(signal_sets=1)
    stream = device.create_stream()
    first = await exec_.launch(stream)
    await held.started.wait()
    on_stream = asyncio.ensure_future(exec_.launch(stream))
    on_null = asyncio.ensure_future(exec_.launch(None))
    await loop_turns()
    assert exec_.statistics().signal_pool.waiters == 2
    ahg.configure_devices(1)
    with pytest.raises(ahg.InvalidDevice):
        await asyncio.wait_for(on_stream, HANG)
    with pytest.raises(ahg.ContextIsDestroyed):  # the replaced device's null stream is gone
        await asyncio.wait_for(on_null, HANG)
    held.release()
    await first
    assert exec_.statistics().launches == 1
    destroy(exec_, graph, stream)


@pytest.mark.asyncio
async def test_a_per_task_stream_ending_with_its_task_wakes_the_calls_parked_on_it(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    got: list[ahg.Stream] = []
    finish = asyncio.Event()

    async def owner() -> None:
        got.append(device.per_thread_stream())
        await finish.wait()

    task = asyncio.ensure_future(owner())
    await loop_turns()
    (stream,) = got
    held = await fill_ring(device, stream)
    tasks = await _parked(device, stream, [lambda: stream.launch_host_func(int)] * 2)
    finish.set()
    await task  # its per-task stream is destroyed as it ends
    await _refused(tasks)
    held.release()
    await device.synchronize()


# -- the per-task stream from a collector's callback ---------------------------------------------


@pytest.fixture
def collect_often() -> Iterator[None]:
    """The collector runs on nearly every allocation, so inside every critical section."""
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)


def _in_thread(target: Callable[[], object]) -> list[BaseException]:
    """Run ``target`` in a thread; fail (not hang) if it does not end: a deadlock."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), "deadlocked"
    return errors


def _making_a_per_thread_stream() -> bool:
    """Whether the caller runs inside ``per_thread_stream`` while it makes a stream."""
    frame = sys._getframe(1)
    names: set[str] = set()
    while frame is not None:
        names.add(frame.f_code.co_qualname)
        frame = frame.f_back  # type: ignore[assignment]
    return {"per_thread_stream", "Stream._init"} <= names


def test_a_gc_hook_asking_for_the_per_task_stream_while_it_is_made_does_not_deadlock(
    collect_often: None,
) -> None:
    seen: list[ahg.Stream] = []
    hooked: list[int] = []

    async def main() -> tuple[ahg.Stream, int, int]:
        device = ahg.get_device()
        implicit = device.statistics().implicit_streams

        def hook(phase: str, info: dict[str, int]) -> None:
            # Once, from a collection inside per_thread_stream's making of the stream.
            if phase == "start" and not hooked and _making_a_per_thread_stream():
                hooked.append(device.statistics().implicit_streams)
                seen.append(device.per_thread_stream())

        async def child() -> tuple[ahg.Stream, int]:
            gc.callbacks.append(hook)
            try:
                stream = device.per_thread_stream()
            finally:
                gc.callbacks.remove(hook)
            return stream, device.statistics().implicit_streams - implicit

        stream, during = await asyncio.ensure_future(child())
        return stream, during, device.statistics().implicit_streams - implicit

    results: list[Any] = []
    errors = _in_thread(lambda: results.append(asyncio.run(main())))
    assert not errors, errors
    assert hooked
    ((stream, during, after),) = results
    assert seen == [stream]  # one per-task stream for the task, whoever asked first
    assert (during, after) == (1, 0)  # one while the task ran; it went with the task
    assert not stream.alive


def test_a_del_asking_for_the_thread_s_stream_while_it_is_made_gets_the_same_stream(
    collect_often: None,
) -> None:
    """Outside a task: the stream of the thread, made once."""
    seen: list[ahg.Stream] = []
    hooked: list[bool] = []

    def main() -> tuple[ahg.Stream, int]:
        device = ahg.get_device()
        implicit = device.statistics().implicit_streams

        def hook(phase: str, info: dict[str, int]) -> None:
            if phase == "start" and not hooked and _making_a_per_thread_stream():
                hooked.append(True)
                seen.append(device.per_thread_stream())

        gc.callbacks.append(hook)
        try:
            stream = device.per_thread_stream()
        finally:
            gc.callbacks.remove(hook)
        return stream, device.statistics().implicit_streams - implicit

    results: list[tuple[ahg.Stream, int]] = []
    errors = _in_thread(lambda: results.append(main()))
    assert not errors, errors
    assert hooked
    ((stream, made),) = results
    assert seen == [stream]
    assert stream.alive
    assert made == 1  # one stream for the thread, not one left behind
    stream.destroy()
