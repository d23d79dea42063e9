"""Whole-graph update against HIP's order of checks (HIP_SEMANTICS.md §5.2).

For each index, ``hipGraphExecUpdate`` checks the node type, then (for a memcpy) the copy kind,
and only then the number of dependencies: a node whose copy direction and dependencies both
changed is reported as ``ParametersChanged``, not ``TopologyChanged``.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


def _graph(
    device: ahg.Device, dev: ahg.DevicePtr, host: np.ndarray, to_device: bool, both: bool
) -> tuple[ahg.Graph, ahg.GraphNode]:
    graph = ahg.Graph()
    first = graph.add_empty_node()
    second = graph.add_empty_node()
    deps = [first, second] if both else [first]
    if to_device:
        node = graph.add_memcpy_node(dev, host, host.nbytes, deps=deps)
    else:
        node = graph.add_memcpy_node(host, dev, host.nbytes, deps=deps)
    return graph, node


@pytest.mark.asyncio
async def test_memcpy_kind_is_checked_before_dependency_count() -> None:
    device = ahg.get_device(0)
    dev = device.malloc(64)
    source = np.arange(8, dtype=np.int64)
    out = np.zeros(8, dtype=np.int64)
    old_graph, _ = _graph(device, dev, source, to_device=True, both=False)
    new_graph, new_node = _graph(device, dev, out, to_device=False, both=True)
    exec_ = old_graph.instantiate()
    stream = device.create_stream()
    try:
        with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
            exec_.update(new_graph)
        result = caught.value.result
        assert result is not None
        assert result.kind is ahg.UpdateResultKind.ParametersChanged
        assert result.node is new_node
        # The failed update left the executable as it was: it still copies host -> device.
        handle = await exec_.launch(stream)
        await handle
        assert [int(v) for v in device.view(dev, np.int64, 8)] == list(range(8))
        assert out.tolist() == [0] * 8
    finally:
        stream.destroy()
        exec_.destroy()
        old_graph.destroy()
        new_graph.destroy()
        device.free(dev)


def test_dependency_count_still_reported_when_kind_is_unchanged() -> None:
    device = ahg.get_device(0)
    dev = device.malloc(64)
    host = np.zeros(8, dtype=np.int64)
    old_graph, _ = _graph(device, dev, host, to_device=True, both=False)
    new_graph, new_node = _graph(device, dev, host, to_device=True, both=True)
    exec_ = old_graph.instantiate()
    try:
        with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
            exec_.update(new_graph)
        result = caught.value.result
        assert result is not None
        assert result.kind is ahg.UpdateResultKind.TopologyChanged
        assert result.node is new_node
    finally:
        exec_.destroy()
        old_graph.destroy()
        new_graph.destroy()
        device.free(dev)


def test_child_graph_setter_still_reports_topology_before_kind() -> None:
    """hipGraphExecChildGraphNodeSetParams validates the topology first: hipErrorUnknown."""
    device = ahg.get_device(0)
    dev = device.malloc(64)
    host = np.zeros(8, dtype=np.int64)
    old_child, _ = _graph(device, dev, host, to_device=True, both=False)
    new_child, _ = _graph(device, dev, host, to_device=False, both=True)
    parent = ahg.Graph()
    node = parent.add_child_graph_node(old_child)
    exec_ = parent.instantiate()
    try:
        with pytest.raises(ahg.Unknown):
            exec_.set_child_graph_node_params(node, new_child)
    finally:
        exec_.destroy()
        parent.destroy()
        old_child.destroy()
        new_child.destroy()
        device.free(dev)


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


def _kernel_then(block: int, host: bool) -> tuple[ahg.Graph, ahg.GraphNode]:
    graph = ahg.Graph()
    kernel = graph.add_kernel_node(tick, 1, block)
    if host:
        graph.add_host_node(lambda: None, deps=[kernel])
    else:
        graph.add_empty_node(deps=[kernel])
    return graph, kernel


def test_earlier_kernel_failure_is_reported_before_a_later_type_change() -> None:
    """Index by index: node 0's SetParams fails (the executable's device cannot run its block)
    before node 1's type is compared, so HIP reports NotSupported on node 0."""
    small = ahg.DeviceProperties(max_threads_per_block=256)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    device = ahg.get_device(1)
    old, _ = _kernel_then(64, host=False)
    new, kernel = _kernel_then(512, host=True)
    exec_ = old.instantiate(device=device)
    before = exec_.statistics()
    try:
        with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
            exec_.update(new)
        result = caught.value.result
        assert result is not None
        assert result.kind is ahg.UpdateResultKind.NotSupported
        assert result.node is kernel
        assert exec_.statistics() == before
    finally:
        exec_.destroy()
        old.destroy()
        new.destroy()


def _child(dev: ahg.DevicePtr, host: np.ndarray, to_host: bool, then_host: bool) -> ahg.Graph:
    graph = ahg.Graph()
    if to_host:
        copy = graph.add_memcpy_node(host, dev, host.nbytes)
    else:
        copy = graph.add_memcpy_node(dev, host, host.nbytes)
    if then_host:
        graph.add_host_node(lambda: None, deps=[copy])
    else:
        graph.add_empty_node(deps=[copy])
    return graph


@pytest.mark.asyncio
async def test_child_setter_checks_the_whole_topology_before_any_parameters() -> None:
    """validateChildGraphNodeSetParams compares the whole node-type sequence first: a later
    node's type change is hipErrorUnknown even when an earlier node's parameters are refused."""
    device = ahg.get_device(0)
    dev = device.malloc(64)
    source = np.arange(8, dtype=np.int64)
    old_child = _child(dev, source, to_host=False, then_host=False)
    new_child = _child(dev, np.zeros(8, dtype=np.int64), to_host=True, then_host=True)
    parent = ahg.Graph()
    node = parent.add_child_graph_node(old_child)
    exec_ = parent.instantiate()
    stream = device.create_stream()
    try:
        with pytest.raises(ahg.Unknown):
            exec_.set_child_graph_node_params(node, new_child)
        # Unchanged: still copies host -> device.
        await (await exec_.launch(stream))
        assert [int(v) for v in device.view(dev, np.int64, 8)] == list(range(8))
        # Same shape, refused parameter: still the memcpy setter's InvalidValue.
        same_shape = _child(dev, np.zeros(8, dtype=np.int64), to_host=True, then_host=False)
        with pytest.raises(ahg.InvalidValue):
            exec_.set_child_graph_node_params(node, same_shape)
        same_shape.destroy()
    finally:
        stream.destroy()
        exec_.destroy()
        parent.destroy()
        old_child.destroy()
        new_child.destroy()
        device.free(dev)


def _with_child(block: int, host: bool) -> tuple[ahg.Graph, ahg.GraphNode]:
    child, _ = _kernel_then(block, host)
    graph = ahg.Graph()
    graph.add_empty_node()
    node = graph.add_child_graph_node(child)
    child.destroy()
    return graph, node


def test_a_child_graph_shape_change_wins_over_its_own_kernels_limits() -> None:
    """A child graph's shape is compared as a whole before its nodes' parameters: the
    type change inside it is reported, not the device limits of a kernel before it."""
    small = ahg.DeviceProperties(max_threads_per_block=256)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    device = ahg.get_device(1)
    old, _ = _with_child(64, host=False)
    new, node = _with_child(512, host=True)
    exec_ = old.instantiate(device=device)
    try:
        with pytest.raises(ahg.GraphExecUpdateFailure) as caught:
            exec_.update(new)
        result = caught.value.result
        assert result is not None
        assert result.kind is ahg.UpdateResultKind.NodeTypeChanged
        assert result.node is node
    finally:
        exec_.destroy()
        old.destroy()
        new.destroy()
