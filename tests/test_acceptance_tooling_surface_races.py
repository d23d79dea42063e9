"""Acceptance checks written from the user's side, one promise each, public API only.

Grouped by topic:

* timeline traces and the plan's DOT view;
* the testing kit: fresh devices, leak reports, scoped faults, the plugin's registration;
* the stress harness and the ``ahipgraph`` command;
* the rest of HIP's graph surface: kernel-node attributes, the graph memory pool, generic
  nodes, pitched and symbol copies, the current device, peer access, stream memory operations;
* the missing-dependency race detector: dynamic checks, reports, annotations, static checks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
import warnings
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import cli, testing
from under_trio import NOT_TRIO, pretend_trio

KA = ahg.KernelNodeAttribute
GM = ahg.GraphMemAttribute
MIB = 1 << 20


def _timed(name: str, duration_ns: int = 1000) -> ahg.Kernel:
    def body(t: ahg.Threads) -> None:
        pass

    return ahg.Kernel(body, name=name, duration_ns=duration_ns)


@ahg.kernel
def noop(t: ahg.Threads) -> None:
    pass


@ahg.kernel
def write_all(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[:] = 1


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[:1] += 1


@ahg.kernel
def copy_first(t: ahg.Threads, x: ahg.ConstPtr[ahg.int32], y: ahg.Ptr[ahg.int32]) -> None:
    y[:1] = x[:1]


@ahg.kernel
def write_const(t: ahg.Threads, x: ahg.ConstPtr[ahg.int32]) -> None:
    x[:1] = 5


@ahg.kernel
def atomic_add(t: ahg.Threads, x: ahg.AtomicPtr[ahg.int32]) -> None:
    x[:1] += 1


@ahg.kernel(extents={"x": "n"})
def write_n(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[:n] = 2


@ahg.kernel(extents={"x": "n"})
def write_past_n(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[n] = 2  # one past its declared extent


# --- timeline traces and the plan's DOT view ----------------------------------------------


async def _traced_fork_join(device: ahg.Device) -> ahg.Trace:
    """A fork-join graph (A -> B, C -> D) and some eager work, everything destroyed inside
    the traced block."""
    a, b, c, d = (_timed(n, ns) for n, ns in (("A", 1000), ("B", 2000), ("C", 3000), ("D", 500)))
    with ahg.tracing() as trace:
        stream = device.create_stream()
        graph = ahg.Graph()
        na = graph.add_kernel_node(a, 1, 1, ())
        nb = graph.add_kernel_node(b, 1, 1, (), deps=[na])
        nc = graph.add_kernel_node(c, 1, 1, (), deps=[na])
        graph.add_kernel_node(d, 1, 1, (), deps=[nb, nc])
        graph_exec = graph.instantiate()
        await (await graph_exec.launch(stream))
        ptr = device.malloc(256)
        await stream.memset(ptr, 1, 256)
        await stream.synchronize()
        device.free(ptr)
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
    return trace


@pytest.mark.asyncio
async def test_trace_of_a_fork_join_follows_its_edges_exactly(device: ahg.Device) -> None:
    trace = await _traced_fork_join(device)
    kernels = {op.name: op for op in trace.ops if op.kind == "kernel"}
    a, b, c, d = (kernels[n] for n in "ABCD")
    assert b.start_ns >= a.end_ns
    assert c.start_ns >= a.end_ns
    assert b.queue != c.queue  # the two branches run in parallel
    assert d.start_ns >= max(b.end_ns, c.end_ns)
    assert (b.end_ns - b.start_ns) - (a.end_ns - a.start_ns) == 1000  # durations as costed
    assert all(op.node is not None for op in (a, b, c, d))  # each names its graph node
    assert len({(op.exec, op.launch) for op in (a, b, c, d)}) == 1
    events = json.loads(trace.dumps())["traceEvents"]
    slices = {e["name"]: e for e in events if e["ph"] == "X" and e["name"] in "ABCD"}
    for name, op in zip("ABCD", (a, b, c, d), strict=True):
        assert int(slices[name]["ts"] * 1000.0) == op.start_ns
        assert int(slices[name]["dur"] * 1000.0) == op.end_ns - op.start_ns


@pytest.mark.asyncio
async def test_trace_of_eager_work_matches_elapsed_time(device: ahg.Device) -> None:
    stream = device.create_stream()
    start, end = device.create_event(), device.create_event()
    kernel = _timed("eager", 4000)
    with ahg.tracing() as trace:
        await stream.record_event(start)
        await stream.launch_kernel(kernel, 1, 1, ())
        await stream.record_event(end)
        await stream.synchronize()
    (op,) = [op for op in trace.ops if op.name == "eager"]
    assert ahg.elapsed_time(start, end) * 1e6 == pytest.approx(op.end_ns - op.start_ns)
    start.destroy()
    end.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_trace_flows_counters_and_tracks(device: ahg.Device) -> None:
    trace = await _traced_fork_join(device)
    events = json.loads(trace.dumps())["traceEvents"]
    starts = {e["id"] for e in events if e["ph"] == "s"}
    finishes = {e["id"] for e in events if e["ph"] == "f"}
    assert starts
    assert starts == finishes
    by_name = {op.index: op for op in trace.ops}
    a = next(op for op in trace.ops if op.name == "A")
    assert any(by_name[flow.source] is a for flow in trace.flows)  # the fork leaves A
    last: dict[str, float] = {}
    for e in events:
        if e["ph"] == "C":
            last[e["name"]] = e["args"]["value"]
    assert set(last) == {"signal sets in use", "arena bytes", "device memory in use"}
    assert set(last.values()) == {0}  # back to zero once everything is destroyed
    names = [e["args"]["name"] for e in events if e["name"] in ("process_name", "thread_name")]
    assert any(n.startswith("device 0") for n in names)
    assert "host" in names
    assert any(n.startswith("queue ") for n in names)
    assert trace.enqueues  # host enqueues are recorded


@pytest.mark.asyncio
async def test_same_program_gives_a_byte_identical_file(tmp_path: Path) -> None:
    files = []
    for run in range(2):
        with testing.fresh_devices(1) as (device,):
            trace = await _traced_fork_join(device)
        path = tmp_path / f"run{run}.json"
        trace.save(path)
        files.append(path.read_bytes())
    assert files[0] == files[1]


@pytest.mark.asyncio
async def test_trace_has_a_process_per_device() -> None:
    with testing.fresh_devices(2) as (d0, d1):
        s0, s1 = d0.create_stream(), d1.create_stream()
        with ahg.tracing() as trace:
            await s0.launch_kernel(noop, 1, 1, ())
            await s1.launch_kernel(noop, 1, 1, ())
            await d0.synchronize()
            await d1.synchronize()
        s0.destroy()
        s1.destroy()
    events = json.loads(trace.dumps())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sum(name.startswith("device ") for name in processes.values()) == 2


def test_exec_plan_dot_shows_segments_strands_and_waits(device: ahg.Device) -> None:
    graph = ahg.Graph()
    root = graph.add_kernel_node(noop, 1, 1, ())
    left = graph.add_kernel_node(noop, 1, 1, (), deps=[root])
    right = graph.add_kernel_node(noop, 1, 1, (), deps=[root])
    graph.add_kernel_node(noop, 1, 1, (), deps=[left, right])
    graph_exec = graph.instantiate()
    dot = graph_exec.plan_dot()
    assert dot.startswith("digraph")
    assert dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_strand_") == 2  # two parallel strands
    assert "seg3" in dot  # one box per segment
    assert dot.count('style="dashed" label="signal') == 2  # the cross-strand waits
    graph_exec.destroy()
    graph.destroy()


# --- the testing kit ----------------------------------------------------------------------


def test_plugin_and_console_script_are_registered() -> None:
    entry_points = importlib.metadata.entry_points()
    (plugin,) = [ep for ep in entry_points.select(group="pytest11") if ep.name == "ahipgraph"]
    assert plugin.value == "ahipgraph.testing.plugin"
    (script,) = [
        ep for ep in entry_points.select(group="console_scripts") if ep.name == "ahipgraph"
    ]
    assert script.value == "ahipgraph.cli:main"


def test_plugin_provides_fixtures_only() -> None:
    from ahipgraph.testing import plugin

    hooks = [name for name in vars(plugin) if name.startswith("pytest_")]
    assert hooks == []
    fixtures = {"ahg_device", "ahg_devices", "ahg_race_check"}
    for name in fixtures:
        marker = getattr(plugin, name)
        assert "autouse=True" not in repr(getattr(marker, "_fixture_function_marker", ""))


def test_fresh_devices_reports_what_a_block_left_alive() -> None:
    block = testing.fresh_devices(1)
    (device,) = block.__enter__()
    stream = device.create_stream()
    device.malloc(64)
    with pytest.raises(testing.LeakError) as caught:
        block.__exit__(None, None, None)
    report = str(caught.value)
    assert "stream" in report
    assert "64 bytes" in report
    stream.destroy()


@pytest.mark.asyncio
async def test_a_block_left_with_failing_work_does_not_reach_the_next() -> None:
    with testing.fresh_devices(1, check=False) as (device,):
        stream = device.create_stream()
        with testing.fail_kernels(1):
            await stream.launch_kernel(noop, 1, 1, ())
        stream.destroy()  # its failing work is still in flight when the block ends
    with testing.fresh_devices(1) as (device,):
        await device.synchronize()  # not the first block's LaunchFailure


def test_device_factory_makes_devices_with_chosen_properties(
    ahg_devices: testing.DeviceFactory,
) -> None:
    small = ahg.DeviceProperties(memory_bytes=4 * MIB, hardware_queues=2)
    devices = ahg_devices(2, properties=small)
    assert [d.memory_info().total for d in devices] == [4 * MIB, 4 * MIB]
    assert ahg.device_count() == 2


def test_leak_report_names_what_is_left_from_statistics(device: ahg.Device) -> None:
    baseline = testing.snapshot()
    ptr = device.malloc(4096)
    report = testing.leak_report(baseline)
    assert report is not None
    assert "4096" in report
    device.free(ptr)
    assert testing.leak_report(baseline) is None


@pytest.mark.asyncio
async def test_fail_kernels_by_name_then_back_at_baseline(device: ahg.Device) -> None:
    stream = device.create_stream()
    target, other = _timed("target"), _timed("other")
    baseline = testing.snapshot()
    with testing.fail_kernels(1, name="target") as fault:
        await stream.launch_kernel(other, 1, 1, ())
        await stream.synchronize()
        failed = await stream.launch_kernel(target, 1, 1, ())
        with pytest.raises(ahg.LaunchFailure):
            await failed
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
    assert fault.hits == 1
    await stream.launch_kernel(target, 1, 1, ())
    await stream.synchronize()
    assert testing.leak_report(baseline) is None
    stream.destroy()


@pytest.mark.asyncio
async def test_fail_allocations_covers_malloc_async_and_graph_allocations(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    baseline = testing.snapshot()
    with testing.fail_allocations(1) as fault, pytest.raises(ahg.OutOfMemory):
        await stream.malloc_async(64)
    assert fault.hits == 1
    graph = ahg.Graph()
    graph.add_mem_alloc_node(64)
    graph_exec = graph.instantiate()
    with testing.fail_allocations(1) as fault, pytest.raises(ahg.OutOfMemory):
        await (await graph_exec.launch(stream))
    assert fault.hits == 1
    with pytest.raises(ahg.OutOfMemory):
        await stream.synchronize()  # the stream's error, seen once
    graph_exec.destroy()
    graph.destroy()
    device.graph_mem_trim()
    assert testing.leak_report(baseline) is None
    stream.destroy()


@pytest.mark.asyncio
async def test_a_hung_kernel_ends_when_cancelled(device: ahg.Device) -> None:
    stream = device.create_stream()
    with testing.hang_kernels(1) as hang:
        stuck = await stream.launch_kernel(noop, 1, 1, ())
        await hang.started.wait()
        assert hang.hanging == 1
        assert not stream.query()
        assert hang.cancel() == 1
        with pytest.raises(ahg.LaunchFailure):
            await stuck
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    await stream.launch_kernel(noop, 1, 1, ())
    await stream.synchronize()
    stream.destroy()


@pytest.mark.asyncio
async def test_exhausted_signal_sets_refuse_nowait_and_come_back(device: ahg.Device) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(noop, 1, 1, ())
    graph_exec = graph.instantiate()
    before = graph_exec.statistics().signal_pool
    with testing.exhaust_signal_sets(graph_exec):
        assert graph_exec.statistics().signal_pool.free == 0
        with pytest.raises(ahg.NotReady):
            graph_exec.launch_nowait(stream)
    assert graph_exec.statistics().signal_pool.free == before.free
    await (await graph_exec.launch(stream))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_held_kernel_holds_its_queue_until_released(device: ahg.Device) -> None:
    stream = device.create_stream()
    held = testing.HeldKernel()
    first = await stream.launch_kernel(held.kernel, 1, 1, ())
    after = await stream.launch_kernel(noop, 1, 1, ())
    await held.started.wait()
    await testing.loop_turns()
    assert not first.done()
    assert not after.done()
    held.release()
    await after
    stream.destroy()


TRIO_CALLS: dict[str, Callable[[ahg.Stream, ahg.Event, ahg.GraphExec], Coroutine[Any, Any, object]]]
TRIO_CALLS = {
    "wait_event": lambda stream, event, graph_exec: stream.wait_event(event),
    "upload": lambda stream, event, graph_exec: graph_exec.upload(stream),
    "empty launch": lambda stream, event, graph_exec: graph_exec.launch(stream),
}


@pytest.fixture
def idle_handles(device: ahg.Device) -> Iterator[tuple[ahg.Stream, ahg.Event, ahg.GraphExec]]:
    """A stream, an event never recorded and the executable of an empty graph: what the
    calls above are given needs no loop."""
    stream, event, graph = device.create_stream(), device.create_event(), ahg.Graph()
    graph_exec = graph.instantiate()
    yield stream, event, graph_exec
    graph_exec.destroy()
    graph.destroy()
    event.destroy()
    stream.destroy()


@pytest.mark.parametrize("call", list(TRIO_CALLS))
def test_under_trio_a_call_with_nothing_to_wait_for_still_names_trio(
    call: str,
    idle_handles: tuple[ahg.Stream, ahg.Event, ahg.GraphExec],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ahipgraph runs on asyncio or uvloop: a trio task hears so at once, not at a later call
    that happens to need the loop. With no loop at all, the call still just returns."""
    with monkeypatch.context() as patch:
        pretend_trio(patch)
        coroutine = TRIO_CALLS[call](*idle_handles)
        try:
            with pytest.raises(RuntimeError, match=NOT_TRIO):
                coroutine.send(None)
        finally:
            coroutine.close()
    with pytest.raises(StopIteration):
        TRIO_CALLS[call](*idle_handles).send(None)


def test_under_trio_a_capture_block_is_refused_before_it_begins(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = device.create_stream()
    with monkeypatch.context() as patch:
        pretend_trio(patch)
        entering = stream.capture().__aenter__()
        try:
            with pytest.raises(RuntimeError, match=NOT_TRIO):
                entering.send(None)
        finally:
            entering.close()
    assert stream.is_capturing() == ahg.CaptureStatus.NONE
    stream.destroy()


# --- the stress harness and the command ---------------------------------------------------


def test_stress_with_a_seed_and_no_threads_is_reproducible() -> None:
    first = testing.stress(seed=7, ops=60, tasks=3, threads=0)
    second = testing.stress(seed=7, ops=60, tasks=3, threads=0)
    assert first.ops >= 60
    assert first.checks > 0
    keep = ("seed", "ops", "checks", "cycles", "launches", "faults", "by_worker")
    assert [getattr(first, k) for k in keep] == [getattr(second, k) for k in keep]


def test_stress_takes_user_graph_builders() -> None:
    made: list[int] = []

    def builder(rng: np.random.Generator, buffer: ahg.DevicePtr) -> ahg.Graph:
        graph = ahg.Graph()
        graph.add_memset_node(buffer, 0, 4 * testing.CELLS)
        made.append(1)
        return graph

    report = testing.stress([builder], seed=1, ops=30, tasks=2, threads=0)
    assert report.ops >= 30
    assert made


def test_cli_stress_prints_the_seed_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["stress", "--plain", "--ops", "40", "--tasks", "2", "--threads", "0"])
    out = capsys.readouterr().out
    assert code == 0
    assert "seed" in out


def test_cli_trace_runs_a_script_and_writes_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "work.py"
    script.write_text(
        "import ahipgraph as ahg\n"
        "async def main():\n"
        "    d = ahg.get_device(0); s = d.create_stream(); p = d.malloc(64)\n"
        "    await s.memset(p, 0, 64); await s.synchronize(); s.destroy(); d.free(p)\n"
        "ahg.run(main)\n"
    )
    out = tmp_path / "trace.json"
    assert cli.main(["trace", "-o", str(out), str(script)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    assert any(e["ph"] == "X" and e["name"].startswith("memset") for e in events)


def test_cli_usage_mistake_exits_two(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main(["stress", "--ops", "many"])
    assert caught.value.code == 2


# --- the rest of HIP's graph surface ------------------------------------------------------


def test_priority_is_checked_against_the_device_range(device: ahg.Device) -> None:
    least, greatest = ahg.stream_priority_range()
    graph = ahg.Graph()
    node = graph.add_kernel_node(noop, 1, 1, ())
    with pytest.raises(ahg.InvalidValue):
        node.set_attribute(KA.Priority, -1000)
    for priority in range(greatest, least + 1):
        node.set_attribute(KA.Priority, priority)
        assert node.get_attribute(KA.Priority) == priority
    graph.destroy()


@pytest.mark.parametrize(
    "change",
    [
        {"hit_ratio": 1.5},
        {"hit_ratio": -0.1},
        {"hit_ratio": float("nan")},
        {"miss_prop": ahg.AccessProperty.Persisting},
        {"num_bytes": 128 * MIB + 1},
    ],
)
def test_access_policy_window_refusals(device: ahg.Device, change: dict[str, object]) -> None:
    graph = ahg.Graph()
    node = graph.add_kernel_node(noop, 1, 1, ())
    before = node.get_attribute(KA.AccessPolicyWindow)
    good = ahg.AccessPolicyWindow(
        base_ptr=ahg.NULL,
        num_bytes=1024,
        hit_ratio=0.5,
        hit_prop=ahg.AccessProperty.Persisting,
        miss_prop=ahg.AccessProperty.Streaming,
    )
    with pytest.raises(ahg.InvalidValue):
        node.set_attribute(KA.AccessPolicyWindow, dataclasses.replace(good, **change))  # type: ignore[arg-type]
    assert node.get_attribute(KA.AccessPolicyWindow) == before
    node.set_attribute(KA.AccessPolicyWindow, good)
    assert node.get_attribute(KA.AccessPolicyWindow) == good
    graph.destroy()


def test_attribute_of_a_non_kernel_node_or_unknown_is_invalid_value(device: ahg.Device) -> None:
    graph = ahg.Graph()
    empty = graph.add_empty_node()
    kernel = graph.add_kernel_node(noop, 1, 1, ())
    for call in (
        lambda: empty.set_attribute(KA.Priority, 0),
        lambda: empty.get_attribute(KA.Cooperative),
        lambda: empty.copy_attributes_from(kernel),
        lambda: kernel.copy_attributes_from(empty),
        lambda: kernel.set_attribute(99, 0),
        lambda: kernel.get_attribute(99),
    ):
        with pytest.raises(ahg.InvalidValue):
            call()
    graph.destroy()


def test_attributes_copy_clone_and_executable_twin(device: ahg.Device) -> None:
    graph = ahg.Graph()
    node = graph.add_kernel_node(noop, 1, 1, ())
    node.set_attribute(KA.Priority, -1)
    node.set_attribute(KA.Cooperative, True)
    other = graph.add_kernel_node(noop, 1, 1, ())
    other.copy_attributes_from(node)
    assert (other.get_attribute(KA.Priority), other.get_attribute(KA.Cooperative)) == (-1, True)
    clone = graph.clone()
    cloned = clone.find_in_clone(node)
    assert cloned.get_attribute(KA.Priority) == -1
    assert cloned.get_attribute(KA.Cooperative)
    graph_exec = graph.instantiate()
    assert graph_exec.kernel_node_attribute(node, KA.Priority) == -1
    graph_exec.set_kernel_node_attribute(node, KA.Priority, 0)
    assert graph_exec.kernel_node_attribute(node, KA.Priority) == 0
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_attribute(node, KA.Priority, -1000)
    assert graph_exec.kernel_node_attribute(node, KA.Priority) == 0
    assert node.get_attribute(KA.Priority) == -1  # the graph is not the executable
    graph_exec.destroy()
    clone.destroy()
    graph.destroy()


@pytest.mark.asyncio
async def test_graph_memory_attributes_reset_and_trim(device: ahg.Device) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(MIB)
    graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    figures = [device.graph_mem_attribute(a) for a in GM]
    assert figures == [0, MIB, MIB, MIB]
    for attr, value in ((GM.UsedMemCurrent, 0), (GM.ReservedMemCurrent, 0), (GM.UsedMemHigh, 1)):
        with pytest.raises(ahg.InvalidValue):
            device.set_graph_mem_attribute(attr, value)
    assert [device.graph_mem_attribute(a) for a in GM] == figures
    device.set_graph_mem_attribute(GM.UsedMemHigh, 0)
    device.set_graph_mem_attribute(GM.ReservedMemHigh, 0)
    assert [device.graph_mem_attribute(a) for a in GM] == [0, 0, MIB, 0]
    assert device.graph_mem_trim() == MIB
    assert device.graph_mem_attribute(GM.ReservedMemCurrent) == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


def test_graph_memory_calls_on_a_replaced_device_are_invalid_device() -> None:
    with testing.fresh_devices(1) as (old,):
        pass
    for call in (
        lambda: old.graph_mem_attribute(GM.UsedMemCurrent),
        lambda: old.set_graph_mem_attribute(GM.UsedMemHigh, 0),
        old.graph_mem_trim,
    ):
        with pytest.raises(ahg.InvalidDevice):
            call()


def test_alloc_nodes_instantiate_once_and_absurd_sizes_are_out_of_memory(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    graph.add_mem_alloc_node(64)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.NotSupported):
        graph.instantiate()
    with pytest.raises(ahg.OutOfMemory):
        graph.add_mem_alloc_node(1 << 62)
    assert graph.statistics().nodes == 1
    graph_exec.destroy()
    graph.destroy()


@pytest.mark.asyncio
async def test_generic_nodes_add_set_and_exec_set(device: ahg.Device) -> None:
    ptr = device.malloc(64)

    def memset(value: int) -> ahg.GraphNodeParams:
        record = ahg.MemsetParams(
            dst=ptr, value=value, element_size=1, width=64, height=1, pitch=64
        )
        return ahg.GraphNodeParams(ahg.NodeType.Memset, record)

    graph = ahg.Graph()
    node = graph.add_node(memset(1))
    assert node.type == ahg.NodeType.Memset
    tail = graph.add_node(ahg.GraphNodeParams(ahg.NodeType.Empty), deps=[node])
    assert list(tail.dependencies()) == [node]
    node.set_params(memset(2))
    for bad in (99, -1, None):
        with pytest.raises(ahg.InvalidValue):
            graph.add_node(ahg.GraphNodeParams(bad))  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue):
        node.set_params(ahg.GraphNodeParams(ahg.NodeType.Empty))
    graph_exec = graph.instantiate()
    graph_exec.set_node_params(node, memset(3))
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_params(node, ahg.GraphNodeParams(ahg.NodeType.Kernel))
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert (device.view(ptr, np.uint8, 64, readonly=True) == 3).all()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(ptr)


@pytest.mark.asyncio
async def test_pitched_copy_codes_on_stream_node_and_setter(device: ahg.Device) -> None:
    stream = device.create_stream()
    dev = device.malloc(256 * 4)
    host = np.arange(400, dtype=np.uint8)
    for call, error in (
        (lambda: stream.memcpy_2d(dev, 50, host, 100, 100, 4), ahg.InvalidPitchValue),
        (lambda: stream.memcpy_2d(dev, 256, host, 100, 100, 5), ahg.InvalidValue),
        (lambda: stream.memcpy_2d(dev, 1 << 40, host, 100, 100, 4), ahg.InvalidValue),
        (
            lambda: stream.memcpy_2d(dev, 256, host, 100, 100, 4, kind=42),
            ahg.InvalidMemcpyDirection,
        ),
    ):
        with pytest.raises(error):
            await call()
    assert stream.statistics().submitted == 0  # a refused copy enqueued nothing
    await stream.memcpy_2d(dev, 256, host, 100, 100, 4)
    await stream.synchronize()
    rows = device.view(dev, np.uint8, 1024, readonly=True).reshape(4, 256)[:, :100]
    assert (rows == host.reshape(4, 100)).all()
    graph = ahg.Graph()
    src, extent = ahg.PitchedPtr(host, 100), (100, 4, 1)
    with pytest.raises(ahg.InvalidPitchValue):
        graph.add_memcpy_3d_node(ahg.PitchedPtr(dev, 50), src, extent)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        graph.add_memcpy_3d_node(ahg.PitchedPtr(dev, 256), src, extent, kind=42)
    node = graph.add_memcpy_3d_node(ahg.PitchedPtr(dev, 256), src, extent)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidPitchValue):
        graph_exec.set_memcpy_3d_node_params(node, ahg.PitchedPtr(dev, 50), src, extent)
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(dev)


@pytest.mark.asyncio
async def test_symbol_copies_and_their_codes(device: ahg.Device) -> None:
    stream = device.create_stream()
    symbol = ahg.device_symbol("acceptance_coeffs", dtype=np.float32, shape=(16,))
    values = np.arange(16, dtype=np.float32)
    await stream.memcpy_to_symbol(symbol, values)
    out = np.zeros(16, np.float32)
    await stream.memcpy_from_symbol(out, symbol)
    await stream.synchronize()
    assert (out == values).all()
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy_to_symbol(symbol, values, 64, offset=4)
    with pytest.raises(ahg.InvalidSymbol):
        await stream.memcpy_to_symbol("acceptance_no_such_symbol", values)
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidSymbol):
        graph.add_memcpy_node_to_symbol("acceptance_no_such_symbol", values)
    with pytest.raises(ahg.InvalidValue):
        graph.add_memcpy_node_from_symbol(out, symbol, 64, 4)
    graph.add_memcpy_node_to_symbol(symbol, values * 2)
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    await stream.memcpy_from_symbol(out, symbol)
    await stream.synchronize()
    assert (out == values * 2).all()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_current_device_is_per_task_and_defaults_use_it() -> None:
    with testing.fresh_devices(2) as (d0, d1):

        async def elsewhere() -> ahg.Device:
            ahg.set_device(1)
            await asyncio.sleep(0)
            return ahg.current_device()

        assert await asyncio.create_task(elsewhere()) is d1
        assert ahg.current_device() is d0  # the task's choice stayed in the task
        ahg.set_device(1)
        assert ahg.get_device() is d1
        graph = ahg.Graph()
        assert graph.add_mem_alloc_node(64).params.device == 1
        with pytest.raises(ahg.InvalidDevice):
            ahg.set_device(2)
        assert ahg.current_device() is d1
        graph.destroy()


@pytest.mark.asyncio
async def test_peer_access_lets_kernels_use_a_peers_memory() -> None:
    with testing.fresh_devices(2) as (d0, d1):
        cell = d1.malloc(4)
        stream = d0.create_stream()
        await stream.launch_kernel(bump, 1, 1, (cell,))
        with pytest.raises(ahg.LaunchFailure) as caught:
            await stream.synchronize()
        assert isinstance(caught.value.__cause__, ahg.InvalidDevicePointer)
        d0.enable_peer_access(1)
        with pytest.raises(ahg.PeerAccessAlreadyEnabled):
            d0.enable_peer_access(1)
        await stream.launch_kernel(bump, 1, 1, (cell,))
        await stream.synchronize()
        assert d1.view(cell, np.int32, 1, readonly=True)[0] == 1
        d0.disable_peer_access(1)
        with pytest.raises(ahg.PeerAccessNotEnabled):
            d0.disable_peer_access(1)
        for peer in (0, 5):
            with pytest.raises(ahg.InvalidDevice):
                d0.enable_peer_access(peer)
        stream.destroy()
        d1.free(cell)


@pytest.mark.asyncio
async def test_executable_launches_on_another_devices_stream_and_per_task_streams() -> None:
    with testing.fresh_devices(2) as (d0, d1):
        cell = d1.malloc(4)
        graph = ahg.Graph()
        graph.add_kernel_node(bump, 1, 1, (cell,))
        ahg.set_device(1)
        graph_exec = graph.instantiate()
        other = d0.create_stream()
        await (await graph_exec.launch(other))
        await (await graph_exec.launch(ahg.STREAM_PER_THREAD))
        assert d1.view(cell, np.int32, 1, readonly=True)[0] == 2
        graph_exec.destroy()
        graph.destroy()
        other.destroy()
        d1.free(cell)


@pytest.mark.asyncio
async def test_peer_copies_cost_more_than_local_ones() -> None:
    with testing.fresh_devices(2) as (d0, d1):
        a0, b0, a1 = d0.malloc(MIB), d0.malloc(MIB), d1.malloc(MIB)
        stream = d0.create_stream()
        events = [d0.create_event() for _ in range(4)]
        await stream.record_event(events[0])
        await stream.memcpy_peer(a1, 1, a0, 0, MIB)
        await stream.record_event(events[1])
        await stream.memcpy(b0, a0, MIB)
        await stream.record_event(events[2])
        await stream.synchronize()
        peer = ahg.elapsed_time(events[0], events[1])
        local = ahg.elapsed_time(events[1], events[2])
        assert peer > local
        for event in events:
            event.destroy()
        stream.destroy()
        for ptr, dev in ((a0, d0), (b0, d0), (a1, d1)):
            dev.free(ptr)


@pytest.mark.asyncio
async def test_stream_memory_operations_eager_and_captured(device: ahg.Device) -> None:
    waiter, writer = device.create_stream(), device.create_stream()
    flag = device.malloc(8)
    device.view(flag, np.uint32, 2)[:] = 0
    waited = await waiter.wait_value_32(flag, 1, ahg.StreamWaitFlag.EQ)
    await waiter.write_value_32(flag + 4, 7)
    await testing.loop_turns()
    assert not waited.done()
    await writer.write_value_32(flag, 1)
    await waiter.synchronize()
    assert list(device.view(flag, np.uint32, 2, readonly=True)) == [1, 7]
    await writer.write_value_64(flag, 0xF0)
    await waiter.wait_value_64(flag, 0x10, ahg.StreamWaitFlag.AND)
    await waiter.wait_value_32(flag, 0x0F, ahg.StreamWaitFlag.NOR, mask=0x0F)
    await waiter.synchronize()
    async with waiter.capture() as capture:
        await waiter.write_value_32(flag, 5)
        await waiter.wait_value_32(flag, 5, ahg.StreamWaitFlag.GEQ)
    graph_exec = capture.graph.instantiate()
    await (await graph_exec.launch(waiter))
    assert device.view(flag, np.uint32, 1, readonly=True)[0] == 5
    graph_exec.destroy()
    capture.graph.destroy()
    waiter.destroy()
    writer.destroy()
    device.free(flag)


# --- the race detector --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_unordered_writers_are_reported_with_every_part(device: ahg.Device) -> None:
    s1, s2 = device.create_stream(), device.create_stream()
    with ahg.race_check(on_race="collect") as check:
        ptr = device.malloc(64)
        await s1.launch_kernel(write_all, 1, 1, (ptr,))
        await s2.launch_kernel(write_all, 1, 1, (ptr,))
        await device.synchronize()
        device.free(ptr)
    (report,) = check.reports
    assert report.kind == "write-after-write"
    for site in (report.first, report.second):
        assert site.source is not None
        assert Path(__file__).name in site.source
        assert site.write
        assert site.end - site.start == 64
        assert site.precision == "conservative"
    assert Path(__file__).name in str(report.allocation)  # where it was allocated
    assert report.first.where in report.why
    assert "record_event" in report.fix
    assert "wait_event" in report.fix
    s1.destroy()
    s2.destroy()


@pytest.mark.asyncio
async def test_event_pair_orders_and_a_stale_event_is_explained(device: ahg.Device) -> None:
    s1, s2 = device.create_stream(), device.create_stream()
    ptr = device.malloc(64)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as check:
        await s1.launch_kernel(write_all, 1, 1, (ptr,))
        await s1.record_event(event)
        await s2.wait_event(event)
        await s2.launch_kernel(write_all, 1, 1, (ptr,))
        await device.synchronize()
    assert check.reports == []
    with ahg.race_check(on_race="collect") as check:
        await s1.launch_kernel(noop, 1, 1, ())
        await s1.record_event(event)
        await s1.launch_kernel(write_all, 1, 1, (ptr,))
        await s2.wait_event(event)
        await s2.launch_kernel(write_all, 1, 1, (ptr,))
        await device.synchronize()
    (report,) = check.reports
    assert "only up to op" in report.why
    assert "event" in report.why
    event.destroy()
    s1.destroy()
    s2.destroy()
    device.free(ptr)


@pytest.mark.asyncio
async def test_raise_mode_raises_before_enqueueing_and_warn_mode_warns(
    device: ahg.Device,
) -> None:
    s1, s2 = device.create_stream(), device.create_stream()
    ptr = device.malloc(64)
    with ahg.race_check():
        await s1.launch_kernel(write_all, 1, 1, (ptr,))
        before = s2.statistics()
        with pytest.raises(ahg.RaceError) as caught:
            await s2.launch_kernel(write_all, 1, 1, (ptr,))
        assert len(caught.value.reports) == 1
        assert s2.statistics() == before
        await device.synchronize()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with ahg.race_check(on_race="warn"):
            await s1.launch_kernel(write_all, 1, 1, (ptr,))
            await s2.launch_kernel(write_all, 1, 1, (ptr,))
            await device.synchronize()
    assert [w.category for w in seen] == [ahg.RaceWarning]
    s1.destroy()
    s2.destroy()
    device.free(ptr)


@pytest.mark.asyncio
async def test_annotations_read_only_extents_and_atomics(device: ahg.Device) -> None:
    s1, s2 = device.create_stream(), device.create_stream()
    a, b, c, d = (device.malloc(64) for _ in range(4))
    with ahg.race_check(on_race="collect") as check:
        await s1.launch_kernel(copy_first, 1, 1, (a, b))  # a read only
        await s2.launch_kernel(copy_first, 1, 1, (a, c))
        await s1.launch_kernel(write_n, 1, 1, (4, b + 16))  # exactly 4 elements
        await s2.launch_kernel(write_n, 1, 1, (4, c + 32))
        await s1.launch_kernel(atomic_add, 1, 1, (d,))
        await s2.launch_kernel(atomic_add, 1, 1, (d,))
        await device.synchronize()
    assert check.reports == []
    for kernel, args in ((write_const, (a,)), (write_past_n, (4, b))):
        await s1.launch_kernel(kernel, 1, 1, args)  # annotations are enforced at dispatch
        with pytest.raises(ahg.LaunchFailure):
            await s1.synchronize()
    s1.destroy()
    s2.destroy()
    for ptr in (a, b, c, d):
        device.free(ptr)


@pytest.mark.asyncio
async def test_a_free_counts_as_a_write_and_host_changes_during_a_copy_count(
    device: ahg.Device,
) -> None:
    s1, s2 = device.create_stream(), device.create_stream()
    with ahg.race_check(on_race="collect") as check:
        ptr = device.malloc(64)
        await s1.launch_kernel(copy_first, 1, 1, (ptr, ptr))
        await s2.free_async(ptr)
        await device.synchronize()
    assert [r.kind for r in check.reports] == ["write-after-write"]
    source = np.zeros(1 << 18, np.int32)
    big = device.malloc(source.nbytes)
    with ahg.race_check(on_race="collect") as check:
        await s1.memcpy(big, source, source.nbytes)
        source[0] = 5  # before the copy has run
        await s1.synchronize()
    assert len(check.reports) == 1
    s1.destroy()
    s2.destroy()
    device.free(big)


def test_static_check_fix_edge_dot_and_instantiate(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    first = graph.add_kernel_node(write_all, 1, 1, (ptr,))
    second = graph.add_kernel_node(write_all, 1, 1, (ptr,))
    (report,) = graph.check_races()
    assert set(report.fix_edge or ()) == {first, second}
    assert "add_dependencies" in report.fix
    drawn = graph.to_dot(races=[report])
    assert drawn.count('color="red"penwidth="2"') == 2  # the racing pair
    assert "write-after-write" in drawn
    assert 'label="add this edge"' in drawn  # the suggested edge
    assert "add this edge" not in graph.to_dot()
    with pytest.raises(ahg.RaceError) as caught:
        graph.instantiate(check_races=True)
    assert len(caught.value.reports) == 1
    graph.add_dependencies(*(report.fix_edge or ()))
    assert graph.check_races() == []
    graph_exec = graph.instantiate(check_races=True)
    graph_exec.destroy()
    graph.destroy()
    device.free(ptr)


def test_checked_executable_setters_and_update_refuse_a_race(device: ahg.Device) -> None:
    a, b = device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    graph.add_kernel_node(write_all, 1, 1, (a,))
    second = graph.add_kernel_node(write_all, 1, 1, (b,))
    graph_exec = graph.instantiate(check_races=True)
    with pytest.raises(ahg.RaceError):
        graph_exec.set_kernel_node_params(second, write_all, 1, 1, (a,))
    params = dataclasses.replace(second.params, args=(a,))
    with pytest.raises(ahg.RaceError):
        graph_exec.set_node_params(second, ahg.GraphNodeParams(ahg.NodeType.Kernel, params))
    racing = ahg.Graph()
    racing.add_kernel_node(write_all, 1, 1, (a,))
    racing.add_kernel_node(write_all, 1, 1, (a,))
    with pytest.raises(ahg.RaceError):
        graph_exec.update(racing)
    assert graph_exec.statistics().versions == 1
    graph_exec.destroy()
    racing.destroy()
    graph.destroy()
    device.free(a)
    device.free(b)
