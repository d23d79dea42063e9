"""Device work (an async host function or kernel body) that waits for work queued behind it.

Its packet holds the head of its hardware queue until it ends, so a wait for anything behind
that packet, directly (its own stream's ``synchronize``, an event recorded after it, its own
completion) or through another queue (a stream waiting for such an event, a graph whose
nodes do), can never end. HIP forbids HIP calls in host functions for this reason; here the
wait is refused with IllegalState, the work fails with it as its LaunchFailure's cause, and
the queue goes on. Waits for work that does not need the waiter still park and end.

``asyncio.wait_for`` is only a guard: before the refusal, each of these hung for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy

GUARD = 10.0


async def _refused(done: ahg.Completion, why: str = "waited for work queued behind it") -> None:
    """``done``'s work failed with the refusal as its LaunchFailure's cause."""
    with pytest.raises(ahg.LaunchFailure) as caught:
        await asyncio.wait_for(done.wait(), GUARD)
    cause = caught.value.__cause__
    assert isinstance(cause, ahg.IllegalState), repr(cause)
    assert why in str(cause)


async def _fails_then_recovers(
    device: ahg.Device, stream: ahg.Stream, body: Callable[[], Awaitable[Any]]
) -> None:
    """``body`` as a host function on ``stream`` fails with the refusal; the stream's next
    work and the device's synchronize then run normally."""
    done = await stream.launch_host_func(body)
    await _refused(done)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # the failure is reported to the stream once
    ran: list[int] = []
    await (await stream.launch_host_func(ran.append, 1))
    await asyncio.wait_for(device.synchronize(), GUARD)
    assert ran == [1]
    assert device.in_flight == 0


@pytest.mark.asyncio
async def test_a_host_function_synchronizing_its_own_stream_fails(device: ahg.Device) -> None:
    stream = device.create_stream()

    async def body() -> None:
        await stream.synchronize()

    await _fails_then_recovers(device, stream, body)
    destroy(stream)


@pytest.mark.asyncio
async def test_a_host_function_awaiting_its_own_or_a_later_completion_fails(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    later: list[ahg.Completion] = []

    async def body() -> None:
        await later[0]

    done = await stream.launch_host_func(body)
    later.append(done)  # its own completion
    await _refused(done)
    later.clear()
    done = await stream.launch_host_func(body)
    later.append(await stream.launch_host_func(lambda: None))  # work behind it
    await _refused(done)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_an_event_recorded_after_it_and_the_null_stream_are_refused(
    device: ahg.Device,
) -> None:
    stream, event = device.create_stream(), device.create_event()

    async def on_event() -> None:
        await event.synchronize()

    async def on_null_stream() -> None:
        await device.null_stream.synchronize()  # orders after every blocking stream

    done = await stream.launch_host_func(on_event)
    await stream.record_event(event)
    await _refused(done)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    await _fails_then_recovers(device, stream, on_null_stream)
    destroy(stream, event)


@pytest.mark.asyncio
async def test_a_wait_through_another_queue_for_work_behind_it_is_refused(
    device: ahg.Device,
) -> None:
    """The other stream waits for an event recorded behind the host function: its work can
    only finish after the host function does."""
    stream, other, event = device.create_stream(), device.create_stream(), device.create_event()
    assert stream.queue.index != other.queue.index

    async def body() -> None:
        await other.synchronize()

    done = await stream.launch_host_func(body)
    await stream.record_event(event)
    await other.wait_event(event)
    await other.launch_host_func(lambda: None)
    await _refused(done)
    with pytest.raises(ahg.LaunchFailure):  # the failure, reported once
        await asyncio.wait_for(device.synchronize(), GUARD)
    await other.synchronize()
    destroy(stream, other, event)


@pytest.mark.asyncio
async def test_a_wait_through_a_graphs_event_nodes_is_refused(device: ahg.Device) -> None:
    """A graph on another stream waits for an event recorded behind the host function, then
    records the event the host function waits for."""
    stream, other = device.create_stream(), device.create_stream()
    behind, recorded = device.create_event(), device.create_event()
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(behind)
    graph.add_event_record_node(recorded, deps=[wait])
    executable = graph.instantiate()

    async def body() -> None:
        await recorded.synchronize()

    done = await stream.launch_host_func(body)
    await stream.record_event(behind)
    await executable.launch(other)
    await _refused(done)
    with pytest.raises(ahg.LaunchFailure):  # the failure, reported once
        await asyncio.wait_for(device.synchronize(), GUARD)
    destroy(executable, graph, stream, other, behind, recorded)


@pytest.mark.asyncio
async def test_a_host_node_awaiting_a_launch_of_its_own_graph_on_its_stream_fails(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    launched: list[int] = []
    box: list[ahg.GraphExec] = []

    async def body() -> None:
        launched.append(1)
        if len(launched) == 1:
            await (await box[0].launch(stream))

    graph.add_host_node(body)
    executable = graph.instantiate()
    box.append(executable)
    first = await executable.launch(stream)
    await _refused(first)
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(device.synchronize(), GUARD)
    assert launched == [1, 1]  # the inner launch ran once its launcher gave up
    assert executable.statistics().in_flight == 0
    destroy(executable, graph, stream)


@ahg.kernel
async def waits_for_its_stream(t: ahg.Threads) -> None:
    await ahg.get_device(0).null_stream.synchronize()


@pytest.mark.asyncio
async def test_an_async_kernel_body_waiting_behind_itself_fails(device: ahg.Device) -> None:
    stream = device.create_stream()
    failed = await stream.launch_kernel(waits_for_its_stream, 1, 1, ())
    await _refused(failed)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(stream)


@pytest.mark.asyncio
async def test_waits_for_work_that_does_not_need_the_waiter_still_end(
    device: ahg.Device,
) -> None:
    """No false refusal: another queue's independent work, the work ahead of it on its own
    stream, and an earlier launch of a graph launched again behind the waiter."""
    stream, other = device.create_stream(), device.create_stream()
    gate = asyncio.Event()
    seen: list[str] = []

    async def other_work() -> None:
        await gate.wait()

    async def waiter(earlier: ahg.Completion, independent: ahg.Completion) -> None:
        await earlier  # done already: ahead of it on its stream
        gate.set()
        await independent  # parks until the other queue's work ends
        await other.synchronize()
        seen.append("waited")

    earlier = await stream.launch_host_func(lambda: None)
    independent = await other.launch_host_func(other_work)
    await asyncio.wait_for(
        (await stream.launch_host_func(waiter, earlier, independent)).wait(), GUARD
    )
    assert seen == ["waited"]

    # A later launch of a graph names the earlier launch's completion in its signal set, and
    # here sits behind the waiter on its queue: it does not make that completion wait.
    graph = ahg.Graph()
    graph.add_host_node(lambda: None)
    executable = graph.instantiate()
    release = asyncio.Event()

    async def hold() -> None:
        await release.wait()

    async def on_launch(first: ahg.Completion) -> None:
        release.set()
        await first
        seen.append("earlier launch")

    await other.launch_host_func(hold)
    first = await executable.launch(other)  # behind ``hold``
    waited = await stream.launch_host_func(on_launch, first)
    second = await executable.launch(stream)  # behind the waiter
    await asyncio.wait_for(second.wait(), GUARD)
    await waited
    assert seen == ["waited", "earlier launch"]
    destroy(executable, graph, stream, other)


@pytest.mark.asyncio
async def test_a_host_function_waiting_for_room_in_its_own_full_queue_fails() -> None:
    """Room in a full ring comes only from its head packet retiring: the one running the
    host function. Its non-waiting twin says NotReady; the waiting one is refused."""
    (device,) = ahg.configure_devices(
        1, ahg.DeviceProperties(hardware_queue_capacity=2, hardware_queues=1)
    )
    assert isinstance(device, ahg.Device)
    stream = device.create_stream()
    ran: list[int] = []

    async def body() -> None:
        for i in range(4):
            await stream.launch_host_func(ran.append, i)

    done = await stream.launch_host_func(body)
    await _refused(done, "room in its own full hardware queue")
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert ran == [0]  # the one that found room ran; nothing else was taken
    assert device.queues[0].statistics().waiting_for_room == 0
    await (await stream.launch_host_func(ran.append, 9))
    assert ran == [0, 9]
    destroy(stream)
