"""The saved trace as Perfetto imports it: every slice kept, every flow drawn the right way.

Perfetto's JSON importer (``json_trace_parser``, ``slice_tracker``, ``flow_tracker``) is
emulated here with its documented rules, so the file is held to what the viewer does, not to
what it looks like:

* events are read in timestamp order; at one timestamp, complete slices first, the longest
  first, then every other event in file order;
* each thread track keeps a stack of open slices: a new slice pops those that ended before
  it (or at its start, unless both are zero-length); one that overlaps the top partially is
  dropped;
* a flow's ``s`` binds to the newest slice on the stack of its track (which is not closed
  first), an ``f`` with ``"bp": "e"`` likewise; an ``f`` read before its ``s`` is dropped, and a
  flow goes from the earlier of its two slices to the later one;
* zero-length slices and instants of one track at one timestamp stack, a level each;
* pid 0 and tid 0 are the kernel's idle task, so a file must not use them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ahipgraph as ahg

_LAST = 1 << 62


@dataclass(frozen=True)
class Slice:
    track: tuple[int, int]
    ts: int  # ns
    dur: int
    name: str


@dataclass
class Imported:
    slices: list[Slice]
    flows: dict[int, tuple[Slice, Slice]]  # flow id -> (from, to)
    dropped_slices: int
    dropped_flows: int
    depth: dict[tuple[int, int], int]  # track -> deepest nesting of its slices (0: none)


def _ns(value: float) -> int:
    return round(value * 1000)


def perfetto_import(document: dict[str, Any]) -> Imported:
    events = [e for e in document["traceEvents"] if e["ph"] != "M"]

    def order(item: tuple[int, dict[str, Any]]) -> tuple[int, int, int]:
        index, event = item
        key = _LAST - _ns(event["dur"]) if event["ph"] == "X" else _LAST
        return _ns(event["ts"]), key, index

    stacks: dict[tuple[int, int], list[Slice]] = defaultdict(list)
    slices: list[Slice] = []
    started: dict[int, Slice] = {}
    flows: dict[int, tuple[Slice, Slice]] = {}
    dropped_slices = dropped_flows = 0
    depth: dict[tuple[int, int], int] = {}
    for _, event in sorted(enumerate(events), key=order):
        phase, ts = event["ph"], _ns(event["ts"])
        if phase == "C":
            continue
        track = (event["pid"], event["tid"])
        stack = stacks[track]
        if phase in ("X", "i"):
            new = Slice(track, ts, _ns(event.get("dur", 0)), event["name"])
            kept = True
            while stack:
                top = stack[-1]
                end = top.ts + top.dur
                if end < ts or (end == ts and not (top.dur == 0 and new.dur == 0)):
                    stack.pop()
                    continue
                if ts < end < ts + new.dur:  # partial overlap: the new slice is dropped
                    kept = False
                break
            if not kept:
                dropped_slices += 1
                continue
            depth[track] = max(depth.get(track, 0), len(stack))
            stack.append(new)
            slices.append(new)
        elif phase == "s":
            if stack:
                started[event["id"]] = stack[-1]
            else:
                dropped_flows += 1
        elif phase == "f":
            assert event.get("bp") == "e"
            source = started.get(event["id"])
            if source is None or not stack:
                dropped_flows += 1
                continue
            target = stack[-1]
            flows[event["id"]] = (source, target) if source.ts <= target.ts else (target, source)
        else:
            raise AssertionError(f"unexpected phase {phase!r}")
    return Imported(slices, flows, dropped_slices, dropped_flows, depth)


def check_imports_whole(trace: ahg.Trace) -> Imported:
    """Perfetto keeps every op and every flow of ``trace``, each flow from its source op to
    the barrier's end on the barrier's queue."""
    document = json.loads(trace.dumps())
    events = document["traceEvents"]
    imported = perfetto_import(document)
    assert imported.dropped_slices == 0
    assert imported.dropped_flows == 0
    assert all(imported.depth.get((pid, 1), 0) == 0 for pid in {e["pid"] for e in events})
    assert all(e["pid"] > 0 and e["tid"] > 0 for e in events)  # counters' too
    ops = trace.ops
    assert len(imported.flows) == len(trace.flows) > 0
    by_place = {(s.track, s.ts) for s in imported.slices}
    tid_of = {}
    for event in document["traceEvents"]:
        if event["ph"] == "M" and event["name"] == "thread_name":
            tid_of[(event["pid"], event["args"]["name"])] = event["tid"]
    pid_of = {
        e["args"]["name"].split(":")[0]: e["pid"]
        for e in document["traceEvents"]
        if e["ph"] == "M" and e["name"] == "process_name"
    }

    def track(op: Any) -> tuple[int, int]:
        pid = pid_of[f"device {op.device}"]
        return pid, tid_of[(pid, f"queue {op.queue}")]

    for number, flow in enumerate(trace.flows):
        start, end = imported.flows[number]
        source, barrier = ops[flow.source], ops[flow.target]
        assert (start.track, start.ts) == (track(source), source.start_ns)
        assert (end.track, end.ts) == (track(barrier), barrier.end_ns)
        assert (end.track, end.ts) in by_place
    return imported


def _kernel(name: str, duration_ns: int) -> ahg.Kernel:
    def body(t: ahg.Threads) -> None:
        pass

    return ahg.Kernel(body, name=name, duration_ns=duration_ns)


async def _wait_across_streams(device: ahg.Device, slow_kernels: int, after: bool) -> ahg.Trace:
    """``slow_kernels`` kernels and an event record on one stream; on another, a wait for the
    event posted at once, then (if ``after``) one more kernel."""
    slow = _kernel("slow", 5000)
    first, second = device.create_stream(), device.create_stream()
    event = device.create_event()
    with ahg.tracing() as trace:
        for _ in range(slow_kernels):
            await first.launch_kernel(slow, 1, 1, ())
        await first.record_event(event)
        await second.wait_event(event)
        if after:
            await second.launch_kernel(_kernel("after", 100), 1, 1, ())
        await device.synchronize()
    event.destroy()
    first.destroy()
    second.destroy()
    return trace


async def _replayed(device: ahg.Device, graph: ahg.Graph, launches: int) -> ahg.Trace:
    """``graph`` launched ``launches`` times back to back (one wait at the end), traced; the
    graph and everything made for it destroyed."""
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    with ahg.tracing() as trace:
        for _ in range(launches):
            await graph_exec.launch(stream)
        await stream.synchronize()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    return trace


@pytest.mark.asyncio
async def test_a_wait_posted_before_its_source_started_keeps_its_flow(
    device: ahg.Device,
) -> None:
    """The barrier begins waiting at once; the op that releases it starts later."""
    trace = await _wait_across_streams(device, slow_kernels=2, after=True)
    (flow,) = trace.flows
    assert trace.ops[flow.target].start_ns < trace.ops[flow.source].start_ns  # the case
    imported = check_imports_whole(trace)
    ((_, end),) = imported.flows.values()
    assert end.name == "after"  # the arrow lands on the work the signal let run


@pytest.mark.asyncio
async def test_a_wait_with_nothing_after_it_ends_its_flow_on_a_released_marker(
    device: ahg.Device,
) -> None:
    trace = await _wait_across_streams(device, slow_kernels=1, after=False)
    imported = check_imports_whole(trace)
    ((_, end),) = imported.flows.values()
    assert (end.name, end.dur) == ("released", 0)


@pytest.mark.asyncio
async def test_every_flow_of_repeated_fork_join_launches_imports(device: ahg.Device) -> None:
    kernels = [_kernel(n, d) for n, d in zip("abcde", (100, 900, 50, 70, 30), strict=True)]
    graph = ahg.Graph()
    a = graph.add_kernel_node(kernels[0], 1, 1, ())
    b = graph.add_kernel_node(kernels[1], 1, 1, (), deps=[a])
    c = graph.add_kernel_node(kernels[2], 1, 1, (), deps=[a])
    d = graph.add_kernel_node(kernels[3], 1, 1, (), deps=[c])
    graph.add_kernel_node(kernels[4], 1, 1, (), deps=[b, d])
    check_imports_whole(await _replayed(device, graph, 3))


@pytest.mark.asyncio
async def test_devices_and_their_tracks_are_named_without_pid_or_tid_zero(
    tmp_path: Path,
) -> None:
    ahg.configure_devices(2)
    device = ahg.get_device(0)
    stream = device.create_stream()
    buffer = device.malloc(64)
    with ahg.tracing() as trace:
        await (await stream.memset(buffer, 1, 64))
    document = json.loads(trace.save(tmp_path / "t.json").read_text())
    meta = {
        (e["name"], e["pid"], e["tid"]): e["args"]
        for e in document["traceEvents"]
        if e["ph"] == "M"
    }
    assert meta[("process_name", 1, 1)] == {"name": f"device 0: {device.name}"}
    assert meta[("thread_name", 1, 1)] == {"name": "host"}
    assert meta[("thread_sort_index", 1, 1)] == {"sort_index": 0}
    assert meta[("thread_name", 1, 2)] == {"name": "queue 0"}
    assert meta[("thread_sort_index", 1, 2)] == {"sort_index": 1}
    memset = next(e for e in document["traceEvents"] if e["ph"] == "X")
    assert (memset["pid"], memset["tid"]) == (1, 2 + stream.queue.index)
    host = next(e for e in document["traceEvents"] if e["ph"] == "i")
    assert (host["pid"], host["tid"], host["s"]) == (1, 1, "t")
    counters = [e for e in document["traceEvents"] if e["ph"] == "C"]
    assert counters
    assert {e["pid"] for e in counters} == {1}
    device.free(buffer)
    stream.destroy()


@pytest.mark.asyncio
async def test_launches_enqueued_at_one_instant_are_one_host_event(device: ahg.Device) -> None:
    """The host clock stands still while it enqueues without waiting: twenty launches were
    twenty instants at one timestamp, which Perfetto stacks twenty levels deep (a loop of a
    thousand went past its depth limit of 512)."""
    graph = ahg.Graph()
    graph.add_kernel_node(_kernel("k", 100), 1, 1, ())
    trace = await _replayed(device, graph, 20)
    document = json.loads(trace.dumps())
    host = [e for e in document["traceEvents"] if e["ph"] == "i"]
    assert len(trace.enqueues) == 20
    (event,) = host
    assert event["name"] == "20 enqueues"
    calls = event["args"]["calls"]
    assert [call["launch"] for call in calls] == list(range(20))
    assert {call["name"] for call in calls} == {"launch exec 0"}
    imported = perfetto_import(document)
    assert imported.depth.get((event["pid"], event["tid"]), 0) == 0


@pytest.mark.asyncio
async def test_work_submitted_before_the_block_runs_on_named_tracks(device: ahg.Device) -> None:
    """A kernel enqueued before ``tracing()`` and run inside it was recorded on a device the
    trace never named: its process and queue track had no name in the file."""
    stream = device.create_stream()
    done = await stream.launch_kernel(_kernel("early", 100), 1, 1, ())
    with ahg.tracing() as trace:
        await done
    assert [op.name for op in trace.ops] == ["early"]
    assert trace.devices == {0: device.name}
    document = json.loads(trace.dumps())
    named = {
        (e["pid"], e["tid"])
        for e in document["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    slices = {(e["pid"], e["tid"]) for e in document["traceEvents"] if e["ph"] == "X"}
    assert slices <= named
    stream.destroy()
