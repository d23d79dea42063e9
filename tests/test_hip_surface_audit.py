"""HIP-surface cases that earlier audits missed: pitched copies, symbols, memory operations."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

P = ahg.PitchedPtr


@pytest.mark.asyncio
@pytest.mark.parametrize("dst_pos", [(0, 68, 0), (4352, 0, 0), (0, 0, 68), (2**64, 0, 0)])
async def test_a_pitched_copy_positioned_past_its_allocation_is_refused(
    device: ahg.Device, dst_pos: tuple[int, int, int]
) -> None:
    """The region is checked against the allocation of the pointer given, as HIP checks it
    against that pointer's memory object: a position that carries it past the end is
    InvalidValue, and it was a silent write into the next allocation (4352 bytes on)."""
    with device.create_stream() as stream:
        ptr = device.malloc(4096)
        neighbour = device.malloc(4096)
        assert neighbour.address - ptr.address == 4352  # the layout the positions aim at
        await stream.memset(neighbour, 0, 4096)
        src = np.arange(1, 9, dtype=np.uint8)
        with pytest.raises(ahg.InvalidValue, match="run past the end"):
            await stream.memcpy_3d(P(ptr, 64, 1), P(src, 64), (8, 1, 1), dst_pos=dst_pos)
        with ahg.Graph() as graph:
            with pytest.raises(ahg.InvalidValue, match="run past the end"):
                graph.add_memcpy_3d_node(P(ptr, 64, 1), P(src, 64), (8, 1, 1), dst_pos=dst_pos)
            node = graph.add_memcpy_3d_node(P(ptr, 64, 1), P(src, 64), (8, 1, 1))
            with pytest.raises(ahg.InvalidValue, match="run past the end"):
                node.set_memcpy_3d_params(P(ptr, 64, 1), P(src, 64), (8, 1, 1), dst_pos=dst_pos)
            with graph.instantiate() as graph_exec:
                with pytest.raises(ahg.InvalidValue, match="run past the end"):
                    graph_exec.set_memcpy_3d_node_params(
                        node, P(ptr, 64, 1), P(src, 64), (8, 1, 1), dst_pos=dst_pos
                    )
                await (await graph_exec.launch(stream))
        assert list(device.view(ptr, np.uint8, 8)) == list(src)  # the node kept its copy
        out = np.ones(4096, np.uint8)
        await stream.memcpy(out, neighbour, 4096)
        await stream.synchronize()
        assert not out.any()
        device.free(neighbour)
        device.free(ptr)


@pytest.mark.asyncio
async def test_a_pitched_copy_from_a_freed_pointer_is_refused_wherever_its_position_lands(
    device: ahg.Device,
) -> None:
    """A freed pointer names no memory, even when its position reaches a live allocation:
    InvalidDevicePointer, where the copy read the neighbouring allocation."""
    with device.create_stream() as stream:
        freed = device.malloc(4096)
        neighbour = device.malloc(4096)
        assert neighbour.address - freed.address == 4352
        device.free(freed)
        dst = np.zeros(8, np.uint8)
        with pytest.raises(ahg.InvalidDevicePointer):
            await stream.memcpy_3d(P(dst, 8), P(freed, 64, 1), (8, 1, 1), src_pos=(0, 68, 0))
        await stream.synchronize()
        assert not dst.any()
        device.free(neighbour)
