"""Hostile inputs to the graph layer that once left a graph inconsistent.

* An add given its dependencies as a one-node list kept that list (the fast path of the
  dependency check), then converted its other arguments, which may run user code (an
  ``__index__``). Code that changed the list then had the node added with the list as it was
  afterwards, unchecked: an edge from a node of another graph, a node listed twice, or the
  caller's own list kept as the node's dependency list, which later changes to it edited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    pass


class Converting:
    """An int whose conversion first runs ``then`` (once)."""

    def __init__(self, value: int, then: Callable[[], object]) -> None:
        self.value, self.then = value, then

    def __index__(self) -> int:
        then, self.then = self.then, lambda: None
        then()
        return self.value


def _add(kind: str, graph: ahg.Graph, ptr: ahg.DevicePtr, value: Any, deps: Any) -> ahg.GraphNode:
    if kind == "kernel":
        return graph.add_kernel_node(touch, 1, 1, (ptr, value), deps=deps)
    return graph.add_memset_node(ptr, value, 8, deps=deps)


@pytest.mark.parametrize("kind", ["kernel", "memset"])
@pytest.mark.parametrize("change", ["foreign", "append", "twice"])
def test_a_deps_list_changed_by_a_conversion_is_read_as_it_was_checked(
    device: ahg.Device, kind: str, change: str
) -> None:
    ptr = device.malloc(64)
    graph, other = ahg.Graph(), ahg.Graph()
    root, spare = graph.add_empty_node(), graph.add_empty_node()
    foreign = other.add_empty_node()
    deps: list[Any] = [root]
    edit: dict[str, Callable[[], None]] = {
        "foreign": lambda: deps.__setitem__(0, foreign),
        "append": lambda: deps.append(spare),
        "twice": lambda: deps.append(root),
    }
    node = _add(kind, graph, ptr, Converting(1, edit[change]), deps)
    assert node.dependencies() == [root]
    assert foreign.dependents() == []
    assert root.dependents() == [node]
    assert spare.dependents() == []
    assert graph.statistics().edges == 1
    assert other.statistics().edges == 0
    deps.append(spare)  # the caller's list is still the caller's own
    assert node.dependencies() == [root]
    graph.destroy()
    other.destroy()
    device.free(ptr)
