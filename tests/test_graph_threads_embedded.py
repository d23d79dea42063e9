"""Threads: graphs embedded in a node (conditional bodies, child-graph copies) are the node's
from the moment another thread can reach them.

An embedded graph refuses ``destroy()`` and memory nodes; a graph reachable through its node
before it is marked as embedded would accept both.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import Graph


@pytest.fixture
def other_thread_attacks_new_bodies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Right after a conditional node is added (its bodies made), another thread that can
    take the graph's lock looks the node up and tries to give its bodies a memory node and
    to destroy them. Returns what it managed to do."""
    done: list[str] = []
    original = Graph._add_node

    def add_node(self: Graph, *args: Any) -> ahg.GraphNode:
        node = original(self, *args)
        if node.type is not ahg.NodeType.Conditional:
            return node

        def attack() -> None:
            if not self.lock.acquire(blocking=False):  # the adding thread still holds it
                return
            try:
                found = next(n for n in self.nodes() if n is node)
                for body in found.params.bodies:
                    try:
                        body.add_mem_alloc_node(64)
                        done.append("mem node")
                    except ahg.NotSupported:
                        pass
                    try:
                        body.destroy()
                        done.append("destroy")
                    except ahg.InvalidValue:
                        pass
            finally:
                self.lock.release()

        thread = threading.Thread(target=attack)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive()
        return node

    monkeypatch.setattr(Graph, "_add_node", add_node)
    return done


def test_conditional_bodies_are_embedded_before_other_threads_see_them(
    other_thread_attacks_new_bodies: list[str],
) -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle(1)
    node, bodies = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    assert other_thread_attacks_new_bodies == []
    (body,) = bodies
    assert body.alive
    assert body.owner_node is node
    assert body.statistics().nodes == 0
    assert not body.statistics().has_mem_nodes
    with pytest.raises(ahg.InvalidValue, match="destroy that node"):
        body.destroy()
    with pytest.raises(ahg.NotSupported):
        body.add_mem_alloc_node(64)
    graph.destroy()
    assert not body.alive
