"""Destroying a capturing stream whose capture graph owns a user object that raises.

HIP_SEMANTICS / DESIGN.md §3: destroying a stream mid-capture ends its participation cleanly;
destroying the origin ends the capture and frees the graph it made, whose user-object
destructors then run. A destructor is user code and may raise anything: the runtime runs it,
so an ``Exception`` goes to ``sys.unraisablehook`` and a ``KeyboardInterrupt`` reaches the
caller, in both cases after everything was released. ``stream.destroy()`` let it escape half
way: the stream was out of the registry (a second destroy said it was already destroyed) yet
still open, accepting work, and still one of its device's streams.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


class Boom(Exception):
    pass


@contextmanager
def destructor_error_surfaces(error: type[BaseException]) -> Iterator[None]:
    """A KeyboardInterrupt propagates; an Exception is reported as unraisable, once."""
    seen: list[Any] = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        if issubclass(error, Exception):
            yield
        else:
            with pytest.raises(error, match="destructor"):
                yield
    finally:
        sys.unraisablehook = previous
    if issubclass(error, Exception):
        assert [type(u.exc_value) for u in seen] == [error]
    else:
        assert seen == []


def raising(error: type[BaseException]) -> ahg.UserObject:
    def destructor(_data: object) -> None:
        raise error("destructor")

    return ahg.UserObject(destructor)


@pytest.mark.asyncio
@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
async def test_destroying_the_origin_still_destroys_the_stream_when_a_destructor_raises(
    device: ahg.Device, error: type[BaseException]
) -> None:
    out = device.malloc(8)
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(add_one, 1, 1, (out,))
    info = stream.capture_info()
    assert info.graph is not None
    info.graph.retain_user_object(raising(error), move=True)
    del info
    with destructor_error_surfaces(error):
        stream.destroy()  # the capture's graph is freed: its destructor raises
    assert not stream.alive
    assert stream not in device.streams
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.launch_kernel(add_one, 1, 1, (out,))
    with pytest.raises(ahg.InvalidHandle):
        stream.destroy()
    # The capture ended: the null stream is usable again, and nothing ran.
    await device.null_stream.launch_kernel(add_one, 1, 1, (out,))
    await device.synchronize()
    assert int(device.view(out, "int64", 1)[0]) == 1
    destroy(out)


@pytest.mark.asyncio
async def test_destroying_a_forked_stream_then_the_origin_with_a_raising_destructor(
    device: ahg.Device,
) -> None:
    """A fork leaves the capture as it is destroyed; the origin's destroy then frees the
    graph, whose destructor raises: both streams end destroyed, the fork's event too."""
    out = device.malloc(8)
    origin, fork = device.create_stream(), device.create_stream()
    forked = device.create_event()
    origin.begin_capture()
    await origin.record_event(forked)
    await fork.wait_event(forked)
    await fork.launch_kernel(add_one, 1, 1, (out,))
    info = origin.capture_info()
    assert info.graph is not None
    info.graph.retain_user_object(raising(Boom), move=True)
    del info
    fork.destroy()
    with destructor_error_surfaces(Boom):
        origin.destroy()
    assert not origin.alive
    assert not fork.alive
    assert origin not in device.streams
    assert fork not in device.streams
    destroy(forked, out)
