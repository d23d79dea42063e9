"""Adversarial programs against the pump's turn boundary (``device/engine.py``, ``hwqueue.py``).

The pump runs at most ``PUMP_BUDGET`` packets per loop turn and leaves the rest to the next
turn. These tests put what a program can do exactly at that boundary: a Ctrl-C from a host
function, a loop stopped or closed between turns, another thread's loop taking the device,
cancellation, events and synchronisation spanning turns.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.device.engine import PUMP_BUDGET


def _queue_calls(stream: ahg.Stream, count: int, host: object) -> None:
    for i in range(count):
        stream.launch_host_func_nowait(host, i)  # type: ignore[arg-type]


@pytest.mark.parametrize("at", [PUMP_BUDGET - 1, PUMP_BUDGET, PUMP_BUDGET + 1, 2 * PUMP_BUDGET])
@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit])
def test_ctrl_c_from_a_host_function_at_the_turn_boundary(
    at: int, error: type[BaseException]
) -> None:
    """The interrupt reaches the loop's caller once, the stream reports the failed call once,
    and every other call runs once, in order, when the loop runs again."""
    device = ahg.get_device(0)
    seen: list[int] = []
    total = 3 * PUMP_BUDGET

    def host(i: int) -> None:
        seen.append(i)
        if i == at:
            raise error

    loop = asyncio.new_event_loop()
    try:
        stream = device.create_stream()

        async def enqueue() -> None:
            _queue_calls(stream, total, host)
            await asyncio.Event().wait()  # no wait on the stream: the failure stays unreported

        task = loop.create_task(enqueue())
        with pytest.raises(error):
            loop.run_until_complete(task)
        assert seen == list(range(at + 1))
        task.cancel()

        async def rest() -> None:
            with pytest.raises(ahg.LaunchFailure, match=error.__name__):
                await stream.synchronize()
            await stream.synchronize()  # reported once
            with pytest.raises(asyncio.CancelledError):
                await task

        loop.run_until_complete(rest())
        assert seen == list(range(total))
        stream.destroy()
    finally:
        loop.close()


def test_a_loop_stopped_between_turns_runs_the_rest_when_run_again() -> None:
    device = ahg.get_device(0)
    seen: list[int] = []
    loop = asyncio.new_event_loop()

    def host(i: int) -> None:
        seen.append(i)
        if i == PUMP_BUDGET - 1:
            loop.stop()  # the last packet of the first turn

    try:
        stream = device.create_stream()

        async def enqueue() -> None:
            _queue_calls(stream, 2 * PUMP_BUDGET, host)
            await stream.synchronize()

        task = loop.create_task(enqueue())
        with pytest.raises(RuntimeError, match="stopped"):
            loop.run_until_complete(task)
        assert seen == list(range(PUMP_BUDGET))
        assert not stream.query()

        # Another thread's loop cannot take the device while the work waits for its turn.
        errors: list[BaseException] = []

        def other() -> None:
            async def take() -> None:
                await device.synchronize()

            try:
                asyncio.run(take())
            except BaseException as exc:  # reported to the test
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(30)
        assert len(errors) == 1, errors
        assert isinstance(errors[0], ahg.IllegalState), errors
        assert seen == list(range(PUMP_BUDGET))

        loop.run_until_complete(stream.synchronize())
        assert seen == list(range(2 * PUMP_BUDGET))
        loop.run_until_complete(task)
        stream.destroy()
    finally:
        loop.close()


def test_a_loop_closed_between_turns_fails_the_rest_on_the_next_loop() -> None:
    device = ahg.get_device(0)
    seen: list[int] = []
    first = asyncio.new_event_loop()

    def host(i: int) -> None:
        seen.append(i)
        if i == PUMP_BUDGET - 1:
            first.stop()

    try:
        stream = device.create_stream()
        event = device.create_event()

        async def enqueue() -> None:
            _queue_calls(stream, 2 * PUMP_BUDGET, host)
            await stream.record_event(event)
            await stream.synchronize()

        with pytest.raises(RuntimeError, match="stopped"):
            first.run_until_complete(enqueue())
    finally:
        first.close()
    assert seen == list(range(PUMP_BUDGET))

    async def after() -> None:
        with pytest.raises(ahg.HipError):
            await stream.synchronize()
        await device.synchronize()
        assert stream.query()
        assert event.query()
        # the device serves the new loop as usual
        more: list[int] = []
        await stream.launch_host_func(more.append, 1)
        await stream.synchronize()
        assert more == [1]
        event.destroy()
        stream.destroy()

    asyncio.run(after())
    assert seen == list(range(PUMP_BUDGET))  # the abandoned calls never ran


@pytest.mark.asyncio
async def test_events_and_synchronize_across_turns(device: ahg.Device) -> None:
    """An event recorded after work spanning several turns completes only after all of it;
    ``device.synchronize`` returns once everything enqueued before it is done; a task
    cancelled while waiting takes nothing with it."""
    seen: list[int] = []
    per = PUMP_BUDGET + 3  # each stream's work alone spans two turns
    streams = [device.create_stream() for _ in range(6)]
    events = [device.create_event() for _ in streams]
    for stream, event in zip(streams, events, strict=True):
        _queue_calls(stream, per, seen.append)
        await stream.record_event(event)
    waiter = asyncio.ensure_future(streams[0].synchronize())
    await asyncio.sleep(0)
    assert not waiter.done()
    waiter.cancel()
    assert not all(event.query() for event in events)
    await device.synchronize()
    assert all(event.query() for event in events)
    assert len(seen) == per * len(streams)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    # a wait on the last event in the order the streams completed
    for stream in streams:
        await stream.wait_event(events[-1])
        await stream.synchronize()
    for event in events:
        event.destroy()
    for stream in streams:
        stream.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("before", [PUMP_BUDGET - 2, PUMP_BUDGET - 1, PUMP_BUDGET])
async def test_a_packet_that_parks_at_the_budget_resumes_in_order(
    device: ahg.Device, before: int
) -> None:
    """Stream A's wait on an event is its ``before + 1``-th packet (parking exactly at the
    budget for ``before = PUMP_BUDGET - 1``); the event is recorded on stream B after a host
    call of B's, later. A's calls after the wait all run after B's call, in order."""
    order: list[str] = []
    gate = asyncio.Event()
    a, b = device.create_stream(), device.create_stream()
    event = device.create_event()
    try:
        await b.launch_host_func(lambda _: gate.wait(), None)  # an async host call: B waits
        await b.launch_host_func(order.append, "b")
        await b.record_event(event)
        _queue_calls(a, before, lambda i: order.append(f"a{i}"))
        await a.wait_event(event)
        _queue_calls(a, 5, lambda i: order.append(f"z{i}"))
        for _ in range(4):  # several turns: A parks, B waits on the gate
            await asyncio.sleep(0)
        assert "b" not in order
        assert not any(entry.startswith("z") for entry in order)
        gate.set()
        await device.synchronize()
        assert order.index("b") < order.index("z0")
        assert [e for e in order if e.startswith("z")] == [f"z{i}" for i in range(5)]
        assert [e for e in order if e.startswith("a")] == [f"a{i}" for i in range(before)]
    finally:
        event.destroy()
        a.destroy()
        b.destroy()


def test_a_graph_launch_behind_the_budget_when_the_loop_closes() -> None:
    """A graph launch queued behind more than a turn's worth of work, its loop closed after
    the first turn: the handle fails on the next loop, the executable's pools come back to
    where they were, and the executable launches again."""
    device = ahg.get_device(0)
    seen: list[int] = []
    ran: list[str] = []
    first = asyncio.new_event_loop()

    def host(i: int) -> None:
        seen.append(i)
        if i == PUMP_BUDGET - 1:
            first.stop()

    graph = ahg.Graph()
    node = graph.add_host_node(ran.append, ("graph",))
    graph.add_host_node(ran.append, ("graph2",), deps=[node])
    executable = graph.instantiate()
    baseline = executable.statistics()
    stream = device.create_stream()
    handles: list[Any] = []

    async def enqueue() -> None:
        _queue_calls(stream, PUMP_BUDGET + 10, host)
        handles.append(await executable.launch(stream))
        await stream.synchronize()

    try:
        task = first.create_task(enqueue())
        with pytest.raises(RuntimeError, match="stopped"):
            first.run_until_complete(task)
        task.cancel()
    finally:
        first.close()
    assert ran == []

    async def after() -> None:
        with pytest.raises(ahg.HipError):
            await handles[0]
        with pytest.raises(ahg.IllegalState, match="closed"):
            await device.synchronize()  # the stream's unreported failure, reported once
        await stream.synchronize()
        await device.synchronize()
        now = executable.statistics()
        assert now.in_flight == 0
        pool, pool0 = now.signal_pool, baseline.signal_pool
        assert (pool.sets, pool.free, pool.in_use, pool.waiters) == (
            pool0.sets,
            pool0.free,
            pool0.in_use,
            pool0.waiters,
        )
        assert (now.arena.live_slots, now.arena.bytes_reserved) == (
            baseline.arena.live_slots,
            baseline.arena.bytes_reserved,
        )
        await (await executable.launch(stream))
        assert ran == ["graph", "graph2"]

    try:
        asyncio.run(after())
    finally:
        executable.destroy()
        graph.destroy()
        stream.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("queues", [1, 3, 16])
async def test_many_streams_over_few_or_many_hardware_queues(ahg_devices: Any, queues: int) -> None:
    """Thirty streams of more than a turn's work each, over 1, 3 or 16 hardware queues: each
    stream's calls run in its order, every stream completes, and another task keeps getting
    turns meanwhile."""
    (device,) = ahg_devices(1, ahg.DeviceProperties(hardware_queues=queues))
    per = PUMP_BUDGET + 1
    streams = [device.create_stream() for _ in range(30)]
    seen: dict[int, list[int]] = {k: [] for k in range(len(streams))}
    turns = 0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0)

    ticking = asyncio.ensure_future(ticker())
    try:
        for k, stream in enumerate(streams):
            _queue_calls(stream, per, seen[k].append)
        await device.synchronize()
    finally:
        done.set()
        await ticking
        for stream in streams:
            stream.destroy()
    assert all(calls == list(range(per)) for calls in seen.values())
    assert turns >= (per * len(streams)) // PUMP_BUDGET - 1
