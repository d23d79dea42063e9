"""Whole-graph update of a large graph: the first failing node is named, and nothing changes.

``exec.update`` compares a graph's node types and dependencies as whole columns when they are
equal, takes a kernel node whose kernel and attributes are the executable's own objects as
compatible without comparing them, and checks each launch shape against the executable's
device once per update, not once per node (a large graph's nodes share one shape's objects).
Each shortcut must still find the first failing node in the graph's order, whatever shape or
kernel the nodes before and after it share, and leave the executable as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy, run_once

SIZE = 3_000
MIDDLE = 1_700
BRANCHES = 10
KA = ahg.KernelNodeAttribute


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


@ahg.kernel
def put_too(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


@ahg.kernel
async def async_put(t: ahg.Threads, value: ahg.int64, index: ahg.int32,
                    out: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    out[index] = value


def build(
    shape: str,
    out: ahg.DevicePtr,
    base: int,
    odd: dict[int, dict[str, Any]] | None = None,
    *,
    reversed_join: bool = False,
) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    """``SIZE`` kernel nodes, node ``i`` writing ``base + i`` to ``out[i]``: a chain, or a
    fork-join of ``BRANCHES`` chains. ``odd`` gives some nodes (by number) other keyword
    arguments of ``add_kernel_node`` (block, shared_mem, kernel), or ``"empty"``,
    ``"cooperative"`` or ``"after"`` (the number of the one node it depends on). Returns
    the graph and its nodes by number."""
    odd = odd or {}
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []

    def add(deps: list[ahg.GraphNode]) -> ahg.GraphNode:
        number = len(nodes)
        options = dict(odd.get(number, {}))
        if "after" in options:
            deps = [nodes[options.pop("after")]]
        if options.pop("empty", False):
            node = graph.add_empty_node(deps=deps)
        else:
            kernel = options.pop("kernel", put)
            cooperative = options.pop("cooperative", False)
            block = options.pop("block", 64)
            args = (base + number, number, out)
            node = graph.add_kernel_node(kernel, 1, block, args, deps=deps, **options)
            if cooperative:
                node.set_attribute(KA.Cooperative, True)
        nodes.append(node)
        return node

    if shape == "chain":
        previous: list[ahg.GraphNode] = []
        for _ in range(SIZE):
            previous = [add(previous)]
        return graph, nodes
    root = add([])
    tails = []
    for branch in range(BRANCHES):
        previous = [root]
        for _ in range((SIZE - 2) // BRANCHES + (branch < (SIZE - 2) % BRANCHES)):
            previous = [add(previous)]
        tails.append(previous[0])
    add(tails[::-1] if reversed_join else tails)
    return graph, nodes


@pytest.fixture
def small_second_device() -> ahg.Device:
    small = ahg.DeviceProperties(max_threads_per_block=256, max_shared_memory_per_block=1024)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    return ahg.get_device(1)


@pytest.fixture
def out(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(8 * SIZE)
    yield ptr
    device.free(ptr)


async def replayed(graph_exec: ahg.GraphExec, device: ahg.Device, out: ahg.DevicePtr) -> list[int]:
    """What one replay on ``device`` writes to ``out`` (on the same device)."""
    device.view(out, np.int64, SIZE)[:] = 0
    await run_once(graph_exec, device)
    return [int(v) for v in device.view(out, np.int64, SIZE)]


def refused(graph_exec: ahg.GraphExec, new: ahg.Graph) -> Any:
    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        graph_exec.update(new)
    return info.value.result  # type: ignore[attr-defined]


SHAPES = ["chain", "fork_join"]
LIMITS = [
    ({"block": 512}, ahg.UpdateResultKind.NotSupported),
    ({"shared_mem": 4096}, ahg.UpdateResultKind.ParametersChanged),
]


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("change", "kind"), LIMITS)
@pytest.mark.parametrize("shared_by_later_nodes", [False, True])
async def test_the_first_launch_the_device_cannot_run_is_named_and_nothing_changes(
    small_second_device: ahg.Device,
    shape: str,
    change: dict[str, Any],
    kind: Any,
    shared_by_later_nodes: bool,
) -> None:
    """One node in the middle of a large update takes a shape the executable's device cannot
    run (valid on the default device the new graph was built on): alone, or with the nodes
    after it on its chain (after it in any order) of the same shape, the same objects."""
    out = small_second_device.malloc(8 * SIZE)
    graph, _ = build(shape, out, 0)
    graph_exec = graph.instantiate(device=small_second_device)
    bad = range(MIDDLE, MIDDLE + 50) if shared_by_later_nodes else [MIDDLE]
    new, new_nodes = build(shape, out, 10_000, dict.fromkeys(bad, change))
    result = refused(graph_exec, new)
    assert result.kind is kind
    assert result.node is new_nodes[MIDDLE]
    assert await replayed(graph_exec, small_second_device, out) == list(range(SIZE))
    good, _ = build(shape, out, 20_000)  # the executable still takes an update
    assert graph_exec.update(good).kind is ahg.UpdateResultKind.Success
    new_values = list(range(20_000, 20_000 + SIZE))
    assert await replayed(graph_exec, small_second_device, out) == new_values
    destroy(graph_exec, graph, new, good, out)


@pytest.mark.asyncio
async def test_a_shape_that_passed_on_one_device_is_checked_again_on_another(
    small_second_device: ahg.Device,
) -> None:
    """The same new graph (its nodes sharing one shape's objects) updates an executable on a
    device that runs the shape, then is refused by one on a device that does not, and the
    other way round: what one update found is not carried into the next."""
    out = small_second_device.malloc(8 * SIZE)
    graph, _ = build("chain", out, 0)
    on_default = graph.instantiate()
    on_small = graph.instantiate(device=small_second_device)
    too_large = {number: {"block": 512} for number in range(SIZE)}
    new, new_nodes = build("chain", out, 10_000, too_large)
    assert on_default.update(new).kind is ahg.UpdateResultKind.Success
    assert refused(on_small, new).node is new_nodes[0]
    assert refused(on_small, new).node is new_nodes[0]  # again, after a refusal
    assert on_default.update(new).kind is ahg.UpdateResultKind.Success
    assert await replayed(on_small, small_second_device, out) == list(range(SIZE))
    destroy(on_default, on_small, graph, new, out)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"kernel": async_put}, ahg.UpdateResultKind.UnsupportedFunctionChange),
        ({"cooperative": True}, ahg.UpdateResultKind.AttributesChanged),
        ({"empty": True}, ahg.UpdateResultKind.NodeTypeChanged),
        # the same count of nodes and edges, one dependency the node before the one it had
        ({"after": MIDDLE - 2}, ahg.UpdateResultKind.TopologyChanged),
    ],
)
async def test_a_node_that_cannot_change_in_the_middle_is_named_and_nothing_changes(
    device: ahg.Device, out: ahg.DevicePtr, shape: str, change: dict[str, Any], kind: Any
) -> None:
    graph, _ = build(shape, out, 0)
    graph_exec = graph.instantiate()
    new, new_nodes = build(shape, out, 10_000, {MIDDLE: change})
    result = refused(graph_exec, new)
    assert result.kind is kind
    assert result.node is new_nodes[MIDDLE]
    assert await replayed(graph_exec, device, out) == list(range(SIZE))
    destroy(graph_exec, graph, new)


@pytest.mark.asyncio
async def test_a_join_with_its_edges_in_another_order_and_another_kernel_update(
    device: ahg.Device, out: ahg.DevicePtr
) -> None:
    """Equal dependency sets in another order, and a kernel object of its own in the middle
    (another kernel of the same launch mode, as HIP allows): both are taken."""
    graph, _ = build("fork_join", out, 0)
    graph_exec = graph.instantiate()
    new, _ = build("fork_join", out, 10_000, {MIDDLE: {"kernel": put_too}}, reversed_join=True)
    assert graph_exec.update(new).kind is ahg.UpdateResultKind.Success
    assert await replayed(graph_exec, device, out) == list(range(10_000, 10_000 + SIZE))
    destroy(graph_exec, graph, new)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    ("change", "error"),
    [({"block": 512}, ahg.InvalidConfiguration), ({"shared_mem": 4096}, ahg.InvalidValue)],
)
async def test_a_child_graph_with_a_launch_the_device_cannot_run_in_the_middle_is_refused(
    small_second_device: ahg.Device, shape: str, change: dict[str, Any], error: type[Exception]
) -> None:
    """``set_child_graph_node_params`` checks each kernel as its own setter would, the same
    shortcut over shared shapes included: the middle node's error, and nothing changes."""
    out = small_second_device.malloc(8 * SIZE)
    child, _ = build(shape, out, 0)
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    graph_exec = parent.instantiate(device=small_second_device)
    new_child, _ = build(shape, out, 10_000, dict.fromkeys(range(MIDDLE, MIDDLE + 50), change))
    with pytest.raises(error):
        graph_exec.set_child_graph_node_params(node, new_child)
    assert await replayed(graph_exec, small_second_device, out) == list(range(SIZE))
    good, _ = build(shape, out, 20_000)
    graph_exec.set_child_graph_node_params(node, good)
    new_values = list(range(20_000, 20_000 + SIZE))
    assert await replayed(graph_exec, small_second_device, out) == new_values
    destroy(graph_exec, parent, child, new_child, good, out)
