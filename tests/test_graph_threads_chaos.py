"""Threads: random edits, queries, copies and destroys of a few shared graphs at once.

Every thread starts on a barrier and the interpreter switches threads very often. Each thread
picks operations at random: adding nodes of every kind (child graphs and conditional nodes
included), adding and removing edges (cycles, duplicates and self-edges included), destroying
nodes and whole graphs, replacing child graphs, editing embedded graphs, retaining and releasing
user objects, cloning, instantiating, race checks, DOT. Only HIP errors, TypeError and
ValueError may come out of a call. Afterwards every surviving graph keeps its invariants (each
edge in both nodes' lists, ``nodes()`` a topological order of exactly its nodes, a clone of
the same shape, embedded graphs owned by their nodes), and once everything is destroyed every
destructor has run exactly once and the graph and node registries are back where they were.
"""

from __future__ import annotations

import contextlib
import random
import threading
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from threads import run_threads

EXPECTED = (ahg.HipError, TypeError, ValueError)


pytestmark = pytest.mark.usefixtures("fast_switching")


def _check_shape(graph: ahg.Graph) -> None:
    """The invariants of a live graph, found through its public queries."""
    try:
        order = graph.nodes()
    except ahg.InvalidValue as error:  # add_dependencies may close a cycle, as in HIP
        cyclic = error
    else:
        cyclic = None
    if cyclic is not None:
        assert "cycle" in str(cyclic)
        return
    position = {node: i for i, node in enumerate(order)}
    assert len(position) == len(order) == graph.statistics().nodes
    edges = graph.edges()
    assert len(edges) == len(set(edges)) == graph.statistics().edges
    for src, dst in edges:
        assert position[src] < position[dst]
        assert dst in src.dependents()
        assert src in dst.dependencies()
    for node in order:
        assert node.alive
        assert [dst for src, dst in edges if src is node] == node.dependents()
        if node.type is ahg.NodeType.Graph:
            assert node.get_child_graph().owner_node is node
            _check_shape(node.get_child_graph())
        elif node.type is ahg.NodeType.Conditional:
            for body in node.params.bodies:
                assert body.owner_node is node
    roots = set(graph.root_nodes())
    assert roots == {n for n in order if not n.dependencies()}
    copy = graph.clone()
    assert sorted((a.id, b.id) for a, b in copy.edges()) == sorted((a.id, b.id) for a, b in edges)
    assert [copy.find_in_clone(n).type for n in order] == [n.type for n in order]
    copy.destroy()
    text = graph.to_dot()
    assert text.startswith("digraph")
    assert text.count("{") == text.count("}")


def _chaos(seed: int, threads: int, ops: int) -> None:
    graphs_before, nodes_before = GRAPHS.statistics().live, NODES.statistics().live
    ran: list[int] = []
    lock = threading.Lock()

    def destructor(data: Any) -> None:
        with lock:
            ran.append(data)

    objects = [ahg.UserObject(destructor, data=i, initial_refcount=1) for i in range(3)]
    graphs = [ahg.Graph() for _ in range(3)]
    for graph in graphs:
        graph.add_empty_node()
        for obj in objects:
            graph.retain_user_object(obj)
    made: list[Any] = []  # clones and executables, destroyed at the end
    child_adds = [12]  # graphs embedding each other grow fast: a budget keeps them small

    def pick(rng: random.Random, graph: ahg.Graph, kind: ahg.NodeType | None = None) -> Any:
        nodes = [n for n in graph.nodes() if kind is None or n.type is kind]
        return rng.choice(nodes) if nodes else None

    def step(rng: random.Random) -> None:
        graph, other, obj = rng.choice(graphs), rng.choice(graphs), rng.choice(objects)
        op = rng.randrange(16)
        if op in (0, 1):
            with lock:
                if child_adds[0] <= 0:
                    return
                child_adds[0] -= 1
        if op == 0:
            graph.add_child_graph_node(other)
        elif op == 1:
            node = pick(rng, graph, ahg.NodeType.Graph)
            if node is not None:
                node.get_child_graph().add_child_graph_node(rng.choice(graphs))
        elif op == 2:
            node = pick(rng, graph, ahg.NodeType.Graph)
            if node is not None:
                node.set_child_graph(other)
        elif op == 3:
            node = pick(rng, graph)
            if node is not None:
                node.destroy()
        elif op == 4:
            graph.add_empty_node(deps=graph.root_nodes()[:2])
        elif op == 5:
            graph.add_dependencies(pick(rng, graph), pick(rng, graph))
        elif op == 6:
            graph.remove_dependencies(pick(rng, graph), pick(rng, graph))
        elif op == 7:
            graph.retain_user_object(obj, rng.randint(1, 2))
        elif op == 8:
            graph.release_user_object(obj, rng.randint(1, 2))
        elif op == 9:
            copy = graph.clone()
            with lock:
                made.append(copy)
        elif op == 10:
            executable = graph.instantiate()
            with lock:
                made.append(executable)
        elif op == 11:
            if rng.random() < 0.2:
                graph.destroy()
        elif op == 12:
            handle = graph.conditional_handle(1)
            _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
            body.add_empty_node()
            body.retain_user_object(obj)
        elif op == 13:
            node = pick(rng, graph, ahg.NodeType.Conditional)
            if node is not None:
                (body,) = node.params.bodies
                body.add_empty_node()
                body.release_user_object(obj)
        elif op == 14:
            graph.check_races()
            graph.to_dot(0xFFFF)
        else:
            node = pick(rng, graph)
            if node is not None:
                node.dependencies()
                node.dependents()
                graph.edges()
                graph.statistics()

    def worker(index: int) -> None:
        rng = random.Random(seed * 1_000 + index)
        for _ in range(ops):
            with contextlib.suppress(*EXPECTED):
                step(rng)

    run_threads(threads, worker)
    for graph in graphs + [m for m in made if isinstance(m, ahg.Graph)]:
        if graph.alive:
            _check_shape(graph)
    assert ran == []  # every object is still owned by its creator
    for thing in made:
        thing.destroy()
    for graph in graphs:
        if graph.alive:
            graph.destroy()
    for obj in objects:
        obj.release()
    assert sorted(ran) == [0, 1, 2]
    assert GRAPHS.statistics().live == graphs_before
    assert NODES.statistics().live == nodes_before


@pytest.mark.parametrize("seed", range(3))
def test_random_graph_edits_from_threads_keep_every_invariant(seed: int) -> None:
    _chaos(seed, threads=4, ops=40)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_random_graph_edits_from_threads_keep_every_invariant_soak(seed: int) -> None:
    _chaos(seed, threads=8, ops=150)
