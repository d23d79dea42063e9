"""Honest coroutines: a launch waits (and so yields) only when it must, never runs device work
inline, and a launch that cannot be made changes nothing."""

from __future__ import annotations

import asyncio
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import GatedHost
from peek import peek


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


_MADE: list[ahg.Graph] = []  # graphs one_kernel_graph made for this test


@pytest.fixture(autouse=True)
def _destroy_made() -> Iterator[None]:
    yield
    while _MADE:
        graph = _MADE.pop()
        if graph.alive:  # a test may destroy its graph itself
            graph.destroy()


def one_kernel_graph(out: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    _MADE.append(graph)
    graph.add_kernel_node(add_one, 1, 1, (out,))
    return graph


def launch_state(graph_exec: ahg.GraphExec) -> tuple[Any, ...]:
    stats = graph_exec.statistics()
    return stats.launches, stats.in_flight, stats.signal_pool, stats.versions


@pytest.mark.asyncio
async def test_a_concurrent_task_gets_a_turn_at_least_once_per_pool_of_launches(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    sets, launches = 4, 400
    graph_exec = one_kernel_graph(out).instantiate(signal_sets=sets)
    stream = device.create_stream()
    turns = 0
    done = False

    async def count_turns() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_turns())
    await asyncio.sleep(0)  # the counter starts
    start = turns
    for _ in range(launches):
        await graph_exec.launch(stream)  # back to back, never awaiting a completion
    done = True
    await counter
    await stream.synchronize()
    assert turns - start >= launches // sets - 1
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.misses) == (sets, 0)  # waiting, not growing
    assert device.view(out, "int64", 1)[0] == launches
    graph_exec.destroy()
    destroy(out, stream)


@pytest.mark.asyncio
async def test_the_grow_policy_adds_sets_and_still_runs_nothing_inline(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    graph_exec = one_kernel_graph(out).instantiate(signal_sets=2, signal_set_policy="grow")
    stream = device.create_stream()
    for _ in range(10):
        await graph_exec.launch(stream)
    assert peek(device, out) == 0  # no launch ran while the host enqueued
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.misses, pool.in_use) == (10, 8, 10)
    await stream.synchronize()
    assert device.view(out, "int64", 1)[0] == 10
    graph_exec.destroy()
    destroy(out, stream)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"signal_set_policy": "sometimes"}, ValueError),
        ({"signal_set_policy": 1}, TypeError),
        ({"signal_set_policy": None}, TypeError),
        ({"signal_set_policy": "grow", "wait_for_signal_sets": True}, ValueError),
    ],
)
def test_a_bad_signal_set_policy_is_refused_before_anything_is_built(
    device: ahg.Device, options: dict[str, Any], error: type[Exception]
) -> None:
    out = device.malloc(8)
    graph = one_kernel_graph(out)
    before = device.statistics()
    with pytest.raises(error):
        graph.instantiate(**options)
    assert device.statistics() == before
    destroy(graph, out)


def test_launch_nowait_without_a_running_loop_changes_nothing(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph_exec = one_kernel_graph(out).instantiate()
    before = launch_state(graph_exec)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="running asyncio event loop"):
            graph_exec.launch_nowait()
    assert launch_state(graph_exec) == before

    async def later() -> None:  # the executable still works, and nothing waits for a ghost
        done = await graph_exec.launch()
        await asyncio.wait_for(done.wait(), 5)

    asyncio.run(later())
    assert device.view(out, "int64", 1)[0] == 1
    graph_exec.destroy()
    destroy(out)


@pytest.mark.asyncio
async def test_a_launch_from_another_loop_while_the_device_is_busy_changes_nothing(
    device: ahg.Device,
) -> None:
    gate = GatedHost()
    out = device.malloc(8)
    graph = one_kernel_graph(out)
    graph.add_host_node(gate, deps=graph.nodes())
    graph_exec = graph.instantiate()
    first = await graph_exec.launch()
    before = launch_state(graph_exec)
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            asyncio.run(graph_exec.launch())
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], ahg.IllegalState)
    assert launch_state(graph_exec) == before
    gate.open_all(2)
    await first
    second = await graph_exec.launch()  # this loop's launches neither hang nor wait for a ghost
    await asyncio.wait_for(second.wait(), 5)
    assert device.view(out, "int64", 1)[0] == 2
    graph_exec.destroy()
    destroy(out)


def test_under_trio_the_error_names_trio(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_trio = types.SimpleNamespace(lowlevel=types.SimpleNamespace(current_task=lambda: object()))
    monkeypatch.setitem(sys.modules, "trio", fake_trio)
    out = device.malloc(8)
    graph_exec = one_kernel_graph(out).instantiate()
    with pytest.raises(RuntimeError, match="not trio"):
        graph_exec.launch_nowait()
    destroy(graph_exec, out)


@pytest.mark.asyncio
async def test_awaiting_unfinished_work_yields_and_finished_work_does_not(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    turns = 0

    async def one_turn() -> None:
        nonlocal turns
        turns += 1

    done = await stream.launch_kernel(add_one, 1, 1, (out,))
    other = asyncio.create_task(one_turn())
    assert not done.done()
    await done  # not finished: the host parks, and the loop runs the device and other tasks
    assert turns == 1
    await other
    again = asyncio.create_task(one_turn())
    await done  # finished: returns without a trip through the loop, like a done future
    assert turns == 1
    await again
    await stream.synchronize()
    assert device.view(out, "int64", 1)[0] == 1
    destroy(out, stream)


@pytest.mark.asyncio
async def test_a_parked_launch_cancelled_or_left_on_a_destroyed_stream_takes_nothing(
    device: ahg.Device,
) -> None:
    gate = asyncio.Event()

    async def held() -> None:
        await gate.wait()

    graph = ahg.Graph()
    graph.add_host_node(held)
    graph_exec = graph.instantiate(signal_sets=2)
    stream = device.create_stream()
    await graph_exec.launch(stream)
    await graph_exec.launch(stream)
    before = launch_state(graph_exec)
    parked = asyncio.create_task(graph_exec.launch(stream))
    await asyncio.sleep(0)  # it parks: both sets are held by the gated launches
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked
    assert launch_state(graph_exec) == before
    parked = asyncio.create_task(graph_exec.launch(stream))
    await asyncio.sleep(0)
    stream.destroy()
    gate.set()
    with pytest.raises(ahg.ContextIsDestroyed) as caught:
        await parked
    assert isinstance(caught.value, ahg.Destroyed)
    await device.synchronize()
    stats = graph_exec.statistics()
    assert (stats.launches, stats.in_flight, stats.signal_pool.in_use) == (2, 0, 0)
    graph_exec.destroy()
    graph.destroy()
