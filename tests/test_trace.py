"""Timeline traces: the recorded events are the simulated timeline, exactly and reproducibly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device import hooks


def _kernel(name: str, duration_ns: int) -> ahg.Kernel:
    def body(t: ahg.Threads) -> None:
        pass

    return ahg.Kernel(body, name=name, duration_ns=duration_ns)


A, B, C, D = (_kernel(n, d) for n, d in (("a", 100), ("b", 200), ("c", 300), ("d", 50)))
LAUNCH = ahg.CostModel().kernel_launch_ns  # every kernel costs this plus its own duration


def fork_join() -> ahg.Graph:
    """a -> (b, c) -> d: b stays on the launch stream, c runs on a second strand."""
    graph = ahg.Graph()
    a = graph.add_kernel_node(A, 1, 1, ())
    b = graph.add_kernel_node(B, 1, 1, (), deps=[a])
    c = graph.add_kernel_node(C, 1, 1, (), deps=[a])
    graph.add_kernel_node(D, 1, 1, (), deps=[b, c])
    return graph


def kernels(trace: ahg.Trace) -> dict[tuple[int | None, str], ahg.tools.trace.OpRecord]:
    return {(op.launch, op.name): op for op in trace.ops if op.kind == "kernel"}


async def run_fork_join(device: ahg.Device, launches: int = 2) -> ahg.Trace:
    stream = device.create_stream()
    graph = fork_join()
    graph_exec = graph.instantiate(device=device)
    with ahg.tracing() as trace:
        for _ in range(launches):
            await (await graph_exec.launch(stream))
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
    return trace


@pytest.mark.asyncio
async def test_fork_join_ops_match_the_simulated_timeline(device: ahg.Device) -> None:
    stream = device.create_stream()
    graph = fork_join()
    graph_exec = graph.instantiate()
    with ahg.tracing() as trace:
        done = await graph_exec.launch(stream)
        await done
    ops = kernels(trace)
    a, b, c, d = (ops[(0, name)] for name in "abcd")
    assert (a.start_ns, a.end_ns) == (0, LAUNCH + 100)
    assert (b.start_ns, b.end_ns) == (a.end_ns, a.end_ns + LAUNCH + 200)
    assert (c.start_ns, c.end_ns) == (a.end_ns, a.end_ns + LAUNCH + 300)
    assert (d.start_ns, d.end_ns) == (c.end_ns, c.end_ns + LAUNCH + 50)  # c is the later branch
    assert done.end_ns == d.end_ns
    assert a.queue == b.queue == d.queue == stream.queue.index != c.queue
    assert [op.node for op in (a, b, c, d)] == [
        "node 0 Kernel a",
        "node 1 Kernel b",
        "node 2 Kernel c",
        "node 3 Kernel d",
    ]
    assert {op.exec for op in trace.ops} == {0}
    launches = [e for e in trace.enqueues if e.exec is not None]
    assert [(e.name, e.launch, e.time_ns) for e in launches] == [("launch exec 0", 0, 0)]
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_eager_ops_match_their_completions(device: ahg.Device) -> None:
    stream = device.create_stream()
    x = device.malloc(1024)
    host = np.arange(256, dtype=np.float32)
    calls: list[int] = []
    with ahg.tracing() as trace:
        done = [
            await stream.memcpy(x, host),
            await stream.launch_kernel(A, 1, 1, ()),
            await stream.memset(x, 0, 1024),
            await stream.launch_host_func(calls.append, 1),
            await stream.memcpy(host, x),
        ]
        await stream.synchronize()
    assert [(op.kind, op.start_ns, op.end_ns) for op in trace.ops] == [
        (kind, c.start_ns, c.end_ns)
        for kind, c in zip(["copy", "kernel", "fill", "host", "copy"], done, strict=True)
    ]
    assert [e.name for e in trace.enqueues] == [
        "memcpy memcpy HostToDevice 1024B",
        "launch_kernel a",
        "memset memset 1024B",
        "host_func list.append",
        "memcpy memcpy DeviceToHost 1024B",
    ]
    assert trace.flows == []  # one stream, one queue: order needs no signal
    device.free(x)
    stream.destroy()


@pytest.mark.asyncio
async def test_flows_connect_the_op_that_reached_a_signal_to_the_barrier_waiting_for_it(
    device: ahg.Device,
) -> None:
    trace = await run_fork_join(device)
    ops = trace.ops
    edges = {(ops[f.source].name, ops[f.source].launch, ops[f.target].queue) for f in trace.flows}
    targets = {f.target for f in trace.flows}
    assert all(ops[t].kind == "barrier" for t in targets)
    ks = kernels(trace)
    # c waits for a (across strands); the join before d waits for c; launch 1 waits for launch 0.
    assert ("a", 0, ks[(0, "c")].queue) in edges
    assert ("c", 0, ks[(0, "d")].queue) in edges
    assert ("d", 0, ks[(1, "a")].queue) in edges
    for flow in trace.flows:  # a flow never goes back in simulated time
        assert ops[flow.source].end_ns <= ops[flow.target].end_ns


@pytest.mark.asyncio
async def test_an_event_wait_across_streams_is_a_flow(device: ahg.Device) -> None:
    first, second = device.create_stream(), device.create_stream()
    event = device.create_event()
    with ahg.tracing() as trace:
        await first.launch_kernel(B, 1, 1, ())
        await first.record_event(event)
        await second.wait_event(event)
        late = await second.launch_kernel(A, 1, 1, ())
        await device.synchronize()
    (flow,) = trace.flows
    source, target = trace.ops[flow.source], trace.ops[flow.target]
    assert (source.queue, target.queue) == (first.queue.index, second.queue.index)
    assert target.kind == "barrier"
    assert target.end_ns == LAUNCH + 200
    assert late.start_ns == target.end_ns
    event.destroy()
    first.destroy()
    second.destroy()


@pytest.mark.asyncio
async def test_the_same_program_gives_byte_identical_files(tmp_path: Path) -> None:
    paths = []
    for run in range(2):
        ahg.configure_devices(2)
        trace = await run_fork_join(ahg.get_device(1), launches=3)
        paths.append(trace.save(tmp_path / f"run{run}.json"))
    first, second = (p.read_bytes() for p in paths)
    assert first == second
    document = json.loads(first)
    assert document["displayTimeUnit"] == "ns"
    names = {
        (e["pid"], e["tid"], e["args"]["name"])
        for e in document["traceEvents"]
        if e["name"] == "thread_name"
    }
    # Device 1 is pid 2; its host track is tid 1 and queue k is tid k + 2 (never 0: Perfetto
    # takes pid 0 and tid 0 for the idle task).
    assert {(2, 1, "host"), (2, 2, "queue 0"), (2, 5, "queue 3")} <= names
    phases = [e["ph"] for e in document["traceEvents"]]
    assert phases.count("s") == phases.count("f") == len(trace.flows) > 0


@pytest.mark.asyncio
async def test_counters_rise_and_return_to_zero(device: ahg.Device) -> None:
    trace = await run_fork_join(device)
    assert max(c.signal_sets_in_use for c in trace.counters) == 1
    assert max(c.arena_bytes for c in trace.counters) > 0
    last = trace.counters[-1]
    assert (last.signal_sets_in_use, last.arena_bytes, last.memory_bytes) == (0, 0, 0)


@pytest.mark.asyncio
async def test_failed_ops_carry_their_error(device: ahg.Device) -> None:
    @ahg.kernel
    def boom(t: ahg.Threads) -> None:
        raise RuntimeError("boom")

    stream = device.create_stream()
    with ahg.tracing() as trace:
        await stream.launch_kernel(boom, 1, 1, ())
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
    (op,) = trace.ops
    assert op.error is not None
    assert "boom" in op.error
    stream.destroy()


def test_tracing_leaves_no_observer_behind() -> None:
    with ahg.tracing(), ahg.tracing():
        assert hooks.observers is not None
        assert len(hooks.observers) == 2
    assert hooks.observers is None


def test_plan_dot_shows_strands_segments_and_cross_strand_waits() -> None:
    graph = fork_join()
    graph_exec = graph.instantiate()
    dot = graph_exec.plan_dot()
    assert dot.startswith('digraph "plan" {')
    assert "subgraph cluster_strand_0" in dot
    assert "subgraph cluster_strand_1" in dot
    assert 'label="segment 0 (level 0)\\n0: a\\nsignals 1"' in dot
    assert 'seg0 -> seg2 [color="red" style="dashed" label="signal 1"];' in dot
    assert 'seg2 -> seg3 [color="red" style="dashed" label="signal 2"];' in dot
    assert dot == graph_exec.plan_dot()
    graph_exec.destroy()
    graph.destroy()


@pytest.mark.asyncio
async def test_a_legacy_null_stream_wait_is_a_barrier_with_a_flow_from_the_work_it_waited_for(
    device: ahg.Device,
) -> None:
    blocking = device.create_stream()
    null = device.null_stream
    with ahg.tracing() as trace:
        first = await null.launch_kernel(B, 1, 1, ())
        late = await blocking.launch_kernel(A, 1, 1, ())  # waits for the null stream's work
        await device.synchronize()
    (flow,) = trace.flows
    source, target = trace.ops[flow.source], trace.ops[flow.target]
    assert (source.name, target.kind) == ("b", "barrier")
    assert target.queue == blocking.queue.index
    assert (target.end_ns, target.node) == (first.end_ns, None)
    assert late.start_ns == target.end_ns == LAUNCH + 200
    blocking.destroy()
