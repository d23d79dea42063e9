"""How many objects the garbage collector tracks per graph node, pinned so it cannot grow back.

A full collection walks every tracked object, so each one a node keeps alive makes building and
first replays of a large graph cost more per node the larger the graph. These tests count them
(``gc.get_objects()`` before and after, a deterministic figure, unlike timings) for a chain of
kernel nodes whose arguments are plain ints (an exact tuple of ints is untracked by the collector,
so what is left is the library's own).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core.registry import HandleId
from ahipgraph.exec.plan_check import unenforced_edges
from ahipgraph.graph.node import NODES
from ahipgraph.runtime import observe

NODES_IN_CHAIN = 2_000
# Per node: the GraphNode and its KernelParams (a chain node holds its one dependency and
# its one dependent as themselves, no edge lists); instantiate adds the kernel op (the copy's
# nodes are columns until something asks for their records). A fixed allowance covers
# per-graph objects.
BUILD_TRACKED_PER_NODE = 2
INSTANTIATE_TRACKED_PER_NODE = 1
FIXED_ALLOWANCE = 200


@ahg.kernel
def count(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing: only the runtime's own objects are counted."""


@pytest.fixture
def _no_observer() -> None:
    """The counts are the runtime's own: the race checker (``make race``) records a site per
    node on top, by design."""
    if observe.observer is not None:
        pytest.skip("the race checker is installed and keeps its own records per node")


def _tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


def _chain(size: int) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    previous: tuple[ahg.GraphNode, ...] = ()
    for i in range(size):
        node = graph.add_kernel_node(count, 1, 1, (i,), deps=previous)
        nodes.append(node)
        previous = (node,)
    return graph, nodes


@pytest.mark.usefixtures("_no_observer")
def test_a_chain_node_keeps_at_most_two_tracked_objects() -> None:
    gc.collect()
    before = _tracked()
    graph, nodes = _chain(NODES_IN_CHAIN)
    del nodes
    try:
        built = _tracked() - before
        assert built <= BUILD_TRACKED_PER_NODE * NODES_IN_CHAIN + FIXED_ALLOWANCE, (
            built / NODES_IN_CHAIN
        )
    finally:
        graph.destroy()


@pytest.mark.usefixtures("_no_observer")
def test_instantiate_adds_at_most_one_tracked_object_per_node() -> None:
    graph, nodes = _chain(NODES_IN_CHAIN)
    del nodes
    # The suite's plan verifier (conftest) reads the copy's node records, which makes them: count
    # what instantiate itself makes, then verify the plan.
    instantiate = getattr(ahg.Graph.instantiate, "__wrapped__", ahg.Graph.instantiate)
    before = _tracked()
    exec_ = instantiate(graph)
    try:
        made = _tracked() - before
        assert made <= INSTANTIATE_TRACKED_PER_NODE * NODES_IN_CHAIN + FIXED_ALLOWANCE, (
            made / NODES_IN_CHAIN
        )
        assert unenforced_edges(exec_) == []
    finally:
        exec_.destroy()
        graph.destroy()


def _int_lists_of_at_least(size: int) -> int:
    """Tracked lists of ``size`` or more items, all ints: what a full pass visits item by item."""
    gc.collect()
    return sum(
        1
        for o in gc.get_objects()
        if type(o) is list and len(o) >= size and all(type(v) is int for v in o)
    )


def test_the_registry_keeps_no_list_of_ints_per_node_built_or_destroyed() -> None:
    # Slot generations, node ids, each graph's slots and the free slots are machine-int arrays:
    # the collector never looks inside them, while a list of ints costs a visit per item on
    # every full pass, also after the graph is gone (its slots then sit on the free list).
    size = NODES_IN_CHAIN + 1_000  # more slots than earlier tests left free: the tables grow
    before = _int_lists_of_at_least(size)
    graph, nodes = _chain(size)
    del nodes
    assert _int_lists_of_at_least(size) == before
    graph.destroy()
    assert _int_lists_of_at_least(size) == before
    stats = NODES.statistics()
    assert stats.slots >= size
    again, renodes = _chain(3)  # the freed slots are reused, generation-checked as before
    assert NODES.statistics().slots == stats.slots
    assert all(node.alive and NODES.get(node.hid) is node for node in renodes)
    again.destroy()
    assert not any(node.alive for node in renodes)


def test_a_node_holds_no_handle_tuple_the_collector_tracks() -> None:
    graph, nodes = _chain(3)
    gc.collect()
    held = {id(o) for o in gc.get_objects() if type(o) is HandleId}
    assert not any(id(node.hid) in held for node in nodes)
    graph.destroy()


def test_a_node_handle_is_the_same_value_on_every_read_and_outlives_the_node() -> None:
    graph, nodes = _chain(2)
    first = nodes[0]
    hid = first.hid
    assert isinstance(hid, HandleId)
    assert first.hid == hid
    assert hash(first.hid) == hash(hid)
    assert NODES.get(hid) is first
    assert NODES.is_valid(first.hid)
    with pytest.raises(AttributeError):  # read-only: a node's handle cannot be redirected
        first.hid = HandleId(hid.slot + 1, hid.generation)  # type: ignore[misc]
    assert NODES.get(first.hid) is first
    graph.destroy()
    assert first.hid == hid  # the handle of a destroyed node still names it, and finds nothing
    assert NODES.get(hid) is None
    assert not first.alive


def test_a_reused_slot_gives_a_new_handle_and_the_old_one_finds_nothing() -> None:
    graph, nodes = _chain(1)
    old = nodes[0]
    old_hid = old.hid
    graph.destroy()
    again, renodes = _chain(1)
    new = renodes[0]
    if new.hid.slot == old_hid.slot:
        assert new.hid.generation > old_hid.generation
    assert new.hid != old_hid
    assert NODES.get(old_hid) is None
    assert NODES.get(new.hid) is new
    assert not old.alive
    assert new.alive
    again.destroy()


@ahg.kernel
def store(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
    x[0] = n


@pytest.mark.asyncio
async def test_exec_side_lookups_by_node_handle_still_find_the_copy(device: ahg.Device) -> None:
    x = device.malloc(8)
    graph = ahg.Graph()
    first = graph.add_kernel_node(store, 1, 1, (x, 1))
    graph.add_kernel_node(store, 1, 1, (x + 4, 2), deps=first)
    exec_ = graph.instantiate()
    stream = device.create_stream()
    try:
        exec_.set_kernel_node_params(first, store, 1, 1, (x, 7))  # found by first.hid
        await (await exec_.launch(stream))
        assert [int(v) for v in device.view(x, np.int32, 2)] == [7, 2]
        other = ahg.Graph()
        stranger = other.add_kernel_node(store, 1, 1, (x, 3))
        with pytest.raises(ahg.HipError):  # another graph's node is not in the executable
            exec_.set_kernel_node_params(stranger, store, 1, 1, (x, 9))
        other.destroy()
    finally:
        stream.destroy()
        exec_.destroy()
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_the_scale_bench_reports_what_a_full_collection_costs_per_node() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "bench" / "scale.py"
    spec = importlib.util.spec_from_file_location("scale_bench", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = NODES.statistics().live
    out = await bench.measure((5, 7), memory=False)
    for shape in bench.SHAPES:
        for size in ("5", "7"):
            assert isinstance(out[shape][size]["gc_pass_us"], float)
            assert isinstance(out[shape][size]["first_yield_us"], float)
            row = out[shape][size]
            assert row["edges_floor"] == row["edges_us"] / row["floor_edges_us"]
        assert "gc_pass_us" in out["ratios_vs_smallest"][shape]["7"]
        assert "edges_floor" in out["ratios_vs_smallest"][shape]["7"]
        # The collector's deferred pass has nothing to defer at the smallest size: no ratio.
        assert "first_yield_us" not in out["ratios_vs_smallest"][shape]["7"]
    assert "gc_pass" in bench.table(out)
    assert "1st yield" in bench.table(out)
    assert "ed/floor" in bench.table(out)
    assert NODES.statistics().live == before  # every graph it made is gone
