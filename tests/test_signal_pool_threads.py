"""Two loops on two threads taking the last signal set of one executable at the same moment.

DESIGN.md §4: a device is used by one loop at a time, but a launch takes its signal set
before its submission claims the device, so launches of one executable from two threads'
loops (the device idle) may take sets at the same moment; the loser is refused IllegalState
at its submission and gives its set back. Taking a set checked the free list (or the count of
sets not made yet) and then took from it in a second step: a set taken by the other thread in
between made the launch fail with a bare ``IndexError``, and two threads taking the last set
not made yet counted it twice, so the pool made sets without end and miscounted its free ones.
Whoever comes second must find nothing and wait (or grow) like any launch.

The moment is made deterministic (``racing_step``): the other thread's take runs inside this
thread's, after its check.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import GatedHost, loop_turns
from racing_step import step_inside


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


def _takes(line: str) -> bool:
    """The line about to run takes a set, or counts one not made yet as taken."""
    return ".popleft()" in line or ("_unmade" in line and "-=" in line) or ".pop()" in line


@pytest.mark.asyncio
@pytest.mark.parametrize("sets", [1, 2], ids=["free list", "not made yet"])
async def test_a_set_taken_by_another_thread_between_the_check_and_the_take(
    device: ahg.Device, sets: int
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
    pool = graph_exec.pool
    with step_inside(pool, "acquire_nowait", _takes, pool.acquire_nowait) as taken:
        launch = asyncio.ensure_future(graph_exec.launch(stream))
        await loop_turns()
    assert len(taken) == 1  # the other thread's take ran ...
    assert taken[0] is not None  # ... and got the set
    assert not launch.done()  # this one found none and waits, as any launch would
    stats = graph_exec.statistics().signal_pool
    assert (stats.sets, stats.free, stats.in_use, stats.waiters) == (sets, 0, sets, 1)
    pool.give_back(taken[0])  # type: ignore[arg-type]  # the other thread's launch was refused
    gates.open_all(launches)
    await (await launch)
    await stream.synchronize()
    if sets == 2:
        await first
    assert int(device.view(out, "int64", 1)[0]) == launches
    stats = graph_exec.statistics().signal_pool
    assert (stats.sets, stats.free, stats.in_use) == (sets, sets, 0)
    destroy(graph_exec, graph, stream, out)
