"""A destroyed graph leaves its clones' lineage, so it is freed while they live.

A program that keeps editing a copy (``new = graph.clone()``, edit, ``exec.update(new)``,
``graph.destroy()``, ``graph = new``) must hold one graph, not every graph it destroyed on the
way: each clone referred to the graph it was cloned from, which held the one before. Now a
destroyed graph's clones descend from its own original instead, and ``find_in_clone`` still
finds nodes across every live graph of the chain.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import weakref

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def noop(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing: only the graph's structure is exercised."""


def test_a_clone_and_destroy_loop_frees_every_destroyed_graph() -> None:
    graph = ahg.Graph()
    first = graph.add_kernel_node(noop, 1, 1, (1,))
    child = ahg.Graph()
    child.add_kernel_node(noop, 1, 1, (2,))
    graph.add_child_graph_node(child, deps=[first])  # embedded copies are cloned too
    child.destroy()
    del first  # a node refers to its graph
    gone: list[weakref.ref[ahg.Graph]] = []
    for _ in range(20):
        old, graph = graph, graph.clone()
        gone.append(weakref.ref(old))
        old.destroy()
        del old
    assert graph.original is None  # every graph it came from is destroyed
    gc.collect()
    assert [ref() for ref in gone] == [None] * len(gone)
    assert len(graph.nodes()) == 2
    graph.destroy()


def test_destroying_a_middle_graph_keeps_the_chain_around_it() -> None:
    first = ahg.Graph()
    a = first.add_empty_node()
    middle = first.clone()
    last = middle.clone()
    assert last.original is middle
    middle.destroy()
    assert last.original is first  # the nearest live graph it descends from
    twin = last.find_in_clone(a)
    assert twin.id == a.id
    assert first.find_in_clone(twin) is a  # and the way back
    first.destroy()
    assert last.original is None
    destroy(last)


def test_conditional_bodies_and_child_copies_leave_the_lineage_too() -> None:
    graph = ahg.Graph()
    node, bodies = graph.add_conditional_node(graph.conditional_handle(), ahg.ConditionalKind.If)
    bodies[0].add_empty_node()
    copy = graph.clone()
    body_copy = copy.find_in_clone(node).params.bodies[0]
    assert body_copy.original is bodies[0]
    body = weakref.ref(bodies[0])
    graph.destroy()
    del graph, node, bodies
    gc.collect()
    assert body_copy.original is None
    assert body() is None
    destroy(copy)


def test_clones_made_and_destroyed_from_threads_leave_one_live_chain() -> None:
    root = ahg.Graph()
    a = root.add_empty_node()
    errors: list[BaseException] = []
    last: list[ahg.Graph] = []

    def worker() -> None:
        try:
            graph = root.clone()
            for _ in range(50):
                old, graph = graph, graph.clone()
                old.destroy()
                assert graph.find_in_clone(a).id == a.id
            last.append(graph)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(graph.original is root for graph in last)
    destroy(root, *last)


def test_a_clone_still_refuses_its_own_original_only_once_that_is_destroyed() -> None:
    first = ahg.Graph()
    first.add_empty_node()
    middle = first.clone()
    last = middle.clone()
    inner = ahg.Graph()
    inner.add_empty_node()
    node = last.add_child_graph_node(inner)
    middle.destroy()
    assert last.original is first  # the lineage skips middle now...
    node.set_child_graph(first)  # ...but first is not the graph last was cloned from (HIP)
    with pytest.raises(ahg.Unknown, match="own parent graph"):
        node.set_child_graph(last)
    destroy(first, last, inner)


def test_a_clone_uses_the_conditional_handles_of_destroyed_graphs_it_came_from() -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle()
    graph.add_empty_node()
    for _ in range(3):  # the handle's graph and every later one destroyed in turn
        old, graph = graph, graph.clone()
        old.destroy()
    node, bodies = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body_node, _ = bodies[0].add_conditional_node(handle, ahg.ConditionalKind.While)
    assert node.params.handle is handle
    assert body_node.params.handle is handle
    stranger = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="belongs to another graph"):
        stranger.add_conditional_node(handle, ahg.ConditionalKind.If)
    destroy(graph, stranger)


def _find_until(
    done: threading.Event,
    first: ahg.Graph,
    last: ahg.Graph,
    a: ahg.GraphNode,
    errors: list[BaseException],
) -> None:
    """Look ``a`` up in ``last`` and back in ``first`` until ``done``; keep the first error."""
    while not done.is_set():
        try:
            first.find_in_clone(last.find_in_clone(a))
        except BaseException as error:
            errors.append(error)
            return


def test_find_in_clone_holds_while_graphs_between_are_destroyed_on_another_thread() -> None:
    # The lineage walk ran without the lineage lock: stepping onto a graph another thread
    # was destroying, it found that graph's original cleared and answered "not clones".
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to land in the walk
    try:
        for _ in range(40):
            first = ahg.Graph()
            a = first.add_empty_node()
            chain = [first]
            for _ in range(100):
                chain.append(chain[-1].clone())
            last = chain[-1]
            done = threading.Event()
            errors: list[BaseException] = []
            thread = threading.Thread(target=_find_until, args=(done, first, last, a, errors))
            thread.start()
            middles = chain[1:-1]
            for graph in middles[::2] + middles[1::2]:
                graph.destroy()
            done.set()
            thread.join()
            assert errors == []
            assert last.original is first
            destroy(first, last)
    finally:
        sys.setswitchinterval(interval)


class _DestroysWhenCollected:
    """Cyclic garbage that renews itself each time the collector runs its ``__del__``, until
    the ``countdown``-th time, when it destroys ``victim`` instead."""

    def __init__(self, victim: ahg.Graph, countdown: int) -> None:
        self.cycle = self
        self.victim, self.countdown = victim, countdown

    def __del__(self) -> None:
        if self.countdown > 1:
            _DestroysWhenCollected(self.victim, self.countdown - 1)
        elif self.victim.alive:
            self.victim.destroy()


def test_a_del_destroying_the_original_while_a_graph_is_destroyed_keeps_the_lineage() -> None:
    # A collection run by destroy()'s own allocations may destroy the original its clones are
    # being moved to; those moved after it were linked to that destroyed graph, which had
    # already handed its clones on: they lost the graph beyond it, and kept it alive.
    landed = 0
    for countdown in range(1, 60):  # the destroy at each collection destroy() runs in turn
        grand = ahg.Graph()
        a = grand.add_empty_node()
        original = grand.clone()
        graph = original.clone()
        copies = [graph.clone() for _ in range(8)]
        gone = weakref.ref(original)
        old = gc.get_threshold()
        gc.set_threshold(1, 1, 1)
        try:
            _DestroysWhenCollected(original, countdown)
            graph.destroy()
            landed += not original.alive
        finally:
            gc.set_threshold(*old)
        gc.collect()  # the renewed garbage, if destroy() ended first
        if original.alive:
            original.destroy()
        del original
        gc.collect()
        assert gone() is None
        assert [copy.original for copy in copies] == [grand] * len(copies)
        assert [copy.find_in_clone(a).id for copy in copies] == [a.id] * len(copies)
        destroy(grand, *copies)
    assert landed  # some collections did run inside destroy()


def test_a_handle_is_not_made_by_a_graph_its_default_destroyed() -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    copy = graph.clone()

    class DestroysTheGraph:
        def __index__(self) -> int:
            graph.destroy()
            return 0

    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.conditional_handle(default=DestroysTheGraph())  # type: ignore[arg-type]
    assert graph.destroyed
    assert copy.original is None
    destroy(copy)


def _clone_make_handle_destroy(graph: ahg.Graph, cycles: int) -> ahg.Graph:
    for _ in range(cycles):
        copy = graph.clone()
        copy.conditional_handle(default=1)  # made and dropped
        graph.destroy()
        graph = copy
    return graph


@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="the environment's race check keeps a record of the line that added each node",
)
def test_a_clone_handle_destroy_loop_stays_flat() -> None:
    """Each clone kept the handle ids of every destroyed graph it came from, one more per
    cycle, forever (about 93 kB and an ever longer copy per thousand cycles). A handle nobody
    holds can never be given to a node again, so a graph now keeps only live handles."""
    import tracemalloc

    graph = ahg.Graph()
    graph.add_empty_node()
    graph = _clone_make_handle_destroy(graph, 200)  # warm up: caches, id counters
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        graph = _clone_make_handle_destroy(graph, 1000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        graph.destroy()
    assert grown < 24_000, f"{grown} bytes more after 1000 cycles"


def test_handles_still_held_stay_usable_through_a_long_clone_chain() -> None:
    """Only handles nobody holds leave a graph's lineage: one the user keeps, and one only a
    node of the chain holds (read back from the node), stay usable in every later clone."""
    graph = ahg.Graph()
    kept = graph.conditional_handle()
    graph.add_conditional_node(graph.conditional_handle(default=2), ahg.ConditionalKind.If)
    graph = _clone_make_handle_destroy(graph, 50)
    middle = graph.conditional_handle(default=3)
    graph = _clone_make_handle_destroy(graph, 50)
    gc.collect()
    held_by_node = next(
        node.params.handle for node in graph.nodes() if node.type is ahg.NodeType.Conditional
    )
    assert held_by_node.default == 2
    for handle in (kept, middle, held_by_node):
        node, _ = graph.add_conditional_node(handle, ahg.ConditionalKind.While)
        assert node.params.handle is handle
    with ahg.Graph() as stranger:
        for handle in (kept, middle, held_by_node):
            with pytest.raises(ahg.InvalidValue, match="belongs to another graph"):
                stranger.add_conditional_node(handle, ahg.ConditionalKind.If)
    graph.instantiate().destroy()
    graph.destroy()
