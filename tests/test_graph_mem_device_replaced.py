"""Graph memory of a device that ``configure_devices`` replaced.

A new device's address space starts where the old one's did, so the old device's graph
allocations share addresses with the new device's. What an executable of the old device gives
back when it is destroyed goes to the memory it allocated in, never to whatever memory its
ordinal names by then: the new device's graphs keep their reservations and pool figures.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

M = ahg.GraphMemAttribute
KIB = 1024


@ahg.kernel
def fill(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


@pytest.mark.asyncio
async def test_an_old_devices_executable_destroyed_late_leaves_the_new_devices_memory_alone(
    device: ahg.Device,
) -> None:
    old_graph = ahg.Graph()
    old_ptr = old_graph.add_mem_alloc_node(KIB).params.ptr
    old_exec = old_graph.instantiate()
    await (await old_exec.launch())  # its allocation stays live on the old device
    (new,) = ahg.configure_devices(1)
    with ahg.Graph() as graph:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        assert ptr == old_ptr  # the same address, in another memory
        graph.add_kernel_node(fill, 1, 1, (7, ptr), deps=[graph.nodes()[0]])
        with graph.instantiate() as graph_exec:
            reserved = new.memory.statistics()
            old_exec.destroy()
            old_graph.destroy()
            assert new.memory.statistics() == reserved  # the new reservation is still there
            await (await graph_exec.launch())
            assert new.view(ptr, np.int64, 1)[0] == 7
            with ahg.Graph() as freer:
                freer.add_mem_free_node(ptr)  # still a graph allocation a free node may name
                with freer.instantiate() as freer_exec:
                    await (await freer_exec.launch())
            assert new.graph_mem_attribute(M.UsedMemCurrent) == 0
    assert new.graph_mem_trim() == KIB
    assert new.memory.statistics().reservations == 0
    assert new.memory.bytes_in_use == 0
