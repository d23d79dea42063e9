"""Executable graphs, as a user of HIP graphs combines them: each test is a case where the
library differed from what HIP_SEMANTICS.md, API.md or its own documentation promise.

Every handle a test makes is given back, and device memory is back where it started.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, HeldKernel
from cleanup import destroy

# The race checker (``make race``) reports the races some tests make on purpose.
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


# -- instantiate: UPLOAD's stream is any stream an upload takes --------------------------------


@pytest.mark.asyncio
async def test_instantiate_uploads_on_the_per_thread_stream(device: ahg.Device) -> None:
    """``hipGraphInstantiateWithParams``'s upload stream may be ``hipStreamPerThread`` (its
    upload resolves it, HIP_SEMANTICS §4.6), as ``exec.upload(STREAM_PER_THREAD)`` takes it:
    the option refused it as a wrong type."""
    graph = ahg.Graph()
    graph.add_kernel_node(tick, 1, 1)
    graph_exec = graph.instantiate(ahg.InstantiateFlags.UPLOAD, upload_stream=ahg.STREAM_PER_THREAD)
    assert graph_exec.flags is ahg.InstantiateFlags.UPLOAD
    await graph_exec.upload(ahg.STREAM_PER_THREAD)  # the call the flag stands for
    await (await graph_exec.launch(ahg.STREAM_PER_THREAD))
    assert graph_exec.statistics().completed == 1
    destroy(graph_exec, graph)


# -- auto-free-on-launch: a relaunch on another stream than a pending free_async ---------------


@pytest.mark.skipif(RACE_CHECK, reason="frees unordered with the relaunch on purpose")
@pytest.mark.asyncio
async def test_an_unordered_free_async_of_the_last_launch_never_frees_an_auto_free_relaunch(
    device: ahg.Device,
) -> None:
    """Launch on s1, ``free_async`` on s1, relaunch on s2 with AUTO_FREE_ON_LAUNCH: the free
    and the relaunch's auto-free both free the first launch's memory, unordered. The auto-free
    ran first here, and the free, reached later, freed the memory the relaunch had committed
    at the same address: the relaunch's copy out of it failed with InvalidDevicePointer. The
    free that comes second now finds the memory gone (its stream reports it), the relaunch
    runs on its own memory, and that memory takes its own free."""
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
    s1, s2 = device.create_stream(), device.create_stream()
    ahead = HeldKernel("ahead of the free")
    first = await graph_exec.launch(s1)
    await ahead.launch(s1)  # holds s1's free_async back until the relaunch committed
    await s1.free_async(ptr)  # frees the first launch's memory, unordered with s2
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
    destroy(graph_exec, graph, s1, s2, out)
    device.graph_mem_trim()
    assert device.memory_info() == before
