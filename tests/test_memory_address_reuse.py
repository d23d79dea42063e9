"""A device's address range, used up: freed addresses are reused, next fit, with guard gaps.

A device owns 2**40 bytes of addresses, handed out by a bump pointer that leaves a guard gap
after each allocation and does not go back while the range lasts. A long run that keeps
allocating and freeing (each instantiate takes about 128 KiB of addresses for its arguments)
gets through the range, and must not then run out while memory is free. Reservations (address
space without memory) stand in here for the long history: one reservation of almost the whole
range leaves a small tail for the test's own allocations.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import random

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device.memory import ADDRESS_SPACE_BYTES, ALLOCATION_ALIGNMENT, DeviceMemory
from ahipgraph.testing import run_together
from cleanup import destroy
from reentrant import AllocatesWhenCollected

ALIGN = ALLOCATION_ALIGNMENT
MIB = 1 << 20


def span(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def live_ranges(ptrs: dict[int, int]) -> list[tuple[int, int]]:
    """The address ranges of ``ptrs`` (address -> bytes), sorted."""
    return sorted((address, address + span(nbytes)) for address, nbytes in ptrs.items())


def assert_disjoint_with_guards(memory: DeviceMemory, ranges: list[tuple[int, int]]) -> None:
    for start, end in ranges:
        assert memory.address_base <= start
        assert end <= memory.address_end
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start - end >= ALIGN, "no guard gap between two live allocations"


def fits_somewhere(memory: DeviceMemory, ranges: list[tuple[int, int]], size: int) -> bool:
    """Whether a free run of the range, less the guard gaps, holds ``size`` bytes."""
    low = memory.address_base
    for start, end in ranges:
        if start - ALIGN - low >= span(size):
            return True
        low = end + ALIGN
    return memory.address_end - low >= span(size)


def test_freed_addresses_are_not_reused_while_the_range_lasts(device: ahg.Device) -> None:
    first = device.malloc(64)
    device.free(first)
    second = device.malloc(64)
    assert second.address >= first.address + span(64) + ALIGN  # past the first and its guard
    device.free(second)


def test_a_used_up_range_reuses_the_freed_run_after_the_pointer_then_from_the_start(
    device: ahg.Device,
) -> None:
    memory = device.memory
    quarter = ADDRESS_SPACE_BYTES // 4
    blocks = [memory.reserve(quarter - ALIGN) for _ in range(4)]  # the whole range, with gaps
    with pytest.raises(ahg.OutOfMemory, match="address space"):
        device.malloc(1)
    memory.unreserve(blocks[1])
    ptr = device.malloc(100)
    assert ptr.address == blocks[1].address  # the only freed run, from its start
    after = device.malloc(100)
    assert after.address == ptr.address + span(100) + ALIGN  # next fit: on from there
    memory.unreserve(blocks[3])
    memory.unreserve(blocks[0])
    third = memory.reserve(quarter - 2 * ALIGN)  # the pointer's run cannot hold it: the next can
    assert third.address == blocks[3].address
    fourth = memory.reserve(quarter // 2)  # then from the start of the range
    assert fourth.address == memory.address_base
    for each in (ptr, after):
        device.free(each)
    memory.unreserve(third)
    memory.unreserve(fourth)
    memory.unreserve(blocks[2])


def test_a_used_up_range_without_a_run_that_holds_the_size_refuses_and_changes_nothing(
    device: ahg.Device,
) -> None:
    memory = device.memory
    half = ADDRESS_SPACE_BYTES // 2
    low, high = memory.reserve(half - ALIGN), memory.reserve(half - 2 * ALIGN)
    middle = memory.reserve(ALIGN)  # what is left after the two, less the guards
    memory.unreserve(middle)
    before, info = memory.statistics(), memory.memory_info()
    with pytest.raises(ahg.OutOfMemory, match="no freed run of addresses"):
        device.malloc(2 * ALIGN)  # the freed run holds ALIGN bytes: not two
    with pytest.raises(ahg.OutOfMemory, match="address space"):
        memory.reserve(2 * ALIGN)
    assert memory.statistics() == before
    assert memory.memory_info() == info
    ptr = device.malloc(ALIGN)  # exactly what the run holds
    assert ptr.address == middle.address
    device.free(ptr)
    memory.unreserve(low)
    memory.unreserve(high)


@pytest.mark.parametrize("seed", range(6))
def test_random_allocations_in_a_used_up_range_stay_disjoint_with_guards(
    device: ahg.Device, seed: int
) -> None:
    """Against a model: every allocation lands in a free run with its guard gaps, reads and
    writes its own bytes, and is refused only when no free run holds it."""
    rng = random.Random(seed)
    memory = device.memory
    tail = 64 * ALIGN  # the part of the range the test allocates in
    history = memory.reserve(ADDRESS_SPACE_BYTES - tail - ALIGN)
    live: dict[int, int] = {history.address: ADDRESS_SPACE_BYTES - tail - ALIGN}
    ptrs: dict[int, ahg.DevicePtr] = {}
    for step in range(400):
        if ptrs and rng.random() < 0.45:
            address = rng.choice(sorted(ptrs))
            device.free(ptrs.pop(address))
            del live[address]
            continue
        size = rng.choice([1, 100, ALIGN, 2 * ALIGN + 1, 5 * ALIGN])
        ranges = live_ranges(live)
        if not fits_somewhere(memory, ranges, size):
            before = memory.statistics()
            with pytest.raises(ahg.OutOfMemory):
                device.malloc(size)
            assert memory.statistics() == before
            continue
        ptr = device.malloc(size)
        live[ptr.address] = size
        ptrs[ptr.address] = ptr
        assert_disjoint_with_guards(memory, live_ranges(live))
        view = device.view(ptr, np.uint8, size)
        assert not view.any()  # fresh memory, even at reused addresses
        view[:] = step % 251 + 1
    for address, ptr in ptrs.items():
        assert (device.view(ptr, np.uint8, live[address]) == device.view(ptr, np.uint8, 1)[0]).all()
        device.free(ptr)
    memory.unreserve(history)


@ahg.kernel
def add_one(t: ahg.Threads, x: ahg.Ptr[ahg.int64], n: ahg.int32) -> None:
    x[0] = x[0] + n


@pytest.mark.asyncio
async def test_instantiates_and_frees_go_on_once_the_range_is_used_up(device: ahg.Device) -> None:
    """Each instantiate takes addresses for its argument arena: a loop of them past the end of
    the range reuses the freed ones, and every launch still reads its own arguments."""
    memory = device.memory
    history = memory.reserve(ADDRESS_SPACE_BYTES - 2 * MIB)
    x = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    node = graph.add_kernel_node(add_one, 1, 1, (x, 1))
    total = 0  # each turn takes about 640 KiB of addresses: the 2 MiB left last three turns
    for n in range(1, 41):
        graph_exec = graph.instantiate()
        graph_exec.set_kernel_node_params(node, add_one, 1, 1, (x, n))
        await (await graph_exec.launch(stream))
        graph_exec.destroy()
        ptr = await stream.malloc_async(MIB // 2)
        await stream.free_async(ptr)
        total += n
    await stream.synchronize()
    assert int(device.view(x, np.int64, 1)[0]) == total
    destroy(graph, stream)
    device.free(x)
    memory.unreserve(history)


def test_threads_allocating_in_a_used_up_range_get_disjoint_allocations(
    device: ahg.Device,
) -> None:
    memory = device.memory
    history = memory.reserve(ADDRESS_SPACE_BYTES - 256 * ALIGN)
    kept: list[list[tuple[ahg.DevicePtr, int]]] = [[] for _ in range(4)]

    def churn(index: int) -> None:
        rng = random.Random(index)
        mine = kept[index]
        for _ in range(300):
            if mine and rng.random() < 0.5:
                device.free(mine.pop(rng.randrange(len(mine)))[0])
            else:
                size = rng.choice([1, ALIGN, 3 * ALIGN])
                # Every run may be taken for the moment: another thread frees one.
                with contextlib.suppress(ahg.OutOfMemory):
                    mine.append((device.malloc(size), size))

    errors = run_together(*(lambda i=i: churn(i) for i in range(4)))
    assert errors == []
    ranges = sorted((ptr.address, ptr.address + span(size)) for mine in kept for ptr, size in mine)
    assert_disjoint_with_guards(memory, ranges)
    for mine in kept:
        for ptr, _ in mine:
            device.free(ptr)
    memory.unreserve(history)


def test_allocations_nested_by_the_collector_in_a_used_up_range_stay_disjoint(
    device: ahg.Device,
) -> None:
    memory = device.memory
    history = memory.reserve(ADDRESS_SPACE_BYTES - 256 * 1024)
    rng = random.Random(11)
    made: list[ahg.DevicePtr] = []  # by the __del__s
    mine: list[ahg.DevicePtr] = []
    taken = 0
    old = gc.get_threshold()
    try:
        for threshold in range(1, 6):  # a collection lands inside malloc at some point
            gc.set_threshold(threshold, 1, 1)
            for _ in range(300):
                for _ in range(rng.randrange(3)):
                    AllocatesWhenCollected(
                        device, made, rng, free_share=0.5, tolerate_out_of_memory=True
                    )
                with contextlib.suppress(ahg.OutOfMemory):
                    mine.append(device.malloc(rng.choice([1, 256, 513])))
                    taken += 1
                if mine and rng.random() < 0.5:
                    device.free(mine.pop(rng.randrange(len(mine))))
    finally:
        gc.set_threshold(*old)
    gc.collect()
    assert taken * 2 * ALIGN > 256 * 1024  # more than the tail holds: freed runs were reused
    live = mine + made
    for ptr in live:
        device.view(ptr, np.uint8, 1, readonly=True)  # findable
    ranges = sorted((ptr.address, ptr.address + ALIGN) for ptr in live)
    assert len({start for start, _ in ranges}) == len(ranges)
    assert_disjoint_with_guards(memory, ranges)  # at least the first ALIGN bytes of each
    assert memory.statistics().allocations == len(live)
    for ptr in live:
        device.free(ptr)
    memory.unreserve(history)
