"""A ``free_async`` of graph memory that is refused after its claim was admitted (no running
event loop in the calling thread) takes that claim back and leaves the allocation's free
bookkeeping as it was: a relaunch ordered behind an earlier free on the stream is still taken.
"""

from __future__ import annotations

import threading

import pytest

import ahipgraph as ahg

KIB = 1024


def call_in_thread_without_loop(stream: ahg.Stream, ptr: ahg.DevicePtr) -> BaseException:
    """Call ``stream.free_async_nowait(ptr)`` in a thread with no event loop, blocking the
    caller's loop meanwhile; what it raised."""
    raised: list[BaseException] = []

    def call() -> None:
        try:
            stream.free_async_nowait(ptr)
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert len(raised) == 1
    return raised[0]


@pytest.mark.asyncio
async def test_a_refused_free_async_keeps_the_free_node_launch_a_relaunch_counts(
    device: ahg.Device,
) -> None:
    with ahg.Graph() as graph, ahg.Graph() as freeing, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        freeing.add_mem_free_node(ptr)
        with graph.instantiate() as graph_exec, freeing.instantiate() as free_exec:
            await graph_exec.launch(stream)
            await free_exec.launch(stream)  # frees the memory before a relaunch on stream
            before = (device.memory_info(), device.statistics(), graph_exec.statistics())
            error = call_in_thread_without_loop(stream, ptr)
            # The free node's launch frees that launch's memory: a free_async of it is a second
            # free, refused as it is called, before the thread's missing loop is found.
            assert isinstance(error, ahg.InvalidValue)
            assert "memory-free node" in str(error)
            assert (device.memory_info(), device.statistics(), graph_exec.statistics()) == before
            await graph_exec.launch(stream)  # still ordered behind the free node's free
            await free_exec.launch(stream)
            await stream.synchronize()
    assert device.graph_mem_trim() == KIB
