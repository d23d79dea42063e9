"""A traced conditional node is one slice over everything it ran, from where its queue reached it.

A WHILE node parks between iterations (one event-loop turn each) and runs again from the top;
the trace used to take the start of its last run as the node's start, so the slice covered the
last iteration only and the queue looked idle before it, and it called the node a marker.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

ITERATIONS = 5
STEP_NS = 4000


@pytest.mark.asyncio
async def test_a_while_node_is_one_slice_over_all_its_iterations(device: ahg.Device) -> None:
    def body(t: ahg.Threads, count: ahg.Ptr[ahg.int32], again: ahg.CondHandle) -> None:
        count[0] += 1
        ahg.set_conditional(again, 1 if count[0] < ITERATIONS else 0)

    step = ahg.Kernel(body, name="step", duration_ns=STEP_NS)
    counter = device.malloc(4)
    stream = device.create_stream()
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    first = graph.add_memset_node(counter, 0, 4)
    _, (loop,) = graph.add_conditional_node(handle, ahg.ConditionalKind.While, deps=[first])
    loop.add_kernel_node(step, 1, 1, (counter, handle))
    graph_exec = graph.instantiate()
    with ahg.tracing() as trace:
        await (await graph_exec.launch(stream))
    assert device.view(counter, np.int32, 1)[0] == ITERATIONS
    (conditional,) = [op for op in trace.ops if op.kind == "conditional"]
    assert conditional.name == "WHILE conditional"
    assert conditional.node is not None
    fill = next(op for op in trace.ops if op.kind == "fill")
    before = [
        op for op in trace.ops if op.queue == conditional.queue and op.index < conditional.index
    ]
    assert conditional.start_ns == max(op.end_ns for op in before) >= fill.end_ns
    assert conditional.duration_ns >= ITERATIONS * STEP_NS
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(counter)
