"""Every exported statistics record has a public way to get one.

``GraphPoolStatistics`` (a device's graph memory pool), ``RegistryStatistics`` (each handle
registry) and ``ThreadIdsStatistics`` (the cache behind ``Threads.ids``) were exported, but only
internal objects made them: ``device.statistics().graph_pool``,
``ahipgraph.testing.registry_statistics()`` and ``ahipgraph.testing.thread_ids_statistics()``
give them to tests and users.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.testing import registry_statistics, thread_ids_statistics


@ahg.kernel
def noop(t: ahg.Threads) -> None:
    """Reads its thread ids, so the ids cache is used."""
    assert t.ids.shape == (t.count,)


@pytest.mark.asyncio
async def test_a_devices_statistics_carry_its_graph_pool(device: ahg.Device) -> None:
    assert device.statistics().graph_pool == ahg.GraphPoolStatistics(0, 0, 0, 0, 0, 0, 0)
    stream = device.create_stream()
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(4096)
    graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    pool = device.statistics().graph_pool
    assert isinstance(pool, ahg.GraphPoolStatistics)
    assert pool.used == 0  # freed by its graph
    assert pool.used_high == device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemHigh) > 0
    assert pool.reserved == device.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent)
    assert pool.cached == device.statistics().memory.graph_pool_cached
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.graph_mem_trim()
    assert device.statistics().graph_pool.cached == 0


def test_registry_statistics_name_every_kind_of_handle(device: ahg.Device) -> None:
    before = registry_statistics()
    assert {"graph", "graph node", "graph exec", "stream", "event", "user object"} <= set(before)
    assert all(isinstance(s, ahg.RegistryStatistics) for s in before.values())
    graph = ahg.Graph()
    graph.add_empty_node()
    during = registry_statistics()
    assert during["graph"].live == before["graph"].live + 1
    assert during["graph node"].live == before["graph node"].live + 1
    assert during["graph"].registered_total == before["graph"].registered_total + 1
    graph.destroy()
    after = registry_statistics()
    assert after["graph"].live == before["graph"].live
    assert after["graph node"].live == before["graph node"].live


@pytest.mark.asyncio
async def test_thread_ids_statistics_show_the_bounded_cache(device: ahg.Device) -> None:
    stream = device.create_stream()
    start = thread_ids_statistics()
    assert isinstance(start, ahg.ThreadIdsStatistics)
    await stream.launch_kernel(noop, 3, 7, ())  # 21 threads: a size nothing else uses
    await stream.synchronize()
    now = thread_ids_statistics()
    assert 21 in now.counts
    assert now.hits + now.misses > start.hits + start.misses
    assert now.entries <= now.max_entries
    assert now.nbytes <= now.max_bytes
    stream.destroy()
