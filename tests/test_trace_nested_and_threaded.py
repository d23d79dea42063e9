"""``ahg.tracing()`` nested in itself, and recording devices that run on two threads at once."""

from __future__ import annotations

import asyncio
import itertools

import pytest

import ahipgraph as ahg
from ahipgraph.testing import run_together
from test_trace import fork_join


@pytest.mark.asyncio
async def test_a_nested_block_records_graph_launches_as_launches(device: ahg.Device) -> None:
    """The outer block wraps each packet's callback; the inner one must still see which
    launch a packet belongs to (it once recorded every launch as stream calls)."""
    graph = fork_join()
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    with ahg.tracing() as outer, ahg.tracing() as inner:
        for _ in range(2):
            await (await graph_exec.launch(stream))
    for trace in (outer, inner):
        assert [e.name for e in trace.enqueues] == ["launch exec 0", "launch exec 0"]
        assert [(e.exec, e.launch) for e in trace.enqueues] == [(0, 0), (0, 1)]
        kernels = [op for op in trace.ops if op.kind == "kernel"]
        assert len(kernels) == 8
        assert all(op.exec == 0 and op.node is not None for op in kernels)
        assert sorted({op.launch for op in kernels}) == [0, 1]
    assert inner.ops == outer.ops
    assert inner.flows == outer.flows
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_blocks_nested_the_other_way_round_record_alike(device: ahg.Device) -> None:
    """Two blocks left in the order they were entered (not nested) record the same work."""
    graph = fork_join()
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    first_block, second_block = ahg.tracing(), ahg.tracing()
    first = first_block.__enter__()
    second = second_block.__enter__()
    await (await graph_exec.launch(stream))
    first_block.__exit__(None, None, None)
    second_block.__exit__(None, None, None)
    assert first.ops == second.ops
    assert [e.name for e in second.enqueues] == ["launch exec 0"]
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.usefixtures("fast_switching")
def test_two_loops_on_two_threads_are_recorded_consistently() -> None:
    """Each thread's loop launches on its own device under one block: every record keeps its
    index, flows stay on their device, and each launch is counted once."""
    launches = 30
    ahg.configure_devices(2)
    graphs = [fork_join() for _ in range(2)]
    execs = [graph.instantiate(device=ahg.get_device(k)) for k, graph in enumerate(graphs)]

    def replay(ordinal: int) -> None:
        async def main() -> None:
            stream = ahg.get_device(ordinal).create_stream()
            for _ in range(launches):
                await execs[ordinal].launch(stream)
            await stream.synchronize()
            stream.destroy()

        asyncio.run(main())

    with ahg.tracing() as trace:
        errors = run_together(lambda: replay(0), lambda: replay(1))
    assert errors == []
    ops = trace.ops
    assert [op.index for op in ops] == list(range(len(ops)))
    assert len([op for op in ops if op.kind == "kernel"]) == 2 * 4 * launches
    for flow in trace.flows:
        assert ops[flow.source].device == ops[flow.target].device
        assert ops[flow.source].end_ns <= ops[flow.target].end_ns
    for ordinal in range(2):
        numbers = [e.launch for e in trace.enqueues if e.device == ordinal and e.exec is not None]
        assert sorted(numbers) == list(range(launches))
        queues: dict[int, list[ahg.tools.trace.OpRecord]] = {}
        for op in ops:
            if op.device == ordinal:
                queues.setdefault(op.queue, []).append(op)
        for recorded in queues.values():  # a queue runs one op at a time, in order
            for earlier, later in itertools.pairwise(recorded):
                assert earlier.end_ns <= later.start_ns
    for graph_exec, graph in zip(execs, graphs, strict=True):
        graph_exec.destroy()
        graph.destroy()
