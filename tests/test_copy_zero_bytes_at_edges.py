"""Copies and fills of 0 bytes at the edge of memory.

``hipMemcpy[Async]`` and ``hipMemset[Async]`` return success for a size of 0 before they look
at the pointers (nothing needs writing). Ours checked the pointers first, so a copy or fill of
0 bytes at one byte past the end of an allocation (the end of a buffer a loop has walked to),
or at a freed pointer, failed with InvalidDevicePointer, eagerly, synchronously and under
capture alike. Nonzero sizes keep every check; graph nodes still refuse a count of 0.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@pytest.fixture
def edges(device: ahg.Device) -> tuple[ahg.DevicePtr, ahg.DevicePtr]:
    """A live 64-byte allocation and a freed one."""
    ptr = device.malloc(64)
    freed = device.malloc(64)
    device.free(freed)
    yield ptr, freed
    device.free(ptr)


@pytest.mark.asyncio
async def test_empty_copies_and_fills_at_the_edges_succeed_and_touch_nothing(
    device: ahg.Device, edges: tuple[ahg.DevicePtr, ahg.DevicePtr]
) -> None:
    ptr, freed = edges
    stream = device.create_stream()
    host = np.arange(16, dtype=np.uint8)
    for dst in (ptr + 64, freed):
        await (await stream.memset(dst, 7, 0))
        await (await stream.memset(dst, 7, 0, element_size=4))
        await (await stream.memcpy(dst, host, 0))
        await (await stream.memcpy(host, dst, 0))
        await (await stream.memcpy(dst, ptr, 0))
        await device.memset(dst, 7, 0)
        await device.memcpy(dst, host, 0)
    await stream.synchronize()
    assert host.tolist() == list(range(16))
    assert not device.view(ptr, np.uint8).any()
    assert device.statistics().in_flight == 0
    stream.destroy()


@pytest.mark.asyncio
async def test_one_byte_past_the_end_is_still_refused(
    device: ahg.Device, edges: tuple[ahg.DevicePtr, ahg.DevicePtr]
) -> None:
    ptr, freed = edges
    stream = device.create_stream()
    host = np.zeros(16, np.uint8)
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.memset(ptr + 64, 7, 1)
    with pytest.raises(ahg.InvalidValue, match="past the end"):
        await stream.memset(ptr + 63, 7, 2)
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.memcpy(host, freed, 1)
    with pytest.raises(ahg.InvalidValue, match="past the end"):
        await stream.memcpy(host, ptr + 60, 5)
    assert stream.statistics().submitted == 0
    await (await stream.memset(ptr + 63, 7, 1))  # the last byte itself is fine
    assert device.view(ptr, np.uint8).tolist()[-2:] == [0, 7]
    stream.destroy()


@pytest.mark.asyncio
async def test_empty_copies_at_the_edges_in_a_capture_add_nothing_and_keep_it_active(
    device: ahg.Device, edges: tuple[ahg.DevicePtr, ahg.DevicePtr]
) -> None:
    ptr, freed = edges
    stream = device.create_stream()
    stream.begin_capture()
    for dst in (ptr + 64, freed):
        assert (await stream.memset(dst, 7, 0)).node is None  # type: ignore[attr-defined]
        assert (await stream.memcpy(dst, np.zeros(4, np.uint8), 0)).node is None  # type: ignore[attr-defined]
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    graph = stream.end_capture()
    assert graph.nodes() == []
    destroy(graph, stream)


def test_graph_nodes_still_refuse_an_empty_copy_or_fill(
    edges: tuple[ahg.DevicePtr, ahg.DevicePtr],
) -> None:
    ptr, _ = edges
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        graph.add_memcpy_node(ptr, np.zeros(4, np.uint8), 0)
    with pytest.raises(ahg.HipError):
        graph.add_memset_node(ptr + 64, 0, 0)
    assert graph.statistics().nodes == 0
    graph.destroy()


@pytest.mark.asyncio
async def test_an_empty_peer_copy_at_the_edge_succeeds_but_a_wrong_device_is_still_refused() -> (
    None
):
    device, peer = ahg.configure_devices(2)
    stream = device.create_stream()
    ptr, far = device.malloc(64), peer.malloc(64)
    await (await stream.memcpy_peer(far + 64, peer, ptr, device, 0))
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.memcpy_peer(far + 64, peer, ptr, device, 1)
    with pytest.raises(ahg.InvalidValue, match="is not on device"):
        await stream.memcpy_peer(far, device, ptr, device, 0)
    await stream.synchronize()
    assert device.statistics().in_flight == 0
    destroy(stream, ptr, far)
