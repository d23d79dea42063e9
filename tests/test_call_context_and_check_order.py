"""How public calls are made: from inside a running loop, from a
second loop on another thread, with hand-made pointers, and with two things wrong at once
(HIP's order of checks decides which error the caller sees).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel
from cleanup import destroy


@ahg.kernel
def nothing(t: ahg.Threads) -> None:
    pass


# -- ahg.run from inside a loop ---------------------------------------------------------------


async def _answer() -> int:
    return 42


@pytest.mark.asyncio
@pytest.mark.parametrize("form", ["coroutine", "function"])
async def test_ahg_run_inside_a_running_loop_refuses_and_leaves_no_unawaited_coroutine(
    form: str,
) -> None:
    """``ahg.run`` called from a coroutine raised asyncio's RuntimeError after ``main()`` had
    made a coroutine that was never awaited, so a ``RuntimeWarning`` followed at some later
    collection (an error under ``-W error``), far from the call."""
    called: list[str] = []

    async def main() -> int:
        called.append("main")
        return 42

    target: Any = main() if form == "coroutine" else main
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="event loop runs"):
            ahg.run(target)
        del target
        gc.collect()
    assert [w for w in seen if issubclass(w.category, RuntimeWarning)] == []
    assert called == []


def test_ahg_run_still_runs_a_coroutine_and_a_function_where_no_loop_runs() -> None:
    assert ahg.run(_answer) == 42
    assert ahg.run(_answer()) == 42


def test_ahg_run_from_a_plain_thread_while_the_main_thread_has_no_loop() -> None:
    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(ahg.run(_answer)))
    thread.start()
    thread.join()
    assert results == [42]


# -- hand-made pointers -----------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("device_field", [None, 0.0, "0"])
async def test_a_hand_made_pointer_with_a_non_int_device_gets_the_call_s_own_error(
    device: ahg.Device, device_field: Any
) -> None:
    forged = ahg.DevicePtr(device_field, 1 << 40)
    stream = device.create_stream()
    graph = ahg.Graph()
    try:
        with pytest.raises(ahg.InvalidDevicePointer):
            await stream.memset(forged, 0, 8)
        with pytest.raises(ahg.InvalidDevicePointer):
            await stream.memcpy(forged, np.zeros(8, np.uint8))
        with pytest.raises(ahg.InvalidDevicePointer):
            graph.add_memset_node(forged, 0, 8)
    finally:
        destroy(graph, stream)


@pytest.mark.asyncio
async def test_a_hand_made_pointer_with_a_non_int_device_is_refused_by_free_and_view(
    device: ahg.Device,
) -> None:
    """The calls that look the pointer up in one device's table already answer with their own
    error; the rest is held above as a strict xfail."""
    forged = ahg.DevicePtr(None, 1 << 40)  # type: ignore[arg-type]
    before = device.memory_info()
    with pytest.raises(ahg.InvalidValue):
        device.free(forged)
    with pytest.raises(ahg.InvalidDevicePointer):
        device.view(forged, "uint8", 1)
    assert device.memory_info() == before


# -- a second event loop while the device is busy ---------------------------------------------


def _in_a_second_loop(make: Callable[[], Coroutine[Any, Any, Any]]) -> BaseException | None:
    """Run ``make()`` on a new loop in a new thread; return what it raised."""
    raised: list[BaseException | None] = []

    def body() -> None:
        try:
            asyncio.run(make())
        except BaseException as error:
            raised.append(error)
        else:
            raised.append(None)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    return raised[0]


@pytest.mark.asyncio
async def test_waits_from_a_second_loop_on_a_busy_device_are_illegal_state_and_take_nothing(
    device: ahg.Device,
) -> None:
    """Event, stream, device and completion waits from another loop while the device runs work
    for this one: ``IllegalState`` before anything parks, and this loop's work still finishes."""
    stream, other = device.create_stream(), device.create_stream()
    held = HeldKernel()
    completion = await held.launch(stream)
    await held.started.wait()
    event = device.create_event()
    await stream.record_event(event)

    async def await_completion() -> None:
        await completion

    waits: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
        "event.synchronize": event.synchronize,
        "stream.synchronize": stream.synchronize,
        "device.synchronize": device.synchronize,
        "completion.wait": completion.wait,
        "await completion": await_completion,
        "record_event": lambda: other.record_event(event),
    }
    submitted = other.statistics().submitted
    for name, make in waits.items():
        error = _in_a_second_loop(make)
        assert isinstance(error, ahg.IllegalState), (name, error)
    assert other.statistics().submitted == submitted
    assert not event.query()
    held.release()
    await completion
    await stream.synchronize()
    assert event.query()
    destroy(stream, other, event)


# -- two things wrong at once: which error first ----------------------------------------------


def test_begin_capture_on_a_destroyed_stream_with_a_bad_mode_is_context_is_destroyed(
    device: ahg.Device,
) -> None:
    """HIP checks the stream before the mode."""
    stream = device.create_stream()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.begin_capture(7)  # type: ignore[arg-type]


def test_begin_capture_on_the_null_stream_with_a_bad_mode_is_capture_unsupported(
    device: ahg.Device,
) -> None:
    with pytest.raises(ahg.StreamCaptureUnsupported):
        device.null_stream.begin_capture(7)  # type: ignore[arg-type]


def test_begin_capture_again_with_a_bad_mode_is_invalid_value_and_keeps_the_capture(
    device: ahg.Device,
) -> None:
    """The mode is checked before the stream's state: InvalidValue, not IllegalState, and the
    capture in progress is untouched."""
    stream = device.create_stream()
    stream.begin_capture()
    info = stream.capture_info()
    with pytest.raises(ahg.InvalidValue):
        stream.begin_capture(7)  # type: ignore[arg-type]
    with pytest.raises(ahg.IllegalState):
        stream.begin_capture()
    assert stream.capture_info() == info
    destroy(stream.end_capture(), stream)


def test_update_capture_dependencies_checks_the_stream_before_the_flags(
    device: ahg.Device,
) -> None:
    idle, dead = device.create_stream(), device.create_stream()
    dead.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        dead.update_capture_dependencies([], 9)  # type: ignore[arg-type]
    with pytest.raises(ahg.IllegalState):
        idle.update_capture_dependencies([], 9)  # type: ignore[arg-type]
    idle.begin_capture()
    with pytest.raises(ahg.InvalidValue):
        idle.update_capture_dependencies([], 9)  # type: ignore[arg-type]
    assert idle.is_capturing() is ahg.CaptureStatus.ACTIVE
    destroy(idle.end_capture(), idle)


def test_end_capture_checks_the_null_stream_then_liveness_then_status(
    device: ahg.Device,
) -> None:
    dead = device.create_stream()
    dead.destroy()
    with pytest.raises(ahg.IllegalState):
        device.null_stream.end_capture()
    with pytest.raises(ahg.ContextIsDestroyed):
        dead.end_capture()
    idle = device.create_stream()
    with pytest.raises(ahg.IllegalState):
        idle.end_capture()
    destroy(idle)


@pytest.mark.asyncio
async def test_a_launch_of_a_destroyed_executable_on_a_destroyed_stream_blames_the_executable(
    device: ahg.Device,
) -> None:
    """``hipGraphLaunch`` checks the executable (InvalidValue) before the stream
    (ContextIsDestroyed)."""
    graph = ahg.Graph()
    graph.add_kernel_node(nothing, 1, 1)
    dead_exec, live_exec = graph.instantiate(), graph.instantiate()
    dead_exec.destroy()
    stream = device.create_stream()
    stream.destroy()
    with pytest.raises(ahg.InvalidValue):
        await dead_exec.launch(stream)
    with pytest.raises(ahg.InvalidValue):
        dead_exec.launch_nowait(stream)
    with pytest.raises(ahg.ContextIsDestroyed):
        await live_exec.launch(stream)
    assert live_exec.statistics().launches == 0
    assert live_exec.statistics().signal_pool.in_use == 0
    destroy(live_exec, graph)


@pytest.mark.asyncio
async def test_a_wait_on_a_null_or_destroyed_event_with_bad_flags_blames_the_flags(
    device: ahg.Device,
) -> None:
    """``hipStreamWaitEvent`` (the version with ``hipEventWaitExternal``) checks the flags
    (InvalidValue) before the event (InvalidHandle), as ``hipEventRecord`` does."""
    stream = device.create_stream()
    event = device.create_event()
    event.destroy()
    with pytest.raises(ahg.InvalidValue, match="wait flag"):
        await stream.wait_event(None, 5)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="wait flag"):
        await stream.wait_event(event, 5)
    with pytest.raises(ahg.InvalidHandle):
        await stream.wait_event(None)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidHandle):
        await stream.wait_event(event)
    assert stream.statistics().submitted == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_querying_an_event_recorded_in_a_capture_invalidates_that_capture(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    event = device.create_event()
    await stream.record_event(event)
    with pytest.raises(ahg.CapturedEvent):
        event.query()
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.CapturedEvent):
        await event.synchronize()
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    destroy(stream, event)


@pytest.mark.parametrize(
    "flags",
    [
        ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH | ahg.InstantiateFlags.USE_NODE_PRIORITY,
        16,
        -1,
    ],
)
def test_instantiate_refuses_flag_combinations_as_hip_does(flags: int) -> None:
    """HIP compares the whole flags value, so a combination of two accepted flags is refused."""
    graph = ahg.Graph()
    graph.add_kernel_node(nothing, 1, 1)
    with pytest.raises(ahg.InvalidValue):
        graph.instantiate(flags)
    assert graph.statistics().instantiated is False
    destroy(graph)


@pytest.mark.parametrize("use_uvloop", [False, True])
@pytest.mark.parametrize("main", [42, None, lambda: 42], ids=["int", "none", "plain-function"])
def test_ahg_run_refuses_what_is_not_a_coroutine_with_one_type_error_on_either_loop(
    main: Any, use_uvloop: bool
) -> None:
    """asyncio answered ``ValueError: a coroutine was expected`` and uvloop ``TypeError: object
    int can't be used in 'await' expression``: a wrong type gets one TypeError on both."""
    with pytest.raises(TypeError, match="needs a coroutine or a coroutine function"):
        ahg.run(main, use_uvloop=use_uvloop)


def test_ahg_run_runs_on_uvloop_too() -> None:
    assert ahg.run(_answer, use_uvloop=True) == 42
    assert ahg.run(_answer(), use_uvloop=True) == 42
