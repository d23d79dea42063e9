"""The shortcuts of capture and instantiate give exactly what the general paths give.

Capturing a chain of kernel launches and instantiating it takes shortcuts: a chain's columns
are read in insertion order without the topological walk, a graph without child graphs or
conditional nodes looks for conditional-handle arguments in the kernel list instantiate makes
anyway, and a captured launch makes its node in one call. Each test holds a shortcut to the
general path's answer (columns, handles, node parameters, errors and their messages, DOT,
replay results), including the cases where the shortcut must step aside.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from itertools import compress, repeat
from operator import is_
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.conditional import prepare, prepare_plain
from ahipgraph.exec.snapshot import _chain_columns, snapshot
from ahipgraph.graph.node import NODES
from ahipgraph.graph.node_type import NodeType
from ahipgraph.graph.topology import _ordered_columns
from capture_helpers import NBYTES, N, affine, host_view, no_capture_left


@ahg.kernel
def set_handle(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    """Sets a conditional handle from a plain kernel node."""
    ahg.set_conditional(h, value)


def _columns(graph: ahg.Graph) -> tuple[list[Any], list[int], dict[int, tuple[int, ...]]]:
    order, first, multi = _ordered_columns(graph)
    return order, list(first), multi


def _chain(graph: ahg.Graph) -> tuple[list[Any], list[int], dict[int, tuple[int, ...]]] | None:
    with graph.lock:
        found = _chain_columns(graph)
    if found is None:
        return None
    order, first, multi = found
    return order, list(first), multi


def _shape(graph: ahg.Graph) -> list[tuple[Any, ...]]:
    order = graph.nodes()
    return [
        (node.type, node.params, [order.index(dep) for dep in node.dependencies()])
        for node in order
    ]


@pytest.fixture
def buf(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(NBYTES)
    yield ptr
    device.free(ptr)


def _dot(graph: ahg.Graph, flags: int) -> str:
    """The graph's DOT without what differs between two graphs: its id, its nodes' ids and
    handles (each node is named by its position instead)."""
    position = {str(node.id): str(index) for index, node in enumerate(graph.nodes())}
    text = graph.to_dot(flags).replace(f"graph_{graph.id}", "graph_G")
    text = text.replace(f"cluster_{graph.id}", "cluster_G")
    text = re.sub(r"node_(\d+)", lambda m: f"node_#{position[m[1]]}", text)
    return re.sub(r"\{(\d+) \| \d+\.\d+\}", lambda m: f"{{#{position[m[1]]} | handle}}", text)


def _kernel_chain(buf: ahg.DevicePtr, count: int) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for i in range(count):
        nodes.append(graph.add_kernel_node(affine, N, 1, (N, 1, i, buf, buf), deps=nodes[-1:]))
    return graph, nodes


# -- a chain's columns --------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 3, 50])
def test_chain_columns_are_the_walks(buf: ahg.DevicePtr, count: int) -> None:
    graph, _ = _kernel_chain(buf, count)
    assert _chain(graph) == _columns(graph)
    assert _chain(graph) is not None
    graph.destroy()


def test_empty_graph_takes_the_walk() -> None:
    graph = ahg.Graph()
    assert _chain(graph) is None
    assert _columns(graph) == ([], [], {})
    exec_ = graph.instantiate()  # an empty graph still instantiates
    exec_.destroy()
    graph.destroy()


def _fork(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.add_empty_node(deps=[nodes[0]])  # a second dependent of the root: a fork


def _second_root(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.add_empty_node()


def _join(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.add_dependencies(nodes[0], nodes[2])  # node 2 now has two dependencies


def _backwards(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    # A chain, but not in insertion order: the new root is added last.
    root = graph.add_empty_node()
    graph.add_dependencies(root, nodes[0])


def _cut(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    graph.remove_dependencies(nodes[1], nodes[2])  # two chains: node 2 is a root again


def _destroyed_middle(graph: ahg.Graph, nodes: list[ahg.GraphNode]) -> None:
    nodes[1].destroy()


@pytest.mark.parametrize(
    "change", [_fork, _second_root, _join, _backwards, _cut, _destroyed_middle]
)
def test_not_a_chain_takes_the_walk(buf: ahg.DevicePtr, change: Any) -> None:
    graph, nodes = _kernel_chain(buf, 4)
    change(graph, nodes)
    assert _chain(graph) is None
    before = _columns(graph)
    exec_ = graph.instantiate()  # through the walk: the same order as before the change
    assert [node.id for node in before[0]] == [node.id for node in exec_._graph.nodes]
    exec_.destroy()
    graph.destroy()


def test_a_cycle_is_still_refused(buf: ahg.DevicePtr) -> None:
    graph, nodes = _kernel_chain(buf, 3)
    graph.add_dependencies(nodes[2], nodes[0])  # the root now depends on the last node
    assert _chain(graph) is None
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    graph.destroy()


# -- handle arguments of a plain graph ----------------------------------------------------------


def _handles_both_ways(graph: ahg.Graph) -> tuple[Any, Any]:
    with graph.lock:
        copy, _ = snapshot(graph)
    general = prepare(copy)
    kernels = list(compress(copy.params_column(), map(is_, copy.types(), repeat(NodeType.Kernel))))
    distinct = {id(params.kernel): params.kernel for params in kernels}
    plain = prepare_plain(kernels, distinct.values())
    return general, plain


def test_plain_graph_finds_the_same_handle_arguments() -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    other = graph.conditional_handle(default=2)
    first = graph.add_kernel_node(set_handle, 1, 1, (5, handle))
    graph.add_kernel_node(set_handle, 1, 1, (6, other), deps=[first])
    general, plain = _handles_both_ways(graph)
    assert general is not None
    assert plain is not None
    assert plain.handles == general.handles
    assert list(plain.handles) == [handle.token, other.token]
    exec_ = graph.instantiate()  # a plain graph whose kernels take handles: cells are made
    exec_.destroy()
    graph.destroy()


def test_plain_graph_without_handles_has_no_conditionals(buf: ahg.DevicePtr) -> None:
    graph, _ = _kernel_chain(buf, 3)
    assert _handles_both_ways(graph) == (None, None)
    graph.destroy()


# -- a captured chain, end to end ---------------------------------------------------------------


@pytest.mark.asyncio
async def test_captured_chain_replays_as_built_and_eager(device: ahg.Device) -> None:
    src = device.malloc(NBYTES)
    dst = device.malloc(NBYTES)
    stream = device.create_stream()
    await stream.memcpy(src, np.arange(N, dtype=np.int64))
    calls = [(N, i % 3, i, src, dst) for i in range(40)]

    async def eager() -> np.ndarray:
        await stream.memset(dst, 0, NBYTES)
        for args in calls:
            await stream.launch_kernel(affine, N, 1, args)
        await stream.synchronize()
        return host_view(device, dst).copy()

    expected = await eager()
    stream.begin_capture()
    for args in calls:
        await stream.launch_kernel(affine, N, 1, args)
    captured = stream.end_capture()
    built = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for args in calls:
        previous = [built.add_kernel_node(affine, N, 1, args, deps=previous)]
    assert _shape(captured) == _shape(built)
    verbose = ahg.DotFlags.Verbose | ahg.DotFlags.KernelNodeParams
    assert _dot(captured, verbose) == _dot(built, verbose)
    results = []
    for graph in (captured, built):
        await stream.memset(dst, 0, NBYTES)
        exec_ = graph.instantiate()
        await exec_.launch(stream)
        await stream.synchronize()
        results.append(host_view(device, dst).copy())
        exec_.destroy()
        graph.destroy()
    np.testing.assert_array_equal(results[0], expected)
    np.testing.assert_array_equal(results[1], expected)
    stream.destroy()
    device.free(src)
    device.free(dst)
    no_capture_left()


# -- a captured kernel launch -------------------------------------------------------------------


def _general(buf: ahg.DevicePtr, args: Any, grid: Any = N, block: Any = 1) -> Any:
    """What the general path makes of a launch: ``KernelParams.make`` on the device."""
    return ahg.KernelParams.make(affine, grid, block, args, device=ahg.get_device(0))


@pytest.mark.asyncio
async def test_captured_params_are_the_general_paths(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    stream = device.create_stream()
    launches: list[tuple[Any, Any, Any]] = [
        (N, 1, (N, 1, 0, buf, buf)),  # the shape's first launch may validate it
        (N, 1, (N, 2, 3, buf, buf)),  # the shape is known: the written-out path
        (N, 1, [N, -(2**63), 2**63 - 1, buf, buf]),  # a list, and the int64 extremes
        (7, 3, (N, 1, 0, buf, buf)),  # another shape
        (ahg.Dim3(N), ahg.Dim3(1), (N, 1, 0, buf, buf)),  # Dim3s: the general path
        (np.int32(N), 1, (np.int32(N), np.int64(5), 0, buf, buf)),  # numpy ints: the same
    ]
    stream.begin_capture()
    works = [await stream.launch_kernel(affine, g, b, args) for g, b, args in launches]
    graph = stream.end_capture()
    for work, (grid, block, args) in zip(works, launches, strict=True):
        params, made = work.node.params, _general(buf, args, grid, block)
        assert type(params) is ahg.KernelParams
        assert params == made
        if type(grid) is int and type(block) is int:  # one Threads per launch shape, shared
            assert params.threads is made.threads
        threads = (params.threads.grid, params.threads.block, params.threads.shared_mem)
        assert threads == (made.threads.grid, made.threads.block, made.threads.shared_mem)
        assert params.arg_bytes == made.arg_bytes
        assert params.attributes == made.attributes
    assert [work.node for work in works] == graph.nodes()
    graph.destroy()
    stream.destroy()
    no_capture_left()


BAD_ARGS: list[tuple[str, Any]] = [
    ("too few", (N, 1, 0, "buf")),
    ("too many", (N, 1, 0, "buf", "buf", 9)),
    ("wrong type", (N, 1.5, 0, "buf", "buf")),
    ("a bool", (N, True, 0, "buf", "buf")),
    ("overflow", (N, 2**63, 0, "buf", "buf")),
    ("int32 overflow", (2**31, 1, 0, "buf", "buf")),
    ("negative overflow", (N, -(2**63) - 1, 0, "buf", "buf")),
    ("a float for a pointer", (N, 1, 0, 1.5, "buf")),
    ("not a sequence", 5),
    ("no args", None),
    ("a string", "abcde"),
]


@pytest.mark.parametrize(("case", "given"), BAD_ARGS, ids=[case for case, _ in BAD_ARGS])
@pytest.mark.asyncio
async def test_bad_arguments_fail_as_the_general_path_and_change_nothing(
    device: ahg.Device, buf: ahg.DevicePtr, case: str, given: Any
) -> None:
    args = tuple(buf if arg == "buf" else arg for arg in given) if type(given) is tuple else given
    graph = ahg.Graph()
    with pytest.raises(Exception) as general:
        graph.add_kernel_node(affine, N, 1, args)
    graph.destroy()
    stream = device.create_stream()
    stream.begin_capture()
    first = await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    before = (stream.capture_info(), ahg.get_device(0).statistics(), len(first.node.graph.nodes()))
    with pytest.raises(type(general.value)) as captured:
        await stream.launch_kernel(affine, N, 1, args)
    assert str(captured.value) == str(general.value)
    after = (stream.capture_info(), ahg.get_device(0).statistics(), len(first.node.graph.nodes()))
    assert after == before  # nothing added, the capture still active
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    stream.end_capture().destroy()
    stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_a_destroyed_last_node_fails_as_the_general_path(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    work = await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    graph = work.node.graph
    work.node.destroy()  # the stream's only dependency: the capture is invalidated
    before = graph.statistics()
    with pytest.raises(ahg.StreamCaptureInvalidated) as general:
        stream.launch_kernel_nowait(affine, N, 1, (N, 1, 0, buf, buf))
    with pytest.raises(ahg.StreamCaptureInvalidated) as captured:
        await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    assert str(captured.value) == str(general.value)
    assert graph.statistics() == before
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_a_destroyed_capture_graph_fails_as_the_general_path(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    graph = ahg.Graph()
    stream = device.create_stream()
    stream.begin_capture_to_graph(graph)
    await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    graph.destroy()  # the user's graph, under the capture: the capture is invalidated
    with pytest.raises(ahg.StreamCaptureInvalidated) as general:
        stream.launch_kernel_nowait(affine, N, 1, (N, 1, 0, buf, buf))
    with pytest.raises(ahg.StreamCaptureInvalidated) as captured:
        await stream.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    assert str(captured.value) == str(general.value)
    with pytest.raises(ahg.HipError):
        stream.end_capture()
    stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_an_event_recorded_mid_chain_keeps_its_node(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    # The stream's dependency list is updated in place: what an event remembered must not move.
    s0, s1 = device.create_stream(), device.create_stream()
    fork = device.create_event()
    s0.begin_capture()
    first = await s0.launch_kernel(affine, N, 1, (N, 1, 0, buf, buf))
    await s0.record_event(fork)
    second = await s0.launch_kernel(affine, N, 1, (N, 1, 1, buf, buf))
    await s1.wait_event(fork)
    branch = await s1.launch_kernel(affine, N, 1, (N, 1, 2, buf, buf))
    assert branch.node.dependencies() == [first.node]
    assert s0.capture_info().dependencies == (second.node,)
    third = await s0.launch_kernel(affine, N, 1, (N, 1, 3, buf, buf))
    assert third.node.dependencies() == [second.node]
    assert s1.capture_info().dependencies == (branch.node,)
    join = device.create_event()
    await s1.record_event(join)
    await s0.wait_event(join)
    last = await s0.launch_kernel(affine, N, 1, (N, 1, 4, buf, buf))
    assert set(last.node.dependencies()) == {third.node, branch.node}
    graph = s0.end_capture()
    assert len(graph.nodes()) == 5
    graph.destroy()
    for handle in (fork, join, s0, s1):
        handle.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_chains_captured_on_two_threads_at_once(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    # Each thread captures its own chain on its own stream (RELAXED: no thread's mode says no
    # to another's), so the graph, capture and registry locks are taken from several threads.
    count = 300
    nodes_before = NODES.statistics().live
    results: dict[int, Any] = {}

    async def capture_chain(index: int) -> None:
        ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
        stream = device.create_stream()
        stream.begin_capture(mode=ahg.CaptureMode.RELAXED)
        for i in range(count):
            await stream.launch_kernel(affine, N, 1, (N, index, i, buf, buf))
        graph = stream.end_capture()
        results[index] = (
            [node.params.args[1:3] for node in graph.nodes()],
            [len(node.dependencies()) for node in graph.nodes()],
        )
        graph.destroy()
        stream.destroy()

    threads = [
        threading.Thread(target=asyncio.run, args=(capture_chain(index),)) for index in (1, 2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for index in (1, 2):
        args, deps = results[index]
        assert args == [(index, i) for i in range(count)]
        assert deps == [0] + [1] * (count - 1)
    assert NODES.statistics().live == nodes_before
    no_capture_left()


@pytest.mark.asyncio
async def test_captured_chain_of_every_shape_replays_as_eager(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    # Launches that take the written-out path and ones that do not, interleaved, captured and
    # replayed: the same values as eager launches.
    stream = device.create_stream()
    calls: list[tuple[Any, Any, Any]] = [
        (N, 1, (N, 1, 1, buf, buf)),
        (ahg.Dim3(N), 1, (N, 2, 0, buf, buf)),
        (N, 1, [N, 1, 2, buf, buf]),
        (np.int64(N), 1, (N, 3, 1, buf, buf)),
        (N, 1, (N, 1, 5, buf, buf)),
    ]
    await stream.memcpy(buf, np.arange(N, dtype=np.int64))
    for grid, block, args in calls:
        await stream.launch_kernel(affine, grid, block, args)
    await stream.synchronize()
    expected = host_view(device, buf)
    await stream.memcpy(buf, np.arange(N, dtype=np.int64))
    stream.begin_capture()
    for grid, block, args in calls:
        await stream.launch_kernel(affine, grid, block, args)
    graph = stream.end_capture()
    exec_ = graph.instantiate()
    await exec_.launch(stream)
    await stream.synchronize()
    np.testing.assert_array_equal(host_view(device, buf), expected)
    exec_.destroy()
    graph.destroy()
    stream.destroy()
    no_capture_left()


BAD_LAUNCHES: list[tuple[str, Any, Any, Any, Any]] = [
    ("null kernel", None, N, 1, 0),
    ("not a kernel", print, N, 1, 0),
    ("bool grid", "affine", True, 1, 0),
    ("zero grid", "affine", 0, 1, 0),
    ("negative grid", "affine", -1, 1, 0),
    ("huge grid", "affine", 2**40, 1, 0),
    ("huge block", "affine", 1, 2**20, 0),
    ("None block", "affine", 1, None, 0),
    ("float block", "affine", 1, 1.0, 0),
    ("negative shared memory", "affine", N, 1, -1),
    ("huge shared memory", "affine", N, 1, 2**40),
    ("bool shared memory", "affine", N, 1, True),
]


@pytest.mark.parametrize(
    ("case", "kernel", "grid", "block", "shared_mem"),
    BAD_LAUNCHES,
    ids=[case[0] for case in BAD_LAUNCHES],
)
@pytest.mark.asyncio
async def test_bad_launches_fail_as_the_general_path_and_change_nothing(
    device: ahg.Device,
    buf: ahg.DevicePtr,
    case: str,
    kernel: Any,
    grid: Any,
    block: Any,
    shared_mem: Any,
) -> None:
    kernel = affine if kernel == "affine" else kernel
    args = (N, 1, 0, buf, buf)
    graph = ahg.Graph()
    try:
        graph.add_kernel_node(kernel, grid, block, args, shared_mem=shared_mem)
    except Exception as error:
        general: Exception | None = error
    else:
        general = None
    graph.destroy()
    stream = device.create_stream()
    stream.begin_capture()
    await stream.launch_kernel(affine, N, 1, args)  # the shape is known: the written-out path
    before = (stream.capture_info(), NODES.statistics())
    if general is None:  # accepted by both: the same parameters
        work = await stream.launch_kernel(kernel, grid, block, args, shared_mem=shared_mem)
        assert work.node.params == ahg.KernelParams.make(
            kernel, grid, block, args, shared_mem=shared_mem, device=device
        )
    else:
        with pytest.raises(type(general)) as captured:
            await stream.launch_kernel(kernel, grid, block, args, shared_mem=shared_mem)
        assert str(captured.value) == str(general)
        assert (stream.capture_info(), NODES.statistics()) == before
        assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    stream.end_capture().destroy()
    stream.destroy()
    no_capture_left()


@pytest.mark.asyncio
async def test_a_capturing_task_cancelled_between_launches_leaves_a_whole_chain(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    # A captured launch never yields: a cancellation lands between two launches, never inside
    # one, so the graph holds exactly the launches made, each after the one before.
    for cancel_after in range(4):
        stream = device.create_stream()
        stream.begin_capture(mode=ahg.CaptureMode.RELAXED)  # ended from this task, not its own
        made: list[Any] = []

        async def launches(target: ahg.Stream = stream, out: list[Any] = made) -> None:
            for i in range(10):
                out.append(await target.launch_kernel(affine, N, 1, (N, 1, i, buf, buf)))
                await asyncio.sleep(0)  # each step: one launch, then a turn of the loop

        task = asyncio.ensure_future(launches())
        for _ in range(cancel_after + 1):
            await asyncio.sleep(0)  # the task makes one launch per turn
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        graph = stream.end_capture()
        nodes = graph.nodes()
        assert nodes == [work.node for work in made]
        assert len(nodes) == cancel_after + 1
        assert [len(node.dependencies()) for node in nodes] == [0] + [1] * cancel_after
        graph.destroy()
        stream.destroy()
    no_capture_left()


@ahg.kernel
def scaled(t: ahg.Threads, n: ahg.int32, factor: ahg.float64, dst: ahg.Ptr[ahg.int64]) -> None:
    """Another parameter list: its arguments pack to other bytes than affine's."""
    i = t.ids[t.ids < n]
    dst[i] = dst[i] * int(factor)


@pytest.mark.asyncio
async def test_a_stream_remembers_its_last_launch_only_for_that_launch(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    # Kernels, grids, blocks and shared memory that change from launch to launch, and the
    # shapes' table cleared mid-capture: every node has the general path's parameters.
    from ahipgraph.runtime import params as params_module

    launches: list[tuple[Any, Any, Any, Any, int]] = []
    for i in range(6):
        launches.append((affine, N, 1, (N, 1, i, buf, buf), 0))
        launches.append((scaled, N, 1, (N, 2.0 + i, buf), 0))
        launches.append((affine, 7, 3, (N, 1, i, buf, buf), 0))
        launches.append((affine, 7, 3, (N, 1, i, buf, buf), 64))
        launches.append((scaled, 7, 3, (N, 1.5, buf), 64))
    stream = device.create_stream()
    stream.begin_capture()
    works = []
    for index, (kernel, grid, block, args, shared_mem) in enumerate(launches):
        if index == len(launches) // 2:
            params_module._SHAPES.clear()  # shapes validated again, new Threads objects
        works.append(await stream.launch_kernel(kernel, grid, block, args, shared_mem=shared_mem))
    graph = stream.end_capture()
    for work, (kernel, grid, block, args, shared_mem) in zip(works, launches, strict=True):
        made = ahg.KernelParams.make(
            kernel, grid, block, args, shared_mem=shared_mem, device=device
        )
        assert work.node.params == made
        assert work.node.params.arg_bytes == made.arg_bytes
    exec_ = graph.instantiate()
    exec_.destroy()
    graph.destroy()
    stream.destroy()
    no_capture_left()
