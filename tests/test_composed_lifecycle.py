"""Where the composed executable meets the handle lifecycle and the race checker.

The launcher and the updater hold the state a forgotten executable's finalizer record frees,
and both refer to the executable: the record must free what they hold without keeping the
executable alive. The race checker's raise mode refuses a launch inside the launcher's enqueue,
before anything is committed: the signal set the launch borrowed goes back to the pool.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.exec.graph_exec import EXECS
from cleanup import destroy
from fakes import loop_turns

K = ahg.ConditionalKind


@ahg.kernel
def put(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = 1


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


@ahg.kernel
def choose(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@pytest.fixture
def baseline() -> Iterator[testing.Snapshot]:
    """Statistics before the test; at the end everything must be back to them."""
    before = testing.snapshot()
    yield before
    assert testing.leak_report(before) is None


def _forget(box: list[Any]) -> None:
    """Drop the handles in ``box`` (the test's only references) and wait for their release."""
    box.clear()
    ahg.collect_forgotten()


def _live_handles() -> dict[str, int]:
    return testing.snapshot().handles


def _read(device: ahg.Device, ptr: ahg.DevicePtr) -> int:
    return int(device.view(ptr, np.int32, 1)[0])


async def _parked_on_pool(graph_exec: ahg.GraphExec) -> None:
    for _ in range(100):
        if graph_exec.statistics().signal_pool.waiters:
            return
        await asyncio.sleep(0)  # one loop turn: the launching task takes its next step
    raise AssertionError("no launch parked on the signal-set pool")


# -- a forgotten executable ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_an_executable_with_a_conditional_forgotten_in_flight_frees_its_cells_after(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    held = testing.HeldKernel("held")
    x = device.malloc(4)
    device.view(x, np.int32, 1)[0] = 0
    with ahg.Graph() as graph:
        handle = graph.conditional_handle(default=0)
        gate = graph.add_kernel_node(held.kernel, 1, 1)
        pick = graph.add_kernel_node(choose, 1, 1, (1, handle), deps=[gate])
        _node, (body,) = graph.add_conditional_node(handle, K.If, 1, deps=[pick])
        body.add_kernel_node(bump, 1, 1, (x,))
        graph_exec = graph.instantiate()
    cells = device.memory.bytes_in_use
    with device.create_stream() as stream:
        launches = [await graph_exec.launch(stream) for _ in range(2)]
        record = graph_exec._life
        del graph_exec
        with warnings.catch_warnings():
            warnings.simplefilter("error", ahg.ForgottenHandleWarning)
            gc.collect()  # the launches hold it (through the launcher): no warning, nothing freed
        assert record.attached
        assert device.memory.bytes_in_use == cells  # its arena and condition cells are there
        await held.started.wait()
        held.release()
        for launch in launches:
            await launch
        assert _read(device, x) == 2  # both launches ran their body to the end
        del launch
        with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
            _forget(launches)  # the last references: the launches' completions
    assert not record.attached
    assert EXECS.statistics().live == baseline.handles["graph exec"]
    device.free(x)


def test_the_finalizer_record_holds_no_part_that_refers_to_the_executable(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    ptr = device.malloc(4)
    with ahg.Graph() as graph:
        graph.add_kernel_node(bump, 1, 1, (ptr,))
        graph_exec = graph.instantiate()
    record = graph_exec._life
    launcher, updater = graph_exec._launcher, graph_exec._updater
    assert launcher.record is record
    held = [getattr(record, name) for name in record.__slots__]
    assert all(part not in held for part in (launcher, updater, graph_exec))
    del launcher, updater, held
    box = [graph_exec]
    del graph_exec
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
        _forget(box)  # collected as soon as dropped: nothing the finalizer holds keeps it
    assert not record.attached
    device.free(ptr)


# -- destroy while launches wait for a signal set ----------------------------------------------


@pytest.mark.asyncio
async def test_destroy_while_a_cross_device_launch_waits_for_a_set_frees_the_home_stream() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    before = _live_handles()
    held = testing.HeldKernel("held")
    with ahg.Graph() as graph:
        graph.add_kernel_node(held.kernel, 1, 1)
        graph_exec = graph.instantiate(device=d0, signal_sets=1)
    other = d1.create_stream()
    first = await graph_exec.launch(other)  # makes the home stream, after the record was made
    home = graph_exec._launcher.home
    assert home is not None
    assert graph_exec._life.home is home  # the finalizer record was handed it
    waiter = asyncio.ensure_future(graph_exec.launch(other))
    await _parked_on_pool(graph_exec)
    await loop_turns()
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        await waiter
    assert not first.done()
    held.release()
    await first
    stats = graph_exec.statistics()
    assert (stats.state, stats.launches, stats.completed) == ("closed", 1, 1)
    assert (stats.signal_pool.waiters, stats.signal_pool.in_use) == (0, 0)
    del graph_exec, first, waiter, home
    other.destroy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ahg.ForgottenHandleWarning)
        ahg.collect_forgotten()  # destroyed, so its record was detached: nothing freed twice
    assert _live_handles() == before  # the home stream and the internal ones included
    assert d0.memory.bytes_in_use == 0


# -- the race checker's raise mode refuses a launch before it commits ------------------------


def _pool(graph_exec: ahg.GraphExec) -> tuple[int, int, int, int]:
    pool = graph_exec.statistics().signal_pool
    return (pool.free, pool.in_use, pool.waiters, pool.sets)


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_racing_graph_launch_and_its_signal_set_comes_back(
    device: ahg.Device,
) -> None:
    buf = device.malloc(64)
    graph = ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (buf,))
    graph_exec = graph.instantiate(signal_sets=2)
    a, b = device.create_stream(), device.create_stream()
    with ahg.race_check(on_race="raise") as rc:
        await a.memset(buf, 0, 64)
        pool, ops = _pool(graph_exec), rc.statistics().ops
        with pytest.raises(ahg.RaceError):
            await graph_exec.launch(b)  # unordered with a's fill of the same bytes
        with pytest.raises(ahg.RaceError):
            graph_exec.launch_nowait(b)
        assert _pool(graph_exec) == pool  # both borrowed sets went back
        stats = graph_exec.statistics()
        assert (stats.launches, stats.in_flight) == (0, 0)
        assert rc.statistics().ops == ops  # nothing was committed to the checker either
        assert b.query()  # and nothing was enqueued on b
        await a.synchronize()
        await (await graph_exec.launch(b))  # ordered now: accepted
    assert _read(device, buf) == 1
    assert graph_exec.statistics().launches == 1
    destroy(graph_exec, graph, a, b)
    device.free(buf)


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_parked_launch_and_gives_its_set_back(
    device: ahg.Device,
) -> None:
    held = testing.HeldKernel("held")
    buf = device.malloc(64)
    graph = ahg.Graph()
    gate = graph.add_kernel_node(held.kernel, 1, 1)
    graph.add_kernel_node(put, 1, 1, (buf,), deps=[gate])
    graph_exec = graph.instantiate(signal_sets=1)
    a, b, c = device.create_stream(), device.create_stream(), device.create_stream()
    after_first = device.create_event()
    with ahg.race_check(on_race="raise"):
        first = await graph_exec.launch(a)
        racing = asyncio.ensure_future(graph_exec.launch(b))  # parks: the one set is in use
        await _parked_on_pool(graph_exec)
        # While it waits, c fills the buffer after the first launch: ordered with that launch,
        # but not with the parked one on b (which follows only the first launch).
        await a.record_event(after_first)
        await c.wait_event(after_first)
        await c.memset(buf, 0, 64)
        held.release()  # first completes and hands its set to the parked launch
        with pytest.raises(ahg.RaceError):
            await racing  # refused at enqueue, after it was handed the set
        assert _pool(graph_exec) == (1, 0, 0, 1)  # the set it was handed went back
        await first
        await c.synchronize()
        await (await graph_exec.launch(b))  # ordered now, and the set is usable again
    stats = graph_exec.statistics()
    assert (stats.launches, stats.completed, stats.signal_pool.misses) == (2, 2, 0)
    assert _read(device, buf) == 1  # b's launch ran after c's fill
    destroy(graph_exec, graph, after_first, a, b, c)
    device.free(buf)
