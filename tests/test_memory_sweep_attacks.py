"""Attacks on device memory and stream-ordered memory that once found a bug.

* A pitched copy (``memcpy_3d``, its graph node and its setter) took a negative slice height
  when it copied one slice: with a z position the region's offset came out negative, so the
  copy wrote before its pointer, into another live allocation (or read another one), and on a
  host array it went through a strided view of an empty slice, outside the region asked for.
  A negative slice height is now ``InvalidValue`` wherever a pitched copy is checked.
* ``Device.free`` told the race checker of the free before the allocator's checks ran: a
  refused free (a pointer inside another device's allocation, a symbol's storage) was
  checked as a host write of the whole allocation, so an unsynchronised one raised
  ``RaceError`` instead of HIP's
  ``InvalidValue`` (or was reported as a race), and the checker forgot the allocation's
  history, missing the real races on it that followed.
* Stream memory operations (``write_value_32`` and the rest) took the alignment of a
  hand-made pointer's address before anything checked it was an int: an address of None or
  a string gave Python's own ``TypeError`` from ``%`` ("not all arguments converted during
  string formatting"), where every other memory call says ``InvalidDevicePointer``. So did
  a pitched copy (``+`` on the address) and ``free_async`` (the allocation lookup compared
  the address with the allocations' bases: "'<' not supported"), which now refuses it as
  ``Device.free`` does (``InvalidValue``).
* ``graph_mem_attribute`` and ``set_graph_mem_attribute`` converted their arguments under
  the device allocator's lock: an argument's ``__index__`` (user code) ran while every other
  thread's ``malloc``/``free`` of that device waited, so one that waited for such a thread
  deadlocked. They are converted before the lock now. So did ``device.view`` and
  ``free_async`` with a hand-made pointer whose device is an object: its ``__eq__`` ran under
  the lock. Only int fields are compared now (such a pointer is refused, as everywhere else).
* A symbol copy of 0 bytes at the symbol's end (an offset of its size, which the range check
  accepts, as HIP's does) failed with ``InvalidDevicePointer``, as did one of 0 bytes whose
  other end was a device pointer at its allocation's end: unlike ``memcpy``, the symbol copies
  looked at the pointers of a copy of nothing. ``hipMemcpyToSymbol`` returns success there.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing

SYMBOL = ahg.device_symbol("test_memory_sweep_attacks.symbol", dtype=np.int32, shape=(4,))


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.uint8]) -> None:
    x[:1] = 1


@pytest.mark.asyncio
async def test_a_pitched_copy_with_a_negative_slice_height_is_refused_not_written_elsewhere(
    device: ahg.Device,
) -> None:
    first = device.malloc(1024)
    second = device.malloc(1024)
    gap = second - first  # a z of one slice of -gap/16 rows steps from second back to first
    host = np.full(64, 7, np.uint8)
    out = np.zeros(64, np.uint8)
    with device.create_stream() as stream:
        submitted = stream.statistics().submitted
        into_first = ahg.PitchedPtr(second, 16, -(gap // 16))
        with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
            await device.memcpy_3d(
                into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
            )
        with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
            await stream.memcpy_3d(
                into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
            )
        with pytest.raises(ahg.InvalidValue, match="negative src slice height"):
            stream.memcpy_3d_nowait(
                ahg.PitchedPtr(out, 16),
                ahg.PitchedPtr(second, 16, -(gap // 16)),
                (16, 1, 1),
                src_pos=(0, 0, 1),
            )
        with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
            await stream.memcpy_3d(
                ahg.PitchedPtr(out, 16, -1),
                ahg.PitchedPtr(first, 16),
                (16, 1, 1),
                dst_pos=(0, 0, 1),
            )
        assert stream.statistics().submitted == submitted  # nothing was enqueued
        await stream.synchronize()

        with ahg.Graph() as graph:
            with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
                graph.add_memcpy_3d_node(
                    into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
                )
            assert graph.nodes() == []
            node = graph.add_memcpy_3d_node(
                ahg.PitchedPtr(second, 16), ahg.PitchedPtr(host, 16), (16, 1, 1)
            )
            with graph.instantiate() as graph_exec:
                with pytest.raises(ahg.InvalidValue, match="negative dst slice height"):
                    graph_exec.set_memcpy_3d_node_params(
                        node, into_first, ahg.PitchedPtr(host, 16), (16, 1, 1), dst_pos=(0, 0, 1)
                    )
                await (await graph_exec.launch(stream))  # the node's own copy, unchanged
        await stream.synchronize()

    assert not device.view(first, np.uint8).any()  # nothing reached the other allocation
    assert (device.view(second, np.uint8)[:16] == 7).all()
    assert not out.any()
    device.free(first)
    device.free(second)
    assert device.memory_info().free == device.memory_info().total


@pytest.mark.asyncio
async def test_a_refused_free_under_the_race_checker_is_invalid_value_and_no_free() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    remote = d1.malloc(256)
    symbol = SYMBOL.address(d0)
    held = testing.HeldKernel()
    with d1.create_stream() as s1, d0.create_stream() as s0:
        with ahg.race_check(on_race="raise"):
            await held.launch(s1)
            await s1.launch_kernel(touch, 1, 1, (remote,))  # in flight: a host free races it
            await s0.memcpy_to_symbol(SYMBOL, np.zeros(4, np.int32))
            with pytest.raises(ahg.InvalidValue, match="not a live allocation of device 1"):
                d0.free(remote + 16)  # inside another device's: refused, so no host write
            with pytest.raises(ahg.InvalidValue, match="symbol's storage"):
                d0.free(symbol)
        with ahg.race_check(on_race="collect") as check:
            await held.launch(s1)
            await s1.launch_kernel(touch, 1, 1, (remote,))
            with pytest.raises(ahg.InvalidValue):
                d0.free(remote + 16)
            assert check.reports == []
            d1.view(remote, np.uint8)  # a real race: the checker still knows the allocation
            assert [report.kind for report in check.reports] == ["write-after-write"]
        held.release()
        await s1.synchronize()
        await s0.synchronize()
    d1.free(remote)
    assert d1.memory_info().free == d1.memory_info().total


@pytest.mark.asyncio
@pytest.mark.parametrize("address", [None, "abc", True, 1.0])
async def test_a_stream_memory_operation_on_a_hand_made_address_is_invalid_device_pointer(
    device: ahg.Device, address: object
) -> None:
    ptr = ahg.DevicePtr(0, address)  # type: ignore[arg-type]
    with device.create_stream() as stream:
        submitted = stream.statistics().submitted
        for call in (
            lambda: stream.write_value_32_nowait(ptr, 1),
            lambda: stream.write_value_64_nowait(ptr, 1),
            lambda: stream.wait_value_32_nowait(ptr, 0),
            lambda: stream.wait_value_64_nowait(ptr, 0),
        ):
            with pytest.raises(ahg.InvalidDevicePointer, match="address that is not an int"):
                call()
        with pytest.raises(ahg.InvalidDevicePointer, match="address that is not an int"):
            await stream.write_value_32(ptr, 1)
        assert stream.statistics().submitted == submitted


@pytest.mark.asyncio
@pytest.mark.parametrize("address", [None, "abc"])
async def test_a_pitched_copy_or_free_async_of_a_hand_made_address_is_hips_error(
    device: ahg.Device, address: object
) -> None:
    ptr = ahg.DevicePtr(0, address)  # type: ignore[arg-type]
    host = np.zeros(16, np.uint8)
    with device.create_stream() as stream:
        submitted = stream.statistics().submitted
        with pytest.raises(ahg.InvalidDevicePointer, match="address that is not an int"):
            stream.memcpy_3d_nowait(ahg.PitchedPtr(ptr, 16), ahg.PitchedPtr(host, 16), (16, 1, 1))
        with pytest.raises(ahg.InvalidDevicePointer, match="address that is not an int"):
            await device.memcpy_2d(host, 16, ptr, 16, 16, 1)
        with (
            ahg.Graph() as graph,
            pytest.raises(ahg.InvalidDevicePointer, match="address that is not an int"),
        ):
            graph.add_memcpy_3d_node(ahg.PitchedPtr(ptr, 16), ahg.PitchedPtr(host, 16), (16, 1, 1))
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            device.free(ptr)
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            stream.free_async_nowait(ptr)
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            await stream.free_async(ptr)
        assert stream.statistics().submitted == submitted


class _IndexWaitingForAnotherThreadsMalloc:
    """An attribute number whose ``__index__`` waits (bounded: a hang detector) for another
    thread's ``malloc`` on ``device``, which it notes in ``finished``."""

    def __init__(self, device: ahg.Device, value: int) -> None:
        self.device, self.value = device, value
        self.finished: list[ahg.DevicePtr] = []

    def __index__(self) -> int:
        other = threading.Thread(target=lambda: self.finished.append(self.device.malloc(16)))
        other.start()
        other.join(10)
        return self.value


def test_graph_memory_attribute_arguments_are_converted_outside_the_allocators_lock(
    device: ahg.Device,
) -> None:
    used_high = ahg.GraphMemAttribute.UsedMemHigh
    calls = [
        lambda index: device.graph_mem_attribute(index),
        lambda index: device.set_graph_mem_attribute(index, 0),
        lambda index: device.set_graph_mem_attribute(used_high, index),
    ]
    for value, call in zip((int(used_high), int(used_high), 0), calls, strict=True):
        index = _IndexWaitingForAnotherThreadsMalloc(device, value)
        call(index)
        assert len(index.finished) == 1  # the other thread's malloc did not wait for the call
        device.free(index.finished[0])
    assert device.statistics().memory.allocations == 0


class _DeviceWaitingForAnotherThreadsMalloc:
    """A pointer's device field whose ``__eq__`` waits (bounded) for another thread's
    ``malloc`` on ``device`` and then claims to be equal."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.made: list[ahg.DevicePtr] = []
        self.threads: list[threading.Thread] = []
        self.blocked = 0  # how many of those mallocs were still waiting when it gave up

    def __eq__(self, other: object) -> bool:
        other_thread = threading.Thread(target=lambda: self.made.append(self.device.malloc(16)))
        self.threads.append(other_thread)
        other_thread.start()
        other_thread.join(10)
        self.blocked += other_thread.is_alive()
        return True

    __hash__ = object.__hash__


@pytest.mark.asyncio
async def test_a_hand_made_device_field_is_never_compared_under_the_allocators_lock(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(64)
    field = _DeviceWaitingForAnotherThreadsMalloc(device)
    forged = ahg.DevicePtr(field, ptr.address)  # type: ignore[arg-type]
    with device.create_stream() as stream:
        with pytest.raises(ahg.InvalidDevicePointer):
            device.view(forged, np.uint8, 4)
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            stream.free_async_nowait(forged)
        with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
            device.free(forged)
        assert stream.statistics().submitted == 0
    for other_thread in field.threads:
        other_thread.join()
    assert field.blocked == 0  # no other thread's malloc waited for the comparison
    for made in field.made:
        device.free(made)
    device.free(ptr)
    assert device.statistics().memory.allocations == 0


@pytest.mark.asyncio
async def test_a_symbol_copy_of_0_bytes_at_the_end_copies_nothing_and_succeeds(
    device: ahg.Device,
) -> None:
    size = SYMBOL.nbytes
    ptr = device.malloc(64)
    host = np.zeros(4, np.int32)
    await device.memcpy_to_symbol(SYMBOL, np.arange(4, dtype=np.int32))
    with device.create_stream() as stream:
        await (await stream.memcpy_to_symbol(SYMBOL, host, 0, size))
        await (await stream.memcpy_from_symbol(host, SYMBOL, 0, size))
        await (await stream.memcpy_to_symbol(SYMBOL, ptr + 64, 0))
        await (await stream.memcpy_from_symbol(ptr + 64, SYMBOL, 0, size))
        await device.memcpy_to_symbol(SYMBOL, host, 0, size)
        await device.memcpy_from_symbol(host, SYMBOL, 0, size)
        async with stream.capture(mode=ahg.CaptureMode.RELAXED) as capture:
            await stream.memcpy_to_symbol(SYMBOL, host, 0, size)
            await stream.memcpy_from_symbol(ptr + 64, SYMBOL, 0, size)
        assert capture.graph.nodes() == []
        capture.graph.destroy()
        with pytest.raises(ahg.InvalidValue, match="do not fit"):
            stream.memcpy_to_symbol_nowait(SYMBOL, host, 1, size)  # one byte is past it
        await stream.synchronize()
    assert SYMBOL.view(device).tolist() == [0, 1, 2, 3]
    assert not host.any()
    device.free(ptr)
