"""Launch host cost with tracing off and on: the part of the launch benchmark the CLI ships.

The full benchmark (graph vs eager vs floor, several sizes, both loops, a results file) stays
``bench/launch.py`` in the repository. This module measures the one figure that tracing could
move — the host time of ``await exec.launch(stream)`` for a 10-node chain, launched back to back
in bursts within the signal-set pool, exactly as ``bench/launch.py`` does — once with tracing
off and once with tracing on, interleaved round by round so machine load hits both alike.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable

from ..core.ints import as_int
from ..device.kernel import Threads, kernel
from ..device.kernel_args import Ptr, float32, int32
from ..device.pointer import DevicePtr
from ..exec.graph_exec import GraphExec
from ..graph.graph import Graph
from ..graph.node import GraphNode
from ..runtime.device import configure_devices, get_device
from ..runtime.stream import Stream
from .trace import tracing

__all__ = ["measure_launch_host"]

BURST = 16
NODES = 10


@kernel
def _noop(t: Threads, x: Ptr[float32], n: int32) -> None:
    """Does nothing: the cost measured is the runtime's."""


def _chain(x: DevicePtr) -> Graph:
    graph = Graph()
    previous: list[GraphNode] = []
    for i in range(NODES):
        previous = [graph.add_kernel_node(_noop, 1, 1, (x, i), deps=previous)]
    return graph


async def _burst_us(graph_exec: GraphExec, stream: Stream, bursts: int) -> float:
    samples = []
    for _ in range(bursts):
        handles = []
        for i in range(BURST):
            start = time.perf_counter()
            handles.append(await graph_exec.launch(stream))
            if i:  # the first launch of a burst follows replays, not a launch
                samples.append(time.perf_counter() - start)
        await handles[-1]
    return statistics.median(samples) * 1e6


async def _measure(rounds: int, progress: Callable[[float, str], None] | None) -> dict[str, float]:
    configure_devices(1)
    device = get_device(0)
    x = device.malloc(4096)
    # Whatever ends the run (a progress callback that raises, Ctrl-C), what it made is
    # given back: the devices table it replaced is no place for left-over work.
    try:
        with device.create_stream() as stream:
            try:
                with _chain(x) as graph, graph.instantiate() as graph_exec:
                    return await _rounds(graph_exec, stream, rounds, progress)
            finally:
                await stream.synchronize()
    finally:
        device.free(x)


async def _rounds(
    graph_exec: GraphExec,
    stream: Stream,
    rounds: int,
    progress: Callable[[float, str], None] | None,
) -> dict[str, float]:
    for _ in range(3):
        await (await graph_exec.launch(stream))
    off: list[float] = []
    on: list[float] = []
    # The collector is paused for the measurement, and left as the caller had it: a harness
    # that runs with it disabled does not find it enabled again.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for done in range(rounds):
            off.append(await _burst_us(graph_exec, stream, 8))
            if progress is not None:
                progress(2 * done + 1, f"tracing off {off[-1]:.2f} us")
            with tracing():
                on.append(await _burst_us(graph_exec, stream, 8))
            if progress is not None:
                progress(2 * done + 2, f"tracing on {on[-1]:.2f} us")
    finally:
        if collecting:
            gc.enable()
    return {"off": statistics.median(off), "on": statistics.median(on)}


def measure_launch_host(
    rounds: int = 9, progress: Callable[[float, str], None] | None = None
) -> dict[str, float]:
    """Median launch host cost in microseconds: ``{"off": ..., "on": ...}``.

    Replaces the devices table (it runs on a fresh device 0), and frees what it made there
    however the run ends. Call outside an event loop.

    Raises:
        TypeError / ValueError: ``rounds`` is not an int of at least 1 (a median needs one
            figure), or ``progress`` is neither callable nor None; checked before the devices
            table is touched.
        RuntimeError: an event loop runs in this thread; nothing is started.
    """
    rounds = as_int(rounds, "rounds")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None, got {progress!r}")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop runs in this thread: the usual case
    else:  # refused before the coroutine is made, which would warn "never awaited"
        raise RuntimeError("asyncio.run() cannot be called from a running event loop")
    return asyncio.run(_measure(rounds, progress))
