"""Every ``add_*_node`` reads ``deps=`` the same way, whatever iterable the user passes.

Written as a user's own suite would be: public API only. ``deps`` is documented as "the nodes
it depends on"; a generator, an iterator, a set, a dict's keys and a numpy object array are
all iterables of nodes, and each must give the node exactly those dependencies. The child-graph
add checks its dependencies twice (once before it copies the child, once after, as a node may
be destroyed meanwhile), and read a one-shot iterable dry the first time: the node was added
with no dependencies at all, silently.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg

Adder = Callable[[Any], ahg.GraphNode]


def _adders(
    graph: ahg.Graph, child: ahg.Graph, ptr: ahg.DevicePtr, event: ahg.Event
) -> dict[str, Adder]:
    """One call per node kind a graph can add, each taking only ``deps``."""
    return {
        "empty": lambda deps: graph.add_empty_node(deps=deps),
        "memset": lambda deps: graph.add_memset_node(ptr, 0, 16, deps=deps),
        "memcpy": lambda deps: graph.add_memcpy_node(ptr, np.zeros(16, np.uint8), deps=deps),
        "host": lambda deps: graph.add_host_node(print, deps=deps),
        "child": lambda deps: graph.add_child_graph_node(child, deps=deps),
        "event record": lambda deps: graph.add_event_record_node(event, deps=deps),
        "event wait": lambda deps: graph.add_event_wait_node(event, deps=deps),
        "mem alloc": lambda deps: graph.add_mem_alloc_node(64, deps=deps),
        "generic empty": lambda deps: graph.add_node(
            ahg.GraphNodeParams(ahg.NodeType.Empty), deps=deps
        ),
        "generic child": lambda deps: graph.add_node(
            ahg.GraphNodeParams(ahg.NodeType.Graph, ahg.ChildGraphParams(child)), deps=deps
        ),
        "conditional": lambda deps: graph.add_conditional_node(
            graph.conditional_handle(), ahg.ConditionalKind.If, deps=deps
        )[0],
    }


_FORMS: dict[str, Callable[[ahg.GraphNode, ahg.GraphNode], Iterable[ahg.GraphNode]]] = {
    "list": lambda a, b: [a, b],
    "tuple": lambda a, b: (a, b),
    "generator": lambda a, b: (node for node in (a, b)),
    "iterator": lambda a, b: iter([a, b]),
    "set": lambda a, b: {a, b},
    "dict keys": lambda a, b: {a: "x", b: "y"},
    "numpy object array": lambda a, b: np.array([a, b], dtype=object),
}

_KINDS = [
    "empty",
    "memset",
    "memcpy",
    "host",
    "child",
    "event record",
    "event wait",
    "mem alloc",
    "generic empty",
    "generic child",
    "conditional",
]


@pytest.mark.parametrize("form", list(_FORMS))
@pytest.mark.parametrize("kind", _KINDS)
def test_every_iterable_of_nodes_gives_the_node_exactly_those_dependencies(
    device: ahg.Device, kind: str, form: str
) -> None:
    ptr = device.malloc(64)
    with ahg.Graph() as graph, ahg.Graph() as child, device.create_event() as event:
        child.add_empty_node()
        a, b = graph.add_empty_node(), graph.add_empty_node()
        adders = _adders(graph, child, ptr, event)
        assert list(adders) == _KINDS

        node = adders[kind](_FORMS[form](a, b))

        assert set(node.dependencies()) == {a, b}
        assert set(a.dependents()) == {node}
        assert set(b.dependents()) == {node}
        assert len(graph.edges()) == 2
    device.free(ptr)


@pytest.mark.parametrize("kind", _KINDS)
def test_a_generator_that_repeats_a_node_is_refused_and_adds_nothing(
    device: ahg.Device, kind: str
) -> None:
    ptr = device.malloc(64)
    with ahg.Graph() as graph, ahg.Graph() as child, device.create_event() as event:
        a = graph.add_empty_node()

        with pytest.raises(ahg.InvalidValue, match="listed twice"):
            _adders(graph, child, ptr, event)[kind](node for node in (a, a))

        assert graph.nodes() == [a]
        assert graph.edges() == []
    device.free(ptr)
