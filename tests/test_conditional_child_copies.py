"""A child graph holding conditional nodes, embedded more than once: each child-graph node runs
its own copy, so each copy's handles are its own (its own cell, starting from its default),
however the copies are placed (in sequence, side by side, in a conditional body, nested), and
after the executable takes new parameters for one copy
(``exec.set_child_graph_node_params``, ``exec.update``)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot
from conditional_kernels import count_to

K = ahg.ConditionalKind


@ahg.kernel
async def decide(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    """Sets the handle after yielding, so copies side by side interleave."""
    await asyncio.sleep(0)
    ahg.set_conditional(h, value)


@ahg.kernel
def add(t: ahg.Threads, value: ahg.int32, index: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[index] += value


@ahg.kernel
def switch_off(t: ahg.Threads, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, 0)


def counting_loop(x: ahg.DevicePtr, limit: int) -> ahg.Graph:
    """A WHILE node (default 1) counting x[0] up to ``limit``: at least one iteration."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    body.add_kernel_node(count_to, 1, 1, (limit, x, handle))
    return graph


def if_else(x: ahg.DevicePtr, value: int) -> tuple[ahg.Graph, ahg.GraphNode]:
    """``decide(value)`` then IF: x[0] += 1, ELSE: x[1] += 1; returns the graph and decide."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    setter = graph.add_kernel_node(decide, 1, 1, (value, handle))
    _, (then, otherwise) = graph.add_conditional_node(handle, K.If, 2, deps=[setter])
    then.add_kernel_node(add, 1, 1, (1, 0, x))
    otherwise.add_kernel_node(add, 1, 1, (1, 1, x))
    return graph, setter


def counts(device: ahg.Device, x: ahg.DevicePtr, n: int = 2) -> list[int]:
    return [int(v) for v in device.view(x, np.int32, n)]


@pytest.mark.asyncio
async def test_a_loop_embedded_twice_in_sequence_runs_in_each_copy(device: ahg.Device) -> None:
    x = device.malloc(8)
    stream = device.create_stream()
    baseline = leak_snapshot()
    child = counting_loop(x, 3)
    parent = ahg.Graph()
    first = parent.add_child_graph_node(child)
    parent.add_child_graph_node(child, deps=[first])
    graph_exec = parent.instantiate()
    before = graph_exec.statistics()
    for _ in range(3):
        device.view(x, np.int32, 1)[0] = 0
        await (await graph_exec.launch(stream))
        # The first copy counts to 3; the second starts from its own default and runs once.
        assert counts(device, x, 1) == [4]
    after = graph_exec.statistics()
    assert (after.launches, after.in_flight) == (3, 0)
    assert after.signal_pool.free == before.signal_pool.free
    assert after.arena.live_slots == before.arena.live_slots
    graph_exec.destroy()
    for graph in (parent, child):
        graph.destroy()
    assert leak_report(baseline) is None
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_copies_side_by_side_follow_their_own_handles(device: ahg.Device) -> None:
    x = device.malloc(8)
    stream = device.create_stream()
    child, setter = if_else(x, 1)
    parent = ahg.Graph()
    left = parent.add_child_graph_node(child)
    right = parent.add_child_graph_node(child)  # no edge: the copies run side by side
    graph_exec = parent.instantiate()
    assert graph_exec.statistics().strands == 2
    otherwise = child.clone()
    otherwise.find_in_clone(setter).set_kernel_params(decide, 1, 1, (0, setter.params.args[1]))
    expected = {(1, 1): [2, 0], (1, 0): [1, 1], (0, 0): [0, 2], (0, 1): [1, 1]}
    for values in [(1, 1), (1, 0), (0, 0), (0, 1), (1, 1)]:
        for node, value in zip((left, right), values, strict=True):
            graph_exec.set_child_graph_node_params(node, child if value else otherwise)
        device.view(x, np.int32, 2)[:] = 0
        await (await graph_exec.launch(stream))
        assert counts(device, x) == expected[values], values
    on_left_only = ahg.Graph()
    made = on_left_only.add_child_graph_node(child)
    on_left_only.add_child_graph_node(otherwise)
    assert made is not None
    assert graph_exec.update(on_left_only).ok
    device.view(x, np.int32, 2)[:] = 0
    await (await graph_exec.launch(stream))
    assert counts(device, x) == [1, 1]
    graph_exec.destroy()
    for graph in (on_left_only, otherwise, parent, child):
        graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_without_assign_default_each_copy_keeps_its_own_value(device: ahg.Device) -> None:
    """An IF whose body switches its own handle off: each copy runs its body once, ever."""
    x = device.malloc(8)
    child = ahg.Graph()
    handle = child.conditional_handle(default=1, assign_default=False)
    _, (body,) = child.add_conditional_node(handle, K.If)
    bump = body.add_kernel_node(add, 1, 1, (1, 0, x))
    body.add_kernel_node(switch_off, 1, 1, (handle,), deps=[bump])
    parent = ahg.Graph()
    first = parent.add_child_graph_node(child)
    parent.add_child_graph_node(child, deps=[first])
    graph_exec = parent.instantiate()
    for _ in range(3):
        await (await graph_exec.launch())
    assert counts(device, x, 1) == [2]
    graph_exec.destroy()
    for graph in (parent, child):
        graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_copies_nested_and_inside_a_loop_body(device: ahg.Device) -> None:
    """A loop's body embeds a counting child twice; that loop's graph is embedded twice."""
    x, y = device.malloc(4), device.malloc(4)
    inner = counting_loop(y, 2)  # each copy: +1, or up to 2
    middle = ahg.Graph()
    handle = middle.conditional_handle(default=1)
    _, (body,) = middle.add_conditional_node(handle, K.While)
    step = body.add_kernel_node(count_to, 1, 1, (3, x, handle))
    once = body.add_child_graph_node(inner, deps=[step])
    body.add_child_graph_node(inner, deps=[once])
    top = ahg.Graph()
    first = top.add_child_graph_node(middle)
    top.add_child_graph_node(middle, deps=[first])
    graph_exec = top.instantiate()

    def expected() -> tuple[int, int]:
        """The same steps on the host: a cell per copy, each set to its default (1) when the
        launch starts (not when a loop's body runs the copy again)."""
        cells = dict.fromkeys(("m1", "m2", "m1a", "m1b", "m2a", "m2b"), 1)
        xs = ys = 0
        for middle_copy in ("m1", "m2"):
            while cells[middle_copy]:
                xs += 1
                cells[middle_copy] = int(xs < 3)
                for inner_copy in (middle_copy + "a", middle_copy + "b"):
                    while cells[inner_copy]:
                        ys += 1
                        cells[inner_copy] = int(ys < 2)
        return xs, ys

    for _ in range(2):
        device.view(x, np.int32, 1)[0] = 0
        device.view(y, np.int32, 1)[0] = 0
        await (await graph_exec.launch())
        assert (counts(device, x, 1)[0], counts(device, y, 1)[0]) == expected()
    graph_exec.destroy()
    for graph in (top, middle, inner):
        graph.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
@pytest.mark.parametrize("depth", [1, 3])
async def test_an_update_refusing_a_changed_nested_conditional_names_its_child_graph_node(
    device: ahg.Device, depth: int
) -> None:
    """As every other failure inside a child graph does, and the executable keeps running as
    it was."""
    x = device.malloc(8)

    def parent_of(limit: int) -> tuple[ahg.Graph, ahg.GraphNode]:
        graph = counting_loop(x, limit)
        for _ in range(depth):
            outer = ahg.Graph()
            outer.add_child_graph_node(graph)
            graph.destroy()
            graph = outer
        parent = ahg.Graph()
        start = parent.add_empty_node()
        holder = parent.add_child_graph_node(graph, deps=[start])
        graph.destroy()
        return parent, holder

    parent, _ = parent_of(3)
    graph_exec = parent.instantiate()
    changed, holder = parent_of(5)
    with pytest.raises(ahg.GraphExecUpdateFailure, match="bodies changed") as info:
        graph_exec.update(changed)
    result = info.value.result  # type: ignore[attr-defined]
    assert result.kind is ahg.UpdateResultKind.ParametersChanged
    assert result.node is holder
    await (await graph_exec.launch())
    assert counts(device, x, 1) == [3]  # the loop it was made with
    graph_exec.destroy()
    for graph in (parent, changed):
        graph.destroy()
    device.free(x)
