"""The race checker's own caches: each must give the answer the uncached lookup would."""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device import hooks
from ahipgraph.exec.footprints import ALLOCATIONS
from ahipgraph.testing import HeldKernel, fresh_devices
from ahipgraph.tools.race_clocks import HandleTable
from cleanup import destroy


def test_the_allocation_cache_forgets_freed_memory(device: ahg.Device) -> None:
    a = device.malloc(256)
    found = ALLOCATIONS.lookup(0, a.address + 8)
    assert found is not None
    assert found[1:] == (a.address, 256)
    entries = ALLOCATIONS.statistics()["entries"]
    assert ALLOCATIONS.lookup(0, a.address + 8) == found  # the second answer is the memo
    assert ALLOCATIONS.statistics()["entries"] == entries
    device.free(a)
    assert ALLOCATIONS.lookup(0, a.address + 8) is None
    b = device.malloc(64)  # made after a miss: still found
    assert ALLOCATIONS.lookup(0, b.address)[1:] == (b.address, 64)  # type: ignore[index]
    assert ALLOCATIONS.lookup(7, b.address) is None  # no such device
    destroy(b)


@pytest.mark.leaks_allowed("replaces the devices inside the test")
def test_the_allocation_cache_follows_a_reconfigured_device() -> None:
    with fresh_devices(1) as (first,):
        a = first.malloc(64)
        assert ALLOCATIONS.lookup(0, a.address) is not None
        first.free(a)
    with fresh_devices(1) as (second,):
        assert ALLOCATIONS.lookup(0, a.address) is None  # the old memory is not asked
        b = second.malloc(64)
        found = ALLOCATIONS.lookup(0, b.address)
        assert found is not None
        assert found[0] is second.memory
        second.free(b)
    old = weakref.ref(first.memory)
    del first, second, found
    gc.collect()
    assert old() is None  # the cache does not keep a replaced device's memory alive


class Handle:
    """Something weakly referenceable, as streams and events are."""


def test_the_handle_table_never_answers_for_a_dead_key() -> None:
    table = HandleTable()
    keys = [Handle() for _ in range(100)]
    for i in range(100):
        table[keys[i]] = i
    assert table.get(keys[42]) == 42
    assert table.get(Handle()) is None
    table[keys[42]] = "again"
    assert table.get(keys[42]) == "again"
    assert len(table) == 100
    del keys[:]
    gc.collect()
    assert len(table) == 0
    assert table.items() == []
    fresh = [Handle() for _ in range(200)]  # ids of the dead may be reused
    for key in fresh:
        assert table.get(key) is None
        table[key] = key
    assert len(table.entries) <= 200 + 64  # dead entries were swept on the way
    assert all(table.get(key) is key for key in fresh)


@pytest.mark.asyncio
async def test_lanes_of_destroyed_streams_are_dropped(device: ahg.Device) -> None:
    buf = device.malloc(64)
    with ahg.race_check(on_race="collect") as rc:
        before = rc.statistics().lanes
        for _ in range(5):
            stream = device.create_stream()
            await stream.memset(buf, 0, 64)
            await stream.synchronize()
            stream.destroy()
            del stream
        gc.collect()
        assert rc.statistics().lanes == before
    assert rc.reports == []
    destroy(buf)


@pytest.mark.asyncio
async def test_an_eager_host_copy_is_watched_without_a_device_hook(device: ahg.Device) -> None:
    """The copy's own program carries the comparison: no device hook slows other programs."""
    stream = device.create_stream(non_blocking=True)
    buf = device.malloc(64)
    host = np.ones(16, np.float32)
    held = HeldKernel()
    with ahg.race_check(on_race="collect") as rc:
        await held.launch(stream)
        await stream.memcpy(buf, host)
        if not os.environ.get("AHIPGRAPH_RACE_CHECK"):
            assert hooks.observers is None
        host[0] = 5.0  # before the copy ran
        held.release()
        await stream.synchronize()
        await stream.memcpy(buf, host)  # unchanged while in flight: nothing to report
        await stream.synchronize()
    assert [r.kind for r in rc.reports] == ["host-write-during-copy"]
    assert float(device.view(buf, np.float32, 1, readonly=True)[0]) == 5.0
    destroy(stream, buf)


def test_a_graph_without_child_graphs_flattens_to_its_own_nodes_as_the_general_walk_does() -> None:
    """The flat fast path (no child graph to inline) gives what the walk gives with one."""
    from ahipgraph.exec.races import flatten
    from ahipgraph.exec.snapshot import snapshot

    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node(deps=[a])
    c = graph.add_empty_node(deps=[a])
    graph.add_empty_node(deps=[b, c])
    with_child, empty = ahg.Graph(), ahg.Graph()
    with_child.add_child_graph_node(empty)  # a child graph forces the general walk
    try:
        exec_graph, originals = snapshot(graph)
        flat = flatten(exec_graph, originals, graph)
        assert [f.index for f in flat] == [0, 1, 2, 3]
        assert [f.deps for f in flat] == [list(n.deps) for n in exec_graph.nodes]
        assert [f.original for f in flat] == originals == [f.top for f in flat]
        assert {f.owner for f in flat} == {graph}
        assert {f.level for f in flat} == {f"graph {exec_graph.graph_id}"}
        assert [f.exec_node for f in flat] == list(exec_graph.nodes)
        anonymous = flatten(exec_graph, None, None)
        assert [(f.original, f.top, f.owner) for f in anonymous] == [(None, None, None)] * 4

        child_graph, child_originals = snapshot(with_child)
        walked = flatten(child_graph, child_originals, with_child)
        assert [(f.index, f.deps, f.original, f.owner) for f in walked] == [
            (0, [], child_originals[0], with_child)
        ]
    finally:
        destroy(graph, with_child, empty)


@ahg.kernel
def _mixed(
    t: ahg.Threads,
    out: ahg.Ptr[ahg.int32],
    src: ahg.ConstPtr[ahg.int32],
    hits: ahg.AtomicPtr[ahg.int32],
    n: ahg.int32,
) -> None:
    pass


@ahg.kernel(extents={"out": "n"})
def _sized(t: ahg.Threads, out: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
    pass


def test_a_kernel_footprint_takes_the_common_path_only_where_it_equals_the_general_one(
    device: ahg.Device,
) -> None:
    from ahipgraph.exec import footprints

    a, b = device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    try:
        assert _sized.layout.pointer_reaches is None  # a declared extent: the general path
        assert _mixed.layout.pointer_reaches == (
            (0, True, False),
            (1, False, False),
            (2, True, True),
        )
        for kernel, args, ranges in [
            (_mixed, (a, b + 8, a + 4, 3), 3),
            (_mixed, (None, b, ahg.DevicePtr(device.ordinal, 0), 1), 1),  # no pointer, null
            (_sized, (a + 4, 5), 1),
        ]:
            params = graph.add_kernel_node(kernel, 1, 1, args).params
            assert len(footprints.kernel_footprint(params)) == ranges
            assert footprints.kernel_footprint(params) == footprints.kernel_footprint_of(
                kernel.layout, params.args, None
            )
            assert footprints.kernel_footprint(params, device) == footprints.kernel_footprint_of(
                kernel.layout, params.args, device
            )
    finally:
        destroy(graph)
        device.free(a)
        device.free(b)


def test_a_clean_check_of_a_flat_graph_makes_no_flat_nodes_until_a_report_needs_them(
    device: ahg.Device,
) -> None:
    from ahipgraph.exec.races import ExecRaces, flatten
    from ahipgraph.exec.snapshot import snapshot

    x = device.malloc(64)
    graph = ahg.Graph()
    first = graph.add_kernel_node(_mixed, 1, 1, (x, x, None, 1))
    graph.add_kernel_node(_mixed, 1, 1, (x, x, None, 2), deps=[first])
    try:
        exec_graph, originals = snapshot(graph)
        races = ExecRaces(exec_graph, originals, graph, check=True)
        assert races.races() == []
        assert races._flat is None  # ordered: nothing to word, nothing made
        made = races.flat
        expected = flatten(exec_graph, originals, graph)
        assert [(f.index, f.deps, f.original, f.owner, f.level) for f in made] == [
            (f.index, f.deps, f.original, f.owner, f.level) for f in expected
        ]
        assert races.flat is made
        assert races.index_of == {id(node): i for i, node in enumerate(exec_graph.nodes)}
        graph.remove_dependencies([first], [graph.nodes()[1]])
        unordered, unordered_originals = snapshot(graph)
        reports = ExecRaces(unordered, unordered_originals, graph, check=True).races()
        assert [report.kind for report in reports] == ["write-after-write"]
    finally:
        destroy(graph)
        device.free(x)
