"""The static check makes a kernel's footprint once per (kernel, pointer) in a graph.

Nodes of one kernel over one pointer share one footprint list and one bucket list. The
shared lists must give exactly the footprints each node would have alone, never be changed
in place by a setter, and keep kernels with different annotations apart.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec import races
from ahipgraph.exec.footprints import Access
from ahipgraph.exec.snapshot import snapshot
from cleanup import destroy


@ahg.kernel
def scribble(t: ahg.Threads, out: ahg.Ptr[ahg.uint8]) -> None:
    out[0] = 1


@ahg.kernel
def peek(t: ahg.Threads, src: ahg.ConstPtr[ahg.uint8]) -> None:
    int(src[0])


@ahg.kernel
def two(t: ahg.Threads, a: ahg.Ptr[ahg.uint8], b: ahg.ConstPtr[ahg.uint8]) -> None:
    a[0] = b[0]


@ahg.kernel(extents={"out": "n"})
def some(t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.uint8]) -> None:
    out[:] = 1


def test_shared_footprints_are_the_ones_each_node_has_alone(device: ahg.Device) -> None:
    a, b = device.malloc(256), device.malloc(64)
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for i in range(12):  # one chain of every kind of node the check sees
        kernel_args = [
            (scribble, (a,)),
            (scribble, (a + 16,)),
            (peek, (a,)),
            (two, (a, b)),
            (some, (8, b)),
            (scribble, (ahg.DevicePtr(0, 0),)),  # the null pointer touches nothing
        ][i % 6]
        previous = (graph.add_kernel_node(kernel_args[0], 1, 1, kernel_args[1], deps=previous),)
    graph.add_memset_node(b, 0, 64, deps=previous)
    graph.add_memcpy_node(a, np.zeros(16, np.uint8), deps=previous)
    exec_graph, originals = snapshot(graph)
    checked = races.ExecRaces(exec_graph, originals, graph, check=True)
    alone = races.ExecRaces(exec_graph, originals, graph, check=False)
    assert checked.footprints == alone.footprints
    assert checked.footprints[0] is checked.footprints[6]  # scribble(a) twice: one list
    assert checked.footprints[0] is not checked.footprints[1]  # another pointer
    assert checked.footprints[0] is not checked.footprints[2]  # another kernel
    assert checked.footprints[0] == [
        Access(0, a.address, a.address + 256, True, False, "conservative")
    ]
    assert checked.footprints[5] == []
    assert checked.buckets[0] is checked.buckets[1]  # one allocation, one bucket list
    assert checked.buckets[0] == [(0, a.address)]
    assert checked.races() == []
    destroy(graph, a, b)


def test_two_kernels_over_one_pointer_keep_their_annotations(device: ahg.Device) -> None:
    buf = device.malloc(64)
    graph = ahg.Graph()
    for _ in range(3):
        graph.add_kernel_node(peek, 1, 1, (buf,))  # unordered readers: fine
    assert graph.check_races() == []
    writer = graph.add_kernel_node(scribble, 1, 1, (buf,))
    reports = graph.check_races()
    assert [r.kind for r in reports] == ["write-after-read"] * 3
    assert all(writer in (r.fix_edge or ()) for r in reports)
    for report in reports:
        assert (report.second.start, report.second.end) == (buf.address, buf.address + 64)
        assert report.second.precision == "conservative"
    destroy(graph, buf)


def test_a_setter_gives_one_node_its_own_footprint(device: ahg.Device) -> None:
    a, b, c = device.malloc(64), device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for _ in range(5):  # a chain over a: every node shares one footprint
        nodes.append(graph.add_kernel_node(scribble, 1, 1, (a,), deps=nodes[-1:]))
    graph.add_kernel_node(scribble, 1, 1, (b,))  # unordered with the chain, on b
    exe = graph.instantiate(check_races=True)
    with pytest.raises(ahg.RaceError) as caught:  # node 2 moved onto b: unordered with it
        exe.set_kernel_node_params(nodes[2], scribble, 1, 1, (b,))
    assert len(caught.value.reports) == 1
    exe.set_kernel_node_params(nodes[2], scribble, 1, 1, (c,))  # c: nobody else's
    exe.set_kernel_node_params(nodes[3], scribble, 1, 1, (a,))  # the others still on a
    with pytest.raises(ahg.RaceError):
        exe.set_kernel_node_params(nodes[4], scribble, 1, 1, (b,))
    assert exe.statistics().launches == 0
    exe.destroy()
    destroy(graph, a, b, c)
