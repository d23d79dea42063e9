"""A pitched copy's record through the generic calls stays a pitched copy.

``exec.set_node_params`` and ``graph.add_node`` take a memcpy node's record; a pitched one
(``hipMemcpy3DParms``: rows of ``width`` bytes ``pitch`` apart) was read by its byte count
only, so the node became a contiguous copy of ``width * height`` bytes, touching other
bytes than the rows it names.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

WIDTH, PITCH, ROWS = 16, 64, 4
NBYTES = PITCH * ROWS


def rows_copied(device: ahg.Device, dst: ahg.DevicePtr, src: ahg.DevicePtr) -> bool:
    """Whether dst holds src's rows (the first WIDTH bytes of each PITCH) and nothing else."""
    got = device.view(dst, np.uint8, NBYTES).reshape(ROWS, PITCH)
    want = device.view(src, np.uint8, NBYTES).reshape(ROWS, PITCH)
    return bool((got[:, :WIDTH] == want[:, :WIDTH]).all() and not got[:, WIDTH:].any())


def pitched(graph: ahg.Graph, dst: ahg.DevicePtr, src: ahg.DevicePtr) -> ahg.GraphNode:
    return graph.add_memcpy_3d_node(
        ahg.PitchedPtr(dst, PITCH, ROWS), ahg.PitchedPtr(src, PITCH, ROWS), (WIDTH, ROWS, 1)
    )


@pytest.fixture
def buffers(device: ahg.Device) -> tuple[ahg.DevicePtr, ahg.DevicePtr]:
    dst, src = device.malloc(NBYTES), device.malloc(NBYTES)
    device.view(src, np.uint8, NBYTES)[:] = np.arange(1, NBYTES + 1, dtype=np.uint8)
    device.view(dst, np.uint8, NBYTES)[:] = 0
    yield dst, src
    device.free(dst)
    device.free(src)


@pytest.mark.asyncio
async def test_the_executable_generic_setter_keeps_a_pitched_copy(
    device: ahg.Device, buffers: tuple[ahg.DevicePtr, ahg.DevicePtr]
) -> None:
    dst, src = buffers
    graph = ahg.Graph()
    node = pitched(graph, dst, src)
    other = device.malloc(NBYTES)
    device.view(other, np.uint8, NBYTES)[:] = 7
    graph_exec = graph.instantiate()
    moved = ahg.Graph()
    record = pitched(moved, dst, other).params  # the same copy from another source
    graph_exec.set_node_params(node, ahg.GraphNodeParams(ahg.NodeType.Memcpy, record))
    await (await graph_exec.launch())
    assert rows_copied(device, dst, other)
    device.view(dst, np.uint8, NBYTES)[:] = 0
    graph_exec.set_node_params(node, ahg.GraphNodeParams(ahg.NodeType.Memcpy, node.params))
    await (await graph_exec.launch())
    assert rows_copied(device, dst, src)
    graph_exec.destroy()
    graph.destroy()
    moved.destroy()
    device.free(other)


@pytest.mark.asyncio
async def test_add_node_with_a_pitched_record_adds_a_pitched_copy(
    device: ahg.Device, buffers: tuple[ahg.DevicePtr, ahg.DevicePtr]
) -> None:
    dst, src = buffers
    source = ahg.Graph()
    record = pitched(source, dst, src).params
    graph = ahg.Graph()
    node = graph.add_node(ahg.GraphNodeParams(ahg.NodeType.Memcpy, record))
    assert node.params == record
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    assert rows_copied(device, dst, src)
    graph_exec.destroy()
    graph.destroy()
    source.destroy()
