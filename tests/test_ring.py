"""Each hardware queue is a ring of fixed capacity: a stream enqueue that finds it full parks until
the device retires a packet, its ``_nowait`` twin raises ``NotReady``, and neither takes anything
when it fails or is cancelled."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, fresh_devices, loop_turns


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


CAPACITY = 4


@pytest.fixture
def small_ring() -> Iterator[ahg.Device]:
    """One device with one hardware queue of CAPACITY packets."""
    properties = ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=CAPACITY)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


def ring(device: ahg.Device) -> ahg.QueueStatistics:
    return device.statistics().queues[0]


def test_the_default_ring_is_amd_sized_and_shown(device: ahg.Device) -> None:
    stats = ring(device)
    assert (stats.capacity, stats.pending, stats.waiting_for_room) == (16384, 0, 0)
    assert "/16384" in repr(device.queues[0])


@pytest.mark.parametrize("capacity", [0, -1])
def test_a_ring_must_hold_a_packet(capacity: int) -> None:
    with pytest.raises(ValueError):
        ahg.DeviceProperties(hardware_queue_capacity=capacity)


@pytest.mark.parametrize("field", ["compute_units", "hardware_queues", "hardware_queue_capacity"])
@pytest.mark.parametrize("value", [True, None, 4.0, "4"])
def test_a_count_property_must_be_an_int(field: str, value: object) -> None:
    with pytest.raises(TypeError, match=field):
        ahg.DeviceProperties(**{field: value})  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_nowait_fills_the_ring_then_raises_not_ready_and_takes_nothing(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    out = device.malloc(8)
    stream = device.create_stream()
    for _ in range(CAPACITY):
        stream.launch_kernel_nowait(add_one, 1, 1, (out,))
    before = stream.statistics(), ring(device)
    with pytest.raises(ahg.NotReady, match="full"):
        stream.launch_kernel_nowait(add_one, 1, 1, (out,))
    with pytest.raises(ahg.NotReady):
        stream.memset_nowait(out, 0, 8)
    event = device.create_event()
    with pytest.raises(ahg.NotReady):
        stream.record_event_nowait(event)
    event.destroy()
    assert (stream.statistics(), ring(device)) == before
    await stream.synchronize()
    assert device.view(out, "int64", 1)[0] == CAPACITY
    stream.launch_kernel_nowait(add_one, 1, 1, (out,))  # room again once the device ran
    await stream.synchronize()
    assert device.view(out, "int64", 1)[0] == CAPACITY + 1
    stream.destroy()
    device.free(out)


@pytest.mark.asyncio
async def test_an_enqueue_with_room_returns_without_yielding(small_ring: ahg.Device) -> None:
    device = small_ring
    out = device.malloc(8)
    stream = device.create_stream()
    turns = 0

    async def count_turns() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    start = turns
    for _ in range(CAPACITY):
        await stream.launch_kernel(add_one, 1, 1, (out,))
    assert turns == start  # never waited, so never yielded
    counter.cancel()
    await stream.synchronize()
    stream.destroy()
    device.free(out)


@pytest.mark.asyncio
async def test_a_concurrent_task_gets_a_turn_at_least_once_per_ring_of_enqueues(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    out = device.malloc(8)
    stream = device.create_stream()
    enqueues = 400
    turns = 0
    done = False

    async def count_turns() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)
    start = turns
    for _ in range(enqueues):
        await stream.launch_kernel(add_one, 1, 1, (out,))  # back to back
    done = True
    await counter
    await stream.synchronize()
    assert turns - start >= enqueues // CAPACITY - 1
    assert device.view(out, "int64", 1)[0] == enqueues
    assert ring(device).pending == 0
    stream.destroy()
    device.free(out)


async def assert_whole_ring_usable(device: ahg.Device, stream: ahg.Stream) -> None:
    """No room was lost: with the device idle, a whole ring's worth goes in without waiting."""
    await stream.synchronize()
    for _ in range(CAPACITY):
        stream.launch_host_func_nowait(int)
    await stream.synchronize()
    assert ring(device).waiting_for_room == 0


async def fill_with_held(device: ahg.Device, stream: ahg.Stream) -> HeldKernel:
    """A held kernel at the head of the ring, and the ring full behind it."""
    held = HeldKernel()
    await held.launch(stream)
    while ring(device).pending < CAPACITY:
        await stream.launch_host_func(int)
    await held.started.wait()
    return held


@pytest.mark.asyncio
async def test_waiters_get_room_in_arrival_order(small_ring: ahg.Device) -> None:
    device = small_ring
    stream = device.create_stream()
    held = await fill_with_held(device, stream)
    order: list[int] = []

    async def enqueue(i: int) -> None:
        await stream.launch_host_func(order.append, i)

    tasks = [asyncio.create_task(enqueue(i)) for i in range(6)]
    await loop_turns()
    assert ring(device).waiting_for_room == 6
    assert not any(task.done() for task in tasks)
    held.release()
    await asyncio.gather(*tasks)
    await stream.synchronize()
    assert order == list(range(6))
    assert ring(device).waiting_for_room == 0
    stream.destroy()


@pytest.mark.asyncio
async def test_a_waiter_cancelled_takes_nothing_and_the_next_still_gets_room(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    held = await fill_with_held(device, stream)
    ran: list[str] = []
    first = asyncio.create_task(stream.launch_host_func(ran.append, "first"))
    second = asyncio.create_task(stream.launch_host_func(ran.append, "second"))
    await loop_turns()
    assert ring(device).waiting_for_room == 2
    submitted = stream.statistics().submitted
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert stream.statistics().submitted == submitted
    assert ring(device).waiting_for_room == 1
    held.release()
    await second
    await stream.synchronize()
    assert ran == ["second"]
    stream.destroy()


@pytest.mark.asyncio
async def test_a_waiter_cancelled_after_it_was_woken_passes_its_room_on(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    held = HeldKernel()
    await held.launch(stream)
    tasks: list[asyncio.Task[ahg.Completion]] = []
    # The packet behind the held kernel cancels the first waiter while the device runs: the
    # held kernel's retirement has just woken that waiter, which has not resumed yet.
    await stream.launch_host_func(lambda: tasks[0].cancel())
    while ring(device).pending < CAPACITY:
        await stream.launch_host_func(int)
    await held.started.wait()
    ran: list[str] = []
    tasks.extend(asyncio.create_task(stream.launch_host_func(ran.append, str(i))) for i in range(3))
    await loop_turns()
    assert ring(device).waiting_for_room == len(tasks)
    submitted = stream.statistics().submitted
    held.release()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    await stream.synchronize()
    assert isinstance(results[0], asyncio.CancelledError)
    assert ran == ["1", "2"]
    assert stream.statistics().submitted == submitted + 2
    assert ring(device).waiting_for_room == 0
    await assert_whole_ring_usable(device, stream)
    stream.destroy()


@pytest.mark.asyncio
async def test_a_woken_enqueue_that_fails_passes_its_room_on(small_ring: ahg.Device) -> None:
    device = small_ring
    stream = device.create_stream()
    held = await fill_with_held(device, stream)
    ran: list[str] = []
    out = device.malloc(8)

    async def bad() -> None:
        await stream.memset(out, 0, 8)  # checked and parked; freed before it has room

    failing = asyncio.create_task(bad())
    good = asyncio.create_task(stream.launch_host_func(ran.append, "good"))
    await loop_turns()
    assert ring(device).waiting_for_room == 2
    device.free(out)  # the body checks again once it has room: refused then
    held.release()
    with pytest.raises(ahg.InvalidDevicePointer):
        await failing
    await good
    await stream.synchronize()
    assert ran == ["good"]
    await assert_whole_ring_usable(device, stream)
    stream.destroy()


@pytest.mark.asyncio
async def test_a_stream_destroyed_while_a_task_waits_for_room(small_ring: ahg.Device) -> None:
    device = small_ring
    stream = device.create_stream()
    other = device.create_stream()
    held = await fill_with_held(device, other)
    waiter = asyncio.create_task(stream.launch_host_func(print, "never"))
    await loop_turns()
    assert ring(device).waiting_for_room == 1
    stream.destroy()
    held.release()
    with pytest.raises(ahg.Destroyed):
        await waiter
    await assert_whole_ring_usable(device, other)
    other.destroy()


@pytest.mark.asyncio
async def test_a_capturing_stream_never_waits_for_room(small_ring: ahg.Device) -> None:
    device = small_ring
    out = device.malloc(8)
    stream = device.create_stream(non_blocking=True)
    other = device.create_stream(non_blocking=True)
    held = await fill_with_held(device, other)
    stream.begin_capture()
    for _ in range(3 * CAPACITY):  # nodes, not packets
        stream.launch_kernel_nowait(add_one, 1, 1, (out,))
    graph = stream.end_capture()
    assert len(graph.nodes()) == 3 * CAPACITY
    held.release()
    await other.synchronize()
    graph.destroy()
    stream.destroy()
    other.destroy()
    device.free(out)


def test_every_enqueue_has_a_nowait_twin_with_its_signature() -> None:
    enqueues = [
        name
        for name, member in vars(ahg.Stream).items()
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    ]
    assert len(enqueues) >= 15
    for name in enqueues:
        if name == "synchronize":  # a wait, whose twin is query()
            continue
        twin = getattr(ahg.Stream, f"{name}_nowait")
        assert not inspect.iscoroutinefunction(twin)
        assert inspect.signature(twin) == inspect.signature(getattr(ahg.Stream, name))
        assert twin.__qualname__ == f"Stream.{name}_nowait"
        assert "NotReady" in (twin.__doc__ or "")


def test_a_wrong_call_names_the_stream_operation(device: ahg.Device) -> None:
    stream = device.create_stream()
    with pytest.raises(TypeError, match=r"^Stream\.memset\(\)"):
        stream.memset_nowait()  # type: ignore[call-arg]
    stream.destroy()


def test_nowait_without_a_running_loop_takes_nothing(device: ahg.Device) -> None:
    stream = device.create_stream()
    before = stream.statistics(), device.statistics()
    with pytest.raises(RuntimeError, match="event loop"):
        stream.launch_host_func_nowait(int)
    assert (stream.statistics(), device.statistics()) == before
    stream.destroy()


@pytest.mark.asyncio
async def test_waiting_for_room_from_another_loop_is_refused_and_takes_nothing(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    stream = device.create_stream()
    held = await fill_with_held(device, stream)
    before = stream.statistics()
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            asyncio.run(stream.launch_host_func(int))
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], ahg.IllegalState)
    assert stream.statistics() == before
    assert ring(device).waiting_for_room == 0
    held.release()
    await assert_whole_ring_usable(device, stream)
    stream.destroy()
