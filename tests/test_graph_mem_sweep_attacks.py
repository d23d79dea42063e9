"""Attacks on graph memory nodes and the graph memory pool that earlier tests missed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
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


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param(lambda ptr: (0, float(ptr.address)), id="float-address"),
        pytest.param(lambda ptr: (0, np.int64(ptr.address)), id="numpy-address"),
        pytest.param(lambda ptr: (np.int64(0), ptr.address), id="numpy-device"),
    ],
)
def test_a_hand_made_pointer_with_non_int_fields_claims_no_allocation(
    device: ahg.Device, fields: Callable[[ahg.DevicePtr], tuple[Any, Any]]
) -> None:
    """Only int fields name an allocation, as for ``device.free``: a hand-made pointer whose
    address is a float equal to an alloc node's base claimed the allocation for a free node,
    and the real free node was then refused ("already has a memory-free node")."""
    with ahg.Graph() as graph, ahg.Graph() as other:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        fake = ahg.DevicePtr(*fields(ptr))
        with pytest.raises(ahg.InvalidValue, match="not allocated by a graph memory-alloc node"):
            other.add_mem_free_node(fake)
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            device.free(fake)  # the device's own rule, which the graph's now follows
        assert not other.nodes()
        graph.add_mem_free_node(ptr)  # the allocation is still free-able
