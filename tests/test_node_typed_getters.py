"""The typed node getters, HIP's ``hipGraph*NodeGetParams`` family.

Each answers for its own node type with the node's parameters, and refuses a node of any
other type and a destroyed node (or a node of a destroyed graph) with InvalidValue, the
handle first, as HIP's typed getters check; ``params`` stays the untyped read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

T = ahg.NodeType


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


def _one_of_each(device: ahg.Device) -> tuple[ahg.Graph, dict[ahg.NodeType, ahg.GraphNode], Any]:
    ptr = device.malloc(64)
    event = device.create_event()
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(32)
    nodes = {
        T.Kernel: graph.add_kernel_node(put, 1, 1, [7, ptr]),
        T.Memcpy: graph.add_memcpy_node(ptr + 8, ptr, 8),
        T.Memset: graph.add_memset_node(ptr, 3, 8),
        T.Host: graph.add_host_node(print, ("x",)),
        T.Graph: graph.add_child_graph_node(child),
        T.Empty: graph.add_empty_node(),
        T.EventRecord: graph.add_event_record_node(event),
        T.WaitEvent: graph.add_event_wait_node(event),
        T.MemAlloc: alloc,
        T.MemFree: graph.add_mem_free_node(alloc.params.ptr, deps=[alloc]),
    }
    return graph, nodes, (ptr, event, child)


GETTERS: dict[str, tuple[ahg.NodeType, ...]] = {
    "get_kernel_params": (T.Kernel,),
    "get_memcpy_params": (T.Memcpy,),
    "get_memset_params": (T.Memset,),
    "get_host_params": (T.Host,),
    "get_event": (T.EventRecord, T.WaitEvent),
    "get_child_graph": (T.Graph,),
    "get_mem_alloc_params": (T.MemAlloc,),
    "get_mem_free_params": (T.MemFree,),
}


def test_each_getter_answers_for_its_own_type_only(device: ahg.Device) -> None:
    graph, nodes, (ptr, event, child) = _one_of_each(device)
    for name, types in GETTERS.items():
        for node_type, node in nodes.items():
            getter: Callable[[], Any] = getattr(node, name)
            if node_type in types:
                getter()
            else:
                with pytest.raises(ahg.InvalidValue, match=f"is not a .*{types[0].name}"):
                    getter()
    destroy(graph, child, event, ptr)


def test_the_getters_return_the_nodes_parameters(device: ahg.Device) -> None:
    graph, nodes, (ptr, event, child) = _one_of_each(device)
    kernel = nodes[T.Kernel].get_kernel_params()
    assert kernel.kernel is put
    assert kernel.args == (7, ptr)
    assert nodes[T.Memcpy].get_memcpy_params().kind is ahg.CopyKind.DeviceToDevice
    memset = nodes[T.Memset].get_memset_params()
    assert (memset.value, memset.width) == (3, 8)
    assert nodes[T.Host].get_host_params().args == ("x",)
    assert nodes[T.EventRecord].get_event() is event
    assert nodes[T.WaitEvent].get_event() is event
    alloc = nodes[T.MemAlloc].get_mem_alloc_params()
    assert alloc.nbytes == 32
    assert alloc.device == device.ordinal
    assert nodes[T.MemFree].get_mem_free_params().ptr == alloc.ptr
    for node in nodes.values():  # the same record ``params`` reads
        if node.type is not T.Empty and node.type is not T.Graph:
            name = next(n for n, types in GETTERS.items() if node.type in types)
            got = getattr(node, name)()
            assert got is (node.params.event if name == "get_event" else node.params)
    destroy(graph, child, event, ptr)


@pytest.mark.asyncio
async def test_the_child_graph_is_the_embedded_copy_and_editing_it_edits_the_node(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    child = ahg.Graph()
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    embedded = node.get_child_graph()
    assert embedded is not child
    assert embedded is node.params.graph
    embedded.add_kernel_node(put, 1, 1, [9, out])
    assert child.statistics().nodes == 0
    graph_exec = parent.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert int(device.view(out, np.int64)[0]) == 9
    destroy(graph_exec, parent, child, stream, out)


def test_a_destroyed_node_or_graph_is_invalid_value_before_the_type(device: ahg.Device) -> None:
    graph = ahg.Graph()
    empty = graph.add_empty_node()
    other = graph.add_empty_node()
    empty.destroy()
    for name in GETTERS:
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            getattr(empty, name)()
    graph.destroy()
    for name in GETTERS:
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            getattr(other, name)()
