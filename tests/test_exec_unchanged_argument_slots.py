"""A change that leaves a kernel node's argument bytes as they are keeps its slot.

With a launch in flight every change takes a new argument slot (the launch reads the old one).
``set_node_enabled`` re-applies the node's own parameters, a new priority keeps the arguments,
and a whole-graph update hands every node over, changed or not: each took a slot for bytes
that had not changed, held until the launch completed, so a control loop toggling nodes under
a long launch (a WHILE node) grew the arena without bound, and an update changing one node of
a thousand took a thousand slots.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from fakes import HeldKernel


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@pytest.mark.asyncio
@pytest.mark.parametrize("strict_flush", [False, True])
async def test_toggles_under_a_launch_in_flight_take_no_slot(
    device: ahg.Device, strict_flush: bool
) -> None:
    out = device.malloc(8)
    held = HeldKernel("gate")
    graph = ahg.Graph()
    gate = graph.add_kernel_node(held.kernel, 1, 1)
    node = graph.add_kernel_node(put, 1, 1, (7, out), deps=[gate])
    graph_exec = graph.instantiate(strict_flush=strict_flush)
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    await held.started.wait()  # launch 1 holds the slots it was enqueued with
    before = graph_exec.statistics().arena
    for i in range(51):  # off, on, ..., off
        graph_exec.set_node_enabled(node, i % 2)
    assert not graph_exec.node_enabled(node)
    assert graph_exec.statistics().arena == before
    held.release()
    await first
    assert int(device.view(out, np.int64, 1)[0]) == 7  # launch 1 ran the node enabled
    device.view(out, np.int64, 1)[0] = 0
    held.release()
    await (await graph_exec.launch(stream))
    assert int(device.view(out, np.int64, 1)[0]) == 0  # launch 2: disabled
    graph_exec.set_node_enabled(node, True)
    held.release()
    await (await graph_exec.launch(stream))
    assert int(device.view(out, np.int64, 1)[0]) == 7
    assert graph_exec.statistics().arena.unflushed == 0
    graph_exec.destroy()
    stream.destroy()
    graph.destroy()
    device.free(out)


@pytest.mark.asyncio
async def test_an_update_under_a_launch_in_flight_takes_slots_for_changed_nodes_only(
    device: ahg.Device,
) -> None:
    out = device.malloc(8 * 100)
    held = HeldKernel("gate")
    graph = ahg.Graph()
    gate = graph.add_kernel_node(held.kernel, 1, 1)
    nodes = [graph.add_kernel_node(put, 1, 1, (i, out + 8 * i), deps=[gate]) for i in range(100)]
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    first = await graph_exec.launch(stream)
    await held.started.wait()
    before = graph_exec.statistics().arena
    new = graph.clone()
    new.find_in_clone(nodes[42]).set_kernel_params(put, 1, 1, (1000, out + 8 * 42))
    assert graph_exec.update(new).ok
    graph_exec.set_kernel_node_attribute(nodes[7], ahg.KernelNodeAttribute.Priority, -1)
    after = graph_exec.statistics().arena
    assert after.allocations - before.allocations == 1  # the one changed node's
    held.release()
    await first
    assert int(device.view(out, np.int64, 100)[42]) == 42  # launch 1: the old arguments
    held.release()
    await (await graph_exec.launch(stream))
    values = [int(v) for v in device.view(out, np.int64, 100)]
    assert values == [1000 if i == 42 else i for i in range(100)]
    graph_exec.destroy()
    stream.destroy()
    new.destroy()
    graph.destroy()
    device.free(out)
