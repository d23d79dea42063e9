"""Misuse of prompt release, the collector's bulk-build pause and the capture fast path.

Each test does something a careless or adversarial program does (bad launch arguments on a
capturing stream's remembered shape, freed executables' methods, destructors that raise,
builds cancelled, switched off or spread over threads and loops) and checks that the
registries, the device memory, the capture statistics and the collector's switch are exactly
as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause
from ahipgraph.graph import graph as graph_module
from ahipgraph.graph.node import NODES
from ahipgraph.runtime import capture_state

SMALL_BULK = 40


@ahg.kernel
def add_one(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    x[:n] += 1


@ahg.kernel
def noop(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing."""


def _counts(device: ahg.Device) -> tuple[Any, ...]:
    return (NODES.statistics().live, device.memory_info(), capture_state.statistics())


def _assert_back_to(device: ahg.Device, before: tuple[Any, ...]) -> None:
    """Nodes, memory and captures as they were, and the collector on and not paused."""
    assert _counts(device) == before
    assert gc.isenabled()
    assert not gcpause.is_paused()


@pytest.fixture
def small_bulk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(graph_module, "BULK_BUILD_NODES", SMALL_BULK)
    assert gc.isenabled()
    assert not gcpause.is_paused()
    yield
    assert gc.isenabled()
    assert not gcpause.is_paused(), "the collector was left paused"


# -- the capture fast path: bad launches after a remembered shape ---------------------------

BAD_LAUNCHES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("bool grid", (True, 4), {}),
    ("bool block", (1, True), {}),
    ("negative grid", (-1, 4), {}),
    ("zero block", (1, 0), {}),
    ("huge grid", (2**63, 4), {}),
    ("huge block", (1, 2**40), {}),
    ("None grid", (None, 4), {}),
    ("negative shared", (1, 4), {"shared_mem": -1}),
    ("huge shared", (1, 4), {"shared_mem": 2**62}),
    ("bool shared", (1, 4), {"shared_mem": True}),
    ("priority None", (1, 4), {"priority": None}),
]


def _general_outcome(x: ahg.DevicePtr, grid_block: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """What a plain graph's add_kernel_node says of the same launch (type of error or None)."""
    graph = ahg.Graph()
    try:
        graph.add_kernel_node(add_one, *grid_block, (x, 4), **kw)
    except Exception as exc:
        return type(exc)
    finally:
        graph.destroy()
    return None


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("what", "grid_block", "kw"), BAD_LAUNCHES, ids=[b[0] for b in BAD_LAUNCHES]
)
async def test_a_bad_launch_after_a_remembered_shape_fails_as_the_general_path(
    device: ahg.Device, what: str, grid_block: tuple[Any, ...], kw: dict[str, Any]
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    stream.begin_capture()
    for _ in range(3):  # the stream remembers (add_one, 1, 4, 0)
        await stream.launch_kernel(add_one, 1, 4, (x, 4))
    before = NODES.statistics()
    info = stream.capture_info()
    assert info.graph is not None
    nodes_before = len(info.graph.nodes())
    del info
    raised: type[BaseException] | None = None
    try:
        await stream.launch_kernel(add_one, *grid_block, (x, 4), **kw)
    except Exception as exc:
        raised = type(exc)
    status = stream.is_capturing()
    if status is ahg.CaptureStatus.ACTIVE:
        info = stream.capture_info()
        assert info.graph is not None
        grew = len(info.graph.nodes()) - nodes_before
        del info
        assert grew == (0 if raised else 1), what
        if raised:
            assert NODES.statistics() == before
    try:
        graph = stream.end_capture()
    except ahg.StreamCaptureInvalidated:
        graph = None
    else:
        graph.destroy()
    stream.destroy()
    general = _general_outcome(x, grid_block, kw)
    device.free(x)
    # The capture refuses exactly what the graph refuses (the capture may invalidate itself).
    assert (raised is None) == (general is None), (what, raised, general)


@pytest.mark.asyncio
async def test_bad_arguments_after_a_remembered_shape_leave_the_capture_as_it_was(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    bad_args: list[Any] = [
        None,
        (),
        (x,),
        (x, 4, 5),
        (x, "four"),
        (x, 2**70),
        7,
        (x, True),
        (x, 4.5),
    ]
    for args in bad_args:
        with pytest.raises(Exception):  # noqa: B017 - each its own kind
            await stream.launch_kernel(add_one, 1, 4, args)
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    graph = stream.end_capture()
    kinds = [node.type for node in graph.nodes()]
    # Either the bad launches invalidated nothing and three nodes form a chain, or it raised.
    assert len(kinds) == 3
    order = graph.nodes()
    assert [n.dependencies() for n in order] == [[], [order[0]], [order[1]]]
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    assert _counts(device)[0] == before[0]
    assert _counts(device)[2] == before[2]
    view = device.to_host(x, 16) if hasattr(device, "to_host") else None
    del view
    device.free(x)


@pytest.mark.asyncio
async def test_a_launch_after_the_capture_graph_is_destroyed_refuses(device: ahg.Device) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    info = stream.capture_info()
    assert info.graph is not None
    info.graph.destroy()
    del info
    with pytest.raises((ahg.InvalidValue, ahg.StreamCaptureInvalidated)):
        await stream.launch_kernel(add_one, 1, 4, (x, 4))  # the remembered shape
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
async def test_a_launch_after_its_dependency_node_is_destroyed_refuses(
    device: ahg.Device,
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    info = stream.capture_info()
    assert info.graph is not None
    assert len(info.dependencies) == 1
    last = info.dependencies[0]
    graph = info.graph
    del info
    before = NODES.statistics()
    last.destroy()
    after_destroy = NODES.statistics()
    raised = None
    try:
        await stream.launch_kernel(add_one, 1, 4, (x, 4))
    except Exception as exc:
        raised = exc
    assert raised is not None, "a launch after a destroyed node was accepted"
    assert NODES.statistics() == after_destroy
    assert after_destroy.live == before.live - 1
    with pytest.raises(ahg.HipError):
        stream.end_capture()
    assert graph.destroyed or len(graph.nodes()) == 1
    if not graph.destroyed:
        graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_cancelled_capturing_task_leaves_counts_and_collector_as_before(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    started = asyncio.Event()
    hold = asyncio.Event()

    async def capture() -> None:
        async with stream.capture():
            for _ in range(5):
                await stream.launch_kernel(add_one, 1, 4, (x, 4))
            started.set()
            await hold.wait()

    task = asyncio.ensure_future(capture())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    stream.destroy()
    device.free(x)
    _assert_back_to(device, before)


# -- freed executables ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_every_method_of_a_freed_executable_refuses_without_reference_errors(
    device: ahg.Device,
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(add_one, 1, 4, (x, 4))
    graph_exec = graph.instantiate()
    completion = await graph_exec.launch(stream)
    await completion
    graph_exec.destroy()
    gc.collect()
    calls: list[tuple[str, Any]] = [
        ("launch_nowait", lambda: graph_exec.launch_nowait(stream)),
        (
            "set_kernel_node_params",
            lambda: graph_exec.set_kernel_node_params(node, add_one, 1, 4, (x, 4)),
        ),
        ("set_node_enabled", lambda: graph_exec.set_node_enabled(node, False)),
        ("node_enabled", lambda: graph_exec.node_enabled(node)),
        ("update", lambda: graph_exec.update(graph)),
        ("kernel_node_attribute", lambda: graph_exec.kernel_node_attribute(node, 1)),
        ("destroy", graph_exec.destroy),
    ]
    for name, call in calls:
        with pytest.raises(ahg.InvalidValue):
            call()
        assert name
    with pytest.raises(ahg.HipError):
        await graph_exec.launch(stream)
    with pytest.raises(ahg.HipError):
        await graph_exec.launch(None)
    assert "destroy" in repr(graph_exec).lower() or "closed" in repr(graph_exec).lower()
    # Inspection still answers on a freed executable, through the launcher's weak proxy.
    assert graph_exec.statistics().state == "closed"
    assert graph_exec.in_flight == 0
    assert graph_exec.plan is not None
    assert graph_exec.plan_dot().startswith("digraph")
    assert not graph_exec.alive
    assert repr(completion)
    await completion  # awaiting a finished launch of a freed executable again
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_a_completion_outliving_its_freed_executable_still_answers(
    device: ahg.Device,
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (x, 4))
    graph_exec = graph.instantiate()
    completion = await graph_exec.launch(stream)
    exec_ref = weakref.ref(graph_exec)
    graph_exec.destroy()
    del graph_exec
    await completion
    gc.collect()
    assert exec_ref() is None
    assert repr(completion)
    assert completion.done()
    await completion
    await stream.synchronize()
    graph.destroy()
    stream.destroy()
    device.free(x)


class _Boom(BaseException):
    """Not an Exception: a destructor raising something a bare ``except Exception`` misses."""


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", [RuntimeError, _Boom])
async def test_a_user_object_destructor_raising_on_exec_destroy_leaves_counts(
    device: ahg.Device, kind: type[BaseException]
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    ran: list[str] = []

    def destructor(_data: object) -> None:
        ran.append("ran")
        raise kind("destructor")

    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (x, 4))
    obj = ahg.UserObject(destructor)
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    graph.destroy()
    exec_ref = weakref.ref(graph_exec)
    with pytest.raises(kind):
        graph_exec.destroy()
    assert ran == ["ran"]
    assert not graph_exec.alive
    del graph_exec, obj
    gc.collect()
    assert exec_ref() is None
    stream.destroy()
    device.free(x)
    _assert_back_to(device, before)


@pytest.mark.asyncio
async def test_a_host_node_raising_base_exception_then_destroy(device: ahg.Device) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()

    def host(_arg: object) -> None:
        raise _Boom("host")

    graph = ahg.Graph()
    first = graph.add_kernel_node(add_one, 1, 4, (x, 4))
    graph.add_host_node(host, (None,), deps=[first])
    graph_exec = graph.instantiate()
    completion = await graph_exec.launch(stream)
    graph_exec.destroy()
    with pytest.raises(BaseException):  # noqa: B017 - whatever it reports
        await completion
    del completion, graph_exec
    with pytest.raises(BaseException):  # noqa: B017
        await stream.synchronize()
    graph.destroy()
    stream.destroy()
    device.free(x)
    gc.collect()
    assert _counts(device) == before


# -- the collector's pause -----------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_program_switching_the_collector_off_mid_burst_keeps_it_off() -> None:
    graph = ahg.Graph()
    for i in range(SMALL_BULK + 1):
        graph.add_kernel_node(noop, 1, 1, (i,))
    assert gcpause.is_paused()  # the build paused it
    assert gc.isenabled()  # through the thresholds: the switch is still the program's
    gc.disable()  # the program wants it off from now on
    try:
        await asyncio.sleep(0)
        program_choice_kept = not gc.isenabled()
    finally:
        gc.enable()
        graph.destroy()
    assert program_choice_kept


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_cancelled_building_task_ends_its_pause() -> None:
    built = asyncio.Event()
    graphs: list[ahg.Graph] = []

    async def build() -> None:
        graph = ahg.Graph()
        graphs.append(graph)
        for i in range(SMALL_BULK + 5):
            graph.add_kernel_node(noop, 1, 1, (i,))
        built.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(build())
    await built.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gc.isenabled()
    assert not gcpause.is_paused()
    graphs[0].destroy()


@pytest.mark.usefixtures("small_bulk")
def test_bulk_builds_on_two_loops_in_threads_and_one_without_a_loop() -> None:
    barrier = threading.Barrier(3)
    errors: list[BaseException] = []
    graphs: list[ahg.Graph] = []
    lock = threading.Lock()

    def build() -> None:
        graph = ahg.Graph()
        with lock:
            graphs.append(graph)
        for i in range(SMALL_BULK * 3):
            graph.add_kernel_node(noop, 1, 1, (i,))

    async def on_loop() -> None:
        barrier.wait()
        for _ in range(3):
            build()
            await asyncio.sleep(0)

    def thread_main(with_loop: bool) -> None:
        try:
            if with_loop:
                asyncio.run(on_loop())
            else:
                barrier.wait()
                build()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread_main, args=(w,)) for w in (True, True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert gc.isenabled()
    # The loops' pauses ended at their next iterations. The thread without a loop may have
    # left a watched pause (core.gcpause): the first young pass that finds its graph no
    # bigger ends it.
    gc.collect(0)
    gc.collect(0)
    assert not gcpause.is_paused()
    for graph in graphs:
        graph.destroy()


@pytest.mark.usefixtures("small_bulk")
def test_a_loop_stopped_right_after_a_burst_and_kept_open_ends_the_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker thread runs its loop until a build stops it, and returns; the loop stays open
    (run again later, or just not closed). The loop's stop check comes before the queued
    callback that would end the pause, so the collector's next young pass ends it: the pause
    holds back full passes for at most PAUSED_YOUNG allocations."""
    monkeypatch.setattr(gcpause, "PAUSED_YOUNG", 2_000)
    thresholds = gc.get_threshold()
    loops: list[asyncio.AbstractEventLoop] = []
    graph_box: list[ahg.Graph] = []

    def worker() -> None:
        loop = asyncio.new_event_loop()
        loops.append(loop)

        def build_then_stop() -> None:
            graph = ahg.Graph()
            graph_box.append(graph)
            for i in range(SMALL_BULK + 1):
                graph.add_kernel_node(noop, 1, 1, (i,))
            loop.stop()

        loop.call_soon(build_then_stop)
        loop.run_forever()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    try:
        assert gcpause.is_paused()  # the worker's loop is stopped, not running
        assert gc.get_threshold()[0] == 2_000
        kept = [[] for _ in range(5_000)]  # allocations enough for one young pass
        still_paused = gcpause.is_paused()
        del kept
    finally:
        loops[0].close()
        graph_box[0].destroy()
    assert not still_paused, "a stopped but open loop in another thread keeps the pause"
    assert gc.get_threshold() == thresholds
    assert gc.isenabled()
    assert not gcpause.is_paused()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_capture_burst_ended_by_an_error_ends_its_pause(device: ahg.Device) -> None:
    stream = device.create_stream()
    before = _counts(device)
    stream.begin_capture()
    for i in range(SMALL_BULK + 2):
        await stream.launch_kernel(noop, 1, 1, (i,))
    assert gcpause.is_paused()
    with pytest.raises(ahg.HipError):
        await stream.launch_kernel(noop, -1, 1, (0,))
    with contextlib.suppress(ahg.StreamCaptureInvalidated):
        stream.end_capture().destroy()
    await asyncio.sleep(0)
    assert gc.isenabled()
    assert not gcpause.is_paused()
    stream.destroy()
    assert _counts(device) == before


# -- spare slots -----------------------------------------------------------------------------


def test_destroyed_nodes_and_graphs_give_back_their_spares_across_threads() -> None:
    before = NODES.statistics()
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def churn(seed: int) -> None:
        try:
            barrier.wait()
            for round_ in range(20):
                graph = ahg.Graph()
                nodes = [graph.add_empty_node() for _ in range(37 + seed + round_)]
                for node in nodes[::3]:
                    node.destroy()
                for _ in range(5):
                    graph.add_empty_node()
                clone = graph.clone()
                graph.destroy()
                clone.destroy()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    after = NODES.statistics()
    assert after.live == before.live


def test_a_dropped_graph_with_spares_gives_them_back_when_collected() -> None:
    before = NODES.statistics()
    graph = ahg.Graph()
    for _ in range(9):  # a block of 8 spares after the 8th node
        graph.add_empty_node()
    node = graph.nodes()[0]
    node.destroy()  # its slot becomes a spare again
    graph.destroy()
    del graph, node
    gc.collect()
    after = NODES.statistics()
    assert after.live == before.live


# -- destroyed mid-flight, mid-capture, from elsewhere --------------------------------------


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_host_node_destroying_its_own_graph_and_executable_mid_flight(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for _ in range(SMALL_BULK):  # a bulk build: the collector is paused till the first await
        previous = [graph.add_kernel_node(add_one, 1, 4, (x, 4), deps=previous)]
    box: list[ahg.GraphExec] = []
    destroyed: list[str] = []

    def host(_arg: object) -> None:
        box[0].destroy()
        graph.destroy()
        destroyed.append("both")

    graph.add_host_node(host, (None,), deps=previous)
    graph_exec = graph.instantiate()
    box.append(graph_exec)
    exec_ref = weakref.ref(graph_exec)
    completion = await graph_exec.launch(stream)
    del graph_exec
    await completion
    assert destroyed == ["both"]
    del completion
    box.clear()
    assert exec_ref() is None
    await stream.synchronize()
    stream.destroy()
    device.free(x)
    _assert_back_to(device, before)


@pytest.mark.asyncio
async def test_ending_a_task_capture_from_an_os_thread_or_another_loop_leaves_it_running(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    outcomes: list[object] = []

    def from_thread() -> None:
        try:
            stream.end_capture()
            outcomes.append("ended")
        except BaseException as exc:
            outcomes.append(type(exc))

    async def from_loop() -> None:
        from_thread()

    thread = threading.Thread(target=from_thread)
    thread.start()
    thread.join()
    thread = threading.Thread(target=lambda: asyncio.run(from_loop()))
    thread.start()
    thread.join()
    if outcomes == ["ended", ahg.IllegalState] or "ended" in outcomes:
        pytest.skip(f"this capture mode may be ended anywhere: {outcomes}")
    assert all(isinstance(o, type) and issubclass(o, ahg.HipError) for o in outcomes), outcomes
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    await stream.launch_kernel(add_one, 1, 4, (x, 4))  # the remembered shape still works
    graph = stream.end_capture()
    order = graph.nodes()
    assert [n.dependencies() for n in order] == [[], [order[0]], [order[1]]]
    graph.destroy()
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
async def test_an_event_of_an_ended_capture_used_by_later_captures(device: ahg.Device) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    other = device.create_stream()
    event = device.create_event()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    await stream.record_event(event)
    first = stream.end_capture()
    first.destroy()
    # The ended capture's graph is gone; its event is waited on by new captures.
    other.begin_capture()
    with contextlib.suppress(ahg.HipError):
        await other.wait_event(event)
    await other.launch_kernel(add_one, 1, 4, (x, 4))
    second = other.end_capture()
    second.destroy()
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureIsolation):
        await stream.wait_event(event)  # recorded by this stream, outside this capture
    stream.end_capture().destroy()  # the refused wait left the capture as it was
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    event.destroy()
    other.destroy()
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
async def test_a_capturing_stream_destroyed_then_launched_on(device: ahg.Device) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    info = stream.capture_info()
    graph_ref = weakref.ref(info.graph) if info.graph is not None else None
    del info
    stream.destroy()
    with pytest.raises(ahg.HipError):
        await stream.launch_kernel(add_one, 1, 4, (x, 4))
    with pytest.raises(ahg.HipError):
        stream.end_capture()
    gc.collect()
    assert graph_ref is not None
    assert graph_ref() is None
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
async def test_a_destroyed_node_slot_reused_as_a_spare_does_not_revive_its_handle(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(5)]  # spares left after the 5th
    victim = nodes[2]
    hid = victim.hid
    victim.destroy()
    assert NODES.get(hid) is None
    fresh = [graph.add_empty_node() for _ in range(4)]
    assert NODES.get(hid) is None
    assert all(NODES.get(n.hid) is n for n in fresh)
    assert hid not in {n.hid for n in fresh}
    with pytest.raises(ahg.InvalidValue):
        victim.dependencies()
    graph.destroy()
    assert all(NODES.get(n.hid) is None for n in fresh)


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_cancelled_at_every_yield_of_a_build_launch_destroy_cycle(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    steps: list[int] = []

    async def cycle() -> None:
        graph = ahg.Graph()
        try:
            previous: list[ahg.GraphNode] = []
            for _ in range(SMALL_BULK + 3):
                previous = [graph.add_kernel_node(add_one, 1, 4, (x, 4), deps=previous)]
            steps.append(1)
            await asyncio.sleep(0)
            graph_exec = graph.instantiate()
            try:
                steps.append(2)
                completion = await graph_exec.launch(stream)
                steps.append(3)
                await completion
                steps.append(4)
                await graph_exec.launch(stream)
                steps.append(5)
                await stream.synchronize()
                steps.append(6)
            finally:
                graph_exec.destroy()
        finally:
            graph.destroy()

    for yields in range(12):
        steps.clear()
        task = asyncio.ensure_future(cycle())
        for _ in range(yields):
            await asyncio.sleep(0)  # explicit yields: the task runs that far
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await stream.synchronize()
        assert gc.isenabled()
        assert not gcpause.is_paused()
        assert _counts(device)[0] == before[0], (yields, steps)
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
async def test_update_and_setters_with_bad_arguments_leave_the_executable_usable(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(add_one, 1, 4, (x, 4))
    graph_exec = graph.instantiate()
    other = ahg.Graph()
    other_node = other.add_kernel_node(add_one, 1, 4, (x, 4))
    dead = ahg.Graph()
    dead.add_kernel_node(add_one, 1, 4, (x, 4))
    dead.destroy()
    nodes_before = NODES.statistics()
    bad_calls: list[tuple[str, Any]] = [
        ("update None", lambda: graph_exec.update(None)),
        ("update True", lambda: graph_exec.update(True)),
        ("update destroyed", lambda: graph_exec.update(dead)),
        (
            "params None node",
            lambda: graph_exec.set_kernel_node_params(None, add_one, 1, 4, (x, 4)),
        ),
        (
            "params other node",
            lambda: graph_exec.set_kernel_node_params(other_node, add_one, 1, 4, (x, 4)),
        ),
        (
            "params bool grid",
            lambda: graph_exec.set_kernel_node_params(node, add_one, True, 4, (x, 4)),
        ),
        (
            "params huge grid",
            lambda: graph_exec.set_kernel_node_params(node, add_one, 2**64, 4, (x, 4)),
        ),
        (
            "params negative block",
            lambda: graph_exec.set_kernel_node_params(node, add_one, 1, -4, (x, 4)),
        ),
        ("enabled None", lambda: graph_exec.set_node_enabled(None, False)),
        ("enabled other", lambda: graph_exec.set_node_enabled(other_node, False)),
        ("launch bool", lambda: graph_exec.launch_nowait(True)),
    ]
    for what, call in bad_calls:
        with pytest.raises((ahg.HipError, TypeError, ValueError)):
            call()
        assert what
    assert NODES.statistics() == nodes_before
    assert graph_exec.alive
    await (await graph_exec.launch(stream))
    assert graph_exec.statistics().launches == 1
    graph_exec.destroy()
    other.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
async def test_an_executable_destroyed_from_an_os_thread_with_launches_in_flight(
    device: ahg.Device,
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for _ in range(20):
        previous = [graph.add_kernel_node(add_one, 1, 4, (x, 4), deps=previous)]
    graph_exec = graph.instantiate()
    completions = [await graph_exec.launch(stream) for _ in range(3)]
    exec_ref = weakref.ref(graph_exec)
    holder = [graph_exec]
    del graph_exec
    errors: list[BaseException] = []

    def destroy() -> None:
        try:
            holder[0].destroy()
            graph.destroy()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=destroy)
    thread.start()
    thread.join()
    assert not errors
    holder.clear()
    for completion in completions:
        await completion
    del completions, completion
    await stream.synchronize()
    assert exec_ref() is None
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", [RuntimeError, _Boom])
async def test_an_unjoined_capture_whose_graph_destructor_raises_still_ends_cleanly(
    device: ahg.Device, kind: type[BaseException]
) -> None:
    before = _counts(device)
    x = device.malloc(16)
    stream = device.create_stream()
    other = device.create_stream()
    fork = device.create_event()

    def destructor(_data: object) -> None:
        raise kind("destructor")

    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 4, (x, 4))
    await stream.record_event(fork)
    await other.wait_event(fork)
    await other.launch_kernel(add_one, 1, 4, (x, 4))
    info = stream.capture_info()
    assert info.graph is not None
    graph_ref = weakref.ref(info.graph)
    info.graph.retain_user_object(ahg.UserObject(destructor), move=True)
    del info
    unraisable: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with pytest.raises(ahg.StreamCaptureUnjoined):
            stream.end_capture()  # the discarded graph's destructor runs here, contained
    finally:
        sys.unraisablehook = previous
    assert [type(u.exc_value) for u in unraisable] == [kind]  # reported, not raised
    unraisable.clear()  # the report's traceback is the last holder of the graph
    gc.collect()
    assert graph_ref() is None
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert other.is_capturing() is ahg.CaptureStatus.NONE
    await stream.launch_kernel(add_one, 1, 4, (x, 4))  # an ordinary launch again
    await stream.synchronize()
    fork.destroy()
    other.destroy()
    stream.destroy()
    device.free(x)
    assert _counts(device) == before


@pytest.mark.usefixtures("small_bulk")
def test_a_capture_and_a_plain_build_on_two_loops_in_threads(device: ahg.Device) -> None:
    """Two loops in two threads each pause the collector by a bulk build (one captured, on
    the device; one a plain graph, no device): the pauses are counted, and end."""
    before = _counts(device)
    x = device.malloc(16)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    sizes: list[int] = []

    async def capture() -> None:
        stream = device.create_stream()
        try:
            barrier.wait()
            for _ in range(3):
                stream.begin_capture()
                for _ in range(SMALL_BULK + 7):
                    await stream.launch_kernel(add_one, 1, 4, (x, 4))
                graph = stream.end_capture()
                sizes.append(len(graph.nodes()))
                graph_exec = graph.instantiate()
                await (await graph_exec.launch(stream))
                graph_exec.destroy()
                graph.destroy()
                await asyncio.sleep(0)
        finally:
            stream.destroy()

    async def plain() -> None:
        barrier.wait()
        for _ in range(3):
            graph = ahg.Graph()
            previous: list[ahg.GraphNode] = []
            for _ in range(SMALL_BULK + 9):
                previous = [graph.add_kernel_node(add_one, 1, 4, (x, 4), deps=previous)]
            sizes.append(len(graph.nodes()))
            graph.destroy()
            await asyncio.sleep(0)

    def thread_main(make: Any) -> None:
        try:
            asyncio.run(make())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread_main, args=(m,)) for m in (capture, plain)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert sorted(sizes) == [SMALL_BULK + 7] * 3 + [SMALL_BULK + 9] * 3
    assert gc.isenabled()
    assert not gcpause.is_paused()
    device.free(x)
    assert _counts(device) == before


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The collector's automatic passes off (an explicit collect still works)."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@pytest.mark.asyncio
@pytest.mark.usefixtures("collector_off")
async def test_a_failed_capture_whose_destructor_raises_frees_its_graph_at_once(
    device: ahg.Device,
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    other = device.create_stream()
    fork = device.create_event()

    def destructor(_data: object) -> None:
        raise RuntimeError("destructor")

    stream.begin_capture()
    await stream.record_event(fork)
    await other.wait_event(fork)
    await other.launch_kernel(add_one, 1, 4, (x, 4))
    info = stream.capture_info()
    assert info.graph is not None
    graph_ref = weakref.ref(info.graph)
    info.graph.retain_user_object(ahg.UserObject(destructor), move=True)
    del info
    unraisable: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with pytest.raises(ahg.StreamCaptureUnjoined):
            stream.end_capture()  # the destructor's error is reported, not raised
        sys.unraisablehook = previous
        assert [str(u.exc_value) for u in unraisable] == ["destructor"]
        unraisable.clear()  # the report's traceback was the graph's last holder
        freed_at_once = graph_ref() is None
    finally:
        sys.unraisablehook = previous
        gc.collect()
        fork.destroy()
        other.destroy()
        stream.destroy()
        device.free(x)
    assert freed_at_once


@pytest.mark.asyncio
@pytest.mark.usefixtures("collector_off")
async def test_an_executable_whose_destructor_raises_is_freed_at_once(
    device: ahg.Device,
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()

    def destructor(_data: object) -> None:
        raise RuntimeError("destructor")

    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (x, 4))
    graph.retain_user_object(ahg.UserObject(destructor), move=True)
    graph_exec = graph.instantiate()
    graph.destroy()  # the executable now holds the only reference to the user object
    await (await graph_exec.launch(stream))
    exec_ref = weakref.ref(graph_exec)
    try:
        with pytest.raises(RuntimeError, match="destructor"):
            graph_exec.destroy()
        del graph_exec
        freed_at_once = exec_ref() is None
    finally:
        gc.collect()
        stream.destroy()
        device.free(x)
    assert freed_at_once
