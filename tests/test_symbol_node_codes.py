"""Symbol copy nodes and their setters answer with HIP's codes, in HIP's order.

``hipGraphAddMemcpyNode{To,From}Symbol`` and the node and executable setters
``hipGraph[Exec]MemcpyNodeSetParams{To,From}Symbol`` refuse a count of 0 (InvalidValue), as
every memcpy node does, where a stream's symbol copy of 0 bytes is a no-op. The setters check
for a null symbol before anything else they take, the executable and the node included
(InvalidSymbol); the add checks its graph first (InvalidValue), then the symbol.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

TABLE = ahg.device_symbol("test_symbol_node_codes.table", 64)


def test_an_add_of_zero_bytes_is_invalid_value_and_adds_nothing(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph.add_memcpy_node_to_symbol(TABLE, ptr, 0)
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph.add_memcpy_node_from_symbol(ptr, TABLE, 0)
    empty = np.zeros(0, np.uint8)  # the count taken from an empty host array is 0 too
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph.add_memcpy_node_to_symbol(TABLE, empty)
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph.add_memcpy_node_from_symbol(empty, TABLE)
    # HIP checks the count before it looks the symbol up.
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph.add_memcpy_node_to_symbol("test_symbol_node_codes.undeclared", ptr, 0)
    assert graph.statistics().nodes == 0
    destroy(graph, ptr)


def test_the_callers_endpoint_and_the_count_come_before_the_symbol(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    node = graph.add_memcpy_node_to_symbol(TABLE, ptr, 8)
    graph_exec = graph.instantiate()
    unknown = "test_symbol_node_codes.undeclared"
    with pytest.raises(ahg.InvalidValue, match="src is null"):
        graph.add_memcpy_node_to_symbol(unknown, None, 8)
    with pytest.raises(ahg.InvalidValue, match="dst is null"):
        graph.add_memcpy_node_from_symbol(None, unknown, 8)
    with pytest.raises(ahg.InvalidValue, match="src is null"):
        node.set_memcpy_to_symbol_params(unknown, None, 8)
    with pytest.raises(ahg.InvalidValue, match="src is null"):
        graph_exec.set_memcpy_node_to_symbol(node, unknown, None, 8)
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph_exec.set_memcpy_node_to_symbol(node, unknown, ptr, 0)
    with pytest.raises(ahg.InvalidSymbol):  # with both right, the symbol is looked up
        graph.add_memcpy_node_to_symbol(unknown, ptr, 8)
    assert graph.statistics().nodes == 1
    destroy(graph_exec, graph, ptr)


def test_an_add_checks_its_graph_before_the_symbol(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    graph.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.add_memcpy_node_to_symbol(None, ptr, 8)
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.add_memcpy_node_from_symbol(ptr, None, 8)
    destroy(ptr)


@pytest.mark.asyncio
async def test_setters_refuse_zero_bytes_and_change_nothing(device: ahg.Device) -> None:
    src, dst = device.malloc(64), device.malloc(64)
    device.view(src, np.uint8)[:] = 5
    graph = ahg.Graph()
    into = graph.add_memcpy_node_to_symbol(TABLE, src, 8)
    out = graph.add_memcpy_node_from_symbol(dst, TABLE, 8, deps=[into])
    before = (into.params, out.params)
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        into.set_memcpy_to_symbol_params(TABLE, src, 0)
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        out.set_memcpy_from_symbol_params(dst, TABLE, 0)
    assert (into.params, out.params) == before
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph_exec.set_memcpy_node_to_symbol(into, TABLE, src, 0)
    with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
        graph_exec.set_memcpy_node_from_symbol(out, dst, TABLE, 0)
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert (device.view(dst, np.uint8)[:8] == 5).all()  # the 8-byte copies still ran
    destroy(graph_exec, graph, stream, src, dst)


def test_setters_check_a_null_symbol_before_the_handles(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    graph = ahg.Graph()
    into = graph.add_memcpy_node_to_symbol(TABLE, ptr, 8)
    out = graph.add_memcpy_node_from_symbol(ptr, TABLE, 8)
    empty = graph.add_empty_node()
    # Before the node's type ...
    with pytest.raises(ahg.InvalidSymbol):
        empty.set_memcpy_to_symbol_params(None, ptr, 8)
    with pytest.raises(ahg.InvalidSymbol):
        empty.set_memcpy_from_symbol_params(ptr, None, 8)
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidSymbol):
        graph_exec.set_memcpy_node_to_symbol(empty, None, ptr, 8)
    # ... before the executable ...
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidSymbol):
        graph_exec.set_memcpy_node_to_symbol(into, None, ptr, 8)
    with pytest.raises(ahg.InvalidSymbol):
        graph_exec.set_memcpy_node_from_symbol(out, ptr, None, 8)
    # ... and before the node handle.
    into.destroy()
    with pytest.raises(ahg.InvalidSymbol):
        into.set_memcpy_to_symbol_params(None, ptr, 8)
    # A symbol that is not null is looked up after the handles, with the other parameters.
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        into.set_memcpy_to_symbol_params("test_symbol_node_codes.undeclared", ptr, 8)
    destroy(graph, ptr)
