"""Awaiting failed work more than once.

A failed launch's handle raises the same ``HipError`` object at every await, and its stream's
next ``synchronize`` raises it again. Each raise added its frames to that object's traceback:
after a thousand awaits (a loop polling a handle) the error carried two thousand frames, and
the traceback of a ``synchronize`` showed the await sites of the handle as if they were part
of it. Each raise now starts a fresh traceback, as ``asyncio.Future.result()`` does; the
user's own exception stays the error's cause.
"""

from __future__ import annotations

import traceback

import pytest

import ahipgraph as ahg


def _frames(error: BaseException) -> int:
    return len(traceback.extract_tb(error.__traceback__))


def _boom() -> None:
    raise ValueError("from the host function")


@pytest.mark.asyncio
async def test_awaiting_a_failed_handle_again_does_not_grow_its_traceback(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_host_node(_boom)
    graph_exec = graph.instantiate()
    handle = await graph_exec.launch(stream)
    seen: list[int] = []
    for _ in range(50):
        with pytest.raises(ahg.LaunchFailure) as caught:
            await handle
        seen.append(_frames(caught.value))
    assert len(set(seen)) == 1  # the same depth every time
    assert isinstance(caught.value.__cause__, ValueError)  # the user's error, kept
    with pytest.raises(ahg.LaunchFailure) as synced:
        await stream.synchronize()
    assert synced.value is caught.value
    names = [frame.name for frame in traceback.extract_tb(synced.value.__traceback__)]
    assert "__await__" not in names  # no frame of the handle's awaits
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
