"""Attacks on the device engine's waits and on device work waiting for itself.

* A task the host program made, already parked in a wait (``device.synchronize()``, a
  stream's or an event's ``synchronize``, an await of a launch's completion, room in a full
  ring, a signal set of an executable) when a host function hands it to its queue, was never
  refused: the checks ran only as a wait started, so the queue waited for the task and the
  task for the queue, for good. The hand-over now wakes such a wait, which re-checks and
  fails with IllegalState, giving back what it was handed.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, fresh_devices, loop_turns
from rings import CAPACITY, ring_of

HANG = 5  # seconds: only a hang detector


class _Handing:
    """A stream held behind a kernel, then a host function that returns ``self.task``."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.stream = device.create_stream()  # queue 0
        self.other = device.create_stream()  # queue 1
        self.held = HeldKernel()
        self.task: asyncio.Task[Any] | None = None
        self.event = device.create_event()
        with ahg.Graph() as graph:
            graph.add_host_node(lambda: None)
            self.exec = graph.instantiate(signal_sets=1, signal_set_policy="wait")

    def hand(self) -> Awaitable[Any]:
        assert self.task is not None
        return self.task

    async def start(self) -> ahg.Completion:
        await self.held.launch(self.stream)
        handing = await self.stream.launch_host_func(self.hand)
        await self.held.started.wait()
        return handing

    def close(self) -> None:
        self.exec.destroy()
        self.event.destroy()
        self.stream.destroy()
        self.other.destroy()


async def _park(kit: _Handing, kind: str, handing: ahg.Completion) -> list[asyncio.Task[Any]]:
    """Park ``kit.task`` in a wait of ``kind``; return other tasks the setup parked."""
    stream, device = kit.stream, kit.device
    waits: dict[str, Callable[[], Awaitable[Any]]] = {
        "device_synchronize": device.synchronize,
        "stream_synchronize": stream.synchronize,
        "event_synchronize": kit.event.synchronize,
        "completion_await": lambda: handing,
        "ring_room": lambda: stream.launch_host_func(int),
        "signal_set": lambda: kit.exec.launch(kit.other),
    }
    others: list[asyncio.Task[Any]] = []
    if kind == "event_synchronize":
        await stream.record_event(kit.event)
    elif kind == "signal_set":
        await kit.exec.launch(stream)  # holds the one set, behind the host function
    elif kind == "ring_room":
        while ring_of(device, stream).pending < CAPACITY:
            await stream.launch_host_func(int)
        # A waiter ahead takes the room the held kernel frees, so the ring is full again
        # when the host function starts.
        others.append(asyncio.ensure_future(stream.launch_host_func(int)))
        await loop_turns()
        assert ring_of(device, stream).waiting_for_room == 1
    kit.task = asyncio.ensure_future(waits[kind]())
    await loop_turns()
    assert not kit.task.done()  # parked before the hand-over
    if kind == "ring_room":
        assert ring_of(device, stream).waiting_for_room == 2
    return others


KINDS = [
    "device_synchronize",
    "stream_synchronize",
    "event_synchronize",
    "completion_await",
    "ring_room",
    "signal_set",
]


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", KINDS)
async def test_a_task_parked_in_a_wait_then_handed_to_its_queue_is_refused(
    small_ring: ahg.Device, kind: str
) -> None:
    kit = _Handing(small_ring)
    handing = await kit.start()
    others = await _park(kit, kind, handing)
    task = kit.task
    assert task is not None
    kit.held.release()  # the host function runs and hands the parked task to its queue
    with pytest.raises(ahg.IllegalState, match="device work"):
        await asyncio.wait_for(asyncio.shield(task), HANG)
    with pytest.raises(ahg.LaunchFailure) as caught:
        await asyncio.wait_for(handing, HANG)
    assert isinstance(caught.value.__cause__, ahg.IllegalState)
    for other in others:
        await asyncio.wait_for(other, HANG)
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(kit.stream.synchronize(), HANG)
    await asyncio.wait_for(small_ring.synchronize(), HANG)
    # Nothing was lost: the ring and the pool take work as before.
    assert ring_of(small_ring, kit.stream).waiting_for_room == 0
    await asyncio.wait_for(kit.stream.launch_host_func(int), HANG)
    await asyncio.wait_for(await kit.exec.launch(kit.other), HANG)
    assert kit.exec.pool.statistics().in_use == 0
    await asyncio.wait_for(small_ring.synchronize(), HANG)
    kit.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["stream_synchronize", "signal_set"])
async def test_a_parked_task_handed_to_work_it_does_not_wait_for_keeps_waiting(
    small_ring: ahg.Device, kind: str
) -> None:
    """The re-check refuses only a real cycle: a task handed to a queue whose work it does
    not need parks again and ends once its wait does."""
    device = small_ring
    kit = _Handing(device)
    held_other = HeldKernel()
    await held_other.launch(kit.other)
    if kind == "signal_set":
        await kit.exec.launch(kit.other)  # the set comes back after ``held_other``
        wait: Callable[[], Awaitable[Any]] = lambda: kit.exec.launch(kit.other)  # noqa: E731
    else:
        wait = kit.other.synchronize
    await held_other.started.wait()
    kit.task = asyncio.ensure_future(wait())
    await loop_turns()
    assert not kit.task.done()
    handing = await kit.stream.launch_host_func(kit.hand)
    await loop_turns()
    assert not kit.task.done()  # handed over, still waiting
    assert not handing.done()
    held_other.release()
    result = await asyncio.wait_for(handing, HANG)
    assert result is None
    if kind == "signal_set":
        await asyncio.wait_for(kit.task.result(), HANG)
    await asyncio.wait_for(device.synchronize(), HANG)
    assert kit.exec.pool.statistics().in_use == 0
    kit.close()


@pytest.mark.asyncio
async def test_a_task_two_host_functions_hand_over_is_the_work_of_both_queues(
    device: ahg.Device,
) -> None:
    """The second hand-over replaced the first: the task then counted only as the work of
    the second queue, and its wait for work behind the first host function hung."""
    first, second = device.create_stream(), device.create_stream()
    assert first.statistics().queue != second.statistics().queue
    go = asyncio.Event()

    async def waits_for_the_first_stream() -> None:
        await go.wait()
        await first.synchronize()

    task = asyncio.ensure_future(waits_for_the_first_stream())
    handed_first = await first.launch_host_func(lambda: task)
    handed_second = await second.launch_host_func(lambda: task)
    await loop_turns()  # both host functions run and wait for the task
    go.set()
    with pytest.raises(ahg.IllegalState, match="hardware queue"):
        await asyncio.wait_for(asyncio.shield(task), HANG)
    for handed in (handed_first, handed_second):
        with pytest.raises(ahg.LaunchFailure) as caught:
            await asyncio.wait_for(handed, HANG)
        assert isinstance(caught.value.__cause__, ahg.IllegalState)
    for stream in (first, second):
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
        stream.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("when", ["before_the_hand_over", "after_the_hand_over"])
async def test_a_cancellation_of_a_parked_task_by_its_owner_wins_over_the_hand_over(
    device: ahg.Device, when: str
) -> None:
    """The hand-over wakes a parked wait with a cancellation it takes back; a cancellation
    the program requested in the same turn (still undelivered) must not be taken back with it
    and turned into IllegalState: the task ends cancelled."""
    stream = device.create_stream()
    held = HeldKernel()
    await held.launch(stream)
    await held.started.wait()
    parked: list[asyncio.Task[None]] = []

    def hand() -> Awaitable[Any]:
        task = parked[0]
        if when == "before_the_hand_over":
            task.cancel()
        else:
            asyncio.get_running_loop().call_soon(task.cancel)
        return task

    handing = await stream.launch_host_func(hand)
    task = asyncio.ensure_future(stream.synchronize())  # for the host function, too
    parked.append(task)
    await loop_turns()
    assert not task.done()
    held.release()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(asyncio.shield(task), HANG)
    assert task.cancelled()
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(handing, HANG)
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(stream.synchronize(), HANG)
    stream.destroy()


@pytest.mark.asyncio
async def test_an_enqueue_handed_room_then_handed_to_its_queue_still_enqueues() -> None:
    """An enqueue woken with room in its ring just as a host function on that queue hands
    it over re-checks with the room it gave back: it is not refused, it enqueues."""
    properties = ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=2)
    with fresh_devices(1, properties) as (device,):
        stream = device.create_stream()
        held = HeldKernel()
        await held.launch(stream)
        parked: list[asyncio.Task[Any]] = []
        handing = await stream.launch_host_func(lambda: parked[0])  # the ring is full
        await held.started.wait()
        ran: list[int] = []
        parked.append(asyncio.ensure_future(stream.launch_host_func(ran.append, 1)))
        await loop_turns()
        assert ring_of(device, stream).waiting_for_room == 1
        held.release()  # its slot goes to the parked enqueue, then the host function starts
        await asyncio.wait_for(handing, HANG)
        await asyncio.wait_for(await parked[0], HANG)
        assert ran == [1]
        assert ring_of(device, stream).waiting_for_room == 0
        await asyncio.wait_for(stream.synchronize(), HANG)
        stream.destroy()


@pytest.mark.asyncio
async def test_a_launch_handed_a_set_then_handed_to_a_queue_keeps_a_set(device: ahg.Device) -> None:
    """A launch woken with a signal set just as a host function hands it over gives the set
    back as it re-checks, then takes it again: no set is lost, the launch goes ahead."""
    stream, other = device.create_stream(), device.create_stream()
    with ahg.Graph() as graph:
        graph.add_host_node(lambda: None)
        graph_exec = graph.instantiate(signal_sets=1, signal_set_policy="wait")
    held = HeldKernel()
    await held.launch(stream)
    first = await graph_exec.launch(stream)  # holds the one set until it completes
    parked: list[asyncio.Task[Any]] = []
    handing = await stream.launch_host_func(lambda: parked[0])  # right behind that launch
    await held.started.wait()
    parked.append(asyncio.ensure_future(graph_exec.launch(other)))
    await loop_turns()
    assert graph_exec.pool.statistics().waiters == 1
    held.release()  # the first launch returns its set to the parked one, then the hand-over
    await asyncio.wait_for(first, HANG)
    await asyncio.wait_for(handing, HANG)
    await asyncio.wait_for(await parked[0], HANG)
    await asyncio.wait_for(device.synchronize(), HANG)
    stats = graph_exec.pool.statistics()
    assert (stats.sets, stats.free, stats.in_use, stats.waiters) == (1, 1, 0, 0)
    assert stats.acquires == 2
    graph_exec.destroy()
    stream.destroy()
    other.destroy()


@pytest.mark.parametrize("kind", KINDS)
def test_a_loop_closed_while_a_task_is_parked_in_a_wait_leaves_a_usable_device(
    small_ring: ahg.Device, kind: str
) -> None:
    """A loop closed (plainly, its tasks never cancelled) while a task is parked in each
    wait: the task goes with the loop without an error of its own (its coroutine, closed by
    the collector, once failed with "coroutine already executing" as the wait's frame held
    its task), and the device, ring and pool work on the next loop."""
    device = small_ring
    kit = _Handing(device)
    first = asyncio.new_event_loop()

    async def park() -> None:
        await kit.held.launch(kit.stream)
        handing = await kit.stream.launch_host_func(int)
        await kit.held.started.wait()
        await _park(kit, kind, handing)

    try:
        first.run_until_complete(park())
        assert kit.task is not None
        kit.task.cancel()  # on the stopped loop: its wake never runs
    finally:
        first.close()
    kit.task = None
    gc.collect()

    async def after() -> None:
        with pytest.raises(ahg.HipError):
            await asyncio.wait_for(kit.stream.synchronize(), HANG)
        await asyncio.wait_for(device.synchronize(), HANG)
        assert ring_of(device, kit.stream).waiting_for_room == 0
        for _ in range(CAPACITY + 1):
            await asyncio.wait_for(kit.stream.launch_host_func(int), HANG)
        await asyncio.wait_for(await kit.exec.launch(kit.other), HANG)
        await asyncio.wait_for(device.synchronize(), HANG)
        stats = kit.exec.pool.statistics()
        assert (stats.free, stats.in_use, stats.waiters) == (1, 0, 0)
        kit.close()

    asyncio.run(after())


@pytest.mark.asyncio
async def test_a_task_parked_on_one_device_handed_to_another_devices_queue_keeps_waiting() -> None:
    """The re-check is per device: a task parked in device 0's synchronize, handed to a host
    function of device 1, waits on and ends when device 0 is idle."""
    with fresh_devices(2) as (zero, one):
        stream, far = zero.create_stream(), one.create_stream()
        held = HeldKernel()
        await held.launch(stream)
        await held.started.wait()
        task = asyncio.ensure_future(zero.synchronize())
        await loop_turns()
        handing = await far.launch_host_func(lambda: task)
        await loop_turns()
        assert not task.done()  # handed over, re-checked, parked again
        assert not handing.done()
        held.release()
        await asyncio.wait_for(handing, HANG)
        assert task.done()
        assert task.exception() is None
        stream.destroy()
        far.destroy()
