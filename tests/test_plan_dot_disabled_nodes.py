"""The plan's DOT marks a node disabled with ``exec.set_node_enabled``: it keeps its place in
its segment and the cross-strand waits, but does no work, which the picture now says."""

from __future__ import annotations

import ahipgraph as ahg


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


def test_a_disabled_node_is_marked_and_unmarked_when_enabled_again() -> None:
    graph = ahg.Graph()
    first = graph.add_kernel_node(tick, 1, 1)
    copy = graph.add_memset_node(ahg.get_device(0).malloc(8), 0, 8, deps=[first])
    graph_exec = graph.instantiate()
    plain = graph_exec.plan_dot()
    assert "(disabled)" not in plain
    graph_exec.set_node_enabled(first, False)
    graph_exec.set_node_enabled(copy, 0)
    marked = graph_exec.plan_dot()
    assert "0: tick (disabled)" in marked
    assert "1: Memset (disabled)" in marked
    assert marked.count("->") == plain.count("->")  # the ordering is the same
    graph_exec.set_node_enabled(first, True)
    graph_exec.set_node_enabled(copy, True)
    assert graph_exec.plan_dot() == plain
    graph_exec.destroy()
    ahg.get_device(0).free(copy.params.dst)
    graph.destroy()
