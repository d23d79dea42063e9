"""A stream enqueue that finds its ring full checks its arguments before it parks.

HIP checks a call's arguments when it is made. An enqueue that must wait for room in its
stream's ring runs its operation's checks first: a bad call is refused at once, with the very
error (type and message) the same call gets when there is room, without ever yielding to the
event loop (so without the ring draining), without a place among the waiters, and with every
statistic unchanged. The ``_nowait`` twin reports the bad call rather than ``NotReady``. Once a
good call has room, its body checks again, since what they read may have changed meanwhile.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices, loop_turns, run_together

CAPACITY = 4
SYMBOL = ahg.device_symbol("test_enqueue_checks_before_parking.symbol", 64)


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


@dataclass
class World:
    device: ahg.Device
    stream: ahg.Stream
    buf: ahg.DevicePtr
    dead_event: ahg.Event
    other_device_event: ahg.Event


Call = tuple[str, tuple[Any, ...], dict[str, Any]]


def call(name: str, *args: Any, **kwargs: Any) -> Call:
    return name, args, kwargs


# One bad call per operation kind (and per kind of mistake where the checks differ).
BAD_CALLS: dict[str, Callable[[World], Call]] = {
    "launch_kernel grid 0": lambda w: call("launch_kernel", add_one, 0, 1, (w.buf,)),
    "launch_kernel wrong argument": lambda w: call("launch_kernel", add_one, 1, 1, ("x",)),
    "memcpy out of range": lambda w: call("memcpy", w.buf, w.buf + 8, 64),
    "memcpy wrong type": lambda w: call("memcpy", w.buf, "host", 8),
    "memset null": lambda w: call("memset", ahg.NULL, 0, 8),
    "memset bad element size": lambda w: call("memset", w.buf, 0, 1, element_size=3),
    "launch_host_func not callable": lambda w: call("launch_host_func", 42),
    "record_event destroyed": lambda w: call("record_event", w.dead_event),
    "record_event bad flags": lambda w: call("record_event", w.dead_event, 7),
    "record_event other device": lambda w: call("record_event", w.other_device_event),
    "wait_event destroyed": lambda w: call("wait_event", w.dead_event),
    "wait_event not an event": lambda w: call("wait_event", "event"),
    "wait_event bad flags": lambda w: call("wait_event", w.other_device_event, 9),
    "memcpy_2d pitch below width": lambda w: call("memcpy_2d", w.buf, 4, w.buf, 16, 8, 2),
    "memcpy_3d out of range": lambda w: call(
        "memcpy_3d", ahg.PitchedPtr(w.buf, 16), ahg.PitchedPtr(w.buf, 16), (8, 64, 1)
    ),
    "memcpy_to_symbol past the symbol": lambda w: call(
        "memcpy_to_symbol", SYMBOL, np.zeros(16, np.uint8), 16, 60
    ),
    "memcpy_from_symbol not a symbol": lambda w: call(
        "memcpy_from_symbol", np.zeros(8, np.uint8), "no such symbol", 8
    ),
    "memcpy_peer bad device": lambda w: call("memcpy_peer", w.buf, 7, w.buf, 0, 8),
    "wait_value_32 None flags": lambda w: call("wait_value_32", w.buf, 0, None),
    "write_value_64 null": lambda w: call("write_value_64", ahg.NULL, 1),
    "free_async inside an allocation": lambda w: call("free_async", w.buf + 8),
    "a wrong call": lambda w: call("memset", w.buf),
}


def enqueue(world: World, bad: str, suffix: str = "") -> Any:
    """Make the bad call ``bad`` (``suffix="_nowait"``: through the twin)."""
    name, args, kwargs = BAD_CALLS[bad](world)
    return getattr(world.stream, name + suffix)(*args, **kwargs)


@pytest.fixture
def world() -> Iterator[World]:
    properties = ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=CAPACITY)
    with fresh_devices(2, properties) as (device, other):
        dead_event = device.create_event()
        dead_event.destroy()
        other_event = other.create_event()
        stream = device.create_stream(non_blocking=True)
        buf = device.malloc(64)
        yield World(device, stream, buf, dead_event, other_event)
        device.free(buf)
        stream.destroy()
        other_event.destroy()


def fill(world: World) -> GatedHost:
    """A gated host function at the head of the stream's ring and the ring full behind it."""
    gate = GatedHost()
    world.stream.launch_host_func_nowait(gate)
    while True:
        try:
            world.stream.launch_host_func_nowait(int)
        except ahg.NotReady:
            return gate


def snapshot(world: World) -> tuple[object, ...]:
    return world.stream.statistics(), world.device.statistics()


def same(error: BaseException) -> str:
    """The error's message, but for the device's repr's count of work in flight."""
    return re.sub(r"in_flight=\d+", "in_flight=N", str(error))


def first_step_raises(coro: Coroutine[Any, Any, object]) -> BaseException:
    """Run ``coro`` to its first suspension: it must raise there, never having yielded."""
    try:
        yielded = coro.send(None)
    except StopIteration:
        pytest.fail("the bad call succeeded")
    except BaseException as error:
        return error
    coro.close()
    pytest.fail(f"the bad call parked (yielded {yielded!r}) instead of being refused")


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(BAD_CALLS))
async def test_a_bad_call_on_a_full_ring_is_refused_before_it_parks(
    world: World, name: str
) -> None:
    gate = fill(world)
    before = snapshot(world)
    parked_error = first_step_raises(enqueue(world, name))
    with pytest.raises(type(parked_error)) as nowait_error:
        enqueue(world, name, "_nowait")  # the bad call, not NotReady
    assert snapshot(world) == before  # nothing taken, nobody waiting, the ring still full
    assert world.device.statistics().queues[0].pending == CAPACITY
    gate.open()
    await world.stream.synchronize()
    # With room, the same call is refused with the same error.
    with pytest.raises(type(parked_error)) as roomy_error:
        await enqueue(world, name)
    messages = {same(roomy_error.value), same(parked_error), same(nowait_error.value)}
    assert len(messages) == 1
    assert world.device.statistics().queues[0].waiting_for_room == 0


@pytest.mark.asyncio
async def test_a_good_call_still_parks_and_runs(world: World) -> None:
    gate = fill(world)
    event = world.device.create_event()
    recording = asyncio.ensure_future(world.stream.record_event(event))
    await loop_turns()
    assert not recording.done()
    assert world.device.statistics().queues[0].waiting_for_room == 1
    gate.open()
    await recording
    await event.synchronize()
    event.destroy()


@pytest.mark.asyncio
async def test_an_event_destroyed_while_its_record_waits_for_room(world: World) -> None:
    """The body checks again once it has room: the record is refused then, and its room
    goes to the next waiter."""
    gate = fill(world)
    event = world.device.create_event()
    recording = asyncio.ensure_future(world.stream.record_event(event))
    ran: list[str] = []
    after = asyncio.ensure_future(world.stream.launch_host_func(ran.append, "after"))
    await loop_turns()
    assert world.device.statistics().queues[0].waiting_for_room == 2
    event.destroy()
    gate.open()
    with pytest.raises(ahg.InvalidHandle):
        await recording
    await (await after)
    assert ran == ["after"]
    await world.stream.synchronize()
    assert world.device.statistics().queues[0].waiting_for_room == 0


@pytest.mark.asyncio
async def test_a_checked_call_cancelled_while_parked_takes_nothing(world: World) -> None:
    gate = fill(world)
    before = snapshot(world)
    parked = asyncio.ensure_future(world.stream.memset(world.buf, 1, 8))
    await loop_turns()
    assert world.device.statistics().queues[0].waiting_for_room == 1
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked
    assert snapshot(world) == before
    gate.open()
    await world.stream.synchronize()
    assert world.device.view(world.buf, "uint8", 8).tolist() == [0] * 8  # never ran


@pytest.mark.asyncio
async def test_a_bad_call_from_another_loop_is_refused_as_a_bad_call(world: World) -> None:
    """Checked before the ring is asked for room, so before the device's loop is claimed:
    another loop's bad call gets its own error, not the busy device's IllegalState."""
    gate = fill(world)
    before = snapshot(world)
    errors = run_together(lambda: asyncio.run(enqueue(world, "memset null")))
    assert [type(error) for error in errors] == [ahg.InvalidValue]
    assert snapshot(world) == before
    good = run_together(lambda: asyncio.run(enqueue_good(world)))
    assert [type(error) for error in good] == [ahg.IllegalState]  # a good one: the loop
    assert snapshot(world) == before
    gate.open()
    await world.stream.synchronize()


async def enqueue_good(world: World) -> None:
    await world.stream.memset(world.buf, 1, 8)


@pytest.mark.asyncio
async def test_a_graph_launch_refused_for_a_destroyed_event_never_parks_for_a_set(
    world: World,
) -> None:
    """A launch that must wait for a signal set checks its event nodes first."""
    gate = GatedHost()
    event = world.device.create_event()
    graph = ahg.Graph()
    graph.add_event_record_node(event, deps=[graph.add_host_node(gate)])
    graph_exec = graph.instantiate(signal_sets=1)
    first = await graph_exec.launch(world.stream)  # holds the only set until the gate opens
    event.destroy()
    before = graph_exec.statistics(), snapshot(world)
    error = first_step_raises(graph_exec.launch(world.stream))
    assert isinstance(error, ahg.InvalidValue)
    with pytest.raises(ahg.InvalidValue, match="destroyed event"):
        graph_exec.launch_nowait(world.stream)  # refused as such, not NotReady
    assert (graph_exec.statistics(), snapshot(world)) == before
    assert graph_exec.statistics().signal_pool.waiters == 0
    gate.open()
    await first
    await world.stream.synchronize()
    graph_exec.destroy()
    graph.destroy()
