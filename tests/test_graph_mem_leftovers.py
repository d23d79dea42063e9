"""Graph memory and stale pointers: each test names the behaviour it pins down.

Every handle a test makes is given back, and device memory is back where it started.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.testing import GatedHost, HeldKernel
from cleanup import destroy

# The race checker (``make race``) reports the races some tests make on purpose.
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


# -- auto-free-on-launch: a relaunch on another stream than a pending free node ----------------


@pytest.mark.skipif(RACE_CHECK, reason="frees unordered with the relaunch on purpose")
@pytest.mark.asyncio
async def test_an_unordered_free_node_of_the_last_launch_never_frees_an_auto_free_relaunch(
    device: ahg.Device,
) -> None:
    """Launch on s1, a graph whose free node frees that launch's memory on s1 (held back),
    relaunch on s2 with AUTO_FREE_ON_LAUNCH: the free node and the relaunch's auto-free both
    free the first launch's memory, unordered. The auto-free ran first here, and the free
    node, reached later, freed the memory the relaunch had committed at the same address: the
    relaunch's copy out of it failed with InvalidDevicePointer. The free that comes second
    now finds the memory gone (its stream reports it), the relaunch runs on its own memory,
    and that memory takes its own free."""
    before = device.memory_info()
    out = device.malloc(8)
    gate = GatedHost()
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    ptr = alloc.params.ptr
    fill = graph.add_kernel_node(put, 1, 1, (7, ptr), deps=[alloc])
    wait = graph.add_host_node(gate, deps=[fill])
    graph.add_memcpy_node(out, ptr, 8, deps=[wait])
    graph_exec = graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH)
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    freeing_exec = freeing.instantiate()
    s1, s2 = device.create_stream(), device.create_stream()
    ahead = HeldKernel("ahead of the free node")
    first = await graph_exec.launch(s1)
    await ahead.launch(s1)  # holds s1's free node back until the relaunch committed
    await freeing_exec.launch(s1)  # frees the first launch's memory, unordered with s2
    second = await graph_exec.launch(s2)
    gate.open(0)
    await first
    await gate.started(1)  # the relaunch auto-freed, committed again and filled it
    ahead.release()
    with pytest.raises(ahg.InvalidValue, match="freed before the stream reached"):
        await s1.synchronize()  # the free came second: the memory it was for is gone
    gate.open(1)
    await second  # read its own memory: nothing freed it
    copied = np.zeros(1, np.int64)
    await s2.memcpy(copied, out, 8)
    await s2.synchronize()
    assert copied[0] == 7
    await s2.free_async(ptr)  # the relaunch's memory takes a free of its own
    await s2.synchronize()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    destroy(freeing_exec, freeing, graph_exec, graph, s1, s2, out)
    device.graph_mem_trim()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent) == 0
    assert device.memory_info() == before


@pytest.mark.skipif(RACE_CHECK, reason="frees unordered with the relaunch on purpose")
@pytest.mark.asyncio
async def test_an_unordered_free_node_that_runs_first_leaves_the_auto_free_nothing_to_free(
    device: ahg.Device,
) -> None:
    """The same two frees the other way round: the free node runs first and frees the first
    launch's memory; the relaunch's auto-free finds it gone, commits its own memory and runs,
    and no launch fails."""
    before = device.memory_info()
    out = device.malloc(8)
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    ptr = alloc.params.ptr
    fill = graph.add_kernel_node(put, 1, 1, (7, ptr), deps=[alloc])
    graph.add_memcpy_node(out, ptr, 8, deps=[fill])
    graph_exec = graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH)
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    freeing_exec = freeing.instantiate()
    s1, s2 = device.create_stream(), device.create_stream()
    ahead = HeldKernel("ahead of the relaunch")
    await graph_exec.launch(s1)
    await freeing_exec.launch(s1)
    await ahead.launch(s2)  # holds the relaunch's auto-free back until the free node ran
    second = await graph_exec.launch(s2)
    await s1.synchronize()  # the free node came first: it freed the first launch's memory
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    ahead.release()
    await second  # its auto-free found nothing to free, and it ran on its own memory
    copied = np.zeros(1, np.int64)
    await s2.memcpy(copied, out, 8)
    await s2.synchronize()
    assert copied[0] == 7
    await s2.free_async(ptr)  # the relaunch's memory takes a free of its own
    await s2.synchronize()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    destroy(freeing_exec, freeing, graph_exec, graph, s1, s2, out)
    device.graph_mem_trim()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent) == 0
    assert device.memory_info() == before


# -- a graph made before configure_devices replaced the devices -----------------------------------


@ahg.kernel
def store(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


def _stale_graph() -> tuple[ahg.Device, ahg.DevicePtr, ahg.Graph, ahg.Device, ahg.DevicePtr]:
    """A graph whose kernel node writes a pointer of a device 0 then replaced, and the
    successor's allocation at the same address."""
    (old,) = ahg.configure_devices(1)
    stale = old.malloc(64)
    graph = ahg.Graph()
    graph.add_kernel_node(store, 1, 1, (7, stale))
    (new,) = ahg.configure_devices(1)
    fresh = new.malloc(64)
    assert fresh == stale  # the successor reuses the addresses: only the origin differs
    new.view(fresh, np.int64, 8)[:] = 5
    return old, stale, graph, new, fresh


@pytest.mark.asyncio
async def test_a_graph_made_before_its_devices_were_replaced_is_not_instantiated() -> None:
    """Its kernel node, added while the pointer was the old device's own, was instantiated on
    the successor, and every launch wrote the successor's allocation at the same address.
    Instantiating it (or a clone, or a graph holding it as a child) is now refused as an
    eager launch of that pointer is, and makes nothing."""
    old, stale, graph, new, fresh = _stale_graph()
    clone = graph.clone()
    parent = ahg.Graph()
    parent.add_child_graph_node(graph)
    memory, handles = new.memory_info(), testing.snapshot().handles
    for made in (graph, clone, parent):
        with pytest.raises(ahg.InvalidDevicePointer, match="configure_devices replaced"):
            made.instantiate()
    assert new.memory_info() == memory
    assert testing.snapshot().handles == handles
    assert new.view(fresh, np.int64, 8).tolist() == [5] * 8
    destroy(parent, clone, graph, fresh)
    old.free(stale)


@pytest.mark.asyncio
async def test_an_update_from_a_graph_made_before_its_devices_were_replaced_is_refused() -> None:
    """``exec.update`` took such a graph's kernel arguments, and the executable's launches
    wrote the successor's allocation at the stale pointer's address. It is refused as
    instantiate refuses the graph, and the executable keeps its own arguments."""
    old, stale, graph, new, fresh = _stale_graph()
    out = new.malloc(64)
    own = ahg.Graph()
    own.add_kernel_node(store, 1, 1, (3, out))
    graph_exec = own.instantiate()
    with pytest.raises(ahg.InvalidDevicePointer, match="configure_devices replaced"):
        graph_exec.update(graph)
    stream = new.create_stream()
    await (await graph_exec.launch(stream))
    await stream.synchronize()
    assert new.view(fresh, np.int64, 8).tolist() == [5] * 8
    assert new.view(out, np.int64, 8).tolist() == [3] * 8
    destroy(graph_exec, own, graph, stream, out, fresh)
    old.free(stale)


def test_a_memory_node_of_a_replaced_device_is_not_instantiated_on_its_successor() -> None:
    """An alloc node reserved by device 0 before it was replaced was instantiated on the
    successor, which found its own graph's reservation at the same address and handed it to
    the executable: that graph, destroyed, then left its range reserved for good. Such alloc
    and free nodes are now refused at instantiate, and the successor's ranges are untouched."""
    ahg.configure_devices(1)
    allocating = ahg.Graph()
    stale = allocating.add_mem_alloc_node(64).params.ptr
    freeing = ahg.Graph()
    freeing.add_mem_free_node(stale)
    (new,) = ahg.configure_devices(1)
    before = new.memory_info()
    own = ahg.Graph()
    assert own.add_mem_alloc_node(64).params.ptr == stale  # the same address, a new range
    for made in (allocating, freeing):
        with pytest.raises(ahg.InvalidDevicePointer, match="configure_devices replaced"):
            made.instantiate()
    destroy(own)
    assert new.statistics().memory.reservations == 0  # its range given back with it
    assert new.memory_info() == before
    destroy(freeing, allocating)


def test_a_free_node_of_a_replaced_devices_range_does_not_claim_its_successors() -> None:
    """``add_mem_free_node`` of a range device 0 reserved before it was replaced claimed the
    successor's range at the same address: that range's own free node was then refused
    ("already has a memory-free node"). It is refused as a replaced device's pointer, and the
    successor's range keeps its free for its own graph."""
    ahg.configure_devices(1)
    allocating = ahg.Graph()
    stale = allocating.add_mem_alloc_node(64).params.ptr
    (new,) = ahg.configure_devices(1)
    own = ahg.Graph()
    ptr = own.add_mem_alloc_node(64).params.ptr
    assert ptr == stale  # the same address, a new range
    freeing = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="configure_devices replaced"):
        freeing.add_mem_free_node(stale)
    assert freeing.nodes() == []
    own.add_mem_free_node(ptr)  # its own graph's free
    destroy(freeing, own, allocating)
    assert new.statistics().memory.reservations == 0
