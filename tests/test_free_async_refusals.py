"""``free_async`` refusals: frees ``hipFreeAsync`` refuses when called, and calls around them.

* Memory a graph frees itself (a MemAlloc node and a MemFree node of the same allocation in
  one graph, made by capture or by ``add_mem_alloc_node`` / ``add_mem_free_node``) has no
  launch's memory left for the user to free. A ``free_async`` of it was accepted and failed
  the stream later (``InvalidValue`` from the stream's completion); a ``Device.free`` of it
  while a launch was running freed the memory under the graph's own later nodes. Both are
  refused when called now, whatever the graph's state, and change nothing.
"""

from __future__ import annotations

import os

import pytest

import ahipgraph as ahg
from fakes import GatedHost

KIB = 1024
M = ahg.GraphMemAttribute
GRAPH_FREES = "freed by a memory-free node of the graph that allocates it"
_RACE_CHECK = pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="races on purpose (a free against a launch on another stream)",
)


@ahg.kernel
def fill(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


async def self_freeing_graph(
    how: str, stream: ahg.Stream, gate: GatedHost | None = None
) -> tuple[ahg.Graph, ahg.DevicePtr]:
    """A graph that allocates KIB, fills it (held by ``gate`` if given) and frees it."""
    if how == "capture":
        stream.begin_capture()
        ptr = await stream.malloc_async(KIB)
        await stream.launch_kernel(fill, 1, 1, (7, ptr))
        if gate is not None:
            await stream.launch_host_func(gate)
        await stream.free_async(ptr)
        return stream.end_capture(), ptr
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(KIB)
    ptr = alloc.params.ptr
    last = graph.add_kernel_node(fill, 1, 1, (7, ptr), deps=[alloc])
    if gate is not None:
        last = graph.add_host_node(gate, deps=[last])
    graph.add_mem_free_node(ptr, deps=[last])
    return graph, ptr


def refuses_every_free(device: ahg.Device, stream: ahg.Stream, ptr: ahg.DevicePtr) -> None:
    """Every free of ``ptr`` is refused when called, and changes nothing."""
    memory = device.statistics().memory
    ring = stream.statistics()
    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
        stream.free_async_nowait(ptr)
    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
        device.free(ptr)
    assert device.statistics().memory == memory
    assert stream.statistics() == ring


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["capture", "nodes"])
@pytest.mark.parametrize("state", ["graph", "instantiated", "running", "done"])
async def test_free_async_of_memory_its_graph_frees_is_refused_when_called(
    device: ahg.Device, how: str, state: str
) -> None:
    gate = GatedHost()
    with device.create_stream() as stream, device.create_stream() as other:
        graph, ptr = await self_freeing_graph(how, stream, gate)
        if state == "graph":
            with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                await other.free_async(ptr)
            refuses_every_free(device, other, ptr)
            graph.destroy()
            await other.synchronize()  # the stream holds no failure
            return
        with graph.instantiate() as graph_exec:
            if state == "instantiated":
                with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                    await other.free_async(ptr)
                refuses_every_free(device, other, ptr)
            else:
                done = await graph_exec.launch(stream)
                await gate.started()  # the launch is between its alloc and its free node
                assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB  # committed
                if state == "running":
                    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                        await other.free_async(ptr)
                    refuses_every_free(device, other, ptr)
                    assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB  # not freed
                gate.open()
                await done
                if state == "done":
                    with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                        await stream.free_async(ptr)
                    refuses_every_free(device, stream, ptr)
                await stream.synchronize()  # the stream holds no failure
                assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
            await other.synchronize()
        graph.destroy()
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_a_free_node_added_after_instantiate_leaves_the_executables_memory_to_the_user(
    device: ahg.Device,
) -> None:
    """The executable was made before the graph had the free node: its launches leave their
    memory behind, which ``free_async`` must still free (launch, use, free, in a loop)."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            graph.add_mem_free_node(ptr)
            for value in (1, 2):
                await graph_exec.launch(stream)
                await stream.launch_kernel(fill, 1, 1, (value, ptr))
                await (await stream.free_async(ptr))
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


@_RACE_CHECK
@pytest.mark.asyncio
async def test_a_free_async_admitted_before_its_graph_got_the_free_node_fails_on_the_stream(
    device: ahg.Device,
) -> None:
    """Admitted while the graph did not free the memory itself, then the free node came: the
    free runs while a launch on another stream holds the memory. It must not free the graph's
    memory under its later nodes; it fails on its stream and holds nothing."""
    gate = GatedHost()
    held = GatedHost("held")
    with device.create_stream() as stream, device.create_stream() as other:
        graph = ahg.Graph()
        alloc = graph.add_mem_alloc_node(KIB)
        ptr = alloc.params.ptr
        await other.launch_host_func(held)  # keeps the free behind the launch below
        early = await other.free_async(ptr)
        host = graph.add_host_node(gate, deps=[alloc])
        graph.add_mem_free_node(ptr, deps=[host])
        with graph.instantiate() as graph_exec:
            done = await graph_exec.launch(stream)
            await gate.started()  # the launch's memory is committed
            held.open()
            with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                await early
            assert device.graph_mem_attribute(M.UsedMemCurrent) == KIB  # still the graph's
            gate.open()
            await done
            with pytest.raises(ahg.InvalidValue, match=GRAPH_FREES):
                await other.synchronize()
        graph.destroy()
    assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()
