"""A destroyed graph leaves its clones' lineage, so it is freed while they live.

A program that keeps editing a copy (``new = graph.clone()``, edit, ``exec.update(new)``,
``graph.destroy()``, ``graph = new``) must hold one graph, not every graph it destroyed on the
way: each clone referred to the graph it was cloned from, which held the one before. Now a
destroyed graph's clones descend from its own original instead, and ``find_in_clone`` still
finds nodes across every live graph of the chain.
"""

from __future__ import annotations

import gc
import threading
import weakref

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
