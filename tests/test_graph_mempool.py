"""The per-device graph memory pool and its attributes (HIP's graph_mem_pool_ and hip-tests).

Alloc nodes draw from the pool; memory freed by a free node, on a stream, by ``device.free`` or
by another graph (even after the allocating graph is gone) goes back to it and is reused;
``graph_mem_trim`` returns what no allocation uses. Leak checks after every failure path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.memnodes import RESERVATIONS

M = ahg.GraphMemAttribute
KIB = 1024


def figures(device: ahg.Device) -> tuple[int, int, int, int]:
    """(used, used high, reserved, reserved high)."""
    return (
        device.graph_mem_attribute(M.UsedMemCurrent),
        device.graph_mem_attribute(M.UsedMemHigh),
        device.graph_mem_attribute(M.ReservedMemCurrent),
        device.graph_mem_attribute(M.ReservedMemHigh),
    )


def small_device(memory_bytes: int) -> ahg.Device:
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=memory_bytes))
    return device


@ahg.kernel
def fill(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


def test_attribute_numbers_are_hips() -> None:
    assert [(a.name, a.value) for a in M] == [
        ("UsedMemCurrent", 0),
        ("UsedMemHigh", 1),
        ("ReservedMemCurrent", 2),
        ("ReservedMemHigh", 3),
    ]


def test_fresh_device_has_an_empty_pool(device: ahg.Device) -> None:
    assert figures(device) == (0, 0, 0, 0)
    assert device.graph_mem_trim() == 0


@pytest.mark.asyncio
async def test_used_and_reserved_while_a_graph_runs_and_after(device: ahg.Device) -> None:
    seen: list[tuple[int, int, int, int]] = []
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(4 * KIB)
    ptr = alloc.params.ptr
    put = graph.add_kernel_node(fill, 1, 1, (5, ptr), deps=[alloc])
    probe = graph.add_host_node(lambda: seen.append(figures(device)), deps=[put])
    graph.add_mem_free_node(ptr, deps=[probe])
    graph_exec = graph.instantiate()
    assert figures(device) == (0, 0, 0, 0)  # reserved addresses are not memory
    stream = device.create_stream()
    for _ in range(3):
        await (await graph_exec.launch(stream))
    # While it ran the allocation was in use; afterwards the pool keeps the memory.
    assert seen == [(4 * KIB, 4 * KIB, 4 * KIB, 4 * KIB)] * 3
    assert figures(device) == (0, 4 * KIB, 4 * KIB, 4 * KIB)
    assert device.memory.statistics().graph_pool_cached == 4 * KIB
    assert device.memory.graph_pool.statistics().reused_bytes == 2 * 4 * KIB  # launches 2, 3
    # Resetting the high-water marks resets only them, and only to 0.
    device.set_graph_mem_attribute(M.UsedMemHigh, 0)
    assert figures(device) == (0, 0, 4 * KIB, 4 * KIB)
    device.set_graph_mem_attribute(M.ReservedMemHigh, 0)
    assert figures(device) == (0, 0, 4 * KIB, 0)
    before = device.memory.bytes_in_use
    assert device.graph_mem_trim() == 4 * KIB
    assert device.memory.bytes_in_use == before - 4 * KIB
    assert figures(device) == (0, 0, 0, 0)
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


BAD_SETS: list[tuple[Any, Any, type[Exception]]] = [
    (M.UsedMemCurrent, 0, ahg.InvalidValue),
    (M.ReservedMemCurrent, 0, ahg.InvalidValue),
    (M.UsedMemHigh, 1, ahg.InvalidValue),
    (M.ReservedMemHigh, -1, ahg.InvalidValue),
    (M.ReservedMemHigh, 2**64, ahg.InvalidValue),
    (7, 0, ahg.InvalidValue),
    (-1, 0, ahg.InvalidValue),
    ("UsedMemHigh", 0, TypeError),
    (M.UsedMemHigh, None, TypeError),
    (M.UsedMemHigh, 0.0, TypeError),
    (M.UsedMemHigh, False, TypeError),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("attr", "value", "error"), BAD_SETS)
async def test_bad_set_is_refused_and_changes_nothing(
    device: ahg.Device, attr: Any, value: Any, error: type[Exception]
) -> None:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(KIB)
    graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch())
    before = figures(device)
    with pytest.raises(error):
        device.set_graph_mem_attribute(attr, value)
    assert figures(device) == before
    graph_exec.destroy()
    graph.destroy()
    device.graph_mem_trim()


@pytest.mark.parametrize(
    ("attr", "error"), [(4, ahg.InvalidValue), (-1, ahg.InvalidValue), (None, TypeError)]
)
def test_bad_get_is_refused(device: ahg.Device, attr: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        device.graph_mem_attribute(attr)


def test_a_device_that_is_gone_is_invalid_device(device: ahg.Device) -> None:
    ahg.configure_devices(1)  # device 0 is replaced: the old handle names no device
    for call in (
        lambda: device.graph_mem_attribute(M.UsedMemCurrent),
        lambda: device.set_graph_mem_attribute(M.UsedMemHigh, 0),
        device.graph_mem_trim,
    ):
        with pytest.raises(ahg.InvalidDevice):
            call()
    assert ahg.get_device(0).graph_mem_attribute(M.UsedMemCurrent) == 0


def test_second_instantiation_of_a_graph_with_alloc_nodes_is_not_supported(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    graph.add_mem_alloc_node(KIB)
    first = graph.instantiate()
    reservations = len(RESERVATIONS)
    with pytest.raises(ahg.NotSupported, match="only once"):
        graph.instantiate()
    assert len(RESERVATIONS) == reservations
    first.destroy()
    graph.destroy()
    assert device.memory.statistics().reservations == 0


@pytest.mark.parametrize("nbytes", [2**64, 2**41, (1 << 40) + 1])
def test_absurd_alloc_is_out_of_memory_and_changes_nothing(device: ahg.Device, nbytes: int) -> None:
    graph = ahg.Graph()
    before = device.memory.statistics()
    with pytest.raises(ahg.OutOfMemory):
        graph.add_mem_alloc_node(nbytes)
    assert device.memory.statistics() == before
    assert graph.statistics().nodes == 0
    node = graph.add_mem_alloc_node(KIB)  # the address space is intact
    assert node.params.ptr.address == device.memory.address_base
    graph.destroy()


@pytest.mark.asyncio
async def test_commit_past_the_device_memory_fails_the_launch_and_leaks_nothing() -> None:
    device = small_device(8 * KIB)
    graph = ahg.Graph()
    graph.add_mem_alloc_node(64 * KIB)  # addresses are plentiful; memory is not
    graph_exec = graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH, arena_headroom=0)
    with pytest.raises(ahg.OutOfMemory):
        await (await graph_exec.launch())
    assert figures(device) == (0, 0, 0, 0)
    graph_exec.destroy()
    graph.destroy()
    assert device.memory.statistics().reservations == 0
    assert device.memory.bytes_in_use == 0


async def _alloc_graph_then(
    device: ahg.Device, nbytes: int
) -> tuple[ahg.Graph, ahg.GraphExec, ahg.DevicePtr]:
    """A graph that allocates ``nbytes`` (and never frees them), launched once."""
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(nbytes)
    graph.add_kernel_node(fill, 1, 1, (9, alloc.params.ptr), deps=[alloc])
    graph_exec = graph.instantiate(arena_headroom=0)
    await (await graph_exec.launch())
    return graph, graph_exec, alloc.params.ptr


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["free node", "stream", "device.free", "exec destroy"])
async def test_freed_graph_memory_is_reusable(how: str) -> None:
    # A device with room for one allocation of this size: a second one fits only if the
    # first one's memory came back.
    size = 48 * KIB
    device = small_device(64 * KIB)
    graph, graph_exec, ptr = await _alloc_graph_then(device, size)
    assert device.view(ptr, np.int64, 1)[0] == 9
    assert figures(device)[0] == size
    stream = device.create_stream()
    freer: ahg.Graph | None = None
    freer_exec: ahg.GraphExec | None = None
    if how == "free node":  # HIP-test: alloc in one graph, free in another after a destroy
        graph.destroy()
        freer = ahg.Graph()
        freer.add_mem_free_node(ptr)
        freer_exec = freer.instantiate(arena_headroom=0)
        await (await freer_exec.launch(stream))
    elif how == "stream":
        await (await stream.free_async(ptr))
    elif how == "device.free":
        device.free(ptr)
    else:
        graph_exec.destroy()
    assert figures(device)[:3] == (0, size, size)
    # The next allocation draws the pool's memory: the device has no room for a new block.
    again, again_exec, again_ptr = await _alloc_graph_then(device, size)
    assert device.view(again_ptr, np.int64, 1)[0] == 9
    assert figures(device)[:3] == (size, size, size)
    assert device.memory.bytes_in_use <= device.memory.total_bytes
    again_exec.destroy()
    again.destroy()
    for handle in (graph_exec, freer_exec):
        if handle is not None and handle.state.value == "open":
            handle.destroy()
    for g in (graph, freer):
        if g is not None and not g.destroyed:
            g.destroy()
    stream.destroy()
    assert device.graph_mem_trim() == size
    assert figures(device)[::2] == (0, 0)
    assert device.memory.statistics().reservations == 0
    assert device.memory.bytes_in_use == 0


@pytest.mark.asyncio
async def test_auto_free_on_launch_relaunches_without_leaking(device: ahg.Device) -> None:
    baseline = device.memory.bytes_in_use
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(2 * KIB)
    graph.add_kernel_node(fill, 1, 1, (1, alloc.params.ptr), deps=[alloc])
    graph_exec = graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH)
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    after_one = figures(device)
    in_use = device.memory.bytes_in_use
    for _ in range(20):
        await (await graph_exec.launch(stream))
    assert figures(device) == after_one == (2 * KIB, 2 * KIB, 2 * KIB, 2 * KIB)
    assert device.memory.bytes_in_use == in_use  # nothing grew
    assert device.graph_mem_trim() == 0  # all of it is in use: nothing to trim
    graph_exec.destroy()
    graph.destroy()
    assert figures(device)[::2] == (0, 2 * KIB)
    assert device.graph_mem_trim() == 2 * KIB
    assert figures(device)[::2] == (0, 0)
    assert device.memory.bytes_in_use == baseline
    stream.destroy()
