"""Enabling or disabling a kernel node keeps its argument slot, launches in flight or not.

``set_node_enabled`` re-applies the node's own parameters. With a launch in flight every
change takes a new argument slot (the launch reads the old one), so each toggle took one for
bytes that had not changed, and held it until the launch completed: a control loop toggling
nodes under a long launch (a WHILE node) grew the arena without bound.
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
