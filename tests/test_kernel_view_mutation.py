"""A kernel body may change the array objects it is given without changing anyone else's.

Eager launches were given the allocator's cached views themselves, so a body that set its
view's ``shape``, ``dtype``, ``strides`` or writeable flag changed what every later launch given
the same pointer, and every host view of it, saw: a reshaped view broadcast wrongly, a read-only
one failed every later write. Bodies now get array objects of their own. (A graph replay keeps
the views it decoded for a node, so a change there carries to that node's later replays: see
the kernel-arguments notes of docs/design.md.)
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

N = 10


def _vandalise(x: Any, how: int) -> None:
    """Change ``x`` in place the way ``how`` says (0 leaves it alone)."""
    if how == 1:
        x.shape = (2, N // 2)
    elif how == 2:
        x.flags.writeable = False
    elif how == 3:
        x.dtype = np.int32  # same size as float32: the same shape, other bits
    elif how == 4:
        x.shape = (N, 1)  # still C- and F-contiguous: only ndim tells
    elif how == 5:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2.4 deprecates it
            x.strides = (0,)  # every element aliases the first
    elif how == 6:
        x.__setstate__((1, (N,), np.dtype(np.float32), False, bytes(4 * N)))  # private bytes
    elif how == 7:
        x.setflags(write=False)


HOWS = [1, 2, 3, 4, 5, 6, 7]


@ahg.kernel
def fill_then_vandalise(
    t: ahg.Threads, x: ahg.Ptr[ahg.float32], value: ahg.float32, how: ahg.int32
) -> None:
    """Writes ``value`` everywhere, then changes its own view."""
    x[:N] = np.arange(N, dtype=np.float32) + value
    _vandalise(x, how)


@ahg.kernel
def accumulate(t: ahg.Threads, x: ahg.Ptr[ahg.float32], how: ahg.int32) -> None:
    """x[:N] += 1 through a 1-D float32 view; changes the view afterwards."""
    x[:N] = x[:N] + np.ones(N, dtype=np.float32)
    _vandalise(x, how)


@ahg.kernel
def read_into(t: ahg.Threads, src: ahg.ConstPtr[ahg.float32], dst: ahg.Ptr[ahg.float32]) -> None:
    dst[:N] = src[:N]


def floats(device: ahg.Device, ptr: ahg.DevicePtr) -> list[float]:
    return device.view(ptr, np.float32, N).tolist()


@pytest.mark.asyncio
@pytest.mark.parametrize("how", HOWS)
async def test_an_eager_launch_changing_its_view_changes_nothing_for_later_ones(
    device: ahg.Device, how: int
) -> None:
    stream = device.create_stream()
    x = device.malloc(4 * N)
    await stream.launch_kernel(fill_then_vandalise, 1, 1, (x, 1.0, how))
    await stream.launch_kernel(fill_then_vandalise, 1, 1, (x, 2.0, 0))
    await stream.synchronize()
    assert floats(device, x) == [float(i + 2) for i in range(N)]
    view = device.view(x, np.float32)
    assert view.shape == (N,)
    assert view.dtype == np.float32
    assert view.flags.writeable
    destroy(stream, x)


@pytest.mark.asyncio
@pytest.mark.parametrize("how", HOWS)
async def test_a_replay_changing_its_view_changes_nothing_for_eager_launches_or_host_views(
    device: ahg.Device, how: int
) -> None:
    stream = device.create_stream()
    x, y = device.malloc(4 * N), device.malloc(4 * N)
    await stream.memset(x, 0, 4 * N)
    await stream.synchronize()
    graph = ahg.Graph()
    graph.add_kernel_node(accumulate, 1, 1, (x, how))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))  # changes its view after its write
    await stream.launch_kernel(read_into, 1, 1, (x, y))
    await stream.synchronize()
    assert floats(device, y) == [1.0] * N
    view = device.view(x, np.float32)
    assert (view.shape, view.dtype, view.flags.writeable) == ((N,), np.float32, True)
    destroy(graph_exec, graph, stream, x, y)


_KEPT: list[Any] = []


@ahg.kernel
def keep_view(t: ahg.Threads, x: ahg.Ptr[ahg.float32]) -> None:
    _KEPT.append(x)
    x[:N] = x[:N] + 1


@pytest.mark.asyncio
async def test_a_body_that_leaves_its_view_alone_gets_the_same_object_every_replay(
    device: ahg.Device,
) -> None:
    """No decode, and no new array object, per replay in the steady state."""
    stream = device.create_stream()
    x = device.malloc(4 * N)
    await stream.memset(x, 0, 4 * N)
    await stream.synchronize()
    for size in (1, 40):
        graph = ahg.Graph()
        previous: list[ahg.GraphNode] = []
        for _ in range(size):
            previous = [graph.add_kernel_node(keep_view, 1, 1, (x,), deps=previous)]
        graph_exec = graph.instantiate()
        for _ in range(3):
            await (await graph_exec.launch(stream))
        assert len({id(v) for v in _KEPT}) == 1  # one view, shared by the run's nodes
        _KEPT.clear()
        destroy(graph_exec, graph)
    destroy(stream, x)
