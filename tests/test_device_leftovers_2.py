"""Device and stream corners, second round: each test names the behaviour it pins down."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel
from cleanup import destroy

# -- asynchronous copies and fills of 0 bytes ---------------------------------------------------


def _empty_stream_calls(
    stream: ahg.Stream, ptr: ahg.DevicePtr, other: ahg.DevicePtr, host: np.ndarray[Any, Any]
) -> dict[str, Callable[[], Any]]:
    symbol = ahg.device_symbol("leftovers_2_empty_async_symbol", dtype=np.uint8, shape=(16,))
    device = stream.device
    return {
        "memcpy d2d": lambda: stream.memcpy(ptr, other, 0),
        "memcpy h2d": lambda: stream.memcpy(ptr, host, 0),
        "memcpy d2h": lambda: stream.memcpy(host, ptr, 0),
        "memcpy empty host array": lambda: stream.memcpy(ptr, host[:0]),
        "memset": lambda: stream.memset(ptr, 7, 0),
        "memset nbytes": lambda: stream.memset(ptr, 7, nbytes=0),
        "memset d32": lambda: stream.memset(ptr, 7, 0, element_size=4),
        "memcpy_2d": lambda: stream.memcpy_2d(ptr, 8, other, 8, 0, 4),
        "memcpy_2d no rows": lambda: stream.memcpy_2d(ptr, 8, other, 8, 8, 0),
        "memcpy_3d": lambda: stream.memcpy_3d(
            ahg.PitchedPtr(ptr, 8), ahg.PitchedPtr(other, 8), (8, 2, 0)
        ),
        "memcpy_to_symbol": lambda: stream.memcpy_to_symbol(symbol, host, 0),
        "memcpy_from_symbol": lambda: stream.memcpy_from_symbol(host, symbol, 0),
        "memcpy_peer": lambda: stream.memcpy_peer(ptr, device, other, device, 0),
        "memcpy_nowait": lambda: _ready(stream.memcpy_nowait(ptr, other, 0)),
        "memset_nowait": lambda: _ready(stream.memset_nowait(ptr, 7, 0)),
    }


async def _ready(completion: ahg.Completion) -> ahg.Completion:
    return completion


@pytest.mark.asyncio
async def test_an_empty_copy_on_the_null_stream_enqueues_nothing_and_waits_for_nothing(
    device: ahg.Device,
) -> None:
    """``hipMemcpyAsync``/``hipMemsetAsync`` and their 2D, 3D, symbol and peer forms return
    ``hipSuccess`` for a size of 0 without enqueuing a command. Ours enqueued an empty
    operation: on the null stream it waited for the legacy order (a kernel held on a blocking
    stream here), and its completion stayed pending until that kernel ended."""
    blocking = device.create_stream()
    null = device.null_stream
    ptr, other = device.malloc(64), device.malloc(64)
    host = np.arange(16, dtype=np.uint8)
    held = HeldKernel()
    await held.launch(blocking)
    await held.started.wait()
    submitted = null.submitted
    for name, call in _empty_stream_calls(null, ptr, other, host).items():
        done = await call()
        assert done.done(), name  # complete at once, not behind the held kernel
        assert done.exception() is None, name
        async with asyncio.timeout(1):
            await done
        assert null.submitted == submitted, name  # nothing enqueued
        assert not blocking.query(), name
    held.release()
    await blocking.synchronize()
    assert host.tolist() == list(range(16))
    destroy(blocking, ptr, other)


@pytest.mark.asyncio
async def test_an_empty_copy_takes_no_simulated_time_before_a_later_record(
    device: ahg.Device,
) -> None:
    """An event recorded after an empty copy is not delayed by it: no launch latency."""
    stream = device.create_stream()
    ptr, other = device.malloc(64), device.malloc(64)
    host = np.zeros(16, dtype=np.uint8)
    start, end = device.create_event(), device.create_event()
    await stream.record_event(start)
    for call in _empty_stream_calls(stream, ptr, other, host).values():
        await call()
    await stream.record_event(end)
    await end.synchronize()
    assert start.elapsed_time(end) == 0.0
    destroy(stream, ptr, other, start, end)


@pytest.mark.asyncio
async def test_an_empty_copy_still_runs_its_checks_first(device: ahg.Device) -> None:
    """Returning early skips the enqueue, not the checks, in the same order as for any size:
    a destroyed stream, a null pointer, a bad direction, a range past a symbol."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    host = np.zeros(16, dtype=np.uint8)
    submitted = stream.submitted
    with pytest.raises(ahg.InvalidValue, match="null"):
        await stream.memcpy(ahg.DevicePtr(device.ordinal, 0), host, 0)
    with pytest.raises(ahg.InvalidValue, match="null"):
        await stream.memset(ahg.DevicePtr(device.ordinal, 0), 7, 0)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await stream.memcpy(ptr, host, 0, ahg.CopyKind.DeviceToHost)
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy_to_symbol("leftovers_2_empty_async_symbol", host, 0, offset=17)
    with pytest.raises(ahg.InvalidPitchValue):
        await stream.memcpy_2d(ptr, 4, ptr, 8, 8, 0)
    assert stream.submitted == submitted
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.memcpy(ptr, ptr, 0)
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.memset(ptr, 0, 0)
    destroy(ptr)


@pytest.mark.asyncio
async def test_an_empty_copy_from_another_event_loop_is_still_refused(device: ahg.Device) -> None:
    """The early return skips the enqueue, not the device's loop check."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    held = HeldKernel()
    await held.launch(stream)
    await held.started.wait()
    outcomes: list[str] = []

    async def from_another_loop() -> None:
        for call in (
            lambda: stream.memcpy(ptr, ptr + 8, 0),
            lambda: stream.memset(ptr, 0, 0),
            lambda: stream.memcpy_2d(ptr, 8, ptr, 8, 0, 2),
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
async def test_an_empty_copy_on_the_null_stream_during_a_capture_is_still_implicit(
    device: ahg.Device,
) -> None:
    """HIP takes the capture path before the size check: the null stream, while a blocking
    stream captures, is refused for 0 bytes as for any size; on the capturing stream itself
    0 bytes add no node (HIP_SEMANTICS: zero-sized copies are skipped)."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    stream.begin_capture()
    await stream.memcpy(ptr, ptr + 8, 0)
    await stream.memset(ptr, 0, 0)
    await stream.memcpy_2d(ptr, 8, ptr + 8, 8, 0, 2)
    for size in (8, 0):
        with pytest.raises(ahg.StreamCaptureImplicit):
            await device.null_stream.memcpy(ptr, ptr + 8, size)
    graph = stream.end_capture()
    assert graph.nodes() == []
    destroy(graph, stream, ptr)


# -- pointers of a device configure_devices replaced ---------------------------------------------


@ahg.kernel
def _store(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


def _stale_and_fresh() -> tuple[ahg.Device, ahg.DevicePtr, ahg.Device, ahg.DevicePtr]:
    """A pointer of a replaced device 0, and its successor's allocation at the same address."""
    (old,) = ahg.configure_devices(1)
    stale = old.malloc(64)
    (new,) = ahg.configure_devices(1)
    fresh = new.malloc(64)
    assert fresh == stale  # the successor reuses the addresses: only the origin differs
    new.view(fresh, np.int64, 8)[:] = 5
    return old, stale, new, fresh


@pytest.mark.asyncio
async def test_a_replaced_devices_pointer_does_not_free_its_successors_allocation() -> None:
    """Freeing the old pointer on the new device freed the successor's allocation at the same
    address (a later use of that allocation then failed far from the mistake)."""
    old, stale, new, fresh = _stale_and_fresh()
    stream = new.create_stream()
    before = (new.memory_info(), new.statistics().memory)
    with pytest.raises(ahg.InvalidValue, match=r"not a live allocation of device 0.*replaced"):
        new.free(stale)
    with pytest.raises(ahg.InvalidValue, match="replaced"):
        await stream.free_async(stale)
    with pytest.raises(ahg.InvalidValue, match="replaced"):
        new.free(stale + 0)  # a pointer moved from it keeps its origin
    assert (new.memory_info(), new.statistics().memory) == before
    assert new.view(fresh, np.int64, 8).tolist() == [5] * 8
    old.free(stale)  # the replaced device still gives back its own memory
    assert old.statistics().memory.allocations == 0
    destroy(stream, fresh)


@pytest.mark.asyncio
async def test_a_replaced_devices_pointer_is_not_read_or_written_on_its_successor() -> None:
    """Copies, fills, kernels and views of the old pointer on the new device read and wrote
    the successor's allocation at the same address."""
    old, stale, new, fresh = _stale_and_fresh()
    stream = new.create_stream()
    host = np.zeros(8, dtype=np.int64)
    submitted = stream.submitted
    refused = {
        "memcpy to": lambda: stream.memcpy(stale, host, 64),
        "memcpy from": lambda: stream.memcpy(host, stale + 8, 8),
        "memset": lambda: stream.memset(stale, 1, 64),
        "sync memcpy": lambda: new.memcpy(fresh, stale, 64),
        "sync memset": lambda: new.memset(stale, 1, 64),
        "kernel": lambda: stream.launch_kernel(_store, 1, 1, (7, stale)),
        "moved kernel": lambda: stream.launch_kernel(_store, 1, 1, (7, stale + 8)),
    }
    for name, call in refused.items():
        with pytest.raises(ahg.InvalidDevicePointer, match="replaced"):
            await call()
        assert stream.submitted == submitted, name
    with pytest.raises(ahg.InvalidDevicePointer, match="replaced"), ahg.Graph() as graph:
        graph.add_kernel_node(_store, 1, 1, (7, stale))
    with pytest.raises(ahg.InvalidDevicePointer, match="replaced"):
        new.view(stale, np.int64, 1)
    await stream.synchronize()
    assert new.view(fresh, np.int64, 8).tolist() == [5] * 8
    assert host.tolist() == [0] * 8
    # A pointer made by hand has no known origin: it still names the allocation at its
    # address on the device of its ordinal, as before.
    by_hand = ahg.DevicePtr(0, stale.address)
    await (await stream.launch_kernel(_store, 1, 1, (9, by_hand)))
    assert new.view(fresh, np.int64, 1)[0] == 9
    old.free(stale)
    destroy(stream, fresh)


def test_another_devices_pointer_in_a_view_is_named_as_such() -> None:
    """``d0.view(p1)`` said only "not inside a live allocation of device 0"."""
    d0, d1 = ahg.configure_devices(2)
    p1 = d1.malloc(64)
    with pytest.raises(
        ahg.InvalidDevicePointer, match="live allocation of device 0: it is a pointer of device 1"
    ):
        d0.view(p1, np.int8)
    d1.free(p1)


@pytest.mark.asyncio
async def test_an_empty_copy_on_a_stream_whose_ring_is_full_does_not_wait_for_room() -> None:
    """It adds no packet, so it needs no room: it parked behind a held kernel until a packet
    retired, and its ``_nowait`` twin said ``NotReady``."""
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=2)
    (device,) = ahg.configure_devices(1, properties)
    stream = device.create_stream(non_blocking=True)
    ptr, other = device.malloc(64), device.malloc(64)
    host = np.zeros(16, dtype=np.uint8)
    held = HeldKernel()
    await held.launch(stream)
    await held.started.wait()
    while True:
        try:
            stream.launch_host_func_nowait(int)
        except ahg.NotReady:
            break
    submitted = stream.submitted
    for name, call in _empty_stream_calls(stream, ptr, other, host).items():
        async with asyncio.timeout(1):  # a wait for room would last until the release
            done = await call()
        assert done.done(), name
    assert stream.submitted == submitted
    with pytest.raises(ahg.NotReady):  # a real copy still finds the ring full
        stream.memcpy_nowait(ptr, other, 8)
    with pytest.raises(ahg.InvalidValue, match="null"):  # and a bad empty one is refused
        await stream.memcpy(ahg.DevicePtr(0, 0), other, 0)
    held.release()
    await stream.synchronize()
    destroy(stream, ptr, other)


# -- fills: a bad size is named as the call names it ---------------------------------------------


@pytest.mark.asyncio
async def test_a_fills_bad_size_is_named_as_the_call_names_it(device: ahg.Device) -> None:
    """``device.memset(ptr, value, nbytes)`` and ``stream.memset(ptr, value, count)`` said
    "width must be an int" (a graph memset node's parameter), and the device's negative size
    read as "-1x1"."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    for size in (True, 1.5, "4", None):
        with pytest.raises(TypeError, match=r"^nbytes must be an int"):
            await device.memset(ptr, 0, size)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"^count must be an int"):
            await stream.memset(ptr, 0, size if size is not None else 1.5)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match=r"negative memset size nbytes=-1$"):
        await device.memset(ptr, 0, -1)
    with pytest.raises(ahg.InvalidValue, match=r"negative memset size -1x1$"):
        await stream.memset(ptr, 0, -1)
    with ahg.Graph() as graph, pytest.raises(TypeError, match=r"^width must be an int"):
        graph.add_memset_node(ptr, 0, True)  # type: ignore[arg-type]
    assert stream.submitted == 0
    destroy(stream, ptr)


# -- a copy onto itself -------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_copy_onto_itself_with_the_default_kind_enqueues_nothing(
    device: ahg.Device,
) -> None:
    """HIP's ``ihipMemcpy`` (``hipMemcpy`` and ``hipMemcpyAsync``) returns ``hipSuccess``
    without enqueuing anything for a source equal to its destination with
    ``hipMemcpyDefault``, after the checks. Ours enqueued the copy: on the null stream it
    waited for the legacy order, behind a kernel held on a blocking stream here."""
    blocking = device.create_stream()
    null = device.null_stream
    ptr = device.malloc(64)
    device.view(ptr, np.uint8)[:] = 3
    host = np.arange(8, dtype=np.uint8)
    held = HeldKernel()
    await held.launch(blocking)
    await held.started.wait()
    submitted = null.submitted
    async with asyncio.timeout(1):  # a wait for the held kernel would never end
        await device.memcpy(ptr, ptr, 64)
        await device.memcpy(ptr + 8, ptr + 8, 8, ahg.CopyKind.Default)
        await device.memcpy(host, host)
        assert (await null.memcpy(ptr, ptr, 64)).done()
        assert (await null.memcpy(ptr, ptr, 64, 4)).done()
    assert null.submitted == submitted
    with pytest.raises(ahg.InvalidValue):  # the checks still run: past the allocation
        await null.memcpy(ptr, ptr, 65)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await null.memcpy(ptr, ptr, 8, ahg.CopyKind.HostToDevice)
    # Another kind, or another address, is a copy as any other: enqueued, in the legacy order.
    done = await null.memcpy(ptr, ptr, 8, ahg.CopyKind.DeviceToDevice)
    assert null.submitted == submitted + 1
    assert not done.done()
    held.release()
    await done
    assert device.view(ptr, np.uint8).tolist() == [3] * 64
    assert host.tolist() == list(range(8))
    await blocking.synchronize()
    destroy(blocking, ptr)


class _BeginsCapture:
    """A size whose ``__index__`` begins a capture on ``stream``: user code run by the call's
    argument checks."""

    def __init__(self, stream: ahg.Stream, size: int) -> None:
        self.stream, self.size = stream, size

    def __index__(self) -> int:
        if self.stream.is_capturing() == ahg.CaptureStatus.NONE:
            self.stream.begin_capture()
        return self.size


@pytest.mark.asyncio
@pytest.mark.parametrize("size", [8, 0])
async def test_a_synchronous_copy_whose_size_began_a_capture_is_refused_for_0_bytes_too(
    device: ahg.Device, size: int
) -> None:
    """A copy of 8 bytes whose size's ``__index__`` began a capture on a blocking stream was
    refused (``StreamCaptureImplicit``: the null stream is in use by the capture), and one of
    0 bytes returned as if nothing had happened."""
    stream = device.create_stream()
    ptr = device.malloc(64)
    calls = (
        lambda: device.memcpy(ptr, ptr + 8, _BeginsCapture(stream, size)),  # type: ignore[arg-type]
        lambda: device.memset(ptr, 0, _BeginsCapture(stream, size)),  # type: ignore[arg-type]
    )
    for call in calls:
        with pytest.raises(ahg.StreamCaptureImplicit):
            await call()
        stream.end_capture().destroy()  # the capture goes on, as for 8 bytes
    assert device.null_stream.submitted == 0
    destroy(stream, ptr)
