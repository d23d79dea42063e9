"""Device, memory and wait-primitive corners: each test names the behaviour it pins down."""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core.waitqueue import WaitQueue, WaitQueueStatistics
from ahipgraph.testing import HeldKernel, loop_turns
from cleanup import destroy

# The race checker (``make race``) reports the races some tests make on purpose.
RACE_CHECK = bool(os.environ.get("AHIPGRAPH_RACE_CHECK"))


# -- synchronous copies and fills of 0 bytes ---------------------------------------------------


def _empty_sync_calls(
    device: ahg.Device, ptr: ahg.DevicePtr, other: ahg.DevicePtr, host: np.ndarray[Any, Any]
) -> dict[str, Callable[[], Awaitable[None]]]:
    symbol = ahg.device_symbol("leftovers_empty_sync_symbol", dtype=np.uint8, shape=(16,))
    return {
        "memcpy d2d": lambda: device.memcpy(ptr, other, 0),
        "memcpy h2d": lambda: device.memcpy(ptr, host, 0),
        "memcpy d2h": lambda: device.memcpy(host, ptr, 0),
        "memcpy empty host array": lambda: device.memcpy(ptr, host[:0]),
        "memset": lambda: device.memset(ptr, 7, 0),
        "memcpy_2d": lambda: device.memcpy_2d(ptr, 8, other, 8, 0, 4),
        "memcpy_3d": lambda: device.memcpy_3d(
            ahg.PitchedPtr(ptr, 8), ahg.PitchedPtr(other, 8), (8, 2, 0)
        ),
        "memcpy_to_symbol": lambda: device.memcpy_to_symbol(symbol, host, 0),
        "memcpy_from_symbol": lambda: device.memcpy_from_symbol(host, symbol, 0),
        "memcpy_peer": lambda: device.memcpy_peer(ptr, device, other, device, 0),
    }


@pytest.mark.asyncio
async def test_an_empty_synchronous_copy_does_not_wait_for_a_held_blocking_stream(
    device: ahg.Device,
) -> None:
    """``hipMemcpy``/``hipMemset`` and their 2D, 3D, symbol and peer forms return
    ``hipSuccess`` for a size of 0 before they look at the null stream. Ours enqueued an
    empty copy on the legacy null stream and waited for its order: behind a kernel on
    another blocking stream (held here, 50 ms of simulated time in the next test)."""
    stream = device.create_stream()
    ptr, other = device.malloc(64), device.malloc(64)
    host = np.arange(16, dtype=np.uint8)
    held = HeldKernel()
    await held.launch(stream)
    await held.started.wait()
    null_submitted = device.null_stream.submitted
    for name, call in _empty_sync_calls(device, ptr, other, host).items():
        async with asyncio.timeout(1):  # a wait for the held kernel would never end
            await call()
        assert not stream.query(), name  # returned while the kernel is still held
        assert device.null_stream.submitted == null_submitted, name  # nothing enqueued
    # The checks still run first: a null pointer is refused at once, not after the kernel.
    with pytest.raises(ahg.InvalidValue, match="null"):
        await device.memcpy(ahg.DevicePtr(device.ordinal, 0), host, 0)
    with pytest.raises(ahg.InvalidValue, match="null"):
        await device.memset(ahg.DevicePtr(device.ordinal, 0), 7, 0)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await device.memcpy(ptr, host, 0, ahg.CopyKind.DeviceToHost)
    with pytest.raises(ahg.InvalidValue):  # past the symbol, even for 0 bytes
        await device.memcpy_to_symbol("leftovers_empty_sync_symbol", host, 0, offset=17)
    assert device.null_stream.submitted == null_submitted
    held.release()
    await stream.synchronize()
    assert host.tolist() == list(range(16))
    destroy(stream, ptr, other)


@pytest.mark.asyncio
async def test_an_empty_synchronous_copy_takes_no_simulated_time(device: ahg.Device) -> None:
    @ahg.kernel(duration_ns=50_000_000)
    def slow(t: ahg.Threads) -> None:
        pass

    stream = device.create_stream()
    ptr, other = device.malloc(64), device.malloc(64)
    await stream.launch_kernel(slow, 1, 1)
    before = device.clock.now
    await device.memcpy(ptr, other, 0)
    await device.memset(ptr, 1, 0)
    assert device.clock.now == before  # not 50 ms later
    await device.memcpy(ptr, other, 8)  # a real copy still waits for the legacy order
    assert device.clock.now >= before + 50_000_000
    destroy(stream, ptr, other)


@pytest.mark.asyncio
async def test_an_empty_synchronous_copy_from_another_event_loop_is_still_refused(
    device: ahg.Device,
) -> None:
    """Returning early for 0 bytes skips the enqueue, not the device's loop check: a device
    busy on one loop refuses the call from another (``IllegalState``), as for any size."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    held = HeldKernel()
    await held.launch(stream)
    await held.started.wait()
    outcomes: list[str] = []

    async def from_another_loop() -> None:
        for call in (
            lambda: device.memcpy(ptr, ptr + 8, 0),
            lambda: device.memset(ptr, 0, 0),
            lambda: device.memcpy(ptr, ptr + 8, 8),
        ):
            try:
                await call()
                outcomes.append("returned")
            except ahg.IllegalState:
                outcomes.append("IllegalState")

    await asyncio.to_thread(asyncio.run, from_another_loop())
    assert outcomes == ["IllegalState"] * 3
    held.release()
    await stream.synchronize()
    destroy(stream, ptr)


@pytest.mark.asyncio
async def test_an_empty_synchronous_copy_during_a_capture_is_still_implicit(
    device: ahg.Device,
) -> None:
    """HIP's ``CHECK_STREAM_CAPTURING`` comes before the size check."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureImplicit):
        await device.memcpy(ptr, ptr, 0)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    destroy(stream, ptr)


# -- fills and stream memory operations on a peer's memory --------------------------------------


@ahg.kernel
def _store_seven(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = 7


@pytest.mark.asyncio
async def test_fills_and_stream_memory_ops_on_peer_memory_need_no_peer_access() -> None:
    """As in HIP (its fill maps the peer's memory itself; ``hipStreamWriteValue32`` and
    ``hipStreamWaitValue32`` do not look at the device), and as copies: only kernels need
    ``enable_peer_access``. Streams and graph nodes alike."""
    d0, d1 = ahg.configure_devices(2)
    remote = d1.malloc(64)
    stream = d0.create_stream()
    assert not d0.memory.peers
    await stream.memset(remote, 0x11, 16)
    await stream.memset(remote + 16, 0x22222222, 4, element_size=4)
    await stream.write_value_32(remote + 32, 5)
    await stream.write_value_64(remote + 40, 6)
    await stream.wait_value_32(remote + 32, 5, ahg.StreamWaitFlag.EQ)
    await stream.wait_value_64(remote + 40, 6, ahg.StreamWaitFlag.EQ)
    graph = ahg.Graph()
    graph.add_memset_node(remote + 56, 0x33, 8)
    graph_exec = graph.instantiate()
    await graph_exec.launch(stream)
    async with asyncio.timeout(1):
        await stream.synchronize()
    seen = d1.view(remote, np.uint8, 64)
    assert seen[:16].tolist() == [0x11] * 16
    assert seen[16:32].tolist() == [0x22] * 16
    assert d1.view(remote + 32, np.uint32, 1)[0] == 5
    assert d1.view(remote + 40, np.uint64, 1)[0] == 6
    assert seen[56:].tolist() == [0x33] * 8
    completion = await stream.launch_kernel(_store_seven, 1, 1, (remote,))
    with pytest.raises(ahg.InvalidDevicePointer):  # a kernel still needs access
        await completion
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.synchronize()
    destroy(graph_exec, graph, stream, remote)


# -- a graph-memory launch that fails part way ----------------------------------------------------


@pytest.mark.asyncio
async def test_a_failed_graph_memory_launch_leaves_the_pool_as_a_successful_one_would(
    device: ahg.Device,
) -> None:
    """The second of two allocations cannot be satisfied. The first was committed and its free
    node still runs (a failure stops no other work): its bytes stay reserved by the graph pool,
    as a successful launch's do (HIP keeps them mapped), and come back with
    ``graph_mem_trim()``. Failing again reuses them: the pool does not grow per failure."""
    kib = 1024
    attrs = list(ahg.GraphMemAttribute)
    before = device.memory_info()
    hog = device.malloc(device.properties.memory_bytes - 4 * kib)
    stream = device.create_stream()
    graph = ahg.Graph()
    first = graph.add_mem_alloc_node(kib)
    second = graph.add_mem_alloc_node(8 * kib, deps=[first])
    free_first = graph.add_mem_free_node(first.params.ptr, deps=[second])
    graph.add_mem_free_node(second.params.ptr, deps=[free_first])
    graph_exec = graph.instantiate()
    for _ in range(3):
        with pytest.raises(ahg.OutOfMemory):
            await (await graph_exec.launch(stream))
        with pytest.raises(ahg.OutOfMemory):
            await stream.synchronize()
        assert [device.graph_mem_attribute(a) for a in attrs] == [0, kib, kib, kib]
        assert device.memory_info().free == 3 * kib
    device.free(hog)
    await (await graph_exec.launch(stream))  # room now: the executable was not stuck
    destroy(graph_exec, graph, stream)
    assert device.graph_mem_trim() == 9 * kib
    assert device.memory_info() == before


# -- the wait primitive: two reclaims at once ---------------------------------------------------


class _ReclaimedMeanwhile(deque[Any]):
    """An orphan list whose first ``popleft`` lets another ``reclaim()`` run just before it:
    what another thread's reclaim does between this one's emptiness check and its pop."""

    def __init__(self, items: deque[Any], queue: WaitQueue) -> None:
        super().__init__(items)
        self.queue, self.raced = queue, False

    def popleft(self) -> Any:
        if not self.raced:
            self.raced = True
            assert self.queue.reclaim()  # the other thread's: it takes the last orphan
        return super().popleft()


def test_two_reclaims_at_once_give_an_orphan_back_once_and_raise_nothing() -> None:
    """An item handed to a waiter whose loop closed, and whose coroutine was then closed, is
    an orphan for ``reclaim()``. Two reclaims on two threads both saw it listed and both
    popped it: the second raised ``IndexError`` from inside the library."""
    queue = WaitQueue()
    given_back: list[object] = []
    loop = asyncio.new_event_loop()
    task = loop.create_task(queue.park(on_abandon=given_back.append))
    loop.run_until_complete(asyncio.sleep(0))  # one turn: the task parks
    loop.call_soon(queue.unpark, "item")  # handed on the loop's thread...
    loop.call_soon(loop.stop)  # ...and the loop stops before the task resumes
    loop.run_forever()
    loop.close()
    task.get_coro().close()  # as when the collector takes the dead task: an orphan
    queue._orphans = _ReclaimedMeanwhile(queue._orphans, queue)
    assert not queue.reclaim()  # the other reclaim gave it back
    assert given_back == ["item"]  # once
    assert queue.statistics() == WaitQueueStatistics(waiters=0, in_transit=0)
    assert not queue.reclaim()


# -- stream memory operations: HIP's check order ------------------------------------------------


@pytest.mark.asyncio
async def test_a_stream_memory_operation_at_null_on_a_destroyed_stream_is_invalid_value(
    device: ahg.Device,
) -> None:
    """``ihipStreamOperation`` refuses a null pointer (``InvalidValue``) before it checks the
    stream (``ContextIsDestroyed``); ours checked the stream first. A bad word on a destroyed
    stream is still the stream's error, as in HIP."""
    stream = device.create_stream()
    stream.destroy()
    null = ahg.DevicePtr(device.ordinal, 0)
    for call in (
        lambda: stream.write_value_32(null, 1),
        lambda: stream.write_value_64(null, 1),
        lambda: stream.wait_value_32(null, 1),
        lambda: stream.wait_value_64(null, 1, ahg.StreamWaitFlag.EQ),
    ):
        with pytest.raises(ahg.InvalidValue, match="null"):
            await call()
    with pytest.raises(ahg.InvalidValue, match="null"):
        stream.write_value_32_nowait(None, 1)  # type: ignore[arg-type]
    ptr = device.malloc(8)
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.write_value_32(ptr + 1, 1)  # misaligned: looked at after the stream
    device.free(ptr)


# -- a synchronous copy of another device's memory ---------------------------------------------


_store_gate: list[asyncio.Event] = []


@ahg.kernel
async def _store_seven_when_open(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    await _store_gate[0].wait()
    x[0] = 7


@pytest.mark.skipif(RACE_CHECK, reason="copies between the devices race with a kernel on purpose")
@pytest.mark.asyncio
async def test_a_synchronous_copy_of_another_devices_memory_waits_for_that_devices_work() -> None:
    """``hipMemcpy`` runs a copy whose device memory is all on another device on that
    device's null stream (``ihipMemcpyCommand``), ordered after its blocking streams as that
    device's own copy is. Ours ran it on the calling device's null stream: it read memory a
    kernel of the other device had not written yet, and wrote memory before that kernel did
    (a stale, silently wrong result). A copy between the two devices stays where it is."""
    _store_gate[:] = [asyncio.Event()]
    d0, d1 = ahg.configure_devices(2)
    remote, other_remote, local = d1.malloc(4), d1.malloc(4), d0.malloc(4)
    stream = d1.create_stream()
    host = np.zeros(1, np.int32)

    await stream.launch_kernel(_store_seven_when_open, 1, 1, (remote,))
    read = asyncio.ensure_future(d0.memcpy(host, remote, 4))
    await loop_turns()  # the kernel waits for its gate: so must the copy
    assert not read.done()
    _store_gate[0].set()
    await read
    assert host[0] == 7

    _store_gate[:] = [asyncio.Event()]
    await stream.launch_kernel(_store_seven_when_open, 1, 1, (remote,))
    write = asyncio.ensure_future(d0.memcpy(remote, np.array([5], np.int32), 4))
    peer = asyncio.ensure_future(d0.memcpy_peer(other_remote, d1, remote, d1, 4))
    await loop_turns()
    assert not write.done()
    assert not peer.done()
    _store_gate[0].set()
    await write
    await peer
    assert d1.view(remote, np.int32, 1)[0] == 5  # written after the kernel's 7
    assert d1.view(other_remote, np.int32, 1)[0] == 5

    _store_gate[:] = [asyncio.Event()]
    await stream.launch_kernel(_store_seven_when_open, 1, 1, (remote,))
    pitched = np.zeros(1, np.int32)
    read_2d = asyncio.ensure_future(d0.memcpy_2d(pitched, 4, remote, 4, 4, 1))
    read_3d = asyncio.ensure_future(
        d0.memcpy_3d(ahg.PitchedPtr(host, 4), ahg.PitchedPtr(remote, 4), (4, 1, 1))
    )
    await loop_turns()
    assert not read_2d.done()
    assert not read_3d.done()
    _store_gate[0].set()
    await read_2d
    await read_3d
    assert pitched[0] == 7
    assert host[0] == 7

    _store_gate[:] = [asyncio.Event()]
    await stream.launch_kernel(_store_seven_when_open, 1, 1, (remote,))
    async with asyncio.timeout(1):  # between the devices: on device 0, as in HIP
        await d0.memcpy(local, remote, 4)
    _store_gate[0].set()
    await stream.synchronize()
    destroy(stream, remote, other_remote, local)
