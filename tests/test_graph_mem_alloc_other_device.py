"""Memory-alloc nodes for another device than the executable's.

``add_mem_alloc_node(n, device=1)`` reserves addresses on device 1 (HIP's pool location),
but the executable committed, freed, checked and unreserved them on its own device: a
launch on device 0 failed with "not a reservation of device 0", an unfreed block was never
seen by the relaunch check, and destroying the executable left device 1's range reserved
for good. Each block now lives on the device its node names.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg

USED_HIGH = ahg.GraphMemAttribute.UsedMemHigh
USED = ahg.GraphMemAttribute.UsedMemCurrent


@pytest.mark.asyncio
async def test_an_alloc_node_for_another_device_runs_and_leaves_nothing_behind() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64, device=1)
    graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    graph_exec = graph.instantiate(device=d0)
    stream = d0.create_stream()
    for _ in range(2):
        await (await graph_exec.launch(stream))
    assert d1.graph_mem_attribute(USED_HIGH) == 64  # committed on device 1
    assert d1.graph_mem_attribute(USED) == 0  # and freed there
    assert d0.graph_mem_attribute(USED_HIGH) == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    d1.graph_mem_trim()
    assert d0.memory.statistics().reservations == 0
    assert d1.memory.statistics().reservations == 0


@pytest.mark.asyncio
async def test_an_unfreed_block_on_another_device_is_seen_by_the_relaunch_check() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    graph = ahg.Graph()
    ptr = graph.add_mem_alloc_node(64, device=1).params.ptr
    graph_exec = graph.instantiate(device=d0)
    stream = d0.create_stream()
    await (await graph_exec.launch(stream))
    assert d1.graph_mem_attribute(USED) == 64
    with pytest.raises(ahg.InvalidValue, match="never freed"):
        await graph_exec.launch(stream)
    frees = d1.create_stream()  # the block is device 1's: freed on a stream of device 1
    await frees.free_async(ptr)
    await frees.synchronize()
    await (await graph_exec.launch(stream))  # freed: the next launch may allocate again
    await frees.free_async(ptr)
    await frees.synchronize()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    frees.destroy()
    d1.graph_mem_trim()
    assert d1.memory.statistics().reservations == 0
