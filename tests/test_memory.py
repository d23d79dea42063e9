"""DeviceMemory: allocation, bounds checks, accounting, reservations."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from ahipgraph.device.memory import (
    ADDRESS_SPACE_BYTES,
    ALLOCATION_ALIGNMENT,
    MAX_DEVICES,
    DeviceMemory,
)
from cleanup import destroy

KIB = 1024


def small_device(memory_bytes: int = 64 * KIB) -> ahg.Device:
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=memory_bytes))
    return device


# -- malloc / free ------------------------------------------------------------------------------


def test_malloc_gives_aligned_disjoint_zeroed_allocations(device: ahg.Device) -> None:
    sizes = (1, 100, 256, 257)
    ptrs = [device.malloc(n) for n in sizes]
    assert all(p.device == 0 for p in ptrs)
    assert all(p.address % ALLOCATION_ALIGNMENT == 0 for p in ptrs)
    spans = sorted((p.address, p.address + n) for p, n in zip(ptrs, sizes, strict=True))
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    assert not device.view(ptrs[3], np.uint8, 257).any()
    destroy(*ptrs)


def test_malloc_zero_gives_null_and_free_null_is_a_no_op(device: ahg.Device) -> None:
    ptr = device.malloc(0)
    assert not ptr
    assert ptr == ahg.NULL
    device.free(ptr)
    device.free(ahg.NULL)
    assert device.memory.statistics().allocations == 0


def test_malloc_rejects_negative_and_non_int_sizes(device: ahg.Device) -> None:
    with pytest.raises(ahg.InvalidValue, match="negative"):
        device.malloc(-1)
    with pytest.raises(TypeError):
        device.malloc(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        device.malloc(True)
    assert device.memory.bytes_in_use == 0


def test_out_of_memory_past_the_device_size_changes_nothing() -> None:
    device = small_device(64 * KIB)
    first = device.malloc(40 * KIB)
    with pytest.raises(ahg.OutOfMemory, match="requested"):
        device.malloc(30 * KIB)
    stats = device.memory.statistics()
    assert (stats.allocations, stats.bytes_in_use) == (1, 40 * KIB)
    rest = device.malloc(24 * KIB)  # exactly what is left still fits
    assert device.memory_info() == (0, 64 * KIB)
    with pytest.raises(ahg.OutOfMemory):
        device.malloc(1)
    device.free(first)
    device.free(rest)
    assert device.memory_info() == (64 * KIB, 64 * KIB)


def test_memory_info_unpacks_as_free_and_total_and_names_them() -> None:
    device = small_device(64 * KIB)
    first = device.malloc(40 * KIB)
    free, total = device.memory_info()  # hipMemGetInfo's two out-parameters
    info = device.memory_info()
    assert (free, total) == (24 * KIB, 64 * KIB)
    assert (info.free, info.total) == (free, total)
    assert isinstance(info, ahg.MemoryInfo)
    assert repr(info) == f"MemoryInfo(free={24 * KIB}, total={64 * KIB})"
    device.free(first)
    assert device.memory_info().free == device.memory_info().total == 64 * KIB


def test_single_allocation_larger_than_the_device_is_out_of_memory() -> None:
    device = small_device(4 * KIB)
    with pytest.raises(ahg.OutOfMemory):
        device.malloc(4 * KIB + 1)


def test_freeing_twice_is_invalid_value(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    device.free(ptr)
    with pytest.raises(ahg.InvalidValue, match="not a live allocation"):
        device.free(ptr)


def test_freeing_an_interior_pointer_is_invalid_value(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    with pytest.raises(ahg.InvalidValue):
        device.free(ptr + 8)
    device.free(ptr)  # the allocation itself was untouched


def test_freed_addresses_are_never_handed_out_again(device: ahg.Device) -> None:
    old = device.malloc(64)
    device.free(old)
    new = device.malloc(64)
    assert new.address != old.address
    with pytest.raises(ahg.InvalidDevicePointer):
        device.memory.resolve(old, 1)  # a stale pointer cannot alias the new allocation
    device.free(new)


# -- accounting --------------------------------------------------------------------------------


def test_statistics_and_memory_info_return_to_baseline_after_frees(device: ahg.Device) -> None:
    total = device.properties.memory_bytes
    baseline = device.memory.statistics()
    assert (baseline.allocations, baseline.bytes_in_use) == (0, 0)
    ptrs = [device.malloc(n) for n in (10, 1000, 4096)]
    stats = device.memory.statistics()
    assert stats.allocations == 3
    assert stats.bytes_in_use == 10 + 1000 + 4096
    assert device.memory_info() == (total - 5106, total)
    for ptr in reversed(ptrs):
        device.free(ptr)
    after = device.memory.statistics()
    assert (after.allocations, after.reservations, after.bytes_in_use) == (0, 0, 0)
    assert after.peak_bytes_in_use == 5106
    assert device.memory_info() == (total, total)
    assert "in_use=0/" in repr(device.memory)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), max_size=12),
    order=st.randoms(use_true_random=False),
)
def test_any_malloc_free_sequence_accounts_exactly(sizes: list[int], order: Any) -> None:
    memory = DeviceMemory(0, 1 << 20)
    ptrs = [memory.malloc(n) for n in sizes]
    assert memory.bytes_in_use == sum(sizes)
    assert memory.statistics().allocations == sum(1 for n in sizes if n)
    live = list(zip(ptrs, sizes, strict=True))
    order.shuffle(live)
    expected = sum(sizes)
    for ptr, size in live:
        memory.free(ptr)
        expected -= size
        assert memory.bytes_in_use == expected
    assert memory.statistics().allocations == 0
    assert memory.memory_info() == (1 << 20, 1 << 20)


# -- bounds checks -----------------------------------------------------------------------------


def test_resolve_accepts_every_range_inside_the_allocation(device: ahg.Device) -> None:
    ptr = device.malloc(100)
    buffer, offset = device.memory.resolve(ptr, 100)
    assert (len(buffer), offset) == (100, 0)
    assert device.memory.resolve(ptr + 60, 40)[1] == 60
    assert device.memory.resolve(ptr + 99, 1)[1] == 99
    assert device.memory.resolve(ptr + 99, 0)[1] == 99
    destroy(ptr)


@pytest.mark.parametrize(("offset", "nbytes"), [(0, 101), (50, 51), (99, 2)])
def test_ranges_running_past_the_end_are_invalid_value(
    device: ahg.Device, offset: int, nbytes: int
) -> None:
    ptr = device.malloc(100)
    with pytest.raises(ahg.InvalidValue, match="past the end"):
        device.memory.resolve(ptr + offset, nbytes)
    destroy(ptr)


def test_addresses_outside_any_allocation_are_invalid_device_pointer(device: ahg.Device) -> None:
    ptr = device.malloc(100)
    for outside in (ptr + 100, ptr + ALLOCATION_ALIGNMENT, ptr - 1):
        with pytest.raises(ahg.InvalidDevicePointer):
            device.memory.resolve(outside, 0)
    destroy(ptr)


def test_null_pointer_and_negative_size_are_invalid_value(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    with pytest.raises(ahg.InvalidValue, match="null"):
        device.memory.resolve(ahg.NULL, 1)
    with pytest.raises(ahg.InvalidValue, match="negative"):
        device.memory.resolve(ptr, -1)
    destroy(ptr)


def test_freed_pointer_is_invalid_device_pointer(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    device.free(ptr)
    with pytest.raises(ahg.InvalidDevicePointer):
        device.memory.resolve(ptr, 1)
    with pytest.raises(ahg.InvalidDevicePointer):
        device.view(ptr, np.float32)


def test_view_is_a_bounds_checked_window_onto_device_bytes(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    words = device.view(ptr, np.uint32)
    assert words.shape == (4,)
    words[:] = [1, 2, 3, 4]
    assert device.view(ptr + 8, np.uint32, 2).tolist() == [3, 4]
    assert device.view(ptr, np.uint8, 4).tolist() == [1, 0, 0, 0]
    with pytest.raises(ahg.InvalidValue):
        device.view(ptr + 8, np.uint32, 3)
    destroy(ptr)


class YieldingList(list[Any]):
    """A fake base list that gives up the GIL on every read.

    ``time.sleep(0)`` waits for nothing; it lets a ``free`` on another thread run in the middle
    of a lookup, which opens the race window the allocator's lock must close.
    """

    def __getitem__(self, index: Any) -> Any:
        time.sleep(0)
        return super().__getitem__(index)


def test_lookup_racing_a_free_on_another_thread_raises_only_hip_errors(
    fast_switching: None,
) -> None:
    memory = DeviceMemory(0, 1 << 20)
    memory._bases = YieldingList()
    latest: list[ahg.DevicePtr] = [memory.malloc(64)]
    done = threading.Event()
    unexpected: list[BaseException] = []

    def churn() -> None:
        try:
            for _ in range(400):
                ptr = memory.malloc(64)
                latest.append(ptr)
                memory.free(ptr)
        finally:
            done.set()

    def lookup() -> None:
        while not done.is_set():
            ptr = latest[-1]
            try:
                memory.resolve(ptr, 8)
                memory.view(ptr.address, np.dtype(np.float32))
            except ahg.HipError:
                pass  # the pointer was freed under us: the right answer
            except BaseException as exc:
                unexpected.append(exc)

    threads = [threading.Thread(target=churn)] + [threading.Thread(target=lookup) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert unexpected == []


# -- reservations ------------------------------------------------------------------------------


def test_reserve_takes_addresses_but_no_memory(device: ahg.Device) -> None:
    ptr = device.memory.reserve(1000)
    assert ptr.address % ALLOCATION_ALIGNMENT == 0
    stats = device.memory.statistics()
    assert (stats.allocations, stats.reservations, stats.bytes_in_use) == (0, 1, 0)
    with pytest.raises(ahg.InvalidDevicePointer):
        device.memory.resolve(ptr, 1)  # nothing to access until committed
    with pytest.raises(ahg.InvalidValue):
        device.free(ptr)  # a reservation is not a malloc
    device.memory.unreserve(ptr)
    assert device.memory.statistics().reservations == 0


def test_commit_decommit_cycle_charges_and_returns_memory(device: ahg.Device) -> None:
    memory = device.memory
    ptr = memory.reserve(1000)
    memory.commit(ptr)
    assert memory.bytes_in_use == 1000
    assert memory.statistics().allocations == 1
    device.view(ptr, np.uint8)[:] = 7
    with pytest.raises(ahg.InvalidValue, match="already committed"):
        memory.commit(ptr)
    memory.decommit(ptr)
    assert memory.bytes_in_use == 1000  # the graph pool keeps the bytes...
    assert memory.trim_graph_pool() == 1000  # ...until a trim
    assert memory.bytes_in_use == 0
    with pytest.raises(ahg.InvalidDevicePointer):
        memory.resolve(ptr, 1)
    memory.decommit(ptr)  # idempotent
    assert memory.bytes_in_use == 0
    memory.commit(ptr)  # same addresses, fresh zeroed memory
    assert not device.view(ptr, np.uint8).any()
    memory.unreserve(ptr)  # gives back the memory too (to the graph pool)
    memory.trim_graph_pool()
    stats = memory.statistics()
    assert (stats.allocations, stats.reservations, stats.bytes_in_use) == (0, 0, 0)


def test_commit_past_the_device_size_is_out_of_memory_and_leaves_it_reserved() -> None:
    device = small_device(4 * KIB)
    big = device.memory.reserve(8 * KIB)  # address space is not limited by memory
    with pytest.raises(ahg.OutOfMemory):
        device.memory.commit(big)
    stats = device.memory.statistics()
    assert (stats.reservations, stats.bytes_in_use) == (1, 0)
    device.memory.unreserve(big)


# -- bounded address spaces --------------------------------------------------------------------


def test_devices_own_disjoint_address_ranges_below_2_64() -> None:
    devices = ahg.configure_devices(3)
    ranges = [(d.memory.address_base, d.memory.address_end) for d in devices]
    assert all(end - base == ADDRESS_SPACE_BYTES for base, end in ranges)
    assert all(a_end <= b_base for (_, a_end), (b_base, _) in itertools.pairwise(ranges))
    for device, (base, end) in zip(devices, ranges, strict=True):
        ptr = device.malloc(1000)
        assert base <= ptr.address < ptr.address + 1000 <= end
        device.free(ptr)
    last = DeviceMemory(MAX_DEVICES - 1, KIB)
    assert last.address_end == 2**64
    with pytest.raises(ValueError, match="address range"):
        DeviceMemory(MAX_DEVICES, KIB)


@pytest.mark.parametrize("nbytes", [2**64 - 1, 2**64, ADDRESS_SPACE_BYTES + 1, 2**100])
def test_a_reservation_past_the_address_range_is_out_of_memory_and_changes_nothing(
    nbytes: int, device: ahg.Device
) -> None:
    memory = device.memory
    kept = memory.reserve(KIB)
    before, info = memory.statistics(), memory.memory_info()
    with pytest.raises(ahg.OutOfMemory, match="address space"):
        memory.reserve(nbytes)
    assert memory.statistics() == before
    assert memory.memory_info() == info
    after = memory.reserve(KIB)  # the bump pointer did not move
    assert after.address == kept.address + KIB + ALLOCATION_ALIGNMENT
    memory.unreserve(kept)
    memory.unreserve(after)


def test_an_exhausted_address_range_refuses_every_allocation_and_changes_nothing() -> None:
    device = small_device(64 * KIB)
    memory = device.memory
    whole = memory.reserve(ADDRESS_SPACE_BYTES)  # exactly the whole range fits
    assert whole.address == memory.address_base
    before, info = memory.statistics(), memory.memory_info()
    assert before.address_space_used > ADDRESS_SPACE_BYTES  # the guard gap ran past the end
    with pytest.raises(ahg.OutOfMemory, match="address space"):
        memory.reserve(1)
    with pytest.raises(ahg.OutOfMemory, match="address space"):
        device.malloc(1)  # memory is free, addresses are not
    assert memory.statistics() == before
    assert memory.memory_info() == info == (64 * KIB, 64 * KIB)
    memory.unreserve(whole)  # the range is used up: freed addresses are reused from its start
    ptr = device.malloc(1)
    assert ptr.address == memory.address_base
    device.free(ptr)


def test_address_space_is_checked_before_any_memory_is_allocated() -> None:
    device = small_device(2**62)  # plenty of simulated memory, but only 2**40 addresses
    before = device.memory.statistics()
    with pytest.raises(ahg.OutOfMemory, match="address space"):
        device.malloc(2 * ADDRESS_SPACE_BYTES)  # would need 2 TiB of host memory if it got far
    assert device.memory.statistics() == before


@pytest.mark.asyncio
async def test_a_huge_alloc_node_is_out_of_memory_and_later_launches_still_work(
    device: ahg.Device,
) -> None:
    @ahg.kernel
    def fill(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
        x[t.ids] = t.ids

    graph = ahg.Graph()
    before, info = device.memory.statistics(), device.memory_info()
    graph_before = graph.statistics()
    with pytest.raises(ahg.OutOfMemory):
        graph.add_mem_alloc_node(2**64 - 1)
    assert device.memory.statistics() == before
    assert device.memory_info() == info
    assert graph.statistics() == graph_before
    node = graph.add_mem_alloc_node(64)  # a reasonable size still works
    ptr = node.params.ptr
    graph.add_kernel_node(fill, 1, 16, (ptr,), deps=[node])
    stream = device.create_stream()
    graph_exec = graph.instantiate()  # packs the reserved address into kernel arguments
    await (await graph_exec.launch(stream))
    assert device.view(ptr, np.int32, 16).tolist() == list(range(16))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


def test_reservation_misuse_is_rejected(device: ahg.Device) -> None:
    memory = device.memory
    with pytest.raises(ahg.InvalidValue, match="zero"):
        memory.reserve(0)
    with pytest.raises(ahg.InvalidValue):
        memory.reserve(-8)
    ptr = memory.reserve(64)
    memory.unreserve(ptr)
    for op in (memory.commit, memory.decommit, memory.unreserve):
        with pytest.raises(ahg.InvalidValue, match="not a reservation"):
            op(ptr)


# -- device pointers ---------------------------------------------------------------------------


def test_device_pointer_arithmetic_and_identity(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    assert (ptr + 16) - ptr == 16
    assert 16 + ptr == ptr + 16
    assert (ptr + 16) - 16 == ptr
    assert hash(ptr + 0) == hash(ptr)
    assert int(ptr) == ptr.address
    with pytest.raises(AttributeError, match="immutable"):
        ptr.address = 0  # type: ignore[misc]
    assert ahg.DevicePtr(3, 0) == ahg.NULL  # null is null on every device
    assert ahg.DevicePtr(0, ptr.address) != ahg.DevicePtr(1, ptr.address)
    with pytest.raises(ValueError, match="different devices"):
        _ = ahg.DevicePtr(1, ptr.address) - ptr
    assert repr(ahg.NULL) == "DevicePtr(NULL)"
    destroy(ptr)
