"""The plan verifier: every declared edge is enforced by the executable's strands and signals.

Run over random graphs (wide, deep, with child graphs, empty and disabled nodes), after
updates, and against deliberately broken programs, which it must catch.
"""

from __future__ import annotations

import random

import pytest

import ahipgraph as ahg
from ahipgraph.device.ops import SignalIndexOp, WaitSignalIndicesOp
from ahipgraph.exec.plan_check import unenforced_edges
from cleanup import destroy


@ahg.kernel
def step(t: ahg.Threads, value: ahg.int32) -> None:
    pass


def random_graph(rng: random.Random, size: int, depth: int = 0) -> ahg.Graph:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for i in range(size):
        deps = [n for n in nodes if rng.random() < 3 / (len(nodes) + 1)]
        roll = rng.random()
        if roll < 0.1 and depth < 2:
            child = random_graph(rng, rng.randint(1, 5), depth + 1)
            nodes.append(graph.add_child_graph_node(child, deps=deps))
            child.destroy()
        elif roll < 0.2:
            nodes.append(graph.add_empty_node(deps=deps))
        else:
            nodes.append(graph.add_kernel_node(step, 1, 1, (i,), deps=deps))
    return graph


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_have_every_edge_enforced(seed: int) -> None:
    rng = random.Random(seed)
    graph = random_graph(rng, rng.randint(2, 60))
    exe = graph.instantiate()
    assert unenforced_edges(exe) == []
    exe.update(graph)  # same topology: the ops are replaced, the ordering must stay
    assert unenforced_edges(exe) == []
    exe.destroy()
    graph.destroy()


def test_disabled_nodes_keep_their_ordering_in_the_plan() -> None:
    graph = ahg.Graph()
    a = graph.add_kernel_node(step, 1, 1, (1,))
    b = graph.add_kernel_node(step, 1, 1, (2,), deps=[a])
    c = graph.add_kernel_node(step, 1, 1, (3,), deps=[b])
    side = graph.add_kernel_node(step, 1, 1, (4,), deps=[a])
    graph.add_kernel_node(step, 1, 1, (5,), deps=[c, side])
    exe = graph.instantiate()
    exe.set_node_enabled(b, False)
    assert unenforced_edges(exe) == []
    exe.destroy()
    destroy(graph)


def wide(width: int = 4) -> tuple[ahg.Graph, ahg.GraphExec]:
    graph = ahg.Graph()
    root = graph.add_kernel_node(step, 1, 1, (0,))
    middle = [graph.add_kernel_node(step, 1, 1, (i,), deps=[root]) for i in range(width)]
    graph.add_kernel_node(step, 1, 1, (9,), deps=middle)
    return graph, graph.instantiate()


def test_a_dropped_wait_is_caught() -> None:
    graph, exe = wide()
    assert len(exe._version.strand_ops) > 1  # the plan really uses several strands
    dropped = False
    for ops in exe._version.strand_ops[1:]:
        for i, op in enumerate(ops):
            if isinstance(op, WaitSignalIndicesOp) and i > 0:
                del ops[i]
                dropped = True
                break
        if dropped:
            break
    if not dropped:  # the other strands only wait for the start: drop strand 0's final join
        ops = exe._version.strand_ops[0]
        index = max(i for i, op in enumerate(ops) if isinstance(op, WaitSignalIndicesOp))
        del ops[index]
    problems = unenforced_edges(exe)
    assert problems
    assert any("is not enforced" in p for p in problems)
    exe.destroy()
    graph.destroy()


def test_a_dropped_wait_is_caught_in_an_executable_held_as_columns() -> None:
    """A large graph of kernels is checked from its copy's columns and its kernel runs, each
    node by index, without making a record; a broken program is caught and named as ever."""
    graph = ahg.Graph()
    root = graph.add_kernel_node(step, 1, 1, (0,))
    tails = []
    for branch in range(4):
        previous = root
        for k in range(300):
            previous = graph.add_kernel_node(step, 1, 1, (branch * 1000 + k,), deps=[previous])
        tails.append(previous)
    join = graph.add_kernel_node(step, 1, 1, (9,), deps=tails)
    exe = graph.instantiate()
    assert unenforced_edges(exe) == []
    assert not exe._graph.made  # read by index: no record made
    ops = exe._version.strand_ops[0]
    last_wait = max(i for i, op in enumerate(ops) if isinstance(op, WaitSignalIndicesOp))
    del ops[last_wait]  # the join no longer waits for the other branches
    problems = unenforced_edges(exe)
    assert problems
    assert all(f"-> node {join.id} (Kernel) is not enforced" in p for p in problems)
    assert not exe._graph.made
    exe.destroy()
    graph.destroy()


def test_a_signal_raised_twice_and_a_deadlock_are_caught() -> None:
    graph, exe = wide()
    strand0 = exe._version.strand_ops[0]
    start = next(op for op in strand0 if isinstance(op, SignalIndexOp))
    strand0.remove(start)  # the other strands wait for a start that never comes
    problems = unenforced_edges(exe)
    assert any("deadlocks" in p for p in problems)
    strand0.insert(1, start)
    strand0.insert(1, SignalIndexOp(start.index))
    assert any("raised by 2 ops" in p for p in unenforced_edges(exe))
    exe.destroy()
    graph.destroy()


def test_the_suite_runs_the_verifier_on_every_instantiate_and_update(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tests/conftest.py wraps ``instantiate`` and ``update``: a plan the verifier rejects
    fails whichever test built it."""
    import conftest

    seen: list[ahg.GraphExec] = []

    def rejecting(graph_exec: ahg.GraphExec) -> list[str]:
        seen.append(graph_exec)
        return ["edge node 0 -> node 1 is not enforced"]

    graph, exe = wide()
    monkeypatch.setattr(conftest, "unenforced_edges", rejecting)
    with pytest.raises(AssertionError, match="plan verifier rejects an updated executable"):
        exe.update(graph)
    with pytest.raises(AssertionError, match="plan verifier rejects a new executable"):
        graph.instantiate()
    assert seen[0] is exe
    for made in seen[1:]:
        made.destroy()
    exe.destroy()
    graph.destroy()
