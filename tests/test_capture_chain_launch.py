"""``await stream.launch_kernel(...)`` on a capturing stream against ``launch_kernel_nowait``.

A captured chain of awaited launches is what capture does most (one stream, one dependency,
the same launch shape over and over) and what its fast paths serve. These tests hold the
awaited launch and the ``_nowait`` one to the same graph (types, edges, parameters, DOT) and
the same errors, and put the chain under misuse: other threads and loops, modes, cancellation,
adversarial arguments.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from ahipgraph.runtime import capture
from ahipgraph.runtime.capture_nodes import CapturedWork
from capture_helpers import NBYTES, N, affine, no_capture_left, on_thread


@pytest.fixture
def buf(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(NBYTES)
    yield ptr
    device.free(ptr)


def _dot(graph: ahg.Graph) -> str:
    """The verbose DOT with each node named by its position (ids and handles differ)."""
    position = {str(node.id): str(index) for index, node in enumerate(graph.nodes())}
    text = graph.to_dot(1).replace(f"graph_{graph.id}", "graph_G")
    text = text.replace(f"cluster_{graph.id}", "cluster_G")
    text = re.sub(r"node_(\d+)", lambda m: f"node_#{position[m[1]]}", text)
    return re.sub(r"\{(\d+) \| \d+\.\d+\}", lambda m: f"{{#{position[m[1]]} | handle}}", text)


def _shape(graph: ahg.Graph) -> list[tuple[Any, ...]]:
    nodes = graph.nodes()
    return [
        (node.type, node.params, [nodes.index(dep) for dep in node.dependencies()])
        for node in nodes
    ]


Launch = Callable[..., Awaitable[Any]]


def _launcher(stream: ahg.Stream, awaited: bool) -> Launch:
    """The awaited launch or the ``_nowait`` one."""

    async def launch(*args: Any, **kwargs: Any) -> Any:
        if awaited:
            return await stream.launch_kernel(*args, **kwargs)
        return stream.launch_kernel_nowait(*args, **kwargs)

    return launch


async def _program(device: ahg.Device, buf: ahg.DevicePtr, awaited: bool) -> ahg.Graph:
    """Chains, a fork and its join, other node kinds, other shapes and a prioritised stream."""
    main = device.create_stream()
    side = device.create_stream()
    urgent = device.create_stream(priority=-1)
    fork, join = device.create_event(), device.create_event()
    on_main, on_side = _launcher(main, awaited), _launcher(side, awaited)
    on_urgent = _launcher(urgent, awaited)
    main.begin_capture()
    for i in range(4):  # the first has no dependency; the rest are the chain
        await on_main(affine, N, 1, (N, 1, i, buf, buf))
    await on_main(affine, 7, 3, [N, 2, 0, buf, buf], shared_mem=64)  # another shape
    await on_main(affine, (N, 1, 1), ahg.Dim3(1), (N, 1, 1, buf, buf))  # Dim3s
    await main.memset(buf, 0, 8)  # another node kind in the chain
    await on_main(affine, N, 1, (N, 3, 0, buf, buf))
    await main.record_event(fork)
    await side.wait_event(fork)  # side joins the capture with main's one dependency
    await on_side(affine, N, 1, (N, 4, 0, buf, buf))
    await on_side(affine, N, 1, (N, 5, 0, buf, buf))
    await main.record_event(join)
    await urgent.wait_event(join)  # a prioritised stream: its launches carry priority -1
    await on_urgent(affine, N, 1, (N, 6, 0, buf, buf))
    await on_main(affine, N, 1, (N, 7, 0, buf, buf))
    await side.record_event(fork)
    await main.wait_event(fork)
    await urgent.record_event(join)
    await main.wait_event(join)  # main now has three dependencies
    await on_main(affine, N, 1, (N, 8, 0, buf, buf))
    await on_main(affine, N, 1, (N, 9, 0, buf, buf))
    graph = main.end_capture()
    for item in (main, side, urgent, fork, join):
        item.destroy()
    return graph


@pytest.mark.asyncio
async def test_awaited_and_nowait_launches_make_the_same_graph(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    graph = await _program(device, buf, awaited=True)
    reference = await _program(device, buf, awaited=False)
    assert _shape(graph) == _shape(reference)
    assert _dot(graph) == _dot(reference)
    kernels = [node for node in graph.nodes() if node.type is ahg.NodeType.Kernel]
    assert [node.params.args[1] for node in kernels if node.params.priority == -1] == [6]
    for made in (graph, reference):
        exec_ = made.instantiate()
        exec_.destroy()
        made.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_chain_work_is_light_reachable_and_refuses_waiting(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    first = await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    second = await stream.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
    made = CapturedWork(second._session, second.node, device)  # what the constructor gives
    for name in ("_signal", "_device", "_program", "_session", "node"):
        assert getattr(second, name) is getattr(made, name), name
    assert type(second) is CapturedWork
    assert second.node.dependencies() == [first.node]
    assert (second.exception(), second.start_ns, second.end_ns) == (None, None, None)
    assert repr(second) == f"<CapturedWork node={second.node!r}>"
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await second  # the same mistake as synchronising the capturing stream
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureUnsupported):
        first.done()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.destroy()
    no_capture_left()


# -- every error still comes out, and a failed launch changes nothing ------------------------------


def _counts(graph: ahg.Graph) -> tuple[Any, ...]:
    size = None if graph.destroyed else len(graph.nodes())
    return (size, NODES.statistics().live, GRAPHS.statistics().live)


async def _break_by_sync(stream: ahg.Stream, graph: ahg.Graph) -> None:
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.synchronize()


async def _break_by_destroyed_node(stream: ahg.Stream, graph: ahg.Graph) -> None:
    graph.nodes()[-1].destroy()  # the stream's one dependency is gone


async def _break_by_destroyed_graph(stream: ahg.Stream, graph: ahg.Graph) -> None:
    graph.destroy()


async def _break_by_device_sync(stream: ahg.Stream, graph: ahg.Graph) -> None:
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await stream.device.synchronize()


async def _break_by_malloc_elsewhere(stream: ahg.Stream, graph: ahg.Graph) -> None:
    # Another task (GLOBAL mode, the default) mallocs during a GLOBAL capture: invalidated.
    async def other() -> None:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            stream.device.malloc(8)

    await asyncio.create_task(other())


async def _break_by_malloc_on_thread(stream: ahg.Stream, graph: ahg.Graph) -> None:
    def other() -> None:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            stream.device.malloc(8)

    on_thread(other)


BREAKS = [
    _break_by_sync,
    _break_by_destroyed_node,
    _break_by_destroyed_graph,
    _break_by_device_sync,
    _break_by_malloc_elsewhere,
    _break_by_malloc_on_thread,
]


@pytest.mark.parametrize("brk", BREAKS, ids=[b.__name__[len("_break_by_") :] for b in BREAKS])
@pytest.mark.asyncio
async def test_a_broken_capture_fails_the_awaited_launch_as_the_nowait_one(
    device: ahg.Device, buf: ahg.DevicePtr, brk: Callable[..., Awaitable[None]]
) -> None:
    errors = []
    for awaited in (True, False):
        stream = device.create_stream()
        stream.begin_capture()
        launch = _launcher(stream, awaited)
        await launch(affine, N, 1, (N, 1, 0, buf, buf))
        await launch(affine, N, 1, (N, 1, 1, buf, buf))  # a chain of two
        graph = stream.capture_info().graph
        assert graph is not None
        await brk(stream, graph)
        before = _counts(graph)
        with pytest.raises(ahg.HipError) as caught:
            await launch(affine, N, 1, (N, 1, 2, buf, buf))
        assert _counts(graph) == before  # nothing added, nothing leaked
        message = str(caught.value).replace(repr(stream), "S")
        errors.append((type(caught.value), re.sub(r"id=\d+", "id=#", message)))
        if stream.is_capturing() is not ahg.CaptureStatus.NONE:
            with pytest.raises(ahg.HipError):
                stream.end_capture()  # invalidated (or a bad graph): discarded
        stream.destroy()
        if not graph.destroyed:
            graph.destroy()
    assert errors[0] == errors[1]
    no_capture_left()


@pytest.mark.asyncio
async def test_a_relaxed_or_thread_local_capture_survives_another_tasks_malloc(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    for mode in (ahg.CaptureMode.RELAXED, ahg.CaptureMode.THREAD_LOCAL):
        stream = device.create_stream()
        stream.begin_capture(mode)
        first = await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))

        async def other() -> None:
            device.free(device.malloc(8))  # not this task's capture, not GLOBAL: allowed

        await asyncio.create_task(other())
        on_thread(lambda: device.free(device.malloc(8)))
        second = await stream.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
        assert second.node.dependencies() == [first.node]
        graph = stream.end_capture()
        assert graph.nodes() == [first.node, second.node]
        graph.destroy()
        stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_a_forked_stream_chains_and_still_cannot_end_the_capture(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    origin, fork = device.create_stream(), device.create_stream()
    event = device.create_event()
    origin.begin_capture()
    root = await origin.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    await origin.record_event(event)
    await fork.wait_event(event)
    a = await fork.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
    b = await fork.launch_kernel(affine, N, 1, (N, 1, 2, buf, buf))
    assert (a.node.dependencies(), b.node.dependencies()) == ([root.node], [a.node])
    with pytest.raises(ahg.StreamCaptureUnmatched):
        fork.end_capture()
    with pytest.raises(ahg.StreamCaptureUnjoined):  # b was never joined back
        origin.end_capture()
    assert fork.is_capturing() is ahg.CaptureStatus.NONE  # it ended with its origin
    for item in (origin, fork, event):
        item.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_the_null_stream_still_refuses_while_a_blocking_stream_captures(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    with pytest.raises(ahg.StreamCaptureImplicit):
        await device.null_stream.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
    stream.end_capture().destroy()
    stream.destroy()
    no_capture_left()


# -- adversarial callers ---------------------------------------------------------------------------


class _Escape(BaseException):
    """Not an Exception: what an adversarial argument may raise."""


class _EscapingInt(int):
    def __index__(self) -> int:
        raise _Escape("argument conversion")

    def __int__(self) -> int:
        raise _Escape("argument conversion")


@pytest.mark.asyncio
async def test_bad_launches_on_the_chain_change_nothing_and_release_the_locks(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    first = await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    graph = stream.capture_info().graph
    assert graph is not None
    before = _counts(graph)
    bad: list[tuple[type[BaseException], Any]] = [
        (TypeError, (N, 1, 0, buf)),
        (ValueError, (N, 2**63, 0, buf, buf)),
        (TypeError, (N, True, 0, buf, buf)),
        (BaseException, (N, _EscapingInt(3), 0, buf, buf)),
    ]
    for error, args in bad:
        with pytest.raises(error):
            await stream.launch_kernel(affine, N, 1, args)
        assert _counts(graph) == before
        # Neither lock is left held: another thread takes both.
        assert on_thread(lambda: (capture.statistics(), len(graph.nodes()))) is not None
    with pytest.raises(ahg.InvalidConfiguration):
        await stream.launch_kernel(affine, 1, 1 << 20, (N, 1, 0, buf, buf))
    assert _counts(graph) == before
    assert stream.capture_info().dependencies == (first.node,)
    second = await stream.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
    assert second.node.dependencies() == [first.node]
    stream.end_capture().destroy()
    stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_a_launch_never_awaited_or_cancelled_before_it_ran_adds_nothing(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    first = await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    pending = stream.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
    pending.close()  # made, never awaited: the coroutine never ran
    task = asyncio.ensure_future(stream.launch_kernel(affine, N, 1, (N, 1, 2, buf, buf)))
    task.cancel()  # before its first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.capture_info().dependencies == (first.node,)
    graph = stream.end_capture()
    assert graph.nodes() == [first.node]
    graph.destroy()
    stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_threads_and_their_loops_launching_on_one_capturing_stream_make_one_chain(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    # Each thread runs its own event loop and awaits launches on the same capturing stream:
    # the capture lock serialises them, so every node follows exactly one other.
    stream = device.create_stream()
    stream.begin_capture(ahg.CaptureMode.RELAXED)
    await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    per_thread = 2000
    start = threading.Barrier(3)
    errors: list[BaseException] = []

    async def launches() -> None:
        for i in range(per_thread):
            await stream.launch_kernel(affine, N, 1, (N, 1, i, buf, buf))

    def run() -> None:
        try:
            start.wait()
            asyncio.run(launches())
        except BaseException as error:  # handed back to the test
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as CPython will: open every window
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    graph = stream.end_capture()
    nodes = graph.nodes()
    assert len(nodes) == 1 + 3 * per_thread
    assert [len(node.dependencies()) for node in nodes] == [0] + [1] * (3 * per_thread)
    assert all(len(node.dependents()) == 1 for node in nodes[:-1])  # one chain, no branch
    graph.destroy()
    stream.destroy()
    no_capture_left()


SHAPES: list[tuple[str, Any, Any, Any]] = [
    ("grid None", None, 1, 0),
    ("block None", N, None, 0),
    ("grid True", True, 1, 0),
    ("block False", N, False, 0),
    ("negative grid", -1, 1, 0),
    ("zero block", N, 0, 0),
    ("huge grid", 2**64, 1, 0),
    ("huge block", N, 2**31, 0),
    ("negative shared memory", N, 1, -1),
    ("huge shared memory", N, 1, 2**40),
    ("shared memory None", N, 1, None),
    ("shared memory a bool", N, 1, True),
]


@pytest.mark.parametrize(
    ("case", "grid", "block", "shared_mem"), SHAPES, ids=[case for case, *_ in SHAPES]
)
@pytest.mark.asyncio
async def test_bad_launch_shapes_on_the_chain_fail_as_the_nowait_launch(
    device: ahg.Device, buf: ahg.DevicePtr, case: str, grid: Any, block: Any, shared_mem: Any
) -> None:
    errors = []
    for awaited in (True, False):
        stream = device.create_stream()
        stream.begin_capture()
        launch = _launcher(stream, awaited)
        first = await launch(affine, N, 1, (N, 1, 0, buf, buf))
        await launch(affine, N, 1, (N, 1, 1, buf, buf))  # the stream's shape is remembered
        graph = stream.capture_info().graph
        assert graph is not None
        before = _counts(graph)
        with pytest.raises(Exception) as caught:
            await launch(affine, grid, block, (N, 1, 2, buf, buf), shared_mem=shared_mem)
        assert _counts(graph) == before
        errors.append((type(caught.value), str(caught.value)))
        last = await launch(affine, N, 1, (N, 1, 3, buf, buf))  # the chain goes on
        assert len(last.node.dependencies()) == 1
        assert last.node.dependencies()[0].dependencies() == [first.node]
        stream.end_capture().destroy()
        stream.destroy()
    assert errors[0] == errors[1]
    no_capture_left()
