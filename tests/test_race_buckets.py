"""The static check, bucket by bucket: same pairs as the ancestor-bitset search, less work.

``unordered_pairs`` clears a bucket (the nodes sharing an allocation) whose members form a
chain of direct edges, or that only reads (or only updates atomically), and searches only the
rest with ancestor bitsets. These tests hold it to :func:`conflicting_pairs` and to a plain
transitive closure on random graphs, and check through real graphs that a pair in one
allocation is still found wherever the shortcuts apply.
"""

from __future__ import annotations

import itertools

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

import ahipgraph as ahg
from ahipgraph.exec import races
from ahipgraph.exec.footprints import Access, merge
from ahipgraph.exec.snapshot import snapshot
from cleanup import destroy

UNIT = 16  # three allocations of 8 units each


Spec = tuple[int, int, int, bool, bool]  # allocation, first unit, units, write, atomic


@st.composite
def random_graphs(draw: st.DrawFn) -> tuple[list[list[Spec]], list[list[int]]]:
    count = draw(st.integers(1, 24))
    deps: list[list[int]] = []
    for i in range(count):
        if i and draw(st.integers(0, 99)) < 45:  # chains are the case the shortcut is for
            deps.append([i - 1])
        elif i:
            deps.append(sorted(set(draw(st.lists(st.integers(0, i - 1), max_size=3)))))
        else:
            deps.append([])
    access = st.tuples(
        st.integers(0, 2), st.integers(0, 7), st.integers(1, 4), st.booleans(), st.booleans()
    )
    specs = [draw(st.lists(access, max_size=3)) for _ in range(count)]
    return specs, deps


def closure_pairs(footprints: list[list[Access]], deps: list[list[int]]) -> set[tuple[int, int]]:
    reach = [set[int]() for _ in deps]  # reach[i]: every ancestor of i, by a path of edges
    for i, node_deps in enumerate(deps):
        for d in node_deps:
            reach[i] |= reach[d] | {d}
    return {
        (j, i)
        for j, i in itertools.combinations(range(len(deps)), 2)
        if j not in reach[i] and any(a.conflicts(b) for a in footprints[j] for b in footprints[i])
    }


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=random_graphs())
def test_buckets_give_the_pairs_the_bitset_search_gives(
    device: ahg.Device, case: tuple[list[list[Spec]], list[list[int]]]
) -> None:
    specs, deps = case
    allocations = [device.malloc(UNIT * 8) for _ in range(3)]
    try:
        footprints = [
            [
                Access(
                    0,
                    allocations[which].address + UNIT * first,
                    allocations[which].address + UNIT * min(first + units, 8),  # inside it
                    write,
                    atomic,
                    "exact",
                )
                for which, first, units, write, atomic in node
            ]
            for node in specs
        ]
        buckets = [list(dict.fromkeys(map(races.bucket, accesses))) for accesses in footprints]
        anc = races._ancestors_of(deps)
        members: dict[tuple[int, int], list[int]] = {}
        for index, keys in enumerate(buckets):
            for key in keys:
                members.setdefault(key, []).append(index)
        first, multi = races._dep_form(deps)
        assert races._ancestors_from(first, multi) == anc
        got = races.unordered_pairs(footprints, buckets, members.items(), first, multi, lambda: anc)
        assert got == races.conflicting_pairs(footprints, buckets, anc)
        assert {(j, i) for j, _, i, _ in got} == closure_pairs(footprints, deps)
    finally:
        destroy(*allocations)


@ahg.kernel
def scribble(t: ahg.Threads, out: ahg.Ptr[ahg.uint8]) -> None:
    out[0] = 1


@ahg.kernel
def copy_in(t: ahg.Threads, out: ahg.Ptr[ahg.uint8], src: ahg.ConstPtr[ahg.uint8]) -> None:
    out[0] = src[0]


@ahg.kernel
def bump(t: ahg.Threads, counter: ahg.AtomicPtr[ahg.int32]) -> None:
    counter.atomic_add(0, 1)


def pair_indices(graph: ahg.Graph) -> list[tuple[int, int]]:
    index = {node: i for i, node in enumerate(graph.nodes())}
    out = []
    for report in graph.check_races():
        assert report.first.node is not None
        assert report.second.node is not None
        out.append((index[report.first.node], index[report.second.node]))
    return out


def test_a_pair_in_one_allocation_is_found_beside_a_chain(device: ahg.Device) -> None:
    chained, shared = device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for i in range(20):  # one allocation's nodes in a chain: cleared without a search
        previous = (graph.add_kernel_node(scribble, 1, 1, (chained + i,), deps=previous),)
    first = graph.add_kernel_node(scribble, 1, 1, (shared + 8,), deps=previous)
    second = graph.add_kernel_node(scribble, 1, 1, (shared + 40,), deps=previous)
    reports = graph.check_races()  # both reach the end of one allocation: they overlap
    assert [(r.kind, r.fix_edge) for r in reports] == [("write-after-write", (first, second))]
    destroy(graph, chained, shared)


def test_members_ordered_through_another_allocation_are_not_reported(
    device: ahg.Device,
) -> None:
    a, b = device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    start = graph.add_kernel_node(scribble, 1, 1, (a,))
    middle = graph.add_kernel_node(scribble, 1, 1, (b,), deps=[start])
    last = graph.add_kernel_node(scribble, 1, 1, (a,), deps=[middle])  # no direct edge
    exec_graph, originals = snapshot(graph)
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    assert checked.races() == []
    assert checked._anc is not None  # the path through b was looked up
    graph.remove_dependencies([start], [middle])  # now a's two writers are unordered
    reports = graph.check_races()
    assert [(r.kind, r.fix_edge) for r in reports] == [("write-after-write", (start, last))]
    destroy(graph, a, b)


def test_unordered_readers_need_no_search_and_a_writer_among_them_is_found(
    device: ahg.Device,
) -> None:
    src = device.malloc(64)
    outs = [device.malloc(16) for _ in range(6)]
    graph = ahg.Graph()
    for out in outs:  # one allocation read by all, unordered: fine
        graph.add_kernel_node(copy_in, 1, 1, (out, src))
    exec_graph, originals = snapshot(graph)
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    assert checked.races() == []
    assert checked._members is not None
    assert sorted(map(len, checked._members.values())) == [1] * 6 + [6]
    assert checked._anc is None  # cleared by its footprints: no bitset made
    writer = graph.add_kernel_node(scribble, 1, 1, (src + 32,))
    reports = graph.check_races()
    assert [r.kind for r in reports] == ["write-after-read"] * 6
    assert all(r.fix_edge is not None and r.fix_edge[1] is writer for r in reports)
    destroy(graph, src, *outs)


def test_atomic_updates_are_cleared_and_a_plain_write_is_not(device: ahg.Device) -> None:
    counter = device.malloc(4)
    graph = ahg.Graph()
    for _ in range(5):
        graph.add_kernel_node(bump, 1, 1, (counter,))
    exec_graph, originals = snapshot(graph)
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    assert checked.races() == []
    assert checked._anc is None  # cleared by its footprints: no bitset made
    graph.add_kernel_node(scribble, 1, 1, (counter,))
    assert pair_indices(graph) == [(i, 5) for i in range(5)]
    destroy(graph, counter)


def test_a_check_of_a_copy_in_columns_makes_no_node_records(device: ahg.Device) -> None:
    x = device.malloc(256)
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for i in range(200):
        previous = (graph.add_kernel_node(scribble, 1, 1, (x + i % 8,), deps=previous),)
    exec_graph, originals = snapshot(graph)
    assert not exec_graph.made  # a large flat copy is held as columns
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    assert checked.races() == []
    assert not exec_graph.made
    assert checked._anc is None  # one chain: no bitset either
    assert checked.statistics()["nodes"] == 200
    made = checked.nodes  # made on demand: the copy's own records
    assert exec_graph.made
    assert all(mine is its for mine, its in zip(made, exec_graph.nodes, strict=True))
    assert checked.index_of[id(exec_graph.nodes[7])] == 7
    destroy(graph, x)


def test_a_whole_check_after_a_commit_sees_the_new_footprints(device: ahg.Device) -> None:
    a, b = device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    graph.add_memset_node(a, 1, 64)
    second = graph.add_memset_node(b, 2, 64)  # no edge: separate buffers
    exec_graph, originals = snapshot(graph)
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    assert checked.races() == []
    node = exec_graph.nodes[[n.id for n in exec_graph.nodes].index(second.id)]
    new = ahg.MemsetParams.make(a, 3, 64)  # aimed at the first fill's buffer
    with_race = [(node, new)]
    with pytest.raises(ahg.RaceError) as caught:
        checked.check_changes(with_race)
    assert [r.kind for r in caught.value.reports] == ["write-after-write"]
    checked.commit(with_race)  # as if applied: the whole check must see it too
    assert [r.kind for r in checked.races()] == ["write-after-write"]
    destroy(graph, a, b)


def test_the_summary_of_shared_footprints_is_the_merge_of_every_node(
    device: ahg.Device,
) -> None:
    a, b, c = device.malloc(256), device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for i in range(30):  # repeats of a few (kernel, pointer) pairs, in a changing order
        kernel, args = [
            (scribble, (a + 8 * (i % 4),)),
            (copy_in, (b, a + 100)),
            (bump, (c,)),
            (scribble, (b,)),
            (copy_in, (c + 8, b)),
        ][(i * 7) % 5]
        previous = (graph.add_kernel_node(kernel, 1, 1, args, deps=previous),)
    graph.add_memset_node(a + 200, 0, 16, deps=previous)
    exec_graph, originals = snapshot(graph)
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    assert checked.races() == []
    assert len({id(accs) for accs in checked.footprints}) < len(checked.footprints)
    every = [access for accs in checked.footprints for access in accs]
    assert checked.summary == merge(every)
    alone = races.ExecRaces(exec_graph, originals, graph, check=False)
    assert alone.summary == checked.summary
    destroy(graph, a, b, c)
