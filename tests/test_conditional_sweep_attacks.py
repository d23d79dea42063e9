"""Attacks on conditional nodes that the other conditional tests miss."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot
from cleanup import destroy
from conditional_kernels import count_to

K = ahg.ConditionalKind


@pytest.mark.asyncio
async def test_destroying_the_executable_does_not_fail_a_while_loop_on_its_last_iteration(
    device: ahg.Device,
) -> None:
    # exec.destroy() stops a WHILE node at its *next* iteration; a body that set the handle to
    # 0 has none, so the launch did all its work and must not fail (HIP defers the destroy to
    # the end of the launch).
    x = device.malloc(4)
    device.view(x, np.int32, 1)[:] = 0
    baseline = leak_snapshot()
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(count_to, 1, 1, (1, x, handle))  # one iteration, then the handle is 0
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    done = await graph_exec.launch(stream)
    graph_exec.destroy()  # before the device ran the launch: it still completes
    await done
    await stream.synchronize()
    assert int(device.view(x, np.int32, 1)[0]) == 1
    graph.destroy()
    stream.destroy()
    assert leak_report(baseline) is None
    destroy(x)
