"""Conformance of stream capture to HIP_SEMANTICS.md §2: the rules the
other capture tests leave open, each with a leak check after its failure paths.

* the null stream never joins a capture through an event (the legacy-stream rule);
* flags and modes take integers only: a float or a bool is refused like any bad value, and
  the refused call changes nothing;
* the unsafe-call matrix (``malloc`` under every calling mode against every capture mode,
  from the capturing task, another task and an OS thread), against HIP's table;
* a captured fork/join graph is an ordinary graph: clone, find in the clone, DOT, instantiate
  both, recapture and ``exec.update`` (and a topology change refused by update).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime import capture
from capture_helpers import NBYTES, Baseline, N, affine, host_view, no_capture_left, on_thread
from cleanup import destroy

MODES = [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL, ahg.CaptureMode.RELAXED]


# -- the null stream and events --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_null_stream_cannot_join_a_capture_through_an_event(device: ahg.Device) -> None:
    """Only a non-blocking stream captures, so the null stream is free; waiting on an event
    recorded in that capture would fork the legacy stream into it. Refused (Implicit), and the
    capture and the null stream are left exactly as they were."""
    capturing = device.create_stream(non_blocking=True)
    event = device.create_event()
    a = device.malloc(NBYTES)
    before = Baseline.take(device)
    capturing.begin_capture()
    fill = (await capturing.memset(a, 1, NBYTES)).node
    await capturing.record_event(event)
    during = capture.statistics()
    null = device.null_stream
    with pytest.raises(ahg.StreamCaptureImplicit):
        await null.wait_event(event)
    assert capture.statistics() == during  # no member was added
    assert null.is_capturing() is ahg.CaptureStatus.NONE  # no guard: nothing blocking captures
    assert capturing.capture_info().dependencies == (fill,)
    eager = await null.memset(a, 2, NBYTES)  # the null stream still runs eager work
    graph = capturing.end_capture()
    await eager
    assert graph.nodes() == [fill]
    graph.destroy()
    assert Baseline.take(device) == before
    assert device.view(a, "u1", 1)[0] == 2
    destroy(capturing, event, a)


@pytest.mark.asyncio
async def test_the_per_thread_stream_captures_and_guards_the_null_stream(
    device: ahg.Device,
) -> None:
    """``STREAM_PER_THREAD`` is an ordinary blocking stream (HIP resolves it before its
    null-stream check): it can capture, and while it does the null stream is Implicit."""
    stream = device.per_thread_stream()
    a = device.malloc(NBYTES)
    stream.begin_capture()
    work = await stream.memset(a, 7, NBYTES)
    with pytest.raises(ahg.StreamCaptureImplicit):
        device.null_stream.is_capturing()
    with pytest.raises(ahg.StreamCaptureImplicit):
        await device.null_stream.memset(a, 0, NBYTES)
    graph = stream.end_capture()
    assert graph.nodes() == [work.node]
    assert device.null_stream.is_capturing() is ahg.CaptureStatus.NONE
    graph.destroy()
    no_capture_left()
    destroy(a)


# -- integers only ---------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("flags", [1.0, 0.0, True, False, None, "1", -1, 2**64, 2])
async def test_update_capture_dependencies_flags_are_integers(
    device: ahg.Device, flags: Any
) -> None:
    stream = device.create_stream()
    a = device.malloc(NBYTES)
    stream.begin_capture()
    first = (await stream.memset(a, 1, NBYTES)).node
    second = (await stream.memset(a, 2, NBYTES)).node
    info = stream.capture_info()
    with pytest.raises(ahg.InvalidValue):
        stream.update_capture_dependencies([first], flags)
    assert stream.capture_info() == info  # the set stays (second,)
    assert stream.capture_info().dependencies == (second,)
    stream.update_capture_dependencies([first], np.int64(1))  # a numpy integer is an integer
    assert stream.capture_info().dependencies == (first,)
    stream.end_capture().destroy()  # `second` was set aside by SET: joined
    no_capture_left()
    destroy(stream, a)


@pytest.mark.asyncio
@pytest.mark.parametrize("flags", [1.0, 0.0, True, None, "0", -1, 2**64])
async def test_wait_event_flags_are_integers(device: ahg.Device, flags: Any) -> None:
    s0, s1 = device.create_stream(), device.create_stream()
    event = device.create_event()
    before = Baseline.take(device)
    s0.begin_capture()
    await s0.record_event(event)
    during = capture.statistics()
    with pytest.raises(ahg.InvalidValue):
        await s1.wait_event(event, flags)  # would fork s1 with flags 0
    with pytest.raises(ahg.InvalidValue):
        await s0.wait_event(event, flags)  # would add an EventWait node with flags 1
    assert s1.is_capturing() is ahg.CaptureStatus.NONE
    assert capture.statistics() == during
    graph = s0.end_capture()
    assert graph.nodes() == []
    graph.destroy()
    assert Baseline.take(device) == before
    destroy(s0, s1, event)


# -- the unsafe-call matrix ------------------------------------------------------------------------


def _tripped(capture_mode: ahg.CaptureMode, caller_mode: ahg.CaptureMode, same: bool) -> bool:
    """HIP §2.7, ``hipMalloc`` row: is a capture invalidated by a caller's unsafe call?

    Relaxed callers trip nothing; otherwise a non-relaxed capture of the caller's own thread,
    or (for a GLOBAL caller) any GLOBAL capture.
    """
    if caller_mode is ahg.CaptureMode.RELAXED:
        return False
    if same and capture_mode is not ahg.CaptureMode.RELAXED:
        return True
    return caller_mode is ahg.CaptureMode.GLOBAL and capture_mode is ahg.CaptureMode.GLOBAL


def _malloc_under(device: ahg.Device, mode: ahg.CaptureMode) -> bool:
    """``device.malloc`` under ``mode`` (restored after); True if it was allowed."""
    previous = ahg.exchange_capture_mode(mode)
    try:
        device.free(device.malloc(64))
        return True
    except ahg.StreamCaptureUnsupported:
        return False
    finally:
        ahg.exchange_capture_mode(previous)


@pytest.mark.asyncio
@pytest.mark.parametrize("capture_mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("caller_mode", MODES, ids=lambda m: m.name)
@pytest.mark.parametrize("where", ["same task", "other task", "os thread"])
async def test_malloc_matrix_of_capture_mode_caller_mode_and_caller(
    device: ahg.Device, capture_mode: Any, caller_mode: Any, where: str
) -> None:
    stream = device.create_stream()
    before = Baseline.take(device)
    stream.begin_capture(capture_mode)
    await stream.memset(await stream.malloc_async(NBYTES), 0, NBYTES)

    async def in_task() -> bool:
        return _malloc_under(device, caller_mode)

    if where == "same task":
        allowed = _malloc_under(device, caller_mode)
    elif where == "other task":
        allowed = await asyncio.create_task(in_task())
    else:
        allowed = on_thread(lambda: _malloc_under(device, caller_mode))
    tripped = _tripped(capture_mode, caller_mode, where == "same task")
    assert allowed is not tripped
    if tripped:
        assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
        with pytest.raises(ahg.StreamCaptureInvalidated):
            stream.end_capture()
    else:
        assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
        stream.end_capture().destroy()
    assert Baseline.take(device) == before
    destroy(stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("capture_mode", MODES, ids=lambda m: m.name)
async def test_a_refused_malloc_allocates_nothing(device: ahg.Device, capture_mode: Any) -> None:
    """The refusal comes before the allocation: memory in use does not move."""
    stream = device.create_stream()
    stream.begin_capture(capture_mode)
    in_use = device.memory.bytes_in_use
    if capture_mode is ahg.CaptureMode.RELAXED:
        device.free(device.malloc(64))  # a relaxed capture of this task trips nothing
        stream.end_capture().destroy()
    else:
        with pytest.raises(ahg.StreamCaptureUnsupported):
            device.malloc(64)
        with pytest.raises(ahg.StreamCaptureInvalidated):
            stream.end_capture()
    assert device.memory.bytes_in_use == in_use
    no_capture_left()
    destroy(stream)


# -- a captured graph is an ordinary graph ---------------------------------------------------------


async def _capture_diamond(
    s0: ahg.Stream,
    s1: ahg.Stream,
    events: tuple[ahg.Event, ahg.Event],
    ptrs: tuple[ahg.DevicePtr, ahg.DevicePtr, ahg.DevicePtr],
    mul: int,
    extra: bool = False,
) -> ahg.Graph:
    a, b, c = ptrs
    fork, join = events
    async with s0.capture() as scope:
        await s0.memset(b, 0, NBYTES)
        await s0.memset(c, 0, NBYTES)
        await s0.record_event(fork)
        await s1.wait_event(fork)
        await s1.launch_kernel(affine, 1, N, (N, mul, 0, a, c))
        await s0.launch_kernel(affine, 1, N, (N, 1, 0, a, b))
        if extra:
            await s0.launch_host_func(lambda: None)
        await s1.record_event(join)
        await s0.wait_event(join)
        await s0.launch_kernel(affine, 1, N, (N, 1, 0, c, b))
    assert scope.graph is not None
    return scope.graph


@pytest.mark.asyncio
async def test_a_captured_diamond_clones_prints_instantiates_and_updates(
    device: ahg.Device,
) -> None:
    s0, s1 = device.create_stream(), device.create_stream()
    events = (device.create_event(), device.create_event())
    ptrs = (device.malloc(NBYTES), device.malloc(NBYTES), device.malloc(NBYTES))
    a, b, _ = ptrs
    x = np.arange(N, dtype=np.int64)
    await s0.memcpy(a, x)
    first = await _capture_diamond(s0, s1, events, ptrs, 2)
    assert len(first.nodes()) == 5
    assert len(first.edges()) == 5
    clone = first.clone()
    for node in first.nodes():
        twin = clone.find_in_clone(node)
        assert twin.type is node.type
        assert len(twin.dependencies()) == len(node.dependencies())
    dot = first.to_dot()
    assert dot.count("->") == 5
    assert dot.count("affine") == 3
    exec_first, exec_clone = first.instantiate(), clone.instantiate()
    await (await exec_clone.launch(s0))
    from_clone = host_view(device, b)
    await (await exec_first.launch(s0))
    assert host_view(device, b).tolist() == from_clone.tolist() == (5 * x).tolist()
    # PyTorch's pattern: record the same code again with new arguments, update the exec
    second = await _capture_diamond(s0, s1, events, ptrs, 7)
    assert exec_first.update(second).ok
    await (await exec_first.launch(s0))
    assert host_view(device, b).tolist() == (10 * x).tolist()
    # a recapture that changed the topology is refused, and the exec still runs its own copy
    third = await _capture_diamond(s0, s1, events, ptrs, 9, extra=True)
    with pytest.raises(ahg.GraphExecUpdateFailure, match="TopologyChanged"):
        exec_first.update(third)
    await (await exec_first.launch(s0))
    assert host_view(device, b).tolist() == (10 * x).tolist()
    no_capture_left()
    destroy(exec_first, exec_clone, first, second, third, clone, s0, s1, *events, *ptrs)


# -- a replaced device -----------------------------------------------------------------------------


def test_a_capturing_per_thread_stream_of_a_replaced_device_ends_its_capture(
    device: ahg.Device,
) -> None:
    """``configure_devices`` retires a replaced device's own streams. A per-thread stream that
    was capturing must end its capture there, as a destroyed stream does: nothing could end it
    afterwards (the stream is gone), and a GLOBAL capture in progress refuses every ``malloc``
    of every later device."""
    origin = device.per_thread_stream()  # this thread's, outside any task
    fork_stream, fork = device.create_stream(), device.create_event()
    origin.begin_capture()

    async def record_and_fork() -> None:
        await origin.record_event(fork)
        await fork_stream.wait_event(fork)

    asyncio.run(record_and_fork())
    assert fork_stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    ahg.configure_devices(1)
    no_capture_left()
    assert fork_stream.is_capturing() is ahg.CaptureStatus.NONE  # forks end with the origin
    with pytest.raises(ahg.ContextIsDestroyed):
        origin.end_capture()
    fresh = ahg.get_device(0)
    fresh.free(fresh.malloc(64))  # no capture is left to refuse it
    destroy(fork_stream, fork)


# -- error precedence ------------------------------------------------------------------------------


def test_begin_capture_to_graph_checks_a_missing_graph_before_the_stream(
    device: ahg.Device,
) -> None:
    """``hipStreamBeginCaptureToGraph`` answers a null graph (a missing argument) with
    InvalidValue before it looks at the stream: destroyed, null, or already capturing."""
    dead, busy = device.create_stream(), device.create_stream()
    dead.destroy()
    busy.begin_capture()
    info = busy.capture_info()
    for stream in (dead, device.null_stream, busy):
        with pytest.raises(ahg.InvalidValue):
            stream.begin_capture_to_graph(None, mode=7)  # type: ignore[arg-type]
    assert busy.capture_info() == info
    # with a graph, the stream's own checks come in HIP's order
    graph = ahg.Graph()
    with pytest.raises(ahg.ContextIsDestroyed):
        dead.begin_capture_to_graph(graph, mode=7)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.null_stream.begin_capture_to_graph(graph, mode=7)
    with pytest.raises(ahg.InvalidValue):
        busy.begin_capture_to_graph(graph, mode=7)
    with pytest.raises(ahg.IllegalState):
        busy.begin_capture_to_graph(graph)
    assert graph.nodes() == []
    destroy(busy.end_capture(), graph, busy)
    no_capture_left()


@pytest.mark.asyncio
async def test_capture_statistics_is_public_and_counts_what_is_in_progress(
    device: ahg.Device,
) -> None:
    s0, s1 = device.create_stream(), device.create_stream()
    event = device.create_event()
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    s0.begin_capture()
    await s0.record_event(event)
    await s1.wait_event(event)
    stats = ahg.capture_statistics()
    assert stats == ahg.CaptureStatistics(sessions=1, capturing_streams=2, event_links=1)
    assert repr(stats) == "CaptureStatistics(sessions=1, capturing_streams=2, event_links=1)"
    s0.end_capture().destroy()
    assert ahg.capture_statistics() == ahg.CaptureStatistics(0, 0, 0)
    destroy(s0, s1, event)
