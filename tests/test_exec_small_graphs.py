"""Small executables (below and at instantiate's run and chain thresholds) under setters,
disabled nodes, updates, mixed node types and failing kernels: always what eager gives."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.compile import _SHARED_RUN_MIN

SIZES = (_SHARED_RUN_MIN - 1, _SHARED_RUN_MIN, _SHARED_RUN_MIN + 1, 63, 64, 65)


@ahg.kernel
def add_to(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] += value


@ahg.kernel
def mul_by(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] *= value


@ahg.kernel
def add_two(t: ahg.Threads, value: ahg.int64, x: ahg.Ptr[ahg.int64], y: ahg.Ptr[ahg.int64]) -> None:
    x[0] += value
    y[0] += 1


class Stop(BaseException):
    pass


RAISE = [False]


@ahg.kernel
def maybe_raise(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> None:
    if RAISE[0]:
        raise Stop()
    x[0] += 1000


def _value(device: ahg.Device, x: ahg.DevicePtr) -> int:
    return int(device.view(x, np.int64, 1)[0])


def _set(device: ahg.Device, x: ahg.DevicePtr, value: int) -> None:
    device.view(x, np.int64, 1)[0] = value


def _chain(x: ahg.DevicePtr, size: int) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for i in range(size):
        nodes.append(graph.add_kernel_node(add_to, 1, 1, (x, 1 + i), deps=nodes[-1:]))
    return graph, nodes


def _expected(ops: list[tuple[str, int]]) -> int:
    value = 0
    for kind, arg in ops:
        value = value + arg if kind == "add" else value * arg
    return value


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_setters_and_disabled_nodes_on_a_small_chain(device: ahg.Device, size: int) -> None:
    x = device.malloc(8)
    y = device.malloc(8)
    stream = device.create_stream()
    graph, nodes = _chain(x, size)
    graph_exec = graph.instantiate()
    ops = [("add", 1 + i) for i in range(size)]
    # a kernel of another layout, a kernel of the same layout, a disabled node
    graph_exec.set_kernel_node_params(nodes[0], mul_by, 1, 1, (x, 3))
    ops[0] = ("mul", 3)
    graph_exec.set_kernel_node_params(nodes[size // 2], add_two, 1, 1, (5, x, y))
    ops[size // 2] = ("add", 5)
    graph_exec.set_kernel_node_params(nodes[-1], mul_by, 1, 1, (x, 2))
    ops[-1] = ("mul", 2)
    graph_exec.set_node_enabled(nodes[1], False)
    del ops[1]
    for _ in range(2):
        _set(device, x, 7)
        _set(device, y, 0)
        await (await graph_exec.launch(stream))
        value = 7
        for kind, arg in ops:
            value = value + arg if kind == "add" else value * arg
        assert _value(device, x) == value
        assert _value(device, y) == 1
    graph_exec.set_node_enabled(nodes[1], True)
    graph_exec.set_kernel_node_params(nodes[size // 2], add_to, 1, 1, (x, 1 + size // 2))
    _set(device, x, 7)
    await (await graph_exec.launch(stream))
    ops.insert(1, ("add", 2))
    ops[size // 2] = ("add", 1 + size // 2)
    value = 7
    for kind, arg in ops:
        value = value + arg if kind == "add" else value * arg
    assert _value(device, x) == value
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_update_between_kernels_of_other_layouts(device: ahg.Device, size: int) -> None:
    x = device.malloc(8)
    y = device.malloc(8)
    stream = device.create_stream()
    graph, _ = _chain(x, size)
    graph_exec = graph.instantiate()
    other = ahg.Graph()
    prev: list[ahg.GraphNode] = []
    for i in range(size):
        prev = [other.add_kernel_node(add_to, 1, 1, (y, 10 + i), deps=prev)]
    graph_exec.update(other)
    _set(device, x, 0)
    _set(device, y, 0)
    await (await graph_exec.launch(stream))
    assert _value(device, x) == 0
    assert _value(device, y) == sum(10 + i for i in range(size))
    for g in (graph, other):
        g.destroy()
    graph_exec.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_a_kernel_raising_a_base_exception_in_a_small_replay(
    device: ahg.Device, size: int
) -> None:
    x = device.malloc(8)
    stream = device.create_stream()
    graph, nodes = _chain(x, size)
    graph.add_kernel_node(maybe_raise, 1, 1, (x,), deps=nodes[-1:])
    graph_exec = graph.instantiate()
    _set(device, x, 0)
    RAISE[0] = True
    try:
        done = await graph_exec.launch(stream)
        with pytest.raises(ahg.LaunchFailure) as caught:
            await done
    finally:
        RAISE[0] = False
    assert isinstance(caught.value.__cause__, Stop)
    assert _value(device, x) == sum(1 + i for i in range(size))  # the chain ran, in order
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
async def test_mixed_node_types_and_a_child_graph_equal_eager(
    device: ahg.Device, size: int
) -> None:
    x = device.malloc(8)
    z = device.malloc(8)
    stream = device.create_stream()
    graph, nodes = _chain(x, size)
    child, _ = _chain(z, 3)
    memset = graph.add_memset_node(z, 0, 8, deps=[nodes[size // 2]])
    c = graph.add_child_graph_node(child, deps=[memset])
    graph.add_memcpy_node(z, x, 8, deps=[nodes[-1], c])  # hmm: z <- x after the child
    graph_exec = graph.instantiate()
    for _ in range(2):
        _set(device, x, 0)
        await (await graph_exec.launch(stream))
        total = sum(1 + i for i in range(size))
        assert _value(device, x) == total
        assert _value(device, z) == total
    graph_exec.destroy()
    graph.destroy()
    child.destroy()
    stream.destroy()
    device.free(x)
    device.free(z)


@ahg.kernel
def choose(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@pytest.mark.asyncio
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("taken", [0, 1])
async def test_a_conditional_node_in_a_small_chain(
    device: ahg.Device, size: int, taken: int
) -> None:
    x = device.malloc(8)
    z = device.malloc(8)
    stream = device.create_stream()
    graph, nodes = _chain(x, size)
    handle = graph.conditional_handle(default=0)
    pick = graph.add_kernel_node(choose, 1, 1, (taken, handle), deps=nodes[-1:])
    _node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If, 1, deps=[pick])
    body.add_kernel_node(add_to, 1, 1, (z, 7))
    graph_exec = graph.instantiate()
    _set(device, x, 0)
    _set(device, z, 0)
    for _ in range(2):
        await (await graph_exec.launch(stream))
    assert _value(device, x) == 2 * sum(1 + i for i in range(size))
    assert _value(device, z) == 14 * taken
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(z)


@pytest.mark.parametrize("size", SIZES)
def test_the_race_check_on_small_graphs(device: ahg.Device, size: int) -> None:
    x = device.malloc(8)
    graph, nodes = _chain(x, size)
    graph_exec = graph.instantiate(check_races=True)  # a chain: ordered, no race
    graph_exec.destroy()
    graph.add_kernel_node(add_to, 1, 1, (x, 1), deps=nodes[:1])  # unordered with nodes[1:]
    with pytest.raises(ahg.RaceError) as caught:
        graph.instantiate(check_races=True)
    assert caught.value.reports
    graph.destroy()
    device.free(x)
