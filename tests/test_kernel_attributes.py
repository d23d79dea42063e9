"""Kernel-node attributes: priority, cooperative, access-policy window (HIP's checks and codes).

Round trips on graph nodes and executables, every InvalidValue case, what clone, child graphs,
capture and ``exec.update`` carry, and that a failed call changes nothing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import run_once

A = ahg.KernelNodeAttribute


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


def kernel_graph(out: ahg.DevicePtr) -> tuple[ahg.Graph, ahg.GraphNode]:
    graph = ahg.Graph()
    return graph, graph.add_kernel_node(put, 1, 1, (7, out))


WINDOW = ahg.AccessPolicyWindow(
    base_ptr=None,
    num_bytes=4096,
    hit_ratio=0.5,
    hit_prop=ahg.AccessProperty.Persisting,
    miss_prop=ahg.AccessProperty.Streaming,
)


def test_priority_range_is_hips() -> None:
    # hip::Stream::Priority: High -1, Normal 0 (the default), Low 1; hip-tests check that
    # least + greatest is the default priority.
    least, greatest = ahg.stream_priority_range()
    assert (least, greatest) == (1, -1)
    assert least + greatest == 0


def test_defaults(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    assert node.get_attribute(A.Priority) == 0
    assert node.get_attribute(A.Cooperative) is False
    assert node.get_attribute(A.AccessPolicyWindow) == ahg.AccessPolicyWindow()
    graph.destroy()
    device.free(out)


@pytest.mark.parametrize(
    ("attr", "value", "expected"),
    [
        (A.Priority, -1, -1),
        (A.Priority, 0, 0),
        (A.Priority, 1, 1),  # the least urgent level
        (A.Cooperative, True, True),
        (A.Cooperative, 1, True),  # HIP takes any non-zero value
        (A.Cooperative, 0, False),
        (A.AccessPolicyWindow, WINDOW, WINDOW),
        (int(A.Priority), -1, -1),  # HIP's plain numbers work too
    ],
)
def test_round_trip(device: ahg.Device, attr: Any, value: Any, expected: Any) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    node.set_attribute(attr, value)
    assert node.get_attribute(attr) == expected
    graph.destroy()
    device.free(out)


def test_window_with_a_device_pointer_and_int_ratio(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    window = ahg.AccessPolicyWindow(out, 8, 1, ahg.AccessProperty.Normal)
    node.set_attribute(A.AccessPolicyWindow, window)
    got = node.get_attribute(A.AccessPolicyWindow)
    assert (got.base_ptr, got.num_bytes, got.hit_ratio) == (out, 8, 1.0)
    assert isinstance(got.hit_ratio, float)
    graph.destroy()
    device.free(out)


@pytest.mark.parametrize("ratio", [np.float32(0.25), np.float64(0.25), np.longdouble(0.25)])
def test_window_takes_a_numpy_ratio_as_a_float(device: ahg.Device, ratio: Any) -> None:
    # numpy's reals are numbers here as in every other numeric argument (a float32 is no
    # Python float, yet a ratio computed with numpy often is one)
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    node.set_attribute(A.AccessPolicyWindow, ahg.AccessPolicyWindow(out, 8, ratio))
    got = node.get_attribute(A.AccessPolicyWindow)
    assert got.hit_ratio == 0.25
    assert type(got.hit_ratio) is float
    graph.destroy()
    device.free(out)


BAD: list[tuple[Any, Any, type[Exception]]] = [
    (A.Priority, -2, ahg.InvalidValue),  # above the greatest priority
    (A.Priority, 2, ahg.InvalidValue),  # below the least
    (A.Priority, -1000, ahg.InvalidValue),
    (A.Priority, 2**64, ahg.InvalidValue),
    (A.Priority, None, ahg.InvalidValue),  # HIP's null value
    (A.Priority, "0", TypeError),
    (A.Priority, True, TypeError),
    (A.Priority, 0.0, TypeError),
    (A.Cooperative, "yes", TypeError),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=1.5), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=-0.1), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=math.nan), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=np.float32("nan")), ahg.InvalidValue),
    # an int too large for a float is out of range, not an OverflowError from float()
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=10**400), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=-(10**400)), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_ratio=np.bool_(True)), TypeError),  # type: ignore[arg-type]
    (
        A.AccessPolicyWindow,
        ahg.AccessPolicyWindow(miss_prop=ahg.AccessProperty.Persisting),
        ahg.InvalidValue,
    ),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(hit_prop=7), ahg.InvalidValue),  # type: ignore[arg-type]
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(num_bytes=-1), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(num_bytes=(1 << 27) + 1), ahg.InvalidValue),
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(num_bytes=1.0), TypeError),  # type: ignore[arg-type]
    (A.AccessPolicyWindow, ahg.AccessPolicyWindow(base_ptr=5), TypeError),  # type: ignore[arg-type]
    (A.AccessPolicyWindow, 0.5, TypeError),
    (0, 1, ahg.InvalidValue),  # not an attribute id
    (3, 1, ahg.InvalidValue),
    (99, 1, ahg.InvalidValue),
    ("Priority", 1, TypeError),
]


@pytest.mark.parametrize(("attr", "value", "error"), BAD)
def test_bad_attribute_is_refused_and_changes_nothing(
    device: ahg.Device, attr: Any, value: Any, error: type[Exception]
) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    node.set_attribute(A.Priority, -1)
    before = node.params
    with pytest.raises(error):
        node.set_attribute(attr, value)
    assert node.params == before
    graph.destroy()
    device.free(out)


def test_unknown_attribute_get_is_invalid_value(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    with pytest.raises(ahg.InvalidValue):
        node.get_attribute(99)
    graph.destroy()
    device.free(out)


def test_non_kernel_nodes_have_no_attributes(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph = ahg.Graph()
    empty = graph.add_empty_node()
    fill = graph.add_memset_node(out, 0, 8)
    kernel = graph.add_kernel_node(put, 1, 1, (1, out))
    for node in (empty, fill):
        with pytest.raises(ahg.InvalidValue, match="not a kernel node"):
            node.set_attribute(A.Priority, 0)
        with pytest.raises(ahg.InvalidValue, match="not a kernel node"):
            node.get_attribute(A.Priority)
        with pytest.raises(ahg.InvalidValue):
            kernel.copy_attributes_from(node)
        with pytest.raises(ahg.InvalidValue):
            node.copy_attributes_from(kernel)
    graph.destroy()
    for call in (
        lambda: kernel.set_attribute(A.Priority, 0),
        lambda: kernel.get_attribute(A.Priority),
    ):
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            call()
    device.free(out)


def test_copy_attributes(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, src = kernel_graph(out)
    dst = graph.add_kernel_node(put, 2, 1, (9, out))
    src.set_attribute(A.Priority, -1)
    src.set_attribute(A.Cooperative, True)
    src.set_attribute(A.AccessPolicyWindow, WINDOW)
    dst.copy_attributes_from(src)
    for attr in A:
        assert dst.get_attribute(attr) == src.get_attribute(attr)
    assert dst.params.args == (9, out)  # only the attributes were copied
    other, foreign = kernel_graph(out)
    foreign.copy_attributes_from(src)  # across graphs too, as HIP's CopyAttr and CUDA allow
    for attr in A:
        assert foreign.get_attribute(attr) == src.get_attribute(attr)
    with pytest.raises(ahg.InvalidValue):
        dst.copy_attributes_from(None)  # type: ignore[arg-type]
    other.destroy()
    graph.destroy()
    device.free(out)


def test_add_kernel_node_checks_the_priority_range(device: ahg.Device) -> None:
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="outside the device's range"):
        graph.add_kernel_node(put, 1, 1, (1, None), priority=-1000)
    assert graph.statistics().nodes == 0
    graph.destroy()


def test_set_params_keeps_attributes_and_clone_child_and_exec_carry_them(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    node.set_attribute(A.Cooperative, True)
    node.set_attribute(A.AccessPolicyWindow, WINDOW)
    node.set_kernel_params(put, 1, 1, (8, out), priority=-1)
    node.set_params(node.params)
    assert node.get_attribute(A.Cooperative) is True
    assert node.get_attribute(A.AccessPolicyWindow) == WINDOW
    clone = graph.clone()
    twin = clone.find_in_clone(node)
    assert twin.get_attribute(A.AccessPolicyWindow) == WINDOW
    twin.set_attribute(A.Priority, 0)  # the clone is independent
    assert node.get_attribute(A.Priority) == -1
    parent = ahg.Graph()
    child = parent.add_child_graph_node(graph)
    (inner,) = child.params.graph.nodes()
    assert inner.get_attribute(A.Cooperative) is True
    graph_exec = graph.instantiate()
    assert graph_exec.kernel_node_attribute(node, A.Priority) == -1
    assert graph_exec.kernel_node_attribute(node, A.AccessPolicyWindow) == WINDOW
    graph_exec.destroy()
    for g in (graph, clone, parent):
        g.destroy()
    device.free(out)


@pytest.mark.asyncio
async def test_executable_twin_round_trips_and_runs(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    graph_exec = graph.instantiate()
    graph_exec.set_kernel_node_attribute(node, A.Priority, -1)
    graph_exec.set_kernel_node_attribute(node, A.AccessPolicyWindow, WINDOW)
    graph_exec.set_kernel_node_attribute(node, A.Cooperative, False)  # unchanged: fine
    assert graph_exec.kernel_node_attribute(node, A.Priority) == -1
    assert graph_exec.kernel_node_attribute(node, A.AccessPolicyWindow) == WINDOW
    assert node.get_attribute(A.Priority) == 0  # the graph is untouched
    with pytest.raises(ahg.InvalidValue, match="cooperative"):
        graph_exec.set_kernel_node_attribute(node, A.Cooperative, True)
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_attribute(node, A.Priority, 3)
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_kernel_node_attribute(node, 42, 0)
    # New kernel parameters keep the executable's attributes, as HIP's setter does.
    graph_exec.set_kernel_node_params(node, put, 1, 1, (11, out))
    assert graph_exec.kernel_node_attribute(node, A.Priority) == -1
    await run_once(graph_exec, device)
    assert device.view(out, np.int64, 1)[0] == 11
    empty = graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.kernel_node_attribute(empty, A.Priority)  # not in the executable
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.kernel_node_attribute(node, A.Priority)
    graph.destroy()
    device.free(out)


def test_exec_update_takes_the_new_graphs_attributes(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, _ = kernel_graph(out)
    graph_exec = graph.instantiate()
    new, new_node = kernel_graph(out)
    new_node.set_attribute(A.AccessPolicyWindow, WINDOW)
    new_node.set_attribute(A.Priority, -1)
    assert graph_exec.update(new).ok
    (original,) = graph.nodes()
    assert graph_exec.kernel_node_attribute(original, A.AccessPolicyWindow) == WINDOW
    assert graph_exec.kernel_node_attribute(original, A.Priority) == -1
    graph_exec.destroy()
    graph.destroy()
    new.destroy()
    device.free(out)


@pytest.mark.asyncio
async def test_capture_on_a_prioritised_stream_gives_the_node_that_priority(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    stream = device.create_stream(priority=-1)
    async with stream.capture() as capture:
        await stream.launch_kernel(put, 1, 1, (3, out))
    (node,) = capture.graph.nodes()
    assert node.get_attribute(A.Priority) == -1
    node.set_attribute(A.Cooperative, True)
    assert node.get_attribute(A.Cooperative) is True
    capture.graph.destroy()
    stream.destroy()
    device.free(out)


def test_dot_shows_the_attributes_with_hips_flag(device: ahg.Device) -> None:
    out = device.malloc(8)
    graph, node = kernel_graph(out)
    node.set_attribute(A.Priority, -1)
    node.set_attribute(A.AccessPolicyWindow, WINDOW)
    text = graph.to_dot(ahg.DotFlags.KernelNodeAttributes)
    assert "{priority | cooperative | window_base" in text
    assert "{-1 | 0 | NULL | 4096 | 0.5 | Persisting | Streaming}" in text
    assert "priority" not in graph.to_dot(ahg.DotFlags.KernelNodeParams)
    graph.destroy()
    device.free(out)
