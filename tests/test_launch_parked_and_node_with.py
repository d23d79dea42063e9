"""Misuses of the core that once broke it: a launch parked while its stream began
capturing, stream-ordered allocation from a second event loop, and ``with`` on a node whose
destroy fails or that another thread destroys."""

from __future__ import annotations

import asyncio
import threading

import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from cleanup import destroy


@pytest.mark.asyncio
async def test_a_launch_parked_while_its_stream_begins_capturing_is_refused(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    graph = ahg.Graph()
    graph.add_kernel_node(held.kernel, 1, 1)
    exec_ = graph.instantiate(signal_sets=1)
    a, b = device.create_stream(), device.create_stream()
    first = await exec_.launch(a)
    await held.started.wait()
    parked = asyncio.create_task(exec_.launch(b))  # the only signal set is in use
    await loop_turns()
    assert not parked.done()
    b.begin_capture()
    held.release()
    await first
    with pytest.raises(ahg.StreamCaptureUnsupported):
        await parked
    assert exec_.statistics().launches == 1
    assert exec_.statistics().signal_pool.in_use == 0  # the set went back
    with pytest.raises(ahg.StreamCaptureInvalidated):  # HIP's side effect, as a direct launch
        b.end_capture()
    await (await exec_.launch(b))  # the set is usable again
    assert exec_.statistics().launches == 2
    destroy(exec_, graph, a, b)


@pytest.mark.asyncio
async def test_malloc_async_from_a_second_loop_on_a_busy_device_is_illegal_state(
    device: ahg.Device,
) -> None:
    held = HeldKernel()
    stream, other = device.create_stream(), device.create_stream()
    await held.launch(stream)
    await held.started.wait()
    before = device.memory_info()
    errors: list[BaseException] = []

    def second_loop() -> None:
        async def allocate() -> None:
            await other.malloc_async(64)

        try:
            asyncio.run(allocate())
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=second_loop)
    thread.start()
    thread.join()
    assert [type(error) for error in errors] == [ahg.IllegalState]
    assert device.memory_info() == before
    held.release()
    await stream.synchronize()
    destroy(stream, other)


def test_a_failed_destroy_on_leaving_with_does_not_hide_the_block_s_exception() -> None:
    graph = ahg.Graph()
    with (
        pytest.raises(RuntimeError, match="the block's own") as caught,
        graph.add_mem_alloc_node(1024),  # HIP never destroys a memory node
    ):
        raise RuntimeError("the block's own")
    assert any("destroy() on leaving the with block failed" in n for n in caught.value.__notes__)
    with pytest.raises(ahg.NotSupported), graph.add_mem_alloc_node(1024):
        pass  # a clean exit still reports the failed destroy
    destroy(graph)


def test_leaving_with_after_another_thread_destroyed_the_node_is_no_error() -> None:
    graph = ahg.Graph()

    node = graph.add_empty_node()
    real_destroy = type(node).destroy
    calls = []

    def destroy_after_another_thread(self: ahg.GraphNode) -> None:
        calls.append(self)
        real_destroy(self)  # "another thread" wins the race...
        real_destroy(self)  # ...so this call finds the node gone

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(node), "destroy", destroy_after_another_thread)
        with node:
            pass
    assert calls == [node]
    assert not node.alive
    destroy(graph)
