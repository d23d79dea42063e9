"""Graph memory and stale pointers, attacked as a user combining them: each test is a case
where the library differed from what HIP_SEMANTICS.md, API.md or its own documentation promise.

Every handle a test makes is given back, and device memory is back where it started.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from cleanup import destroy

# The race checker (``make race``) reports the races some tests make on purpose.
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))


@ahg.kernel
def store(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


# -- a child graph made before configure_devices replaced the devices -----------------------------


@pytest.mark.asyncio
async def test_a_child_graph_setter_refuses_a_graph_holding_a_replaced_devices_pointer() -> None:
    """``exec.set_child_graph_node_params`` took the kernel arguments of a child graph made
    before the devices were replaced, and the executable's launches wrote the successor's
    allocation at the stale pointer's address. It is refused as ``exec.update`` refuses such
    a graph, and the executable keeps its own arguments."""
    (old,) = ahg.configure_devices(1)
    stale = old.malloc(64)
    stale_child = ahg.Graph()
    stale_child.add_kernel_node(store, 1, 1, (99, stale))
    (new,) = ahg.configure_devices(1)
    fresh = new.malloc(64)
    assert fresh == stale  # the successor reuses the addresses: only the origin differs
    new.view(fresh, np.int64, 8)[:] = 5
    out = new.malloc(64)
    child = ahg.Graph()
    child.add_kernel_node(store, 1, 1, (3, out))
    graph = ahg.Graph()
    node = graph.add_child_graph_node(child)
    graph_exec = graph.instantiate()
    memory, handles = new.memory_info(), testing.snapshot().handles
    with pytest.raises(ahg.InvalidDevicePointer, match="configure_devices replaced"):
        graph_exec.set_child_graph_node_params(node, stale_child)
    assert new.memory_info() == memory
    assert testing.snapshot().handles == handles
    stream = new.create_stream()
    await (await graph_exec.launch(stream))
    await stream.synchronize()
    assert new.view(fresh, np.int64, 8).tolist() == [5] * 8
    assert new.view(out, np.int64, 8).tolist() == [3] * 8
    destroy(graph_exec, graph, child, stale_child, stream, out, fresh)
    old.free(stale)


# -- a fresh_devices block nested in another: the outer devices' pointers ------------------------


@pytest.mark.asyncio
async def test_an_outer_blocks_pointer_is_refused_by_a_nested_blocks_device(
    device: ahg.Device,
) -> None:
    """A nested ``fresh_devices`` block's device 0 reuses the outer device 0's addresses. The
    outer device's pointer, given as a kernel argument on the block's device (eagerly, or by
    a graph made before the block), wrote the block's allocation at the same address, though
    the block's device refuses that pointer everywhere else (view, free, copy). It is refused
    as a replaced device's pointer while the outer device is lent, and is the outer device's
    own again once the block gave it back."""
    outer = device.malloc(64)
    device.view(outer, np.int64, 8)[:] = 1
    before_block = ahg.Graph()
    before_block.add_kernel_node(store, 1, 1, (98, outer))
    with testing.fresh_devices(1) as (inner,):
        mine = inner.malloc(64)
        assert mine == outer  # the same address: only the origin tells them apart
        inner.view(mine, np.int64, 8)[:] = 5
        stream = inner.create_stream()
        with pytest.raises(ahg.InvalidDevicePointer, match="configure_devices replaced"):
            await stream.launch_kernel(store, 1, 1, (99, outer))
        with pytest.raises(ahg.InvalidDevicePointer, match="configure_devices replaced"):
            before_block.instantiate()
        await stream.synchronize()
        assert inner.view(mine, np.int64, 8).tolist() == [5] * 8
        destroy(stream, mine)
    graph_exec = before_block.instantiate()  # the outer device's own pointer again
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    await stream.synchronize()
    assert device.view(outer, np.int64, 8).tolist() == [98] * 8
    destroy(graph_exec, before_block, stream, outer)


# -- auto-free-on-launch: a relaunch the legacy null stream orders behind the free -------------


@pytest.mark.asyncio
@pytest.mark.parametrize("free_by", ["free_async", "free node"])
async def test_a_relaunch_on_the_null_stream_is_ordered_behind_a_blocking_streams_free(
    device: ahg.Device, free_by: str
) -> None:
    """Launch on a blocking stream, free its memory there (held back), relaunch with
    AUTO_FREE_ON_LAUNCH on the null stream, which the legacy rules order after that free, and
    free the relaunch's memory on the null stream, with no host wait: HIP's launch, free,
    launch, free. The relaunch was taken as if unordered with the free (contested), which left
    no room for a free of its own memory: that free_async was refused ("already being freed").
    It is taken, as on the launch's own stream, and every free runs."""
    before = device.memory_info()
    graph = ahg.Graph()
    ptr = graph.add_mem_alloc_node(64).params.ptr
    graph.add_kernel_node(store, 1, 1, (7, ptr), deps=graph.nodes())
    graph_exec = graph.instantiate(ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH)
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    freeing_exec = freeing.instantiate()
    stream, null = device.create_stream(), device.null_stream
    ahead = testing.HeldKernel("ahead of the free")
    await graph_exec.launch(stream)
    await ahead.launch(stream)
    if free_by == "free_async":
        await stream.free_async(ptr)
    else:
        await freeing_exec.launch(stream)
    await graph_exec.launch(null)  # behind the free: the legacy null stream waits for it
    await null.free_async(ptr)  # the relaunch's memory
    ahead.release()
    await device.synchronize()  # no free failed
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    destroy(freeing_exec, freeing, graph_exec, graph, stream)
    device.graph_mem_trim()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent) == 0
    assert device.memory_info() == before


@pytest.mark.skipif(RACE_CHECK, reason="frees on a stream unordered with the launch on purpose")
@pytest.mark.asyncio
@pytest.mark.parametrize("free_by", ["free_async", "free node"])
async def test_a_relaunch_on_the_null_stream_behind_a_blocking_streams_free_is_taken(
    device: ahg.Device, free_by: str
) -> None:
    """Without AUTO_FREE_ON_LAUNCH: launch on a blocking stream, free its memory there (held
    back), relaunch on the null stream, which the legacy rules order after that free. The
    relaunch was refused ("never freed"), as if the free were on an unordered stream; a
    non-blocking stream, which the null stream does not wait for, is still refused."""
    before = device.memory_info()
    graph = ahg.Graph()
    ptr = graph.add_mem_alloc_node(64).params.ptr
    graph.add_kernel_node(store, 1, 1, (7, ptr), deps=graph.nodes())
    graph_exec = graph.instantiate()
    freeing = ahg.Graph()
    freeing.add_mem_free_node(ptr)
    freeing_exec = freeing.instantiate()
    stream, null = device.create_stream(), device.null_stream
    unordered = device.create_stream(non_blocking=True)
    ahead = testing.HeldKernel("ahead of the free")
    await graph_exec.launch(stream)
    await ahead.launch(stream)
    if free_by == "free_async":
        held = testing.HeldKernel("ahead of the unordered free")
        await held.launch(unordered)
        await unordered.free_async(ptr)
        with pytest.raises(ahg.InvalidValue, match="never freed"):
            await graph_exec.launch(null)  # the null stream does not wait for that free
        held.release()
        await unordered.synchronize()
        await graph_exec.launch(stream)
        await ahead.launch(stream)
        await stream.free_async(ptr)
    else:
        await freeing_exec.launch(stream)
    await graph_exec.launch(null)  # behind the free: the legacy null stream waits for it
    await null.free_async(ptr)  # the relaunch's memory
    ahead.release()
    await device.synchronize()  # no free failed
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemCurrent) == 0
    destroy(freeing_exec, freeing, graph_exec, graph, stream, unordered)
    device.graph_mem_trim()
    assert device.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent) == 0
    assert device.memory_info() == before
