"""GraphExec end to end: launch semantics, ordering, node kinds at run time, failures, flags.

Results of whole graphs against eager execution are in ``test_exec_random.py``; updates in
``test_exec_update.py``; destroy, user objects, pools and leaks in ``test_exec_lifetime.py``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.runtime.stream import STREAMS
from cleanup import destroy, run_once
from fakes import GatedHost, HeldKernel, loop_turns
from peek import peek


class Boom(Exception):
    pass


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


@ahg.kernel
def iota(t: ahg.Threads, n: ahg.int32, scale: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    i = t.ids[t.ids < n]
    out[i] = i * scale


@ahg.kernel
def explode(t: ahg.Threads) -> None:
    raise Boom("kaboom")


@ahg.kernel(duration_ns=1_000)
def tick(t: ahg.Threads) -> None:
    pass


@ahg.kernel(duration_ns=5_000)
def slow_tick(t: ahg.Threads) -> None:
    pass


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run until ``condition`` holds: for progress that no gate marks."""
    for _ in range(100):
        if condition():
            return
        await asyncio.sleep(0)  # one loop iteration: ready device work and tasks advance a hop
    raise AssertionError(f"never happened: {what}")


def value_at(device: ahg.Device, ptr: ahg.DevicePtr, index: int = 0) -> int:
    return int(device.view(ptr, np.int64, index + 1)[index])


def strand_of(graph_exec: ahg.GraphExec, graph: ahg.Graph, node: ahg.GraphNode) -> int:
    """The strand the planner gave ``node`` (0 is the launch stream)."""
    index = graph.nodes().index(node)
    (segment,) = [s for s in graph_exec.plan.segments if index in s.nodes]
    return segment.strand


# -- launch returns once enqueued ------------------------------------------------------------


@pytest.mark.asyncio
async def test_launch_returns_once_enqueued_and_the_completion_resolves_later(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    out = device.malloc(8)
    graph = ahg.Graph()
    gate = graph.add_kernel_node(held.kernel, 1, 1)
    graph.add_kernel_node(put, 1, 1, (42, 0, out), deps=[gate])
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    handle = await graph_exec.launch(stream)
    assert isinstance(handle, ahg.Completion)
    assert not handle.done()
    assert handle.end_ns is None
    assert handle.exception() is None
    stats = graph_exec.statistics()
    assert (stats.launches, stats.in_flight, stats.completed) == (1, 1, 0)
    assert "in_flight=1" in repr(graph_exec)

    await held.started.wait()  # the replay is running and holds its queue in the held kernel
    await loop_turns()
    assert not handle.done()
    assert peek(device, out) == 0  # the node after the held kernel has not run
    assert not stream.query()

    held.release()
    await handle
    assert handle.done()
    assert handle.end_ns is not None
    assert value_at(device, out) == 42
    stats = graph_exec.statistics()
    assert (stats.launches, stats.in_flight, stats.completed) == (1, 0, 1)
    assert stream.query()
    destroy(out, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_launch_nowait_enqueues_like_launch(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (5, 0, out))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    handle = graph_exec.launch_nowait(stream)
    assert not handle.done()  # enqueued, not run: device work starts when the host yields
    await handle
    assert value_at(device, out) == 5
    destroy(out, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_launch_without_a_stream_uses_the_null_stream(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (9, 0, out))
    graph_exec = graph.instantiate()
    handle = await graph_exec.launch()
    assert device.null_stream.tail is not None
    await device.null_stream.synchronize()
    assert handle.done()
    assert value_at(device, out) == 9
    destroy(out, graph, graph_exec)


@pytest.mark.asyncio
async def test_empty_graph_launch_is_a_no_op(device: ahg.Device) -> None:
    held = HeldKernel()
    stream = device.create_stream()
    blocker = await held.launch(stream)
    await held.started.wait()  # the stream is busy
    submitted = stream.statistics().submitted
    empty = ahg.Graph()
    graph_exec = empty.instantiate()

    handle = await graph_exec.launch(stream)
    assert handle.done()  # nothing was enqueued, so there is nothing to wait for
    await handle
    assert stream.statistics().submitted == submitted
    assert graph_exec.statistics().signal_pool.acquires == 0
    assert not blocker.done()

    held.release()
    await stream.synchronize()
    destroy(stream, graph_exec, empty)


# -- ordering --------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_launch_starts_after_earlier_work_on_its_stream(device: ahg.Device) -> None:
    log: list[str] = []
    held = HeldKernel("eager", log)
    graph = ahg.Graph()
    root = graph.add_host_node(log.append, ("graph root",))
    graph.add_host_node(log.append, ("graph branch 1",), deps=[root])
    graph.add_host_node(log.append, ("graph branch 2",), deps=[root])
    graph_exec = graph.instantiate()
    assert graph_exec.statistics().strands == 2  # a branch runs on an internal stream
    stream = device.create_stream()

    await held.launch(stream)
    handle = await graph_exec.launch(stream)
    await held.started.wait()
    await loop_turns()
    assert log == ["eager start"]  # no part of the graph ran, on any of its streams

    held.release()
    await handle
    assert log[:3] == ["eager start", "eager end", "graph root"]
    assert sorted(log[3:]) == ["graph branch 1", "graph branch 2"]
    destroy(graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_stream_work_after_a_launch_waits_for_every_leaf_and_sees_its_results(
    device: ahg.Device,
) -> None:
    gate = asyncio.Event()

    async def late_write(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
        await gate.wait()
        out[0] = value

    late = ahg.Kernel(late_write, name="late_write")
    a, b = device.malloc(8), device.malloc(8)
    graph = ahg.Graph()
    root = graph.add_empty_node()
    early_leaf = graph.add_kernel_node(put, 1, 1, (1, 0, a), deps=[root])
    late_leaf = graph.add_kernel_node(late, 1, 1, (2, b), deps=[root])
    graph_exec = graph.instantiate()
    assert strand_of(graph_exec, graph, early_leaf) == 0
    assert strand_of(graph_exec, graph, late_leaf) == 1  # the leaf that waits is off-stream

    stream = device.create_stream()
    host = np.zeros(2, dtype=np.int64)
    log: list[str] = []
    handle = await graph_exec.launch(stream)
    await stream.memcpy(host[0:1], a)
    await stream.memcpy(host[1:2], b)
    await stream.launch_host_func(log.append, "after")
    await until(lambda: peek(device, a) == 1, "the launch stream's leaf ran")
    await loop_turns()
    assert log == []  # but later stream work waits for the other leaf too
    assert not handle.done()

    gate.set()
    await stream.synchronize()
    assert handle.done()
    assert host.tolist() == [1, 2]
    assert log == ["after"]
    destroy(a, b, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_two_launches_of_one_exec_on_two_streams_are_ordered(device: ahg.Device) -> None:
    log: list[str] = []
    gated = GatedHost("branch", log)
    graph = ahg.Graph()
    root = graph.add_empty_node()
    quick = graph.add_host_node(log.append, ("quick",), deps=[root])
    held = graph.add_host_node(gated, deps=[root])
    graph.add_empty_node(deps=[quick, held])
    graph_exec = graph.instantiate()
    assert strand_of(graph_exec, graph, quick) == 0
    assert strand_of(graph_exec, graph, held) == 1

    s1, s2 = device.create_stream(), device.create_stream()
    h1 = await graph_exec.launch(s1)
    h2 = await graph_exec.launch(s2)
    await gated.started(0)
    await until(lambda: "quick" in log, "launch 1's other branch ran")
    await loop_turns()
    # Launch 1 is held in its branch. Launch 2 is on another, idle stream, but no part of it
    # may start before launch 1 is complete.
    assert sorted(log) == ["branch start 0", "quick"]
    assert not h1.done()
    assert not h2.done()

    gated.open(0)
    await h1
    await gated.started(1)  # launch 2 starts only now
    assert log.count("quick") == 2
    second_quick = len(log) - 1 - log[::-1].index("quick")
    assert log.index("branch end 0") < second_quick
    assert log.index("branch end 0") < log.index("branch start 1")
    assert not h2.done()
    gated.open(1)
    await h2
    assert log[-1] == "branch end 1"
    destroy(graph, graph_exec, s1, s2)


@pytest.mark.asyncio
async def test_launches_on_one_stream_run_back_to_back(device: ahg.Device) -> None:
    out = device.malloc(8 * 4)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (0, 0, out))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    handles = []
    for i in range(4):
        graph_exec.set_kernel_node_params(node, put, 1, 1, (i + 1, i, out))
        handles.append(await graph_exec.launch(stream))
    await handles[-1]
    assert all(h.done() for h in handles)
    ends = [h.end_ns for h in handles]
    assert ends == sorted(ends)
    assert device.view(out, np.int64, 4).tolist() == [1, 2, 3, 4]
    destroy(out, graph, graph_exec, stream)


# -- node kinds at run time ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_host_node_blocks_its_queue_until_it_returns(device: ahg.Device) -> None:
    log: list[str] = []
    gated = GatedHost("host", log)
    out = device.malloc(8)
    graph = ahg.Graph()
    host = graph.add_host_node(gated)
    graph.add_kernel_node(put, 1, 1, (3, 0, out), deps=[host])
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    handle = await graph_exec.launch(stream)
    after = await stream.launch_host_func(log.append, "stream work")
    await gated.started()
    await loop_turns()
    assert peek(device, out) == 0  # the kernel after the host node waits
    assert log == ["host start 0"]
    assert not after.done()

    gated.open()
    await after
    assert handle.done()
    assert value_at(device, out) == 3
    assert log == ["host start 0", "host end 0", "stream work"]
    destroy(out, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_host_node_gets_its_arguments_on_every_launch(device: ahg.Device) -> None:
    calls: list[tuple[Any, ...]] = []
    graph = ahg.Graph()
    graph.add_host_node(lambda *args: calls.append(args), (1, "two"))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    for _ in range(3):
        await graph_exec.launch(stream)
    await stream.synchronize()
    assert calls == [(1, "two")] * 3
    destroy(graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_event_record_node_orders_a_waiting_stream_after_the_node(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    before, after = GatedHost("before", log), GatedHost("after", log)
    event = device.create_event()
    graph = ahg.Graph()
    first = graph.add_host_node(before)
    record = graph.add_event_record_node(event, deps=[first])
    graph.add_host_node(after, deps=[record])
    graph_exec = graph.instantiate()
    s1, s2 = device.create_stream(), device.create_stream()

    handle = await graph_exec.launch(s1)
    assert not event.query()  # the launch recorded the event; the node has not run
    await s2.wait_event(event)
    waiter = await s2.launch_host_func(log.append, "s2")
    await before.started()
    await loop_turns()
    assert "s2" not in log  # s2 waits for the record node, which waits for `before`

    before.open()
    await waiter  # s2 went on once the node ran...
    assert event.query()
    assert log[:2] == ["before start 0", "before end 0"]
    assert sorted(log[2:]) == ["after start 0", "s2"]
    assert not handle.done()  # ...while the rest of the graph is still held
    after.open()
    await handle
    destroy(event, graph, graph_exec, s1, s2)


@pytest.mark.asyncio
async def test_event_wait_node_waits_for_an_event_recorded_on_another_stream(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    held = HeldKernel("producer", log)
    event = device.create_event()
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(event)
    graph.add_host_node(log.append, ("graph",), deps=[wait])
    graph_exec = graph.instantiate()
    s1, s2 = device.create_stream(), device.create_stream()

    await held.launch(s1)
    await s1.record_event(event)
    handle = await graph_exec.launch(s2)
    await held.started.wait()
    await loop_turns()
    assert log == ["producer start"]
    assert not handle.done()

    held.release()
    await handle
    assert log == ["producer start", "producer end", "graph"]
    destroy(event, graph, graph_exec, s1, s2)


@pytest.mark.asyncio
async def test_event_wait_node_waits_for_the_record_that_existed_at_launch(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    first, second = HeldKernel("first", log), HeldKernel("second", log)
    event = device.create_event()
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(event)
    graph.add_host_node(log.append, ("graph",), deps=[wait])
    graph_exec = graph.instantiate()
    s1, s2 = device.create_stream(), device.create_stream()

    await first.launch(s1)
    await s1.record_event(event)
    handle = await graph_exec.launch(s2)
    await second.launch(s1)
    await s1.record_event(event)  # a later record: the launch already bound the earlier one
    first.release()
    await handle
    assert "graph" in log
    assert "second end" not in log
    assert not event.query()  # the later record is still pending
    second.release()
    await s1.synchronize()
    destroy(event, graph, graph_exec, s1, s2)


@pytest.mark.asyncio
async def test_a_launch_on_the_null_stream_orders_with_blocking_streams(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    gated = GatedHost("graph", log)
    graph = ahg.Graph()
    graph.add_host_node(gated)
    graph_exec = graph.instantiate()
    blocking = device.create_stream()
    non_blocking = device.create_stream(non_blocking=True)

    handle = await graph_exec.launch()  # the legacy null stream
    after_blocking = await blocking.launch_host_func(log.append, "blocking")
    after_non_blocking = await non_blocking.launch_host_func(log.append, "non-blocking")
    await gated.started()
    await after_non_blocking  # a non-blocking stream does not wait for the null stream
    await loop_turns()
    assert sorted(log) == ["graph start 0", "non-blocking"]
    assert not after_blocking.done()

    gated.open()
    await after_blocking
    assert handle.done()
    assert log[2:] == ["graph end 0", "blocking"]
    destroy(graph, graph_exec, blocking, non_blocking)


@pytest.mark.asyncio
async def test_event_wait_node_on_an_unrecorded_event_does_not_wait(device: ahg.Device) -> None:
    log: list[str] = []
    event = device.create_event()
    graph = ahg.Graph()
    wait = graph.add_event_wait_node(event)
    graph.add_host_node(log.append, ("graph",), deps=[wait])
    graph_exec = graph.instantiate()
    await run_once(graph_exec, device)
    assert log == ["graph"]
    destroy(event, graph, graph_exec)


@pytest.mark.asyncio
async def test_event_record_nodes_time_the_work_between_them(device: ahg.Device) -> None:
    start, end = device.create_event(), device.create_event()
    graph = ahg.Graph()
    first = graph.add_event_record_node(start)
    work = graph.add_kernel_node(tick, 1, 1, deps=[first])
    graph.add_event_record_node(end, deps=[work])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    for _ in range(2):  # every launch records both events again
        await (await graph_exec.launch(stream))
        kernel_ns = device.properties.cost.kernel_launch_ns + 1_000
        assert ahg.elapsed_time(start, end) == pytest.approx(kernel_ns / 1e6)
    destroy(start, end, graph, graph_exec, stream)


# -- failures --------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("failing_strand", [0, 1])
async def test_failing_kernel_fails_the_launch_and_the_stream_and_returns_the_signal_set(
    device: ahg.Device, failing_strand: int
) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    root = graph.add_empty_node()
    branches = [
        graph.add_kernel_node(put, 1, 1, (7, 0, out), deps=[root]),
        graph.add_kernel_node(tick, 1, 1, deps=[root]),
    ]
    bad = graph.add_kernel_node(explode, 1, 1, deps=[branches[failing_strand]])
    graph.add_empty_node(deps=[bad, branches[1 - failing_strand]])
    graph_exec = graph.instantiate()
    assert strand_of(graph_exec, graph, bad) == failing_strand
    stream = device.create_stream()

    handle = await graph_exec.launch(stream)
    with pytest.raises(ahg.LaunchFailure, match="kernel 'explode' failed") as info:
        await handle
    assert isinstance(info.value.__cause__, Boom)
    assert handle.exception() is info.value
    assert value_at(device, out) == 7  # the other work of the launch still ran

    with pytest.raises(ahg.LaunchFailure, match="explode") as sync_info:
        await stream.synchronize()
    assert sync_info.value is info.value
    await stream.synchronize()  # reported once, then cleared

    stats = graph_exec.statistics()
    assert stats.in_flight == 0
    assert stats.signal_pool.free == stats.signal_pool.prepopulated
    assert stats.signal_pool.in_use == 0
    destroy(out, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_nodes_independent_of_a_failed_kernel_run_wherever_they_are_placed(
    device: ahg.Device,
) -> None:
    out = device.malloc(8 * 3)
    graph = ahg.Graph()
    root = graph.add_empty_node()
    bad = graph.add_kernel_node(explode, 1, 1, deps=[root])
    other = graph.add_kernel_node(put, 1, 1, (1, 0, out), deps=[root])
    left = graph.add_kernel_node(put, 1, 1, (2, 1, out), deps=[other])
    right = graph.add_kernel_node(put, 1, 1, (3, 2, out), deps=[other])
    graph_exec = graph.instantiate()
    # `left` and `right` depend only on `other`, never on `bad`; the planner happens to put
    # `left` after `bad` on the launch stream and `right` on another stream. A failure stops
    # nothing else (as on an eager stream), so both run whatever their placement.
    assert strand_of(graph_exec, graph, bad) == strand_of(graph_exec, graph, left) == 0
    assert strand_of(graph_exec, graph, right) == 1
    stream = device.create_stream()
    with pytest.raises(ahg.LaunchFailure):
        await (await graph_exec.launch(stream))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert device.view(out, np.int64, 3).tolist() == [1, 2, 3]
    destroy(out, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_a_failed_launch_does_not_poison_the_next_one(device: ahg.Device) -> None:
    runs: list[int] = []

    def flaky_body(t: ahg.Threads) -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise Boom("first run only")

    flaky = ahg.Kernel(flaky_body, name="flaky")
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(flaky, 1, 1)
    graph.add_kernel_node(put, 1, 1, (1, 0, out), deps=[node])
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    first = await graph_exec.launch(stream)
    second = await graph_exec.launch(stream)  # enqueued behind the launch that will fail
    with pytest.raises(ahg.LaunchFailure, match="flaky"):
        await first
    await second
    assert second.exception() is None
    assert runs == [0, 1]
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert graph_exec.statistics().signal_pool.free == 16
    destroy(out, graph, graph_exec, stream)


@pytest.mark.asyncio
async def test_failing_host_node_fails_the_launch_naming_the_function(device: ahg.Device) -> None:
    def broken_callback() -> None:
        raise Boom("host")

    graph = ahg.Graph()
    graph.add_host_node(broken_callback)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    with pytest.raises(ahg.LaunchFailure, match="broken_callback"):
        await (await graph_exec.launch(stream))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(graph, graph_exec, stream)


# -- invalid launches ------------------------------------------------------------------------


async def _call(fn: Callable[[], Any]) -> None:
    result = fn()
    if inspect.isawaitable(result):
        await result


_MADE: list[Any] = []  # what the helpers below made for a test; ended after it


@pytest.fixture(autouse=True)
def _destroy_made() -> Iterator[None]:
    yield
    destroy(*(made for made in _MADE if isinstance(made, ahg.DevicePtr) or made.alive))
    _MADE.clear()


def _exec_calls(
    graph_exec: ahg.GraphExec, graph: ahg.Graph, nodes: dict[str, ahg.GraphNode], device: ahg.Device
) -> dict[str, Callable[[], Any]]:
    buf = device.malloc(64)
    host = np.zeros(8, dtype=np.uint8)
    event = device.create_event()
    stream = device.create_stream()
    child = ahg.Graph()
    _MADE.extend((buf, event, stream, child))
    k, c, s, h = nodes["kernel"], nodes["memcpy"], nodes["memset"], nodes["host"]
    return {
        "launch": lambda: graph_exec.launch(stream),
        "launch_nowait": lambda: graph_exec.launch_nowait(stream),
        "upload": lambda: graph_exec.upload(stream),
        "upload_nowait": lambda: graph_exec.upload_nowait(stream),
        "destroy": graph_exec.destroy,
        "update": lambda: graph_exec.update(graph),
        "set_kernel_node_params": lambda: graph_exec.set_kernel_node_params(
            k, put, 1, 1, (1, 0, buf)
        ),
        "set_memcpy_node_params": lambda: graph_exec.set_memcpy_node_params(c, host, buf, 8),
        "set_memset_node_params": lambda: graph_exec.set_memset_node_params(s, buf, 1, 8),
        "set_host_node_params": lambda: graph_exec.set_host_node_params(h, print),
        "set_event_record_node_event": lambda: graph_exec.set_event_record_node_event(
            nodes["record"], event
        ),
        "set_event_wait_node_event": lambda: graph_exec.set_event_wait_node_event(
            nodes["wait"], event
        ),
        "set_child_graph_node_params": lambda: graph_exec.set_child_graph_node_params(
            nodes["child"], child
        ),
        "set_node_enabled": lambda: graph_exec.set_node_enabled(k, False),
        "node_enabled": lambda: graph_exec.node_enabled(k),
    }


def _every_kind_graph(device: ahg.Device) -> tuple[ahg.Graph, dict[str, ahg.GraphNode]]:
    buf = device.malloc(64)
    host = np.zeros(8, dtype=np.uint8)
    event = device.create_event()
    graph, child = ahg.Graph(), ahg.Graph()
    _MADE.extend((buf, event, graph, child))
    nodes = {
        "kernel": graph.add_kernel_node(put, 1, 1, (1, 0, buf)),
        "memcpy": graph.add_memcpy_node(host, buf, 8),
        "memset": graph.add_memset_node(buf, 0, 8),
        "host": graph.add_host_node(print),
        "record": graph.add_event_record_node(event),
        "wait": graph.add_event_wait_node(event),
        "child": graph.add_child_graph_node(child),
        "empty": graph.add_empty_node(),
    }
    return graph, nodes


CALL_NAMES = [
    "launch",
    "launch_nowait",
    "upload",
    "upload_nowait",
    "destroy",
    "update",
    "set_kernel_node_params",
    "set_memcpy_node_params",
    "set_memset_node_params",
    "set_host_node_params",
    "set_event_record_node_event",
    "set_event_wait_node_event",
    "set_child_graph_node_params",
    "set_node_enabled",
    "node_enabled",
]


@pytest.mark.asyncio
@pytest.mark.parametrize("name", CALL_NAMES)
async def test_every_call_on_a_destroyed_exec_is_invalid_value(
    device: ahg.Device, name: str
) -> None:
    graph, nodes = _every_kind_graph(device)
    graph_exec = graph.instantiate()
    calls = _exec_calls(graph_exec, graph, nodes, device)
    graph_exec.destroy()
    launches = graph_exec.statistics().launches
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        await _call(calls[name])
    assert graph_exec.statistics().launches == launches
    assert graph_exec.statistics().state == "closed"


@pytest.mark.asyncio
async def test_launch_on_a_destroyed_stream_is_context_is_destroyed(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await graph_exec.launch(stream)
    with pytest.raises(ahg.ContextIsDestroyed):
        graph_exec.launch_nowait(stream)
    assert graph_exec.statistics().launches == 0
    assert graph_exec.statistics().signal_pool.acquires == 0
    destroy(graph, graph_exec)


@pytest.mark.asyncio
async def test_launch_on_another_devices_stream_runs_on_the_exec_device() -> None:
    # HIP's DependencyGraphDeviceCtxtChg: the launch crosses devices (tests/test_multi_device.py
    # covers ordering and failures); only an upload stays tied to the executable's device.
    ahg.configure_devices(2)
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()  # device 0 by default
    stream = ahg.get_device(1).create_stream()
    await (await graph_exec.launch(stream))
    assert graph_exec.statistics().launches == 1
    with pytest.raises(ahg.InvalidValue, match="device 0"):
        await graph_exec.upload(stream)
    graph_exec.destroy()
    stream.destroy()
    destroy(graph)


@pytest.mark.asyncio
async def test_an_exec_for_another_device_runs_there() -> None:
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    out = device1.malloc(8)
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph.add_kernel_node(put, 1, 1, (2, 0, out), deps=[root])
    before0, before1 = device0.memory.bytes_in_use, device1.memory.bytes_in_use
    graph_exec = graph.instantiate(device=device1)
    arena = graph_exec.statistics().arena.bytes_reserved
    assert graph_exec.device is device1
    assert device0.memory.bytes_in_use == before0  # the argument arena lives on device 1
    assert device1.memory.bytes_in_use == before1 + arena
    stream0, stream1 = device0.create_stream(), device1.create_stream()
    with pytest.raises(ahg.InvalidValue, match="device 1"):
        await graph_exec.upload(stream0)
    await (await graph_exec.launch(stream1))
    assert value_at(device1, out) == 2
    graph_exec.destroy()
    assert device1.memory.bytes_in_use == before1
    destroy(out, graph, stream0, stream1)


def test_executables_have_no_public_constructor() -> None:
    with ahg.Graph() as graph, pytest.raises(TypeError, match="instantiate"):
        ahg.GraphExec(graph, 0, ahg.get_device(0), {}, object())


# -- instantiate: flags, upload, cycles ------------------------------------------------------


def _counts(device: ahg.Device) -> tuple[int, int, int]:
    return len(EXECS), len(STREAMS), device.memory.bytes_in_use


@pytest.mark.parametrize("flags", [3, 5, 6, 9, 10, 12, 15, 16, -1])
def test_flag_combinations_and_unknown_flags_are_invalid_value(
    device: ahg.Device, flags: int
) -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(tick, 1, 1)
    before = _counts(device)
    with pytest.raises(ahg.InvalidValue, match="instantiate flags"):
        graph.instantiate(flags)
    assert _counts(device) == before
    assert not graph.statistics().instantiated
    destroy(graph)


@pytest.mark.parametrize("flags", ["1", 1.0, True, None])
def test_flags_must_be_integers(flags: Any) -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match="flags"):
        graph.instantiate(flags)
    destroy(graph)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "flag", [f for f in ahg.InstantiateFlags if f is not ahg.InstantiateFlags.DEVICE_LAUNCH]
)
async def test_each_single_flag_is_accepted(device: ahg.Device, flag: ahg.InstantiateFlags) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph.add_kernel_node(put, 1, 1, (2, 0, out), deps=[root])
    graph_exec = graph.instantiate(int(flag))
    assert graph_exec.flags is flag
    await run_once(graph_exec, device)
    assert value_at(device, out) == 2
    destroy(out, graph, graph_exec)


@pytest.mark.asyncio
async def test_use_node_priority_keeps_results_and_ordering(device: ahg.Device) -> None:
    out = device.malloc(8 * 3)
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    a = graph.add_kernel_node(put, 1, 1, (2, 1, out), deps=[root])
    b = graph.add_kernel_node(put, 1, 1, (3, 2, out), deps=[root])
    graph.add_empty_node(deps=[a, b])
    graph_exec = graph.instantiate(ahg.InstantiateFlags.USE_NODE_PRIORITY)
    assert graph_exec.statistics().strands == 2
    await run_once(graph_exec, device)
    assert device.view(out, np.int64, 3).tolist() == [1, 2, 3]
    destroy(out, graph, graph_exec)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("priorities", "watched", "round_robin", "by_urgency"),
    [
        # the most urgent branch (-1) goes onto the launch stream
        ((0, -1), 2, 1, 0),
        # a branch of the least urgent priority (1, HIP's Low) declares it, so the branch of
        # the default priority 0 goes first
        ((1, 0), 1, 0, 1),
    ],
    ids=["urgent-first", "least-urgent-last"],
)
async def test_use_node_priority_orders_branches_by_their_declared_priority(
    device: ahg.Device,
    priorities: tuple[int, int],
    watched: int,
    round_robin: int,
    by_urgency: int,
) -> None:
    out = device.malloc(8 * 3)
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    for slot, priority in enumerate(priorities, 1):
        node = graph.add_kernel_node(
            put, 1, 1, (slot + 1, slot, out), deps=[root], priority=priority
        )
        assert node.params.priority == priority

    def strand_of_watched(graph_exec: ahg.GraphExec) -> int:
        (segment,) = [s for s in graph_exec.plan.segments if s.nodes == [watched]]
        return segment.strand

    plain = graph.instantiate()
    by_priority = graph.instantiate(ahg.InstantiateFlags.USE_NODE_PRIORITY)
    assert strand_of_watched(plain) == round_robin  # the branches in the order they were added
    assert strand_of_watched(by_priority) == by_urgency
    await run_once(by_priority, device)
    assert device.view(out, np.int64, 3).tolist() == [1, 2, 3]
    plain.destroy()
    by_priority.destroy()
    graph.destroy()
    device.free(out)


@pytest.mark.asyncio
@pytest.mark.parametrize(("inner", "outer", "child_strand"), [(-1, 0, 0), (0, 1, 0), (1, 0, 1)])
async def test_use_node_priority_counts_the_kernels_of_a_child_graph(
    device: ahg.Device, inner: int, outer: int, child_strand: int
) -> None:
    # HIP: a child graph node's segment declares the most urgent priority among the child
    # graph's segments, here nested one level deeper still.
    out = device.malloc(8 * 3)
    graph = ahg.Graph()
    root = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph.add_kernel_node(put, 1, 1, (2, 1, out), deps=[root], priority=outer)
    innermost = ahg.Graph()
    innermost.add_kernel_node(put, 1, 1, (3, 2, out), priority=inner)
    middle = ahg.Graph()
    middle.add_empty_node()
    middle.add_child_graph_node(innermost)
    graph.add_child_graph_node(middle, deps=[root])  # node 2
    graph_exec = graph.instantiate(ahg.InstantiateFlags.USE_NODE_PRIORITY)
    (segment,) = [s for s in graph_exec.plan.segments if s.nodes == [2]]
    assert segment.strand == child_strand
    await run_once(graph_exec, device)
    assert device.view(out, np.int64, 3).tolist() == [1, 2, 3]
    destroy(out, graph, graph_exec, middle, innermost)


@pytest.mark.asyncio
async def test_upload_validates_and_does_no_work(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(put, 1, 1, (4, 0, out))
    graph_exec = graph.instantiate(ahg.InstantiateFlags.UPLOAD)
    stream = device.create_stream()
    before = stream.statistics().submitted
    memory = device.memory.bytes_in_use

    assert await graph_exec.upload(stream) is None
    assert await graph_exec.upload() is None  # the null stream
    graph_exec.upload_nowait(stream)  # the synchronous twin: the same checks, never NotReady
    graph_exec.upload_nowait()
    assert stream.statistics().submitted == before
    assert device.memory.bytes_in_use == memory
    assert graph_exec.statistics().launches == 0
    assert value_at(device, out) == 0

    await (await graph_exec.launch(stream))
    assert value_at(device, out) == 4
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await graph_exec.upload(stream)
    with pytest.raises(ahg.ContextIsDestroyed):
        graph_exec.upload_nowait(stream)
    destroy(out, graph, graph_exec)


def test_a_graph_with_a_cycle_is_invalid_value_at_instantiate_and_nothing_is_created(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    a = graph.add_kernel_node(tick, 1, 1)
    b = graph.add_kernel_node(tick, 1, 1, deps=[a])
    c = graph.add_kernel_node(tick, 1, 1, deps=[b])
    graph.add_dependencies(c, a)
    before = _counts(device)
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    assert _counts(device) == before
    assert not graph.statistics().instantiated

    graph.remove_dependencies(c, a)
    graph_exec = graph.instantiate()  # the same graph instantiates once the cycle is gone
    assert len(EXECS) == before[0] + 1
    destroy(graph, graph_exec)


def test_a_cycle_inside_a_child_graph_is_invalid_value_at_instantiate(device: ahg.Device) -> None:
    child = ahg.Graph()
    x = child.add_empty_node()
    y = child.add_empty_node(deps=[x])
    child.add_dependencies(y, x)
    graph = ahg.Graph()
    graph.add_child_graph_node(child)
    before = _counts(device)
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    assert _counts(device) == before
    destroy(child, graph)


@pytest.mark.asyncio
async def test_instantiate_copies_the_graph(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph_exec = graph.instantiate()
    node.set_kernel_params(put, 1, 1, (2, 0, out))  # edits after instantiate...
    graph.add_kernel_node(put, 1, 1, (3, 0, out), deps=[node])
    await run_once(graph_exec, device)
    assert value_at(device, out) == 1  # ...do not reach the executable
    assert graph_exec.statistics().nodes == 1
    destroy(out, graph, graph_exec)


# -- memory nodes ----------------------------------------------------------------------------

MEM_N = 16


def _mem_graph(
    device: ahg.Device, host: np.ndarray, log: list[int], *, with_free: bool
) -> ahg.Graph:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(MEM_N * 8)
    ptr = alloc.params.ptr
    fill = graph.add_kernel_node(iota, 1, MEM_N, (MEM_N, 3, ptr), deps=[alloc])
    copy = graph.add_memcpy_node(host, ptr, deps=[fill])
    probe = graph.add_host_node(lambda: log.append(device.memory.bytes_in_use), deps=[copy])
    if with_free:
        graph.add_mem_free_node(ptr, deps=[probe])
    return graph


@pytest.mark.asyncio
async def test_memory_nodes_allocate_and_free_on_every_launch(device: ahg.Device) -> None:
    baseline = device.memory.bytes_in_use
    host = np.zeros(MEM_N, dtype=np.int64)
    in_use: list[int] = []
    graph = _mem_graph(device, host, in_use, with_free=True)
    graph_exec = graph.instantiate()
    arena = graph_exec.statistics().arena.bytes_reserved
    assert device.memory.bytes_in_use == baseline + arena  # reserved, not allocated yet
    stream = device.create_stream()

    for _ in range(3):
        host[:] = 0
        await (await graph_exec.launch(stream))
        assert host.tolist() == [3 * i for i in range(MEM_N)]
        # The free node gave the memory back to the device's graph pool, which keeps it.
        assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
        assert device.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent) == MEM_N * 8
        assert device.memory.bytes_in_use == baseline + arena + MEM_N * 8
    assert in_use == [baseline + arena + MEM_N * 8] * 3  # allocated while the graph ran
    assert device.graph_mem_trim() == MEM_N * 8
    assert device.memory.bytes_in_use == baseline + arena

    with pytest.raises(ahg.NotSupported):
        graph.instantiate()  # a graph with memory nodes instantiates once
    graph_exec.destroy()
    graph.destroy()
    assert device.memory.bytes_in_use == baseline
    assert device.memory.statistics().reservations == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_relaunch_without_a_free_node_is_invalid_value(device: ahg.Device) -> None:
    baseline = device.memory.bytes_in_use
    host = np.zeros(MEM_N, dtype=np.int64)
    graph = _mem_graph(device, host, [], with_free=False)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert host[1] == 3
    with pytest.raises(ahg.InvalidValue, match="never freed"):
        await graph_exec.launch(stream)
    assert graph_exec.statistics().launches == 1
    graph_exec.destroy()  # the executable owns the allocation and returns it (to the pool)
    graph.destroy()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    device.graph_mem_trim()
    assert device.memory.bytes_in_use == baseline
    assert device.memory.statistics().reservations == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_relaunch_without_a_free_node_is_refused_even_back_to_back(
    device: ahg.Device,
) -> None:
    host = np.zeros(MEM_N, dtype=np.int64)
    graph = _mem_graph(device, host, [], with_free=False)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    first = await graph_exec.launch(stream)  # still in flight: its block cannot be free yet
    before = graph_exec.statistics()
    with pytest.raises(ahg.InvalidValue, match="never freed"):
        await graph_exec.launch(stream)
    with pytest.raises(ahg.InvalidValue, match="never freed"):
        graph_exec.launch_nowait(stream)
    assert graph_exec.statistics() == before  # the answer never depends on timing
    await first
    assert host[1] == 3
    graph_exec.destroy()
    graph.destroy()
    destroy(stream)


@pytest.mark.asyncio
async def test_auto_free_on_launch_allows_relaunch_without_a_free_node(device: ahg.Device) -> None:
    baseline = device.memory.bytes_in_use
    host = np.zeros(MEM_N, dtype=np.int64)
    in_use: list[int] = []
    graph = _mem_graph(device, host, in_use, with_free=False)
    graph_exec = graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH)
    arena = graph_exec.statistics().arena.bytes_reserved
    stream = device.create_stream()
    for _ in range(3):
        host[:] = 0
        await (await graph_exec.launch(stream))
        assert host.tolist() == [3 * i for i in range(MEM_N)]
    # Each launch freed the previous allocation first: never two at once.
    assert in_use == [baseline + arena + MEM_N * 8] * 3
    graph_exec.destroy()
    graph.destroy()
    device.graph_mem_trim()
    assert device.memory.bytes_in_use == baseline
    assert device.memory.statistics().reservations == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_relaunch_after_the_user_frees_the_graph_allocation(device: ahg.Device) -> None:
    baseline = device.memory.bytes_in_use
    host = np.zeros(MEM_N, dtype=np.int64)
    graph = _mem_graph(device, host, [], with_free=False)
    ptr = graph.nodes()[0].params.ptr
    graph_exec = graph.instantiate()
    arena = graph_exec.statistics().arena.bytes_reserved
    stream = device.create_stream()
    for _ in range(2):
        host[:] = 0
        await (await graph_exec.launch(stream))
        assert host.tolist() == [3 * i for i in range(MEM_N)]
        assert device.memory.bytes_in_use == baseline + arena + MEM_N * 8
        device.free(ptr)  # "free them", as the relaunch error asks: the next launch may go
        assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
        assert device.graph_mem_trim() == MEM_N * 8
        assert device.memory.bytes_in_use == baseline + arena
    graph_exec.destroy()
    graph.destroy()
    assert device.memory.bytes_in_use == baseline
    assert device.memory.statistics().reservations == 0
    destroy(stream)


# -- simulated time --------------------------------------------------------------------------


def _timed_graph(device: ahg.Device, host: np.ndarray) -> tuple[ahg.Graph, ahg.DevicePtr]:
    buf = device.malloc(host.nbytes)
    graph = ahg.Graph()
    upload = graph.add_memcpy_node(buf, host)
    quick = graph.add_kernel_node(tick, 1, 1, deps=[upload])
    slow = graph.add_kernel_node(slow_tick, 1, 1, deps=[upload])
    join = graph.add_kernel_node(tick, 1, 1, deps=[quick, slow])
    graph.add_memcpy_node(host, buf, deps=[join])
    return graph, buf


async def _launch_ends(device: ahg.Device, *, back_to_back: bool) -> list[int]:
    host = np.zeros(1024, dtype=np.float32)
    graph, buf = _timed_graph(device, host)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    handles = []
    for _ in range(3):
        handles.append(await graph_exec.launch(stream))
        if not back_to_back:
            await handles[-1]
    await stream.synchronize()
    ends = [h.end_ns for h in handles]
    assert all(end is not None for end in ends)
    destroy(graph_exec, graph, stream, buf)
    return ends  # type: ignore[return-value]


@pytest.mark.asyncio
async def test_the_same_graph_launched_again_takes_the_same_simulated_time(
    device: ahg.Device,
) -> None:
    cost = device.properties.cost
    copy = cost.copy_ns(4096, ahg.CopyKind.HostToDevice)
    # upload, the slower of the two arms, the join, download
    critical_path = copy + (cost.kernel_launch_ns + 5_000) + (cost.kernel_launch_ns + 1_000) + copy

    ends = await _launch_ends(device, back_to_back=False)
    durations = [ends[0], ends[1] - ends[0], ends[2] - ends[1]]  # the device starts at t=0
    assert durations == [critical_path] * 3

    ahg.configure_devices(1)  # a fresh device: the same program gives the same timeline
    assert await _launch_ends(ahg.get_device(0), back_to_back=False) == ends
    ahg.configure_devices(1)  # launches enqueued back to back run back to back
    assert await _launch_ends(ahg.get_device(0), back_to_back=True) == ends
