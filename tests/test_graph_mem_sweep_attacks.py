"""Attacks on graph memory nodes and the graph memory pool that earlier tests missed."""

from __future__ import annotations

import pytest

import ahipgraph as ahg

M = ahg.GraphMemAttribute
KIB = 1024


@pytest.mark.asyncio
async def test_a_withdrawn_free_node_leaves_an_executables_orphan_free_able(
    device: ahg.Device,
) -> None:
    """The allocating graph is gone, its executable lives: a graph holding a free node of the
    allocation, destroyed, withdraws its claim and must leave the allocation as it found it,
    free-able by another free node (the executable still allocates it at every launch)."""
    before = device.memory_info()
    with device.create_stream() as stream:
        graph = ahg.Graph()
        ptr = graph.add_mem_alloc_node(KIB).params.ptr  # never freed by the graph
        graph_exec = graph.instantiate()
        graph.destroy()  # the range is now an orphan the executable owns
        await (await graph_exec.launch(stream))
        with ahg.Graph() as withdrawn:
            withdrawn.add_mem_free_node(ptr)
        with ahg.Graph() as freeing:
            freeing.add_mem_free_node(ptr)  # was InvalidValue: the orphan had been forgotten
            with freeing.instantiate() as freeing_exec:
                await (await freeing_exec.launch(stream))
        assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
        await (await graph_exec.launch(stream))  # freed: launchable again
        await stream.free_async(ptr)
        await stream.synchronize()
        graph_exec.destroy()
        with ahg.Graph() as late, pytest.raises(ahg.InvalidValue):
            late.add_mem_free_node(ptr)  # given back with its executable: nothing to free
    assert device.graph_mem_trim() == KIB
    assert device.memory_info() == before
    assert [device.graph_mem_attribute(a) for a in M] == [0, KIB, 0, KIB]
