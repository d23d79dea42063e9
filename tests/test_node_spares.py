"""A graph takes node-registry slots a block at a time: the counts and handles stay exact.

The registry's lock is taken once per block of spare slots rather than once per node (see
``graph/node_registry.py``). Spares are counted as slots only: ``live`` and
``registered_total`` count nodes, every handle is unique and generation-checked, and a
destroyed or forgotten graph gives back its spares with its nodes' slots.
"""

from __future__ import annotations

import gc
import threading
import warnings

import ahipgraph as ahg
from ahipgraph.graph.node import NODES


def _slots_in_use() -> set[int]:
    return {node.hid.slot for node in NODES.live_objects()}


def test_counts_are_of_nodes_while_spares_are_held() -> None:
    before = NODES.statistics()
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for count in range(1, 700):
        nodes.append(graph.add_empty_node(deps=nodes[-1:]))
        if count in (1, 2, 3, 5, 64, 257, 699):  # block edges: spares held, or none
            stats = NODES.statistics()
            assert stats.live == before.live + count
            assert stats.registered_total == before.registered_total + count
            assert len(NODES) == before.live + count
            assert f"live={before.live + count} " in repr(NODES)
    assert len({node.hid for node in nodes}) == len(nodes)
    assert all(NODES.get(node.hid) is node for node in nodes)
    graph.destroy()
    after = NODES.statistics()
    assert after.live == before.live
    assert after.registered_total == before.registered_total + 699
    assert not any(node.alive for node in nodes)


def test_a_rebuilt_graph_reuses_the_slots_and_spares_given_back() -> None:
    graph = ahg.Graph()
    for _ in range(300):
        graph.add_empty_node()
    graph.destroy()
    slots = NODES.statistics().slots
    again = ahg.Graph()
    for _ in range(300):
        again.add_empty_node()
    assert NODES.statistics().slots == slots  # nothing new: the free list held them all
    again.destroy()


def test_a_node_destroyed_mid_build_gives_its_slot_to_the_next_node() -> None:
    before = NODES.statistics()
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(40)]  # spares held now
    victim = nodes[17]
    stale = victim.hid
    victim.destroy()
    assert NODES.statistics().live == before.live + 39
    assert NODES.get(stale) is None
    reused = graph.add_empty_node()
    assert reused.hid.slot == stale.slot
    assert reused.hid.generation == stale.generation + 1
    assert NODES.get(stale) is None
    assert NODES.get(reused.hid) is reused
    stats = NODES.statistics()
    assert stats.live == before.live + 40
    assert stats.registered_total == before.registered_total + 41
    graph.destroy()
    assert NODES.statistics().live == before.live


def test_a_forgotten_graph_gives_back_its_spares() -> None:
    before = NODES.statistics()
    graph = ahg.Graph()
    for _ in range(100):
        graph.add_empty_node()
    slots = NODES.statistics().slots
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        del graph
        gc.collect()
        ahg.collect_forgotten()
    after = NODES.statistics()
    assert after.live == before.live
    assert after.registered_total == before.registered_total + 100
    again = ahg.Graph()
    for _ in range(100):
        again.add_empty_node()
    assert NODES.statistics().slots == slots  # its nodes' slots and spares came back
    again.destroy()


def test_graphs_built_on_threads_at_once_never_share_a_slot() -> None:
    before = NODES.statistics()
    graphs = [ahg.Graph() for _ in range(4)]
    made: list[list[ahg.GraphNode]] = [[] for _ in graphs]
    errors: list[BaseException] = []

    def build(index: int) -> None:
        try:
            graph = graphs[index]
            for step in range(600):
                node = graph.add_empty_node()
                made[index].append(node)
                if step % 7 == 3:  # destroy some as we go: slots go back and are reused
                    made[index].pop(0).destroy()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=build, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    live = [node for nodes in made for node in nodes]
    assert len({node.hid.slot for node in live}) == len(live)
    assert all(NODES.get(node.hid) is node for node in live)
    assert NODES.statistics().live == before.live + len(live)
    assert _slots_in_use() >= {node.hid.slot for node in live}
    for graph in graphs:
        graph.destroy()
    assert NODES.statistics().live == before.live


def test_taking_spares_after_a_large_graph_does_not_reallocate_the_free_list() -> None:
    """A destroyed large graph leaves a long free list; each block taken from it must not
    reallocate it whole (an array shrunk by 16 or more items at once is)."""
    import tracemalloc

    large = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for _ in range(50_000):
        previous = [large.add_empty_node(deps=previous)]
    del previous
    large.destroy()
    del large
    registry_file = tracemalloc.Filter(True, "*/ahipgraph/graph/node_registry.py")
    tracemalloc.start()
    try:
        graph = ahg.Graph()
        nodes = [graph.add_empty_node() for _ in range(1_000)]
        snapshot = tracemalloc.take_snapshot().filter_traces([registry_file])
    finally:
        tracemalloc.stop()
    registry_bytes = sum(stat.size for stat in snapshot.statistics("filename"))
    # The slots' own arrays: a few bytes per node. The free list is 400 kB.
    assert registry_bytes < 100_000, registry_bytes
    assert len(nodes) == 1_000
    graph.destroy()
