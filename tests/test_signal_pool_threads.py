"""Two loops on two threads taking the last signal set of one executable at the same moment.

DESIGN.md §4: a device is used by one loop at a time, but a launch takes its signal set
before its submission claims the device, so launches of one executable from two threads'
loops (the device idle) may take sets at the same moment; the loser is refused IllegalState
at its submission and gives its set back. Taking a set checked the free list (or the count of
sets not made yet) and then took from it in a second step: a set taken by the other thread in
between made the launch fail with a bare ``IndexError``, and two threads taking the last set
not made yet counted it twice, so the pool made sets without end and miscounted its free ones.
Whoever comes second must find nothing and wait (or grow) like any launch.

The moment is made deterministic: a trace hook runs the other thread's take inside this
thread's, after its check.
"""

from __future__ import annotations

import asyncio
import linecache
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import GatedHost, loop_turns


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


def _takes(frame: FrameType) -> bool:
    """The line about to run takes a set, or counts one not made yet as taken."""
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
    return ".popleft()" in line or ("_unmade" in line and "-=" in line) or ".pop()" in line


@pytest.fixture
def other_take_inside_acquire() -> Iterator[Callable[[ahg.GraphExec], list[object]]]:
    """``arm(graph_exec)``: the next time a set is taken from its pool, another take of the
    same pool runs after the first line of that take's branch; returns what it took."""
    armed: list[tuple[object, list[object]]] = []

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_name != "acquire_nowait" or not armed:
            return None
        pool, taken = armed[0]
        if frame.f_locals.get("self") is not pool:
            return None

        def lines(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line" and armed and _takes(frame):  # the check ran; the take has not
                armed.clear()
                taken.append(pool.acquire_nowait())  # type: ignore[attr-defined]
            return lines

        return lines

    def arm(graph_exec: ahg.GraphExec) -> list[object]:
        taken: list[object] = []
        armed.append((graph_exec.pool, taken))
        return taken

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield arm
    finally:
        sys.settrace(previous)


@pytest.mark.asyncio
@pytest.mark.parametrize("sets", [1, 2], ids=["free list", "not made yet"])
async def test_a_set_taken_by_another_thread_between_the_check_and_the_take(
    device: ahg.Device,
    other_take_inside_acquire: Callable[[ahg.GraphExec], list[object]],
    sets: int,
) -> None:
    out = device.malloc(8)
    gates = GatedHost()  # holds each launch until the test opens its gate
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,), deps=[graph.add_host_node(gates)])
    graph_exec = graph.instantiate(signal_sets=sets)
    stream = device.create_stream()
    launches = 1
    if sets == 2:  # the made set is held: the next launch makes the one not made yet
        first = await graph_exec.launch(stream)
        launches = 2
    taken = other_take_inside_acquire(graph_exec)
    launch = asyncio.ensure_future(graph_exec.launch(stream))
    await loop_turns()
    assert len(taken) == 1  # the other thread's take ran ...
    assert taken[0] is not None  # ... and got the set
    assert not launch.done()  # this one found none and waits, as any launch would
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use, pool.waiters) == (sets, 0, sets, 1)
    graph_exec.pool.give_back(taken[0])  # the other thread's launch was refused
    gates.open_all(launches)
    await (await launch)
    await stream.synchronize()
    if sets == 2:
        await first
    assert int(device.view(out, "int64", 1)[0]) == launches
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use) == (sets, sets, 0)
    destroy(graph_exec, graph, stream, out)
