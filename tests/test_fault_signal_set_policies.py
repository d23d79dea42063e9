"""``exhaust_signal_sets`` under each signal-set policy, as its documentation words it.

The default policy waits: in the block ``launch_nowait`` raises ``NotReady`` and a launch parks
until the block ends. ``signal_set_policy="grow"``: a launch in the block adds a set (a miss).
Either way the block ends with every set free again and nothing left behind.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from cleanup import destroy


@ahg.kernel
def bump(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[t.ids] += 1


@pytest.mark.asyncio
async def test_by_default_a_launch_parks_until_the_block_ends(device: ahg.Device) -> None:
    out, stream = device.malloc(8), device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(bump, 1, 1, (out,))
    graph_exec = graph.instantiate(signal_sets=2)  # the default policy: wait
    baseline = testing.snapshot()
    with testing.exhaust_signal_sets(graph_exec) as held:
        assert held.held == 2
        with pytest.raises(ahg.NotReady):
            graph_exec.launch_nowait(stream)
        parked = asyncio.create_task(graph_exec.launch(stream))
        await testing.loop_turns()
        assert not parked.done()
        assert graph_exec.statistics().signal_pool.waiters == 1
    await (await parked)  # the block gave the sets back: the launch went on
    assert device.view(out, "int64", 1)[0] == 1
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.misses, pool.waiters) == (2, 2, 0, 0)
    assert testing.leak_report(baseline) is None
    destroy(graph_exec, graph, stream, out)


@pytest.mark.asyncio
async def test_a_growing_pool_counts_a_miss_instead(device: ahg.Device) -> None:
    out, stream = device.malloc(8), device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(bump, 1, 1, (out,))
    graph_exec = graph.instantiate(signal_sets=2, signal_set_policy="grow")
    with testing.exhaust_signal_sets(graph_exec):
        await (await graph_exec.launch(stream))
        assert graph_exec.statistics().signal_pool.misses == 1
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use, pool.misses) == (3, 3, 0, 1)
    destroy(graph_exec, graph, stream, out)
