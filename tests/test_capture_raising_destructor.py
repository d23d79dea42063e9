"""A capture's own graph holds a user object whose destructor raises (user code is untrusted).

A program may give the graph a capture is making a user object (``capture_info().graph
.retain_user_object(...)``, as PyTorch does). When the capture fails, or its origin stream is
destroyed, the capture frees that graph and the destructor runs there. Whatever it raises:

* ``end_capture`` still raises HIP's error (Invalidated, Unjoined), not the destructor's;
* an ``async with`` block's own exception propagates unchanged;
* ``stream.destroy()`` completes: the stream is destroyed and leaves the device;

and the destructor's error is reported to ``sys.unraisablehook``, as the releaser reports one
for a forgotten capture. KeyboardInterrupt and SystemExit propagate, after the same cleanup.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy

RAISED = [ValueError("destructor"), asyncio.CancelledError(), GeneratorExit()]


@pytest.fixture
def unraisable() -> Iterator[list[Any]]:
    seen: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    yield seen
    sys.unraisablehook = previous


class _Owned:
    """A user object, moved into the capture's graph, whose destructor raises ``error``."""

    def __init__(self, stream: ahg.Stream, error: BaseException) -> None:
        self.ran = 0

        def destructor(_data: object) -> None:
            self.ran += 1
            raise error

        graph = stream.capture_info().graph
        assert graph is not None
        graph.retain_user_object(ahg.UserObject(destructor), move=True)


def _reported(unraisable: list[Any], error: BaseException) -> None:
    assert [u.exc_value for u in unraisable] == [error]
    assert "capture" in unraisable[0].err_msg


@pytest.mark.asyncio
@pytest.mark.parametrize("error", RAISED, ids=lambda e: type(e).__name__)
async def test_end_of_an_invalidated_capture_is_still_invalidated(
    device: ahg.Device, unraisable: list[Any], error: BaseException
) -> None:
    stream = device.create_stream()
    before = Baseline.take(device)
    stream.begin_capture()
    owned = _Owned(stream, error)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        stream.query()  # invalidates the capture
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    assert owned.ran == 1
    _reported(unraisable, error)
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(stream)


@pytest.mark.asyncio
async def test_end_of_an_unjoined_capture_is_still_unjoined(
    device: ahg.Device, unraisable: list[Any]
) -> None:
    origin, fork = device.create_stream(), device.create_stream()
    event = device.create_event()
    ptr = device.malloc(NBYTES)
    before = Baseline.take(device)
    origin.begin_capture()
    owned = _Owned(origin, ValueError("destructor"))
    await origin.record_event(event)
    await fork.wait_event(event)
    await fork.launch_kernel(affine, 1, N, (N, 1, 1, ptr, ptr))  # never joined back
    with pytest.raises(ahg.StreamCaptureUnjoined):
        origin.end_capture()
    assert owned.ran == 1
    assert len(unraisable) == 1
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(origin, fork, event, ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("error", RAISED, ids=lambda e: type(e).__name__)
async def test_a_failing_capture_block_keeps_its_own_exception(
    device: ahg.Device, unraisable: list[Any], error: BaseException
) -> None:
    stream = device.create_stream()
    before = Baseline.take(device)
    owned: list[_Owned] = []

    async def block() -> None:
        async with stream.capture():
            owned.append(_Owned(stream, error))
            raise KeyError("the block's own")

    with pytest.raises(KeyError, match="the block's own"):
        await block()
    assert owned[0].ran == 1
    _reported(unraisable, error)
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(stream)


@pytest.mark.parametrize("error", RAISED, ids=lambda e: type(e).__name__)
def test_destroying_the_capturing_stream_completes(
    device: ahg.Device, unraisable: list[Any], error: BaseException
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    owned = _Owned(stream, error)
    stream.destroy()
    assert not stream.alive
    assert stream not in device.streams
    assert owned.ran == 1
    _reported(unraisable, error)
    no_capture_left()
    with pytest.raises(ahg.InvalidHandle):
        stream.destroy()  # destroyed once, for good


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt(), SystemExit(3)], ids=lambda e: type(e).__name__
)
def test_an_interrupt_from_the_destructor_propagates_after_the_cleanup(
    device: ahg.Device, unraisable: list[Any], error: BaseException
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    owned = _Owned(stream, error)
    with pytest.raises(type(error)):
        stream.destroy()
    assert not stream.alive
    assert stream not in device.streams
    assert owned.ran == 1
    assert unraisable == []
    no_capture_left()
    destroy(device.malloc(64))  # no GLOBAL capture left in progress
