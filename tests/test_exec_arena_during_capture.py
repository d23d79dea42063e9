"""Executables made and destroyed while another stream captures.

An executable's argument arena came from the public ``device.malloc``/``device.free``, so the
capture rule for the user's ``hipMalloc``/``hipFree`` applied to the runtime's own memory:
while any GLOBAL capture ran, ``graph.instantiate()`` of a graph with a kernel failed with
"malloc() is not allowed" and ``exec.destroy()`` with "free() is not allowed", each
invalidating the capture; the failed destroy also lost the arena's chunk (device memory stayed
in use after everything was destroyed). HIP's ``hipGraphInstantiate`` and
``hipGraphExecDestroy`` have no capture check (its kernarg pool is not hipMalloc).
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from cleanup import destroy


@ahg.kernel
def nothing(t: ahg.Threads, n: ahg.int32) -> None:
    pass


def _kernel_graph() -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_kernel_node(nothing, 1, 1, (1,))
    return graph


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", [ahg.CaptureMode.GLOBAL, ahg.CaptureMode.THREAD_LOCAL])
async def test_instantiate_and_destroy_during_a_capture_leave_it_active(
    device: ahg.Device, mode: ahg.CaptureMode
) -> None:
    graph = _kernel_graph()
    stream = device.create_stream()
    baseline = device.statistics().memory.bytes_in_use
    stream.begin_capture(mode)
    await stream.launch_kernel(nothing, 1, 1, (2,))
    graph_exec = graph.instantiate()
    assert graph_exec.statistics().arena.chunks == 1
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    graph_exec.destroy()
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert device.statistics().memory.bytes_in_use == baseline
    captured = stream.end_capture()
    assert len(captured.nodes()) == 1
    destroy(captured, graph, stream)


@pytest.mark.asyncio
async def test_the_last_launch_of_a_destroyed_executable_completing_during_a_capture(
    device: ahg.Device,
) -> None:
    """The arena is freed by the completion of the last launch: inside a capture, too."""
    graph = _kernel_graph()
    graph_exec = graph.instantiate()
    worker, capturing = device.create_stream(), device.create_stream()
    held = testing.HeldKernel()
    await held.launch(worker)
    handle = await graph_exec.launch(worker)  # behind the held kernel
    graph_exec.destroy()  # in flight: freed when the launch completes
    capturing.begin_capture()
    await capturing.launch_kernel(nothing, 1, 1, (3,))
    held.release()
    await handle  # completes, and frees the executable, while the capture is active
    assert capturing.is_capturing() is ahg.CaptureStatus.ACTIVE
    assert graph_exec.statistics().arena.chunks == 0
    captured = capturing.end_capture()
    await worker.synchronize()
    destroy(captured, graph, worker, capturing)


@pytest.mark.asyncio
async def test_the_users_own_malloc_is_still_refused_during_a_global_capture(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureUnsupported, match="malloc"):
        device.malloc(64)
    assert stream.is_capturing() is ahg.CaptureStatus.INVALIDATED
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.destroy()


def test_an_arena_allocation_still_meets_injected_faults(device: ahg.Device) -> None:
    graph = _kernel_graph()
    before = device.statistics().memory.bytes_in_use
    with testing.fail_allocations(1), pytest.raises(ahg.OutOfMemory):
        graph.instantiate()
    assert device.statistics().memory.bytes_in_use == before
    graph.destroy()
