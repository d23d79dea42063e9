"""Graph-node handles are found through their graph: generations, reuse, forgotten graphs.

The node registry keeps no weak reference per node (see graph/node_registry.py); these tests
pin down that its handles behave as every other registry's do.
"""

from __future__ import annotations

import threading
import warnings

import pytest

import ahipgraph as ahg
from ahipgraph.graph.node import NODES


def test_a_destroyed_nodes_handle_never_validates_again_even_in_a_reused_slot() -> None:
    graph, other = ahg.Graph(), ahg.Graph()
    try:
        node = graph.add_empty_node()
        stale = node.hid
        node.destroy()
        assert NODES.get(stale) is None
        assert NODES.unregister(stale) is None  # once only
        again = graph.add_empty_node()  # the freed slot, a new generation
        assert again.hid.slot == stale.slot
        assert again.hid.generation == stale.generation + 1
        assert NODES.get(stale) is None
        assert NODES.get(again.hid) is again
        with pytest.raises(ahg.InvalidValue):
            node.dependencies()
        with pytest.raises(ahg.InvalidValue):
            node.destroy()
        again.destroy()
        foreign = other.add_empty_node()  # reused by another graph's node
        assert foreign.hid.slot == stale.slot
        assert NODES.get(again.hid) is None
        assert NODES.get(foreign.hid) is foreign
    finally:
        graph.destroy()
        other.destroy()
    assert NODES.get(foreign.hid) is None
    with pytest.raises(ahg.InvalidValue):
        foreign.type  # noqa: B018


def test_unknown_handles_are_not_found() -> None:
    from ahipgraph.core.registry import HandleId

    for hid in (HandleId(-1, 0), HandleId(10**9, 0), HandleId(0, 10**9)):
        assert NODES.get(hid) is None
        assert not NODES.is_valid(hid)
        assert NODES.unregister(hid) is None


def test_a_forgotten_graph_gives_back_every_node_slot_it_held() -> None:
    before = NODES.statistics()
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(5)]
    nodes[1].destroy()
    reused = graph.add_empty_node()  # the same slot twice in the graph's list
    assert reused.hid.slot == nodes[1].hid.slot
    assert len(NODES) == before.live + 5
    assert set(NODES.live_objects()) >= {*nodes[:1], *nodes[2:], reused}
    hids = [n.hid for n in nodes] + [reused.hid]
    del nodes, reused
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        del graph
        ahg.collect_forgotten()
    after = NODES.statistics()
    assert after.live == before.live
    assert after.registered_total == before.registered_total + 6
    assert all(NODES.get(hid) is None for hid in hids)
    assert f"live={after.live}" in repr(NODES)


def test_a_destroyed_graph_retires_its_nodes_once() -> None:
    before = len(NODES)
    graph = ahg.Graph()
    first = graph.add_empty_node()
    graph.add_empty_node(deps=first)
    copy = graph.clone()
    assert len(NODES) == before + 4
    graph.destroy()
    assert len(NODES) == before + 2
    assert not first.alive
    assert [n.id for n in copy.nodes()] == [first.id, first.id + 1]  # ids kept, own handles
    copy.destroy()
    assert len(NODES) == before


def test_nodes_added_from_threads_each_get_their_own_handle() -> None:
    before = len(NODES)
    graphs = [ahg.Graph() for _ in range(4)]
    made: list[list[ahg.GraphNode]] = [[] for _ in graphs]

    def work(i: int) -> None:
        for _ in range(200):
            made[i].append(graphs[i].add_empty_node())

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [node for nodes in made for node in nodes]
    assert len({node.hid for node in every}) == len(every) == 800
    assert all(NODES.get(node.hid) is node for node in every)
    assert len(NODES) == before + 800
    for graph in graphs:
        graph.destroy()
    assert len(NODES) == before
