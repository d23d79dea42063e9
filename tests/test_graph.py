"""Graphs and nodes: every node kind, HIP-style negative cases, setters, destroy semantics."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.memnodes import RESERVATIONS
from ahipgraph.graph.node import NODES, PARAMS_TYPES
from ahipgraph.graph.params import (
    ChildGraphParams,
    EventParams,
    MemAllocParams,
    MemFreeParams,
)
from ahipgraph.runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from cleanup import destroy


@ahg.kernel
def scale(t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32]) -> None:
    i = t.ids[t.ids < n]
    x[i] *= a


def noop(*_: Any) -> None:
    pass


@pytest.fixture
def buf(device: ahg.Device) -> Iterator[ahg.DevicePtr]:
    ptr = device.malloc(1024)
    yield ptr
    while _MADE:  # what _adders made for this test
        made = _MADE.pop()
        if made.alive:
            made.destroy()
    device.free(ptr)


# One adder per creatable node kind, with valid parameters, for the cases that apply to all.
Adder = Callable[[ahg.Graph, dict[str, Any]], ahg.GraphNode]


_MADE: list[ahg.Graph | ahg.Event] = []  # destroyed by the ``buf`` fixture at teardown


def _adders(device: ahg.Device, buf: ahg.DevicePtr) -> dict[str, Adder]:
    host = np.zeros(256, dtype=np.float32)
    event = device.create_event()
    child = ahg.Graph()
    child.add_empty_node()
    _MADE.extend((event, child))
    return {
        "kernel": lambda g, kw: g.add_kernel_node(scale, 1, 256, (256, 2.0, buf), **kw),
        "memcpy": lambda g, kw: g.add_memcpy_node(buf, host, **kw),
        "memset": lambda g, kw: g.add_memset_node(buf, 0, 1024, **kw),
        "host": lambda g, kw: g.add_host_node(noop, (1,), **kw),
        "child": lambda g, kw: g.add_child_graph_node(child, **kw),
        "empty": lambda g, kw: g.add_empty_node(**kw),
        "event_record": lambda g, kw: g.add_event_record_node(event, **kw),
        "event_wait": lambda g, kw: g.add_event_wait_node(event, **kw),
        "mem_alloc": lambda g, kw: g.add_mem_alloc_node(64, **kw),
    }


H4 = np.zeros(4, np.uint8)
HUGE = 1 << 30
BAD_KIND = ahg.InvalidMemcpyDirection
BAD = ahg.InvalidValue

KINDS = [
    "kernel",
    "memcpy",
    "memset",
    "host",
    "child",
    "empty",
    "event_record",
    "event_wait",
    "mem_alloc",
]


# -- NodeType and the public surface -------------------------------------------------------------


def test_node_type_has_hips_names_and_values() -> None:
    expected = {
        "Kernel": 0,
        "Memcpy": 1,
        "Memset": 2,
        "Host": 3,
        "Graph": 4,
        "Empty": 5,
        "WaitEvent": 6,
        "EventRecord": 7,
        "ExtSemaphoreSignal": 8,
        "ExtSemaphoreWait": 9,
        "MemAlloc": 10,
        "MemFree": 11,
        "MemcpyFromSymbol": 12,
        "MemcpyToSymbol": 13,
        "Conditional": 15,
    }
    assert {t.name: t.value for t in ahg.NodeType} == expected
    assert ahg.NodeType.Kernel.hip_name == "hipGraphNodeTypeKernel"


def test_graph_names_are_exported() -> None:
    for name in ("Graph", "GraphNode", "NodeType", "UserObject", "DotFlags"):
        assert name in ahg.__all__
        assert hasattr(ahg, name)


def test_nodes_have_no_public_constructor() -> None:
    with ahg.Graph() as graph, pytest.raises(TypeError):
        ahg.GraphNode(graph, ahg.NodeType.Empty, None)


# -- each node kind ------------------------------------------------------------------------------


def test_every_kind_is_created_with_its_type_and_params(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    graph = ahg.Graph()
    adders = _adders(device, buf)
    nodes = {kind: adders[kind](graph, {}) for kind in KINDS}
    free = graph.add_mem_free_node(nodes["mem_alloc"].params.ptr)
    expected_types = {
        "kernel": ahg.NodeType.Kernel,
        "memcpy": ahg.NodeType.Memcpy,
        "memset": ahg.NodeType.Memset,
        "host": ahg.NodeType.Host,
        "child": ahg.NodeType.Graph,
        "empty": ahg.NodeType.Empty,
        "event_record": ahg.NodeType.EventRecord,
        "event_wait": ahg.NodeType.WaitEvent,
        "mem_alloc": ahg.NodeType.MemAlloc,
    }
    for kind, node in nodes.items():
        assert node.type is expected_types[kind]
        assert node.graph is graph
        expected_params = PARAMS_TYPES[node.type]
        if expected_params is None:
            assert node.params is None
        else:
            assert isinstance(node.params, expected_params)
    assert free.type is ahg.NodeType.MemFree
    assert isinstance(free.params, MemFreeParams)
    assert graph.has_mem_nodes
    assert len(graph.nodes()) == len(KINDS) + 1
    destroy(graph)


def test_kernel_node_params(buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    node = graph.add_kernel_node(scale, (2, 1), (128,), (256, 2.0, buf), shared_mem=64)
    params = node.params
    assert isinstance(params, KernelParams)
    assert params.kernel is scale
    assert params.grid == ahg.Dim3(2, 1, 1)
    assert params.block == ahg.Dim3(128, 1, 1)
    assert params.args == (256, 2.0, buf)
    assert params.shared_mem == 64
    destroy(graph)


@pytest.mark.parametrize(
    ("direction", "expected"),
    [
        ("h2d", ahg.CopyKind.HostToDevice),
        ("d2h", ahg.CopyKind.DeviceToHost),
        ("d2d", ahg.CopyKind.DeviceToDevice),
    ],
)
def test_memcpy_node_direction_comes_from_endpoints(
    device: ahg.Device, buf: ahg.DevicePtr, direction: str, expected: ahg.CopyKind
) -> None:
    host = np.zeros(64, dtype=np.uint8)
    other = device.malloc(64)
    graph = ahg.Graph()
    if direction == "h2d":
        node = graph.add_memcpy_node(buf, host)
    elif direction == "d2h":
        node = graph.add_memcpy_node(host, buf)
    else:
        node = graph.add_memcpy_node(other, buf, 64, ahg.CopyKind.DeviceToDevice)
    assert isinstance(node.params, MemcpyParams)
    assert node.params.kind is expected
    assert node.params.nbytes == 64
    destroy(other, graph)


def test_memset_node_params(buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    node = graph.add_memset_node(buf, 0x1234, 8, element_size=2, height=4, pitch=32)
    params = node.params
    assert isinstance(params, MemsetParams)
    assert (params.value, params.element_size, params.width, params.height, params.pitch) == (
        0x1234,
        2,
        8,
        4,
        32,
    )
    destroy(graph)


def test_host_event_and_child_params(device: ahg.Device) -> None:
    graph = ahg.Graph()
    event = device.create_event()
    host = graph.add_host_node(noop, [1, 2])
    record = graph.add_event_record_node(event)
    child_src = ahg.Graph()
    child = graph.add_child_graph_node(child_src)
    assert host.params == HostParams(noop, (1, 2))
    assert record.params == EventParams(event)
    assert isinstance(child.params, ChildGraphParams)
    assert child.params.graph is not child_src
    destroy(graph, event, child_src)


# -- negative cases for every add_*_node ---------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_add_on_destroyed_graph_is_invalid_value(
    device: ahg.Device, buf: ahg.DevicePtr, kind: str
) -> None:
    graph = ahg.Graph()
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        _adders(device, buf)[kind](graph, {})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", ["null", "destroyed", "foreign", "duplicate", "dead_graph"])
def test_add_with_bad_deps_is_invalid_value_and_changes_nothing(
    device: ahg.Device, buf: ahg.DevicePtr, kind: str, bad: str
) -> None:
    graph = ahg.Graph()
    good = graph.add_empty_node()
    if bad == "null":
        deps: list[Any] = [good, None]
    elif bad == "destroyed":
        gone = graph.add_empty_node()
        gone.destroy()
        deps = [good, gone]
    elif bad == "foreign":
        foreign = ahg.Graph()
        _MADE.append(foreign)
        deps = [foreign.add_empty_node()]
    elif bad == "duplicate":
        deps = [good, good]
    else:
        other = ahg.Graph()
        deps = [other.add_empty_node()]
        other.destroy()
    reservations = len(RESERVATIONS)
    before = graph.statistics()
    with pytest.raises(ahg.InvalidValue):
        _adders(device, buf)[kind](graph, {"deps": deps})
    assert graph.statistics() == before
    assert graph.nodes() == [good]
    assert good.dependents() == []
    assert len(RESERVATIONS) == reservations  # no address space taken by a failed alloc node
    destroy(graph)


@pytest.mark.parametrize(
    "bad_call",
    [
        lambda g, b, kw: g.add_kernel_node(scale, 0, 256, (1, 1.0, b), **kw),
        lambda g, b, kw: g.add_memcpy_node(None, b, 4, **kw),
        lambda g, b, kw: g.add_memset_node(b, 0, 4, element_size=3, **kw),
        lambda g, b, kw: g.add_host_node(None, **kw),
        lambda g, b, kw: g.add_child_graph_node(None, **kw),
        lambda g, b, kw: g.add_event_record_node(None, **kw),
        lambda g, b, kw: g.add_event_wait_node(None, **kw),
        lambda g, b, kw: g.add_mem_alloc_node(0, **kw),
        lambda g, b, kw: g.add_mem_free_node(None, **kw),
    ],
)
def test_check_order_is_graph_then_deps_then_parameters(
    buf: ahg.DevicePtr, bad_call: Callable[[ahg.Graph, ahg.DevicePtr, dict[str, Any]], Any]
) -> None:
    graph = ahg.Graph()
    node = graph.add_empty_node()
    with pytest.raises(ahg.InvalidValue, match="listed twice"):
        bad_call(graph, buf, {"deps": [node, node]})
    graph.destroy()
    with pytest.raises(ahg.InvalidValue, match=r"Graph id=.* destroyed"):
        bad_call(graph, buf, {"deps": [node, node]})


def test_deps_accept_a_single_node(buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_memset_node(buf, 1, 4, deps=a)
    assert b.dependencies() == [a]
    destroy(graph)


def test_deps_must_be_nodes() -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError):
        graph.add_empty_node(deps=["not a node"])  # type: ignore[list-item]
    destroy(graph)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda g, b: g.add_kernel_node(None, 1, 1, ()), ahg.InvalidValue),
        (lambda g, b: g.add_kernel_node(scale, 0, 256, (1, 1.0, b)), ahg.InvalidConfiguration),
        (lambda g, b: g.add_kernel_node(scale, 1, 4096, (1, 1.0, b)), ahg.InvalidConfiguration),
        (lambda g, b: g.add_kernel_node(scale, 1, 1, (1, 1.0, b), shared_mem=HUGE), BAD),
        (lambda g, b: g.add_kernel_node(scale, 1, 1, (1,)), TypeError),
        (lambda g, b: g.add_memcpy_node(None, b, 4), ahg.InvalidValue),
        (lambda g, b: g.add_memcpy_node(b, None, 4), ahg.InvalidValue),
        (lambda g, b: g.add_memcpy_node(b + 8, b, 1024), ahg.InvalidValue),
        (lambda g, b: g.add_memcpy_node(b, H4, 8), ahg.InvalidValue),
        (lambda g, b: g.add_memcpy_node(b, b + 512, -1), ahg.InvalidValue),
        (lambda g, b: g.add_memcpy_node(b, b + 512), ahg.InvalidValue),
        (lambda g, b: g.add_memcpy_node(b, H4, 4, ahg.CopyKind.DeviceToHost), BAD_KIND),
        (lambda g, b: g.add_memcpy_node(b, H4, 4, 17), BAD_KIND),
        (lambda g, b: g.add_memcpy_node(ahg.DevicePtr(0, 12345), b, 4), ahg.InvalidDevicePointer),
        (lambda g, b: g.add_memset_node(ahg.NULL, 0, 4), ahg.InvalidValue),
        (lambda g, b: g.add_memset_node(b, 0, 4, element_size=3), ahg.InvalidValue),
        (lambda g, b: g.add_memset_node(b, 0, 1025), ahg.InvalidValue),
        (lambda g, b: g.add_memset_node(b, 0, 257, element_size=4), ahg.InvalidValue),
        (lambda g, b: g.add_memset_node(b, 0, 16, height=2, pitch=8), ahg.InvalidValue),
        (lambda g, b: g.add_memset_node(b, 0, -1), ahg.InvalidValue),
        (lambda g, b: g.add_host_node(None), ahg.InvalidValue),
        (lambda g, b: g.add_host_node(42), TypeError),
        (lambda g, b: g.add_child_graph_node(None), ahg.InvalidValue),
        (lambda g, b: g.add_child_graph_node("graph"), TypeError),
        (lambda g, b: g.add_event_record_node(None), ahg.InvalidValue),
        (lambda g, b: g.add_event_wait_node(None), ahg.InvalidValue),
        (lambda g, b: g.add_event_wait_node("event"), TypeError),
        (lambda g, b: g.add_mem_alloc_node(0), ahg.InvalidValue),
        (lambda g, b: g.add_mem_alloc_node(-5), ahg.InvalidValue),
        (lambda g, b: g.add_mem_alloc_node(64, device=7), ahg.InvalidValue),
        (lambda g, b: g.add_mem_alloc_node(1.5), TypeError),
        (lambda g, b: g.add_mem_free_node(None), ahg.InvalidValue),
        (lambda g, b: g.add_mem_free_node(ahg.NULL), ahg.InvalidValue),
        (lambda g, b: g.add_mem_free_node(b), ahg.InvalidValue),  # not an alloc node's pointer
    ],
)
def test_bad_parameters_raise_hips_error_and_leave_graph_unchanged(
    buf: ahg.DevicePtr, call: Callable[[ahg.Graph, ahg.DevicePtr], Any], error: type[Exception]
) -> None:
    graph = ahg.Graph()
    nodes_before = len(NODES)
    with pytest.raises(error):
        call(graph, buf)
    assert graph.statistics().nodes == 0
    assert len(NODES) == nodes_before
    destroy(graph)


def test_freed_memory_is_rejected(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    device.free(ptr)
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidDevicePointer):
        graph.add_memset_node(ptr, 0, 4)
    destroy(graph)


def test_destroyed_child_graph_and_event_are_invalid_value(device: ahg.Device) -> None:
    graph = ahg.Graph()
    child = ahg.Graph()
    child.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.add_child_graph_node(child)
    event = device.create_event()
    event.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.add_event_record_node(event)
    with pytest.raises(ahg.InvalidValue):
        graph.add_event_wait_node(event)
    assert graph.statistics().nodes == 0
    destroy(graph)


# -- child graphs --------------------------------------------------------------------------------


def test_child_graph_embeds_a_copy_taken_when_added() -> None:
    child = ahg.Graph()
    a = child.add_empty_node()
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    child.add_empty_node(deps=[a])  # does not reach the copy
    embedded = node.params.graph
    assert len(embedded.nodes()) == 1
    assert embedded.nodes()[0].id == a.id
    assert embedded.owner_node is node
    embedded.add_empty_node()  # editing the copy changes the parent's child
    assert len(node.params.graph.nodes()) == 2
    destroy(child, parent)


def test_graph_may_be_added_as_its_own_child() -> None:
    graph = ahg.Graph()
    first = graph.add_empty_node()
    node = graph.add_child_graph_node(graph, deps=[first])
    embedded = node.params.graph
    assert [n.id for n in embedded.nodes()] == [first.id]  # the snapshot predates the node
    assert [n.type for n in graph.nodes()] == [ahg.NodeType.Empty, ahg.NodeType.Graph]
    destroy(graph)


def test_embedded_copy_cannot_be_destroyed_directly() -> None:
    parent, child = ahg.Graph(), ahg.Graph()
    node = parent.add_child_graph_node(child)
    embedded = node.params.graph
    with pytest.raises(ahg.InvalidValue):
        embedded.destroy()
    node.destroy()
    assert embedded.destroyed
    with pytest.raises(ahg.IllegalState):
        embedded.destroy()
    destroy(parent, child)


def test_child_graph_with_memory_nodes_is_not_supported() -> None:
    child = ahg.Graph()
    child.add_mem_alloc_node(64)
    parent = ahg.Graph()
    with pytest.raises(ahg.NotSupported):
        parent.add_child_graph_node(child)
    empty = ahg.Graph()
    embedded = parent.add_child_graph_node(empty).params.graph
    with pytest.raises(ahg.NotSupported):
        embedded.add_mem_alloc_node(64)
    assert parent.statistics().nodes == 1
    destroy(child, parent, empty)


# -- memory nodes --------------------------------------------------------------------------------


def test_mem_alloc_reserves_address_space_that_later_nodes_can_use(device: ahg.Device) -> None:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(256)
    params = alloc.params
    assert isinstance(params, MemAllocParams)
    assert (params.nbytes, params.device) == (256, 0)
    stats = device.memory.statistics()
    assert stats.reservations == 1
    assert stats.bytes_in_use == 0  # nothing committed until an executable runs it
    host = np.zeros(256, dtype=np.uint8)
    fill = graph.add_memset_node(params.ptr + 128, 7, 32, element_size=4, deps=[alloc])
    copy = graph.add_memcpy_node(host, params.ptr, deps=[fill])
    assert copy.params.kind is ahg.CopyKind.DeviceToHost
    with pytest.raises(ahg.InvalidValue):
        graph.add_memset_node(params.ptr + 200, 0, 57)  # past the reservation's end
    with pytest.raises(ahg.InvalidValue):
        graph.add_memcpy_node(params.ptr, np.zeros(512, np.uint8))
    with pytest.raises(ahg.InvalidValue):
        graph.add_memset_node(params.ptr, 0, 4, element_size=3)  # other checks still apply
    graph.add_mem_free_node(params.ptr, deps=[copy])
    graph.destroy()
    assert device.memory.statistics().reservations == 0


def test_mem_free_rules(device: ahg.Device) -> None:
    graph = ahg.Graph()
    ptr = graph.add_mem_alloc_node(64).params.ptr
    with pytest.raises(ahg.InvalidValue):
        graph.add_mem_free_node(ptr + 8)  # not the start of the allocation
    graph.add_mem_free_node(ptr)
    with pytest.raises(ahg.InvalidValue):
        graph.add_mem_free_node(ptr)  # a second free
    other = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        other.add_mem_free_node(ptr)
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        other.add_mem_free_node(ptr)  # the allocating graph is gone
    destroy(other)


def test_free_node_in_another_graph_and_unclaim_on_destroy() -> None:
    allocating = ahg.Graph()
    ptr = allocating.add_mem_alloc_node(64).params.ptr
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    freeing.destroy()
    again = ahg.Graph()
    again.add_mem_free_node(ptr)  # free-able again once the freeing graph is gone
    allocating.destroy()
    again.destroy()


def test_memory_nodes_cannot_be_destroyed_or_cloned() -> None:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    free = graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    for node in (alloc, free):
        with pytest.raises(ahg.NotSupported):
            node.destroy()
        with pytest.raises(ahg.NotSupported):
            node.set_params(node.params)
    with pytest.raises(ahg.NotSupported):
        graph.clone()
    assert graph.statistics().nodes == 2
    destroy(graph)


def test_instantiated_graph_leaves_reservations_to_the_executable(device: ahg.Device) -> None:
    graph = ahg.Graph()
    ptr = graph.add_mem_alloc_node(64).params.ptr
    graph._mark_instantiated()
    assert graph.instantiated
    graph.destroy()
    assert device.memory.statistics().reservations == 1
    device.memory.unreserve(ptr)  # what the executable does when it is destroyed
    assert device.memory.statistics().reservations == 0


# -- setters -------------------------------------------------------------------------------------


def test_setters_replace_params_with_the_same_validation(
    device: ahg.Device, buf: ahg.DevicePtr
) -> None:
    graph = ahg.Graph()
    kernel = graph.add_kernel_node(scale, 1, 256, (256, 2.0, buf))
    kernel.set_kernel_params(scale, 2, 128, (256, 3.0, buf))
    assert kernel.params.grid == ahg.Dim3(2)
    with pytest.raises(ahg.InvalidConfiguration):
        kernel.set_kernel_params(scale, 0, 128, (256, 3.0, buf))
    assert kernel.params.grid == ahg.Dim3(2)  # unchanged after a failed set

    memset = graph.add_memset_node(buf, 1, 16)
    memset.set_memset_params(buf + 16, 2, 4, element_size=4)
    assert (memset.params.dst, memset.params.value) == (buf + 16, 2)
    with pytest.raises(ahg.InvalidValue):
        memset.set_memset_params(buf, 2, 4, element_size=8)

    host = graph.add_host_node(noop)
    host.set_host_params(print, ("x",))
    assert host.params == HostParams(print, ("x",))
    with pytest.raises(ahg.InvalidValue):
        host.set_host_params(None)  # type: ignore[arg-type]

    e1, e2 = device.create_event(), device.create_event()
    wait = graph.add_event_wait_node(e1)
    wait.set_event(e2)
    assert wait.params.event is e2
    e1.destroy()
    with pytest.raises(ahg.InvalidValue):
        wait.set_event(e1)
    destroy(graph, e2)


def test_memcpy_direction_is_fixed(device: ahg.Device, buf: ahg.DevicePtr) -> None:
    host = np.zeros(64, dtype=np.uint8)
    graph = ahg.Graph()
    node = graph.add_memcpy_node(buf, host)
    node.set_memcpy_params(buf + 64, host, 32)
    assert node.params.nbytes == 32
    with pytest.raises(ahg.InvalidValue):
        node.set_memcpy_params(host, buf)  # DtoH now
    other = device.malloc(64)
    with pytest.raises(ahg.InvalidValue):
        node.set_params(MemcpyParams.make(other, buf, 64))
    assert node.params.kind is ahg.CopyKind.HostToDevice
    destroy(graph, other)


def test_setter_on_wrong_node_type_is_invalid_value(device: ahg.Device, buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    empty = graph.add_empty_node()
    memset = graph.add_memset_node(buf, 1, 16)
    with pytest.raises(ahg.InvalidValue):
        empty.set_kernel_params(scale, 1, 1, (1, 1.0, buf))
    with pytest.raises(ahg.InvalidValue):
        memset.set_host_params(noop)
    event, child = device.create_event(), ahg.Graph()
    _MADE.extend((event, child))
    with pytest.raises(ahg.InvalidValue):
        memset.set_event(event)
    with pytest.raises(ahg.InvalidValue):
        memset.set_child_graph(child)
    with pytest.raises(ahg.InvalidValue):
        memset.set_params(HostParams.make(noop))
    with pytest.raises(ahg.InvalidValue):
        empty.set_params(None)
    # Type is checked before values: a wrong-type node with bad values is still InvalidValue.
    with pytest.raises(ahg.InvalidValue):
        empty.set_memset_params(buf, 0, 4, element_size=3)
    destroy(graph)


def test_set_params_revalidates_a_hand_built_object(buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    node = graph.add_memset_node(buf, 1, 16)
    bogus = MemsetParams(buf, 0, 1, 4096, 1, 4096)  # bypasses make(): past the allocation
    with pytest.raises(ahg.InvalidValue):
        node.set_params(bogus)
    good = MemsetParams.make(buf, 9, 8)
    node.set_params(good)
    assert node.params == good
    destroy(graph)


def test_set_child_graph_swaps_in_a_fresh_copy_and_destroys_the_old() -> None:
    graph = ahg.Graph()
    empty = ahg.Graph()
    node = graph.add_child_graph_node(empty)
    old = node.params.graph
    replacement = ahg.Graph()
    replacement.add_empty_node()
    node.set_child_graph(replacement)
    assert old.destroyed
    new = node.params.graph
    assert new is not replacement
    assert new.owner_node is node
    assert len(new.nodes()) == 1
    node.set_params(ChildGraphParams(replacement))
    assert new.destroyed
    with pytest.raises(ahg.InvalidValue):
        node.set_child_graph(None)  # type: ignore[arg-type]
    destroy(graph, replacement, empty)


# -- destroy semantics ---------------------------------------------------------------------------


def test_node_destroy_removes_its_edges() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    c = graph.add_empty_node(deps=[b])
    b.destroy()
    assert graph.nodes() == [a, c]
    assert a.dependents() == []
    assert c.dependencies() == []
    assert graph.edges() == []
    with pytest.raises(ahg.InvalidValue):
        b.destroy()
    for call in (lambda: b.type, lambda: b.params, b.dependencies, b.dependents):
        with pytest.raises(ahg.InvalidValue):
            call()
    with pytest.raises(ahg.InvalidValue):
        graph.add_empty_node(deps=[b])
    destroy(graph)


def test_graph_destroy_invalidates_every_node_handle_at_once(buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_memset_node(buf, 0, 4, deps=[a])
    live_nodes = len(NODES)
    live_graphs = len(GRAPHS)
    graph.destroy()
    assert graph.destroyed
    assert len(NODES) == live_nodes - 2
    assert len(GRAPHS) == live_graphs - 1
    for node in (a, b):
        assert not node.alive
        assert "destroyed" in repr(node)
        with pytest.raises(ahg.InvalidValue):
            node._check_alive()
        with pytest.raises(ahg.InvalidValue):
            node.set_memset_params(buf, 0, 4)
        with pytest.raises(ahg.InvalidValue):
            node.destroy()
    with pytest.raises(ahg.IllegalState):
        graph.destroy()


def test_every_call_on_a_destroyed_graph_is_invalid_value() -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node()
    graph.destroy()
    calls: list[Callable[[], Any]] = [
        graph.nodes,
        graph.root_nodes,
        graph.edges,
        graph.clone,
        graph.user_objects,
        graph._mark_instantiated,
        graph.to_dot,
        graph._check_alive,
        lambda: graph.add_dependencies(a, b),
        lambda: graph.remove_dependencies(a, b),
        lambda: graph.find_in_clone(a),
        lambda: graph.add_empty_node(),
    ]
    for call in calls:
        with pytest.raises(ahg.InvalidValue):
            call()
    assert repr(graph) == f"<Graph id={graph.id} destroyed>"
    assert graph.statistics().destroyed


def test_child_node_destroy_destroys_embedded_graph_and_its_nodes() -> None:
    child = ahg.Graph()
    child.add_empty_node()
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    embedded = node.params.graph
    inner = embedded.nodes()[0]
    node.destroy()
    assert embedded.destroyed
    assert not inner.alive
    destroy(child, parent)


def test_registries_return_to_baseline() -> None:
    graphs, nodes = len(GRAPHS), len(NODES)
    graph = ahg.Graph()
    a = graph.add_empty_node()
    graph.add_child_graph_node(graph, deps=[a])
    graph.clone().destroy()
    graph.destroy()
    assert (len(GRAPHS), len(NODES)) == (graphs, nodes)


# -- reporting -----------------------------------------------------------------------------------


def test_statistics_and_repr(buf: ahg.DevicePtr) -> None:
    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_memset_node(buf, 0, 4, deps=[a])
    child = ahg.Graph()
    graph.add_child_graph_node(child, deps=[a, b])
    obj = ahg.UserObject(noop)
    graph.retain_user_object(obj, 2)
    stats = graph.statistics()
    assert (stats.nodes, stats.edges, stats.roots, stats.child_graphs) == (3, 3, 1, 1)
    assert (stats.user_objects, stats.user_object_references) == (1, 2)
    assert not stats.has_mem_nodes
    assert repr(graph) == f"<Graph id={graph.id} nodes=3 edges=3 user_objects=1>"
    assert repr(b) == f"<GraphNode Memset id={b.id} graph={graph.id} deps=1 dependents=1>"
    destroy(graph, child, obj)


def test_kernel_node_priority_survives_set_params(device: ahg.Device) -> None:
    @ahg.kernel
    def nothing(t: ahg.Threads) -> None:
        pass

    graph = ahg.Graph()
    node = graph.add_kernel_node(nothing, 1, 1, priority=-1)
    node.set_params(node.params)
    assert node.params.priority == -1
    node.set_kernel_params(nothing, 2, 1, priority=0)
    assert (node.params.priority, node.params.grid) == (0, ahg.Dim3(2))
    graph.destroy()
