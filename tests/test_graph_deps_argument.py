"""``deps=``: a value that is neither a node nor an iterable of nodes.

``deps=None`` or ``deps=3`` reached ``for dep in deps`` and failed with Python's bare
"'NoneType' object is not iterable". ``add_dependencies`` already treats None as a null node
(InvalidValue, as HIP's null handle) and refuses a number with a TypeError naming the
argument; every ``add_*_node`` now does the same, and the failed add leaves no node behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy


def _adds(
    graph: ahg.Graph, ptr: ahg.DevicePtr, event: ahg.Event
) -> dict[str, Callable[[Any], Any]]:
    return {
        "empty": lambda deps: graph.add_empty_node(deps=deps),
        "memset": lambda deps: graph.add_memset_node(ptr, 1, 8, deps=deps),
        "host": lambda deps: graph.add_host_node(print, deps=deps),
        "child": lambda deps: graph.add_child_graph_node(graph, deps=deps),
        "event record": lambda deps: graph.add_event_record_node(event, deps=deps),
        "mem alloc": lambda deps: graph.add_mem_alloc_node(64, deps=deps),
        "generic": lambda deps: graph.add_node(ahg.GraphNodeParams(ahg.NodeType.Empty), deps=deps),
    }


@pytest.mark.parametrize("deps", [None, 3, 2.5])
def test_a_deps_value_that_is_not_nodes_is_refused_clearly(device: ahg.Device, deps: Any) -> None:
    graph = ahg.Graph()
    event = device.create_event()
    ptr = device.malloc(64)
    before = device.memory_info()
    for name, add in _adds(graph, ptr, event).items():
        if deps is None:
            with pytest.raises(ahg.InvalidValue, match="null"):
                add(deps)
        else:
            with pytest.raises(TypeError, match="deps must be a GraphNode or an iterable"):
                add(deps)
        assert graph.nodes() == [], name  # the failed add left nothing behind
    assert device.memory_info() == before
    destroy(graph, event, ptr)
