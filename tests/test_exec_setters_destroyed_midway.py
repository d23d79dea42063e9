"""A setter whose own argument checks destroy the executable changes nothing and says so.

A setter checks the executable first (HIP's order), then builds the new parameters, which
runs user code: an argument's ``__index__``. That code (or another thread) may destroy the
executable; the change must then fail with ``InvalidValue`` rather than write into an arena
that was given back, or allocate argument slots for a launch that can never come.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from fakes import HeldKernel


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


class DestroysOnIndex:
    """An integer argument whose conversion destroys the executable it is passed to."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.graph_exec: ahg.GraphExec | None = None

    def __index__(self) -> int:
        assert self.graph_exec is not None
        self.graph_exec.destroy()
        return self.value

    __int__ = __index__


def _kernel_params(exec_: ahg.GraphExec, node: ahg.GraphNode, evil: Any, out: Any) -> None:
    exec_.set_kernel_node_params(node, put, 1, 1, (evil, 0, out))


def _priority(exec_: ahg.GraphExec, node: ahg.GraphNode, evil: Any, out: Any) -> None:
    exec_.set_kernel_node_attribute(node, ahg.KernelNodeAttribute.Priority, evil)


@pytest.mark.asyncio
@pytest.mark.parametrize("change", [_kernel_params, _priority])
async def test_destroyed_by_its_own_argument_while_idle(
    device: ahg.Device, change: Callable[..., None]
) -> None:
    out = device.malloc(64)
    graph = ahg.Graph()
    node = graph.add_kernel_node(put, 1, 1, (1, 0, out))
    graph_exec = graph.instantiate()
    evil = DestroysOnIndex(0)
    evil.graph_exec = graph_exec
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        change(graph_exec, node, evil, out)
    assert not graph_exec.alive
    assert graph_exec.statistics().arena.chunks == 0
    graph.destroy()
    device.free(out)


@pytest.mark.asyncio
async def test_destroyed_by_its_own_argument_with_a_launch_in_flight(device: ahg.Device) -> None:
    """The launch in flight holds the arena: a new slot would be taken for nothing."""
    out = device.malloc(64)
    held = HeldKernel("gate")
    graph = ahg.Graph()
    gate = graph.add_kernel_node(held.kernel, 1, 1)
    node = graph.add_kernel_node(put, 1, 1, (7, 0, out), deps=[gate])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    done = await graph_exec.launch(stream)
    await held.started.wait()
    before = graph_exec.statistics()
    evil = DestroysOnIndex(9)
    evil.graph_exec = graph_exec
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        _kernel_params(graph_exec, node, evil, out)
    after = graph_exec.statistics()
    assert (after.arena.live_slots, after.arena.allocations, after.versions) == (
        before.arena.live_slots,
        before.arena.allocations,
        before.versions,
    )
    held.release()
    await done
    assert int(device.view(out, "int64", 1)[0]) == 7  # the launch ran what it was enqueued with
    assert graph_exec.statistics().arena.chunks == 0  # freed with the last launch
    stream.destroy()
    graph.destroy()
    device.free(out)
