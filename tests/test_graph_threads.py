"""Threads: building graphs, editing one graph, and user-object counts under contention.

Every test starts its threads on a barrier so they really overlap, and shrinks the interpreter's
switch interval so they are preempted often; the assertions are exact counts at the end.
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from ahipgraph.lifetime.user_object import USER_OBJECTS
from threads import run_threads


@pytest.fixture(autouse=True)
def frequent_switches() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


class Counter:
    """A destructor that counts its calls (thread-safe)."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self, _: Any) -> None:
        with self._lock:
            self.calls += 1


def check_order(graph: ahg.Graph) -> None:
    position = {node: i for i, node in enumerate(graph.nodes())}
    for src, dst in graph.edges():
        assert position[src] < position[dst]


# -- building graphs -----------------------------------------------------------------------------


def test_building_different_graphs_from_many_threads() -> None:
    threads, per_graph = 64, 40
    nodes_before, graphs_before = len(NODES), len(GRAPHS)

    def build(seed: int) -> tuple[ahg.Graph, int]:
        rng = random.Random(seed)
        graph = ahg.Graph()
        made: list[ahg.GraphNode] = []
        edges = 0
        for _ in range(per_graph):
            deps = rng.sample(made, k=min(len(made), rng.randint(0, 3)))
            made.append(graph.add_empty_node(deps=deps))
            edges += len(deps)
        return graph, edges

    built = run_threads(threads, build)
    assert len(NODES) == nodes_before + threads * per_graph
    assert len(GRAPHS) == graphs_before + threads
    ids = [node.id for graph, _ in built for node in graph.nodes()]
    assert len(set(ids)) == threads * per_graph  # the id counter never hands out a duplicate
    assert len({graph.id for graph, _ in built}) == threads
    for graph, edges in built:
        assert graph.statistics().nodes == per_graph
        assert len(graph.edges()) == graph.statistics().edges == edges
        check_order(graph)
    run_threads(threads, lambda i: built[i][0].destroy())
    assert (len(NODES), len(GRAPHS)) == (nodes_before, graphs_before)


def test_concurrent_edits_to_one_graph_are_serialised() -> None:
    threads, per_thread = 48, 30
    graph = ahg.Graph()
    root = graph.add_empty_node()

    def edit(seed: int) -> tuple[int, int]:
        rng = random.Random(seed)
        mine: list[ahg.GraphNode] = []
        edges = 0
        for _ in range(per_thread):
            deps = [root, *rng.sample(mine, k=min(len(mine), rng.randint(0, 2)))]
            mine.append(graph.add_empty_node(deps=deps))
            edges += len(deps)
            if len(mine) >= 2 and rng.random() < 0.3:
                src, dst = mine[-2], mine[-1]
                if dst not in src.dependents():
                    graph.add_dependencies(src, dst)
                    edges += 1
            graph.nodes()  # queries interleave with other threads' edits
        # Destroy a few of our own nodes: their edges go with them.
        for node in rng.sample(mine, k=3):
            edges -= len(node.dependencies()) + len(node.dependents())
            node.destroy()
        return per_thread - 3, edges

    results = run_threads(threads, edit)
    stats = graph.statistics()
    assert stats.nodes == 1 + sum(count for count, _ in results)
    assert stats.edges == len(graph.edges()) == sum(edges for _, edges in results)
    assert len(graph.nodes()) == stats.nodes
    check_order(graph)
    for node in graph.nodes():  # both directions of every edge agree
        for dep in node.dependencies():
            assert node in dep.dependents()
    graph.destroy()


def test_graphs_adding_each_other_as_children_do_not_deadlock() -> None:
    # a.add_child_graph_node(b) racing b.add_child_graph_node(a): each copies the other while
    # the other may be editing itself. Destroying each child node again keeps the graphs small
    # (otherwise every copy would embed the other's earlier copies, and sizes would explode).
    a, b = ahg.Graph(), ahg.Graph()
    a.add_empty_node()
    b.add_empty_node()
    graphs_before = len(GRAPHS)

    def cross(index: int) -> int:
        first, second = (a, b) if index % 2 else (b, a)
        for _ in range(20):
            first.add_child_graph_node(second).destroy()
        return 20

    assert sum(run_threads(16, cross)) == 320
    assert a.statistics().nodes == b.statistics().nodes == 1
    assert len(GRAPHS) == graphs_before  # every embedded copy was destroyed with its node
    a.destroy()
    b.destroy()


def test_racing_destroys_exactly_one_wins() -> None:
    counter = Counter()
    obj = ahg.UserObject(counter)
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(50)]
    graph.retain_user_object(obj, 1, move=True)

    def destroy(_: int) -> str:
        try:
            graph.destroy()
        except ahg.IllegalState:
            return "illegal"
        return "destroyed"

    outcomes = run_threads(32, destroy)
    assert outcomes.count("destroyed") == 1
    assert outcomes.count("illegal") == 31
    assert counter.calls == 1
    assert not any(node.alive for node in nodes)


def test_node_destroys_racing_graph_destroy_leave_everything_dead() -> None:
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(200)]
    for i in range(1, len(nodes)):
        graph.add_dependencies(nodes[i - 1], nodes[i])

    def worker(index: int) -> None:
        if index == 0:
            graph.destroy()
            return
        for node in nodes[index::16]:
            with contextlib.suppress(ahg.InvalidValue):  # the graph got there first
                node.destroy()

    nodes_before = len(NODES)
    run_threads(16, worker)
    assert graph.destroyed
    assert not any(node.alive for node in nodes)
    assert len(NODES) <= nodes_before


# -- user objects --------------------------------------------------------------------------------


def test_concurrent_retain_release_never_loses_or_doubles_a_count() -> None:
    counter = Counter()
    obj = ahg.UserObject(counter)
    threads, ops = 200, 100

    def churn(seed: int) -> int:
        rng = random.Random(seed)
        held = 0
        for _ in range(ops):
            if held and rng.random() < 0.5:
                count = rng.randint(1, held)
                obj.release(count)
                held -= count
            else:
                count = rng.randint(1, 3)
                obj.retain(count)
                held += count
        return held

    held = run_threads(threads, churn)
    assert obj.refcount == 1 + sum(held)
    assert counter.calls == 0
    run_threads(threads, lambda i: held[i] and obj.release(held[i]))
    assert obj.refcount == 1
    assert counter.calls == 0
    obj.release()
    assert counter.calls == 1


def test_racing_last_releases_run_the_destructor_once() -> None:
    threads = 200
    counter = Counter()
    obj = ahg.UserObject(counter, initial_refcount=threads)
    last = run_threads(threads, lambda _: obj.release())
    assert counter.calls == 1
    assert last.count(True) == 1
    assert USER_OBJECTS.get(obj.hid) is None


def test_concurrent_graph_retain_release_keeps_owned_counts_exact() -> None:
    counter = Counter()
    obj = ahg.UserObject(counter)
    graphs = [ahg.Graph() for _ in range(8)]
    threads, ops = 128, 50

    def churn(index: int) -> None:
        graph = graphs[index % len(graphs)]
        for _ in range(ops):
            graph.retain_user_object(obj, 2)
            graph.release_user_object(obj, 1)
        # net: each thread leaves `ops` references owned by its graph

    run_threads(threads, churn)
    per_graph = threads // len(graphs) * ops
    assert all(graph.user_objects() == {obj: per_graph} for graph in graphs)
    assert obj.refcount == 1 + threads * ops
    assert obj.owners == set(graphs)
    obj.release()
    run_threads(len(graphs), lambda i: graphs[i].destroy())
    assert counter.calls == 1


def test_concurrent_clones_and_destroys_balance_references() -> None:
    counter = Counter()
    obj = ahg.UserObject(counter)
    graph = ahg.Graph()
    a = graph.add_empty_node()
    graph.add_child_graph_node(graph, deps=[a])
    graph.retain_user_object(obj, 1, move=True)
    graphs_before = len(GRAPHS)

    def clone_and_destroy(_: int) -> None:
        for _ in range(20):
            copy = graph.clone()
            assert copy.user_objects() == {obj: 1}
            copy.destroy()

    run_threads(64, clone_and_destroy)
    assert len(GRAPHS) == graphs_before
    assert obj.refcount == 1
    assert obj.owners == {graph}
    assert counter.calls == 0
    graph.destroy()
    assert counter.calls == 1
