"""Memory-alloc nodes: a range reserved after the graph was instantiated.

A graph gave its alloc nodes' address ranges back when destroyed only if it had never been
instantiated: once an executable was made, every range was taken to be the executable's. An
alloc node added to a graph instantiated before it held one (allowed: HIP refuses only a
second instantiate of a graph that has memory nodes), or added after the graph's executable
was made, was owned by no one, and its range stayed reserved for good. Now the executable
takes exactly the ranges it copied, and the graph gives back the rest.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg


def test_an_alloc_node_added_after_an_instantiate_without_one_is_given_back(
    device: ahg.Device,
) -> None:
    baseline = device.memory.statistics().reservations
    graph = ahg.Graph()
    graph.add_empty_node()
    graph.instantiate().destroy()
    graph.add_mem_alloc_node(64)
    assert device.memory.statistics().reservations == baseline + 1
    with pytest.raises(ahg.NotSupported):
        graph.instantiate()  # HIP's rule: instantiated before, and now has a memory node
    graph.destroy()
    assert device.memory.statistics().reservations == baseline


@pytest.mark.asyncio
async def test_an_alloc_node_added_after_the_executable_was_made_is_the_graphs(
    device: ahg.Device,
) -> None:
    baseline = device.memory.statistics().reservations
    graph = ahg.Graph()
    first = graph.add_mem_alloc_node(64)
    graph.add_mem_free_node(first.params.ptr, deps=[first])
    graph_exec = graph.instantiate()
    late = graph.add_mem_alloc_node(128)  # not in the executable's copy
    assert device.memory.statistics().reservations == baseline + 2
    stream = device.create_stream()
    await (await graph_exec.launch(stream))  # the executable still runs its own range
    graph.destroy()  # gives back the late range; the executable keeps its own
    assert device.memory.statistics().reservations == baseline + 1
    with ahg.Graph() as other, pytest.raises(ahg.InvalidValue):  # the late range is gone
        other.add_mem_free_node(late.params.ptr)
    await (await graph_exec.launch(stream))
    graph_exec.destroy()
    stream.destroy()
    device.graph_mem_trim()
    assert device.memory.statistics().reservations == baseline
