"""Odd graph shapes against the column read of instantiate (``exec/kahn_columns.py``) and the
plan built on it.

Each shape is read both ways (the column read forced, and the node walk) and the two must
agree exactly; then, with the column read forced for every instantiate, an executable of the
shape runs its host nodes in an order that respects every edge, also after ``exec.update``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.exec import kahn_columns as kc
from ahipgraph.graph.topology import ordered_columns

Shape = Callable[[ahg.Graph, Callable[[int], ahg.GraphNode]], None]


def _roots_and_sinks(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    for i in range(40):
        add(i)


def _diamonds(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    top = add(0)
    for k in range(10):
        left, right = add(1 + 3 * k), add(2 + 3 * k)
        graph.add_dependencies([top, top], [left, right])
        top = add(3 + 3 * k)
        graph.add_dependencies([left, right], [top, top])


def _interleaved_fork_join(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    fork = add(0)
    tips = [fork] * 8
    label = 1
    for _ in range(5):  # one node of every branch in turn
        for b in range(8):
            node = add(label)
            label += 1
            graph.add_dependencies(tips[b], node)
            tips[b] = node
    join = add(label)
    graph.add_dependencies(tips, [join] * 8)


def _destroyed_mid_build(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    chain = [add(0)]
    for i in range(1, 30):
        node = add(i)
        graph.add_dependencies(chain[-1], node)
        chain.append(node)
    for node in chain[5:25:4]:  # holes in the middle: ids not dense, chains cut
        node.destroy()
    late = add(100)
    graph.add_dependencies(chain[0], late)


def _edges_removed_and_readded(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    nodes = [add(i) for i in range(30)]
    graph.add_dependencies(nodes[:-1], nodes[1:])  # a chain in insertion order
    graph.remove_dependencies(nodes[10:20], nodes[11:21])
    graph.add_dependencies(reversed(nodes[10:20]), reversed(nodes[11:21]))  # back, reversed
    graph.remove_dependencies(nodes[3], nodes[4])
    graph.add_dependencies([nodes[0], nodes[3]], [nodes[4], nodes[4]])  # a lone dep now a join


def _child_graphs(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    first = add(0)
    with ahg.Graph() as child:
        child.add_empty_node()
        nodes = [graph.add_child_graph_node(child, deps=[first]) for _ in range(5)]
    last = add(1)
    graph.add_dependencies(nodes, [last] * 5)


def _conditional_and_memory(graph: ahg.Graph, add: Callable[[int], ahg.GraphNode]) -> None:
    first = add(0)
    handle = graph.conditional_handle(1)
    node, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If, deps=[first])
    body.add_empty_node()
    alloc = graph.add_mem_alloc_node(256, deps=[first])
    middle = [add(i) for i in range(1, 6)]
    graph.add_dependencies([alloc] * 5, middle)
    free = graph.add_mem_free_node(alloc.params.ptr, deps=middle)
    last = add(6)
    graph.add_dependencies([node, free], [last, last])


SHAPES: dict[str, Shape] = {
    "conditional_and_memory": _conditional_and_memory,
    "roots_and_sinks": _roots_and_sinks,
    "diamonds": _diamonds,
    "interleaved_fork_join": _interleaved_fork_join,
    "destroyed_mid_build": _destroyed_mid_build,
    "edges_removed_and_readded": _edges_removed_and_readded,
    "child_graphs": _child_graphs,
}


@pytest.fixture
def columns_everywhere() -> Iterator[None]:
    saved = kc.MIN_NODES, kc.ODD_SHARE, kc.NODES_PER_ROUND
    kc.MIN_NODES, kc.ODD_SHARE, kc.NODES_PER_ROUND = 1, 1, 1
    try:
        yield
    finally:
        kc.MIN_NODES, kc.ODD_SHARE, kc.NODES_PER_ROUND = saved


def _build(shape: Shape, ran: list[int]) -> tuple[ahg.Graph, dict[int, ahg.GraphNode]]:
    graph = ahg.Graph()
    labels: dict[int, ahg.GraphNode] = {}

    def add(label: int) -> ahg.GraphNode:
        node = graph.add_host_node(ran.append, (label,))
        labels[label] = node
        return node

    shape(graph, add)
    return graph, labels


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_column_read_is_the_walk(name: str) -> None:
    graph, _ = _build(SHAPES[name], [])
    try:
        with graph.lock:
            read = kc.kahn_columns(graph, min_nodes=1, max_odd=10**9, max_rounds=10**9)
        assert read is not None
        order, first, multi = ordered_columns(graph)
        assert [read.nodes[i] for i in read.order.tolist()] == order
        assert list(read.first) == list(first)
        assert read.multi == multi
    finally:
        graph.destroy()


def _respects_edges(graph: ahg.Graph, labels: dict[int, ahg.GraphNode], ran: list[int]) -> None:
    where = {label: i for i, label in enumerate(ran)}
    label_of = {node: label for label, node in labels.items()}
    live = [label for label, node in labels.items() if node in set(graph.nodes())]
    assert sorted(ran) == sorted(live)
    for src, dst in graph.edges():
        if src in label_of and dst in label_of:
            assert where[label_of[src]] < where[label_of[dst]], (src, dst)


@pytest.mark.asyncio
@pytest.mark.usefixtures("columns_everywhere")
@pytest.mark.parametrize("name", sorted(SHAPES))
async def test_an_odd_shape_runs_in_edge_order_and_after_update(
    device: ahg.Device, name: str
) -> None:
    ran: list[int] = []
    graph, labels = _build(SHAPES[name], ran)
    twin_ran: list[int] = []
    twin, twin_labels = _build(SHAPES[name], twin_ran)
    stream = device.create_stream()
    try:
        executable = graph.instantiate()
        try:
            await (await executable.launch(stream))
            _respects_edges(graph, labels, ran)
            # the same shape built again: an update takes its parameters (its host nodes'
            # argument list), and the next launch runs the twin's callbacks in edge order
            ran.clear()
            if name == "conditional_and_memory":
                # an executable keeps its conditional bodies: the update is refused whole,
                # and the executable runs as before
                with pytest.raises(ahg.GraphExecUpdateFailure, match="conditional"):
                    executable.update(twin)
                await (await executable.launch(stream))
                _respects_edges(graph, labels, ran)
                return
            result: Any = executable.update(twin)
            assert result is not None
            await (await executable.launch(stream))
            assert ran == []
            _respects_edges(twin, twin_labels, twin_ran)
        finally:
            executable.destroy()
        await stream.synchronize()
    finally:
        stream.destroy()
        graph.destroy()
        twin.destroy()


@pytest.mark.usefixtures("columns_everywhere")
def test_instantiate_while_another_thread_edits_the_graph() -> None:
    """Each executable is one consistent copy of the graph: every edge it holds is enforced,
    and its node count is one the graph had (between the counts before and after)."""
    import random
    import threading

    from ahipgraph.exec.plan_check import unenforced_edges

    graph = ahg.Graph()
    nodes = [graph.add_empty_node()]
    for _ in range(300):
        nodes.append(graph.add_empty_node(deps=[nodes[-1]]))
    stop = threading.Event()
    errors: list[BaseException] = []
    rng = random.Random(5)

    def edit() -> None:
        try:
            for _ in range(2000):  # bounded: the copies stay small
                if stop.is_set():
                    return
                fresh = graph.add_empty_node(deps=[rng.choice(nodes)])
                nodes.append(fresh)
                a, b = rng.sample(range(len(nodes) - 1), 2)
                src, dst = nodes[min(a, b)], nodes[max(a, b)]
                if dst in src.dependents():
                    graph.remove_dependencies(src, dst)
                    graph.add_dependencies(src, dst)  # removed and put back
                else:
                    graph.add_dependencies(src, dst)
        except BaseException as exc:  # reported below
            errors.append(exc)

    editor = threading.Thread(target=edit)
    made: list[ahg.GraphExec] = []
    editor.start()
    try:
        for _ in range(20):
            before = len(nodes)
            executable = graph.instantiate()
            after = len(nodes)
            made.append(executable)
            assert unenforced_edges(executable) == []
            # ``nodes`` grows just after each add: the copy may hold one more than it showed
            assert before <= executable.statistics().nodes <= after + 1
    finally:
        stop.set()
        editor.join(30)
        for executable in made:
            executable.destroy()
        graph.destroy()
    assert errors == []
