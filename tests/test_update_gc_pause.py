"""``exec.update`` is one bulk pass: the collector makes no automatic pass while it runs.

An update makes several objects per node (the new graph's copy, the list of changes, new
argument slots), none of them garbage. With the collector's automatic passes on, a
million-node update ran two full passes over everything alive, about a fifth of its time; the
whole update now runs inside ``core.gcpause.paused``, as instantiate and clone do.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause


@ahg.kernel
def scale_by(t: ahg.Threads, x: ahg.Ptr[ahg.float32], factor: ahg.float32) -> None:
    """Multiplies the first element by ``factor``: every node writes the same cell."""
    x[0:1] = x[0:1] * factor


def _chain(x: ahg.DevicePtr, size: int, factor: float) -> ahg.Graph:
    graph = ahg.Graph()
    previous: tuple[Any, ...] = ()
    for _ in range(size):
        previous = (graph.add_kernel_node(scale_by, 1, 1, (x, factor), deps=previous),)
    return graph


@pytest.fixture
def eager_collector() -> Iterator[list[int]]:
    """A collector that passes every 50 allocations; yields the generations of its passes."""
    thresholds = gc.get_threshold()
    passes: list[int] = []

    def record(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.set_threshold(50, 2, 2)
    try:
        gc.callbacks.append(record)
        yield passes
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*thresholds)


def test_an_update_runs_no_automatic_collection(
    device: ahg.Device, eager_collector: list[int]
) -> None:
    x = device.malloc(4)
    graph, again = _chain(x, 500, 2.0), _chain(x, 500, 0.5)
    graph_exec = graph.instantiate()
    # The suite's plan verifier wraps update (tests/conftest.py) and allocates after it: time
    # the update alone.
    update = getattr(ahg.GraphExec.update, "__wrapped__", ahg.GraphExec.update)
    # Every generation's count from zero: the one young pass after the pause then cannot
    # cascade into a full one, whatever the build before it left in the counters.
    gc.collect()
    eager_collector.clear()
    result = update(graph_exec, again)
    # At most the one young pass that the first allocation after the pause brings; without
    # the pause, dozens, full passes among them.
    assert len(eager_collector) <= 1
    assert 2 not in eager_collector
    assert result.ok
    assert not gcpause.is_paused()
    assert gc.get_threshold() == (50, 2, 2)  # the program's thresholds, back
    graph_exec.destroy()
    graph.destroy()
    again.destroy()
    device.free(x)


def test_a_refused_update_ends_the_pause_too(
    device: ahg.Device, eager_collector: list[int]
) -> None:
    x = device.malloc(4)
    graph, longer = _chain(x, 50, 2.0), _chain(x, 51, 2.0)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.GraphExecUpdateFailure):
        graph_exec.update(longer)
    assert not gcpause.is_paused()
    assert gc.get_threshold() == (50, 2, 2)
    graph_exec.destroy()
    graph.destroy()
    longer.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_the_updated_executable_runs_the_new_arguments(device: ahg.Device) -> None:
    x = device.malloc(4)
    stream = device.create_stream()
    await stream.memcpy(x, np.ones(1, np.float32))
    graph, again = _chain(x, 8, 2.0), _chain(x, 8, 0.5)
    graph_exec = graph.instantiate()
    graph_exec.update(again)
    await (await graph_exec.launch(stream))
    out = np.zeros(1, np.float32)
    await stream.memcpy(out, x)
    await stream.synchronize()
    assert out[0] == 0.5**8
    graph_exec.destroy()
    graph.destroy()
    again.destroy()
    stream.destroy()
    device.free(x)
