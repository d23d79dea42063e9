"""Pointer annotations hold in every node of a graph, however long its run of one kernel.

``ConstPtr`` parameters arrive read-only and parameters with a declared extent arrive as views
of exactly that length. A long chain of nodes of one kernel and launch shape is compiled into
ops that share one class and decode their arguments once (``KernelOp.make_shared``); those
ops must decode with the kernel's own checked layout like any other, rather than with the
plain layout's memo, which hands out a writable view to the end of the allocation.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

# Long enough to be compiled as one shared run, short enough to be quick; 1 is the plain path.
LENGTHS = [1, 64]


@ahg.kernel
def writes_through_const(t: ahg.Threads, x: ahg.ConstPtr[ahg.int32]) -> None:
    x[0] = 5


@ahg.kernel(extents={"x": 2})
def writes_past_its_extent(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[3] = 7


seen_lengths: list[int] = []


@ahg.kernel(extents={"x": "n"})
def records_its_length(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    seen_lengths.append(len(x))


def chain(kernel: ahg.Kernel, args: list[tuple[object, ...]]) -> ahg.Graph:
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for each in args:
        previous = (graph.add_kernel_node(kernel, 1, 1, each, deps=previous),)
    return graph


@pytest.mark.asyncio
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("kernel", [writes_through_const, writes_past_its_extent])
async def test_a_write_the_annotation_forbids_fails_the_launch(
    device: ahg.Device, kernel: ahg.Kernel, length: int
) -> None:
    ptr = device.malloc(16)
    stream = device.create_stream()
    await stream.memset(ptr, 0, 16)
    graph = chain(kernel, [(ptr,)] * length)
    graph_exec = graph.instantiate()
    done = await graph_exec.launch(stream)
    with pytest.raises(ahg.LaunchFailure):
        await done
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert device.view(ptr, np.int32, 4).tolist() == [0, 0, 0, 0]
    destroy(graph_exec, graph, stream)
    device.free(ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("length", LENGTHS)
async def test_each_node_gets_the_length_its_own_argument_declares(
    device: ahg.Device, length: int
) -> None:
    ptr = device.malloc(64)
    stream = device.create_stream()
    graph = chain(records_its_length, [(i % 16, ptr) for i in range(length)])
    graph_exec = graph.instantiate()
    seen_lengths.clear()
    for _ in range(2):  # the first launch decodes, the second reuses what it decoded
        await graph_exec.launch(stream)
    await stream.synchronize()
    assert seen_lengths == [i % 16 for i in range(length)] * 2
    destroy(graph_exec, graph, stream)
    device.free(ptr)
