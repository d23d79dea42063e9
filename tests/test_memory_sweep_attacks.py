"""Attacks on device memory and stream-ordered memory that once found a bug.

* A pitched copy (``memcpy_3d``, its graph node and its setter) took a negative slice height
  when it copied one slice: with a z position the region's offset came out negative, so the
  copy wrote before its pointer, into another live allocation (or read another one), and on a
  host array it went through a strided view of an empty slice, outside the region asked for.
  A negative slice height is now ``InvalidValue`` wherever a pitched copy is checked.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
async def test_a_pitched_copy_with_a_negative_slice_height_is_refused_not_written_elsewhere(
    device: ahg.Device,
) -> None:
    first = device.malloc(1024)
    second = device.malloc(1024)
    gap = second - first  # a z of one slice of -gap/16 rows steps from second back to first
    host = np.full(64, 7, np.uint8)
    out = np.zeros(64, np.uint8)
    with device.create_stream() as stream:
        submitted = stream.statistics().submitted
        into_first = ahg.PitchedPtr(second, 16, -(gap // 16))
        with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
            await device.memcpy_3d(
                into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
            )
        with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
            await stream.memcpy_3d(
                into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
            )
        with pytest.raises(ahg.InvalidValue, match="negative src slice height"):
            stream.memcpy_3d_nowait(
                ahg.PitchedPtr(out, 16),
                ahg.PitchedPtr(second, 16, -(gap // 16)),
                (16, 1, 1),
                src_pos=(0, 0, 1),
            )
        with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
            await stream.memcpy_3d(
                ahg.PitchedPtr(out, 16, -1),
                ahg.PitchedPtr(first, 16),
                (16, 1, 1),
                dst_pos=(0, 0, 1),
            )
        assert stream.statistics().submitted == submitted  # nothing was enqueued
        await stream.synchronize()

        with ahg.Graph() as graph:
            with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
                graph.add_memcpy_3d_node(
                    into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
                )
            assert graph.nodes() == []
            node = graph.add_memcpy_3d_node(
                ahg.PitchedPtr(second, 16), ahg.PitchedPtr(host, 16), (16, 1, 1)
            )
            with graph.instantiate() as graph_exec:
                with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
                    graph_exec.set_memcpy_3d_node_params(
                        node, into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
                    )
                await (await graph_exec.launch(stream))  # the node's own copy, unchanged
        await stream.synchronize()

    assert not device.view(first, np.uint8).any()  # nothing reached the other allocation
    assert (device.view(second, np.uint8)[:16] == 7).all()
    assert not out.any()
    device.free(first)
    device.free(second)
    assert device.memory_info().free == device.memory_info().total
