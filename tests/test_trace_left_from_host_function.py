"""``ahg.tracing()``: the block left from inside device work.

A packet being run reports each of its ops to the observers installed when it started, so
when a host function left the ``tracing()`` block, the rest of that packet (the nodes after
the host node) was still appended to the trace that the block had declared complete: the
trace grew after ``__exit__``, and a copy saved at exit differed from one saved later. The
recorder ignores what it is told once it is closed.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
async def test_a_trace_left_from_a_host_function_records_nothing_after_that(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    buffer = device.malloc(64)
    block = ahg.tracing()
    trace = block.__enter__()
    at_exit: list[str] = []

    def leave() -> None:
        if not at_exit:  # the first run leaves the block; a replay finds it left
            block.__exit__(None, None, None)
            at_exit.append(trace.dumps())

    graph = ahg.Graph()
    first = graph.add_memset_node(buffer, 1, 8)
    host = graph.add_host_node(leave, deps=[first])
    graph.add_memset_node(buffer, 2, 8, deps=[host])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert at_exit == [trace.dumps()]
    assert [op.kind for op in trace.ops if op.kind != "barrier"] == ["fill"]  # not the second
    await (await graph_exec.launch(stream))
    assert at_exit == [trace.dumps()]
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(buffer)
