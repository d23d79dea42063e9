"""Shared pieces of the stream-capture tests: a kernel, a leak check, a stream/event kit."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.memnodes import RESERVATIONS
from ahipgraph.graph.node import NODES
from ahipgraph.runtime import capture
from ahipgraph.runtime.capture import CaptureStatistics

N = 16
NBYTES = N * 8


@ahg.kernel
def affine(t: ahg.Threads, n: ahg.int32, mul: ahg.int64, add: ahg.int64,
           src: ahg.Ptr[ahg.int64], dst: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    """dst = dst * 3 + mul * src + add: not idempotent, so running twice or out of order shows."""
    i = t.ids[t.ids < n]
    dst[i] = dst[i] * 3 + mul * src[i] + add


@dataclass(frozen=True)
class Baseline:
    """What must be back where it was after a failure path: captures, graphs, nodes, memory."""

    capture: CaptureStatistics
    graphs: int
    nodes: int
    reservations: int
    bytes_in_use: int

    @classmethod
    def take(cls, device: ahg.Device) -> Baseline:
        return cls(
            capture.statistics(),
            GRAPHS.statistics().live,
            NODES.statistics().live,
            len(RESERVATIONS),
            # Memory the graph pool keeps for reuse is not leaked (a trim returns it).
            device.memory.bytes_in_use - device.memory.statistics().graph_pool_cached,
        )


@contextlib.contextmanager
def stream_and_buffer(device: ahg.Device) -> Iterator[tuple[ahg.Stream, ahg.DevicePtr]]:
    """A stream and an ``NBYTES`` buffer for a test, destroyed and freed after it."""
    stream = device.create_stream()
    ptr = device.malloc(NBYTES)
    yield stream, ptr
    stream.destroy()
    device.free(ptr)


def no_capture_left() -> None:
    assert capture.statistics() == CaptureStatistics(0, 0, 0)


def host_view(device: ahg.Device, ptr: ahg.DevicePtr) -> np.ndarray:
    return device.view(ptr, np.int64, N).copy()


def on_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a fresh OS thread (no event loop there); return its result or raise its
    exception here."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as error:  # handed back to the test
            box["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")
