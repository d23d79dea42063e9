"""How a test gives back what it made, so the leak check at teardown finds nothing.

``destroy(*things)`` ends each handle the test created, in an order that needs no thought:
executables before their graphs, graphs before streams and events, memory last. It is strict:
destroying a handle twice or freeing memory that is not live raises, as it would in the
library, so a test cannot hide a double destroy behind it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ahipgraph as ahg

__all__ = ["destroy", "replayed_int64", "run_once"]

_ORDER = (ahg.GraphExec, ahg.Graph, ahg.Stream, ahg.Event, ahg.UserObject, ahg.DevicePtr)


def _rank(thing: Any) -> int:
    for rank, kind in enumerate(_ORDER):
        if isinstance(thing, kind):
            return rank
    raise TypeError(f"destroy() does not know how to end {thing!r}")


def destroy(*things: Any) -> None:
    """Destroy handles, release user objects and free device memory, executables first."""
    for thing in sorted(things, key=_rank):
        if isinstance(thing, ahg.DevicePtr):
            ahg.get_device(thing.device).free(thing)
        elif isinstance(thing, ahg.UserObject):
            count = thing.statistics().refcount
            if count:  # at zero its destructor already ran: nothing is left to give back
                thing.release(count)
        else:
            thing.destroy()


async def run_once(graph_exec: ahg.GraphExec, device: ahg.Device) -> None:
    """Launch ``graph_exec`` on a new stream of ``device``, wait for it, destroy the stream."""
    stream = device.create_stream()
    try:
        await (await graph_exec.launch(stream))
    finally:
        stream.destroy()


async def replayed_int64(
    device: ahg.Device, graph_exec: ahg.GraphExec, x: ahg.DevicePtr, count: int
) -> np.ndarray:
    """``count`` int64s at ``x`` after one replay of ``graph_exec`` on zeroed memory, on a new
    stream of ``device`` (destroyed afterwards)."""
    stream = device.create_stream()
    try:
        await device.memset(x, 0, count * 8)
        await graph_exec.launch(stream)
        await stream.synchronize()
        return device.view(x, np.int64, count).copy()
    finally:
        stream.destroy()
