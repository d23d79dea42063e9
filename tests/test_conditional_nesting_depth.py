"""How deep conditional nodes may nest in an executable.

A nested body is compiled and run as a call inside its conditional node's, so a nesting deep
enough ended instantiate with Python's ``RecursionError``. Nesting is allowed up to
``MAX_CONDITIONAL_DEPTH`` levels (child graphs in between do not count: they compile and run
flat) and refused past it with HIP's ``NotSupported``, before anything is made.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.conditional import MAX_CONDITIONAL_DEPTH
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot
from conditional_kernels import count_to

K = ahg.ConditionalKind


@ahg.kernel
async def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def nested(levels: int, x: ahg.DevicePtr, *, with_children: bool) -> ahg.Graph:
    """IF nodes nested ``levels`` deep (a child graph between each two when asked), the
    innermost body a WHILE node counting x[1] to 5 after an async bump of x[0]."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    body = graph
    for _ in range(levels - 1):
        if with_children:
            inner = ahg.Graph()
            body = body.add_child_graph_node(inner).get_child_graph()
            inner.destroy()
        _, (body,) = body.add_conditional_node(handle, K.If)
    body.add_kernel_node(bump, 1, 1, (x,))
    loop = graph.conditional_handle(default=1)
    _, (last,) = body.add_conditional_node(loop, K.While)
    last.add_kernel_node(count_to, 1, 1, (5, x + 4, loop))
    return graph


def read(device: ahg.Device, ptr: ahg.DevicePtr) -> list[int]:
    return [int(v) for v in device.view(ptr, np.int32, 2)]


@pytest.mark.asyncio
@pytest.mark.parametrize("with_children", [False, True])
async def test_the_deepest_allowed_nesting_runs_and_updates(
    device: ahg.Device, with_children: bool
) -> None:
    x = device.malloc(8)
    graph = nested(MAX_CONDITIONAL_DEPTH, x, with_children=with_children)
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert read(device, x) == [1, 5]
    same = graph.clone()
    assert graph_exec.update(same).ok
    await (await graph_exec.launch())
    assert read(device, x) == [2, 6]  # the WHILE's default re-applied: one more iteration
    graph_exec.destroy()
    same.destroy()
    graph.destroy()
    device.free(x)


@pytest.mark.parametrize("with_children", [False, True])
def test_one_level_more_is_not_supported_and_makes_nothing(
    device: ahg.Device, with_children: bool
) -> None:
    x = device.malloc(8)
    graph = nested(MAX_CONDITIONAL_DEPTH + 1, x, with_children=with_children)
    before = leak_snapshot()
    with pytest.raises(ahg.NotSupported, match=f"deeper than {MAX_CONDITIONAL_DEPTH} levels"):
        graph.instantiate()
    assert leak_report(before) is None
    assert not graph.instantiated
    graph.destroy()
    device.free(x)


def test_a_nesting_far_past_the_limit_is_refused_not_a_recursion_error(
    device: ahg.Device,
) -> None:
    x = device.malloc(8)
    graph = nested(1500, x, with_children=False)
    with pytest.raises(ahg.NotSupported):
        graph.instantiate()
    graph.destroy()
    device.free(x)
