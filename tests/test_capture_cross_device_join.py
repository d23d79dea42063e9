"""A stream of another device never forks into a capture.

Its operations would become nodes of a graph that runs on the one device it is instantiated
for, where they fail at replay (its pointers belong to the other device). HIP joins such a
stream silently and refuses the multi-device graph only at instantiate (``NotSupported``); the
wait that would join it is refused here with that code, and changes nothing: the waiting
stream stays outside the capture (its work runs eagerly), and the capture goes on, ends and
replays as if the wait had not been made.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy

NONE, ACTIVE = ahg.CaptureStatus.NONE, ahg.CaptureStatus.ACTIVE


def _two_devices(ahg_devices: Callable[..., list[ahg.Device]]) -> tuple[ahg.Device, ahg.Device]:
    d0, d1 = ahg_devices(2)
    return d0, d1


def _stream_on_each_device(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> tuple[ahg.Stream, ahg.Stream, ahg.Event]:
    """A stream of device 0, one of device 1, and an event of device 0."""
    d0, d1 = _two_devices(ahg_devices)
    return d0.create_stream(), d1.create_stream(), d0.create_event()


async def _wait(stream: ahg.Stream, event: ahg.Event, how: str) -> None:
    if how == "wait_event_nowait":
        stream.wait_event_nowait(event)
    else:
        await stream.wait_event(event, 1 if how == "wait_event_external" else 0)


@pytest.mark.asyncio
@pytest.mark.parametrize("recorder", ["origin", "fork"])
@pytest.mark.parametrize(
    "how", ["wait_event", "wait_event_nowait", "wait_event_external", "non_blocking_stream"]
)
async def test_a_stream_of_another_device_cannot_fork_into_a_capture(
    ahg_devices: Callable[..., list[ahg.Device]], recorder: str, how: str
) -> None:
    d0, d1 = _two_devices(ahg_devices)
    origin, fork = d0.create_stream(), d0.create_stream()
    foreign = d1.create_stream(non_blocking=how == "non_blocking_stream")
    to_fork, fork_done, recorded = d0.create_event(), d0.create_event(), d0.create_event()
    p0, p1 = d0.malloc(NBYTES), d1.malloc(NBYTES)
    await origin.memset(p0, 0, NBYTES)
    await foreign.memset(p1, 0, NBYTES)

    origin.begin_capture()
    await origin.launch_kernel(affine, 1, N, (N, 0, 1, p0, p0))  # p0 = 1
    source = origin
    if recorder == "fork":
        await origin.record_event(to_fork)
        await fork.wait_event(to_fork)
        await fork.launch_kernel(affine, 1, N, (N, 0, 2, p0, p0))  # p0 = 3 * 1 + 2
        source = fork
    await source.record_event(recorded)
    info = origin.capture_info(), fork.capture_info()
    statistics = ahg.capture_statistics()
    before = Baseline.take(d1)
    with pytest.raises(ahg.NotSupported, match="device 0"):
        await _wait(foreign, recorded, how)
    # nothing changed: the foreign stream is outside, the capture as it was
    assert foreign.is_capturing() is NONE
    assert (origin.capture_info(), fork.capture_info()) == info
    assert ahg.capture_statistics() == statistics
    assert Baseline.take(d1) == before
    # the foreign stream's work runs eagerly on its own device
    await (await foreign.launch_kernel(affine, 1, N, (N, 0, 5, p1, p1)))
    assert d1.view(p1, np.int64, N).tolist() == [5] * N
    # the capture ends and replays on device 0 as if the wait had not been made
    if recorder == "fork":
        await fork.record_event(fork_done)
        await origin.wait_event(fork_done)
    graph = origin.end_capture()
    assert (origin.is_capturing(), fork.is_capturing()) == (NONE, NONE)
    no_capture_left()
    exec_ = graph.instantiate(device=d0)
    await (await exec_.launch(origin))
    assert d0.view(p0, np.int64, N).tolist() == [5 if recorder == "fork" else 1] * N
    destroy(exec_, graph, origin, fork, foreign, to_fork, fork_done, recorded, p0, p1)


@pytest.mark.asyncio
async def test_the_foreign_wait_is_checked_after_the_stream_and_event_are(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> None:
    """HIP's order: the handles first, then what the wait would do."""
    d0, d1 = _two_devices(ahg_devices)
    origin, foreign = d0.create_stream(), d1.create_stream()
    recorded, gone = d0.create_event(), d0.create_event()
    gone.destroy()
    origin.begin_capture()
    await origin.record_event(recorded)
    with pytest.raises(ahg.InvalidHandle):
        await foreign.wait_event(gone)
    with pytest.raises(ahg.InvalidValue):
        await foreign.wait_event(recorded, 2)
    dead = d1.create_stream()
    dead.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await dead.wait_event(recorded)
    with pytest.raises(ahg.StreamCaptureImplicit):
        await d1.null_stream.wait_event(recorded)  # the null stream's own refusal comes first
    origin.end_capture().destroy()
    no_capture_left()
    destroy(origin, foreign, recorded)


@pytest.mark.asyncio
async def test_a_capturing_stream_of_another_device_still_gets_merge(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> None:
    """Two captures, one per device: the wait would merge them, as on one device."""
    s0, s1, event = _stream_on_each_device(ahg_devices)
    s0.begin_capture()
    s1.begin_capture()
    await s0.record_event(event)
    with pytest.raises(ahg.StreamCaptureMerge):
        await s1.wait_event(event)
    assert (s0.is_capturing(), s1.is_capturing()) == (ACTIVE, ACTIVE)
    for stream in (s0, s1):
        stream.end_capture().destroy()
    no_capture_left()
    destroy(s0, s1, event)


@pytest.mark.asyncio
async def test_an_event_recorded_on_another_device_outside_a_capture_is_a_real_wait(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> None:
    """Only a join is refused: waiting on another device's eager record is ordinary."""
    s0, s1, event = _stream_on_each_device(ahg_devices)
    await s0.record_event(event)
    s1.begin_capture()
    await s1.wait_event(event)  # recorded outside any capture: a real wait, as in HIP
    s1.end_capture().destroy()
    await s1.wait_event(event)
    await s1.synchronize()
    no_capture_left()
    destroy(s0, s1, event)
