"""New work on a device ``configure_devices`` replaced is refused (``InvalidDevice``).

The successor has the same ordinal and address range, and copies and fills resolve their
pointers by ordinal. A fill through a stream kept from before the replacement, or a launch of
an executable instantiated on the old device, therefore wrote the successor's allocation that
happened to sit at the old pointer's address. The old device now takes no new work (stream
enqueues and graph launches alike); work already in flight still completes, and its streams can
still be synchronized and destroyed.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from cleanup import destroy


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_a_kept_stream_of_the_old_device_takes_no_new_work() -> None:
    old = ahg.get_device(0)
    old_ptr = old.malloc(16)
    old_stream = old.create_stream()
    ahg.configure_devices(1)
    new = ahg.get_device(0)
    new_ptr = new.malloc(16)
    assert new_ptr == old_ptr  # the same ordinal and address: the successor's own memory
    stream = new.create_stream()
    await stream.memset(new_ptr, 0, 16)
    await stream.synchronize()
    submitted = old_stream.statistics()
    for enqueue in (
        lambda: old_stream.memset(old_ptr, 7, 16),
        lambda: old_stream.memcpy(old_ptr, np.full(16, 7, np.uint8), 16),
        lambda: old_stream.launch_kernel(tick, 1, 1, ()),
        lambda: old_stream.launch_host_func(lambda: None),
    ):
        with pytest.raises(ahg.InvalidDevice, match="replaced"):
            await enqueue()
    assert old_stream.statistics() == submitted
    assert new.view(new_ptr, np.uint8, 16).tolist() == [0] * 16  # untouched
    await old_stream.synchronize()  # nothing of its own in flight: returns at once
    destroy(old_stream, stream, new_ptr)
    old.free(old_ptr)


@pytest.mark.asyncio
@pytest.mark.parametrize("on", ["an old stream", "a new stream"])
async def test_an_executable_of_the_old_device_is_not_launched(on: str) -> None:
    old = ahg.get_device(0)
    old_ptr = old.malloc(16)
    old_stream = old.create_stream()
    graph = ahg.Graph()
    graph.add_memset_node(old_ptr, 7, 16)
    graph_exec = graph.instantiate()
    ahg.configure_devices(1)
    new = ahg.get_device(0)
    new_ptr = new.malloc(16)
    assert new_ptr == old_ptr
    stream = new.create_stream()
    await stream.memset(new_ptr, 0, 16)
    await stream.synchronize()
    before = graph_exec.statistics()
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await graph_exec.launch(old_stream if on == "an old stream" else stream)
    assert graph_exec.statistics() == before  # no launch counted, its signal set given back
    assert new.view(new_ptr, np.uint8, 16).tolist() == [0] * 16
    destroy(graph_exec, graph, old_stream, stream, new_ptr)
    old.free(old_ptr)


@pytest.mark.asyncio
async def test_a_symbol_copy_on_a_kept_stream_loads_nothing_on_the_old_device() -> None:
    # The copy resolved the symbol on the stream's device before the submission was refused,
    # giving the replaced device storage that nothing could use or free any more.
    symbol = ahg.device_symbol("test_device_replaced_new_work.table", dtype=np.int32, shape=(4,))
    old = ahg.get_device(0)
    old_stream = old.create_stream()
    ahg.configure_devices(1)
    host = np.zeros(4, np.int32)
    with pytest.raises(ahg.InvalidDevice):
        await old_stream.memcpy_to_symbol(symbol, host)
    with pytest.raises(ahg.InvalidDevice):
        await old_stream.memcpy_from_symbol(host, symbol)
    assert old.statistics().memory.static_allocations == 0
    assert old_stream.statistics().submitted == 0
    destroy(old_stream)


@pytest.mark.asyncio
async def test_an_enqueue_parked_for_ring_room_when_the_device_is_replaced_is_refused() -> None:
    (old,) = ahg.configure_devices(
        1, ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=2)
    )
    stream = old.create_stream()
    held = HeldKernel()
    await held.launch(stream)
    await stream.launch_kernel(tick, 1, 1, ())  # the ring is full
    parked = asyncio.ensure_future(stream.launch_kernel(tick, 1, 1, ()))
    await loop_turns()  # the enqueue parks for room
    assert old.statistics().queues[0].waiting_for_room == 1
    ahg.configure_devices(1)
    held.release()  # room comes: the parked enqueue wakes on a replaced device
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await parked
    await stream.synchronize()  # the work already in flight completes
    queue = old.statistics().queues[0]
    assert (queue.submitted, queue.completed, queue.pending, queue.waiting_for_room) == (
        2,
        2,
        0,
        0,
    )
    destroy(stream)
