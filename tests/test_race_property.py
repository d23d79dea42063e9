"""Property: the static race check reports a pair iff the transitive closure leaves it unordered.

Random graphs of fills (writes) and reads over two small buffers, with random edges; then one
random edge is deleted. The oracle is a plain depth-first transitive closure over the edges and
byte-range overlap; the detector must name exactly the conflicting pairs the oracle finds
unordered, before and after the deletion.
"""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import ahipgraph as ahg
from cleanup import destroy

UNIT = 16


@ahg.kernel(extents={"src": "n"})
def read(t: ahg.Threads, n: ahg.int32, src: ahg.ConstPtr[ahg.float32]) -> None:
    float(src.sum())


node_spec = st.tuples(
    st.booleans(),  # writes?
    st.integers(0, 1),  # buffer
    st.integers(0, 3),  # first unit
    st.integers(1, 3),  # units
)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[list[tuple[bool, int, int, int]], list[tuple[int, int]]]:
    nodes = draw(st.lists(node_spec, min_size=2, max_size=9))
    pairs = [(i, j) for i, j in itertools.combinations(range(len(nodes)), 2)]
    edges = [p for p in pairs if draw(st.integers(0, 99)) < 35]
    return nodes, edges


def oracle(
    nodes: list[tuple[bool, int, int, int]], edges: list[tuple[int, int]]
) -> set[frozenset[int]]:
    succ: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    for a, b in edges:
        succ[a].append(b)

    def reach(a: int) -> set[int]:
        seen: set[int] = set()
        todo = [a]
        while todo:
            for nxt in succ[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    closure = {i: reach(i) for i in range(len(nodes))}
    out = set()
    for i, j in itertools.combinations(range(len(nodes)), 2):
        wi, bi, si, li = nodes[i]
        wj, bj, sj, lj = nodes[j]
        overlap = bi == bj and si < sj + lj and sj < si + li
        if overlap and (wi or wj) and j not in closure[i] and i not in closure[j]:
            out.add(frozenset((i, j)))
    return out


def detected(graph: ahg.Graph, handles: list[ahg.GraphNode]) -> set[frozenset[int]]:
    index = {node: i for i, node in enumerate(handles)}
    out = set()
    for report in graph.check_races():
        assert report.first.node is not None
        assert report.second.node is not None
        out.add(frozenset((index[report.first.node], index[report.second.node])))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs(), st.randoms(use_true_random=False))
def test_reported_iff_unordered_after_deleting_an_edge(
    spec: tuple[list[tuple[bool, int, int, int]], list[tuple[int, int]]], rng: object
) -> None:
    nodes, edges = spec
    device = ahg.get_device(0)
    buffers = [device.malloc(7 * UNIT), device.malloc(7 * UNIT)]
    graph = ahg.Graph()
    try:
        handles = []
        for writes, buffer, first, units in nodes:
            ptr = buffers[buffer] + first * UNIT
            if writes:
                handles.append(graph.add_memset_node(ptr, 1, units * UNIT))
            else:
                handles.append(graph.add_kernel_node(read, 1, 1, (units * UNIT // 4, ptr)))
        for a, b in edges:
            graph.add_dependencies(handles[a], handles[b])
        assert detected(graph, handles) == oracle(nodes, edges)
        if edges:
            victim = edges[rng.randrange(len(edges))]  # type: ignore[attr-defined]
            graph.remove_dependencies(handles[victim[0]], handles[victim[1]])
            rest = [e for e in edges if e != victim]
            assert detected(graph, handles) == oracle(nodes, rest)
    finally:  # also when Hypothesis stops an example early
        graph.destroy()
        for buffer in buffers:
            device.free(buffer)


@pytest.mark.parametrize("seed", range(3))
def test_a_chain_has_no_race_and_each_cut_is_found(seed: int) -> None:
    device = ahg.get_device(0)
    buf = device.malloc(UNIT)
    graph = ahg.Graph()
    chain = [graph.add_memset_node(buf, k, UNIT) for k in range(4 + seed)]
    for a, b in itertools.pairwise(chain):
        graph.add_dependencies(a, b)
    assert graph.check_races() == []
    graph.remove_dependencies(chain[1], chain[2])
    reports = graph.check_races()
    # every writer before the cut races every writer after it
    assert len(reports) == 2 * (len(chain) - 2)
    assert all(r.kind == "write-after-write" for r in reports)
    destroy(buf, graph)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs(), st.data())
def test_a_setter_is_refused_iff_the_changed_node_becomes_unordered_with_a_conflict(
    spec: tuple[list[tuple[bool, int, int, int]], list[tuple[int, int]]], data: st.DataObject
) -> None:
    nodes, edges = spec
    nodes = [(True, b, s, n) for _, b, s, n in nodes]  # fills only: each can be re-aimed
    device = ahg.get_device(0)
    buffers = [device.malloc(7 * UNIT), device.malloc(7 * UNIT)]
    graph = ahg.Graph()
    exe: ahg.GraphExec | None = None
    try:
        handles = [
            graph.add_memset_node(buffers[b] + s * UNIT, 1, n * UNIT) for _, b, s, n in nodes
        ]
        for a, b in edges:
            graph.add_dependencies(handles[a], handles[b])
        if oracle(nodes, edges):
            with pytest.raises(ahg.RaceError):
                graph.instantiate(check_races=True)
        else:
            exe = graph.instantiate(check_races=True)
            victim = data.draw(st.integers(0, len(nodes) - 1))
            moved = data.draw(node_spec.map(lambda spec: (True, *spec[1:])))
            changed = list(nodes)
            changed[victim] = moved
            _, b, s, n = moved
            if oracle(changed, edges):
                with pytest.raises(ahg.RaceError):
                    exe.set_memset_node_params(handles[victim], buffers[b] + s * UNIT, 2, n * UNIT)
            else:
                exe.set_memset_node_params(handles[victim], buffers[b] + s * UNIT, 2, n * UNIT)
    finally:  # also when Hypothesis stops an example early (data.draw)
        if exe is not None:
            exe.destroy()
        graph.destroy()
        for buffer in buffers:
            device.free(buffer)
