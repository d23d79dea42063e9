"""Freeing memory through another device (``hipFree`` of any device's pointer), and attacks on
the frees of device memory and of graph memory.

* ``Device.free`` of another device's pointer was refused (``InvalidValue``, "not a live
  allocation of device 0"); ``hipFree`` takes any device pointer and frees it on its own
  device. It is freed in its device's allocator now, with exactly that device's refusals,
  the race checker told, the capture rules kept, and the peers mapping that device dropping
  their views of it. A pointer naming no configured device is ``InvalidValue``.
* A ``free_async`` (or ``free``) of a graph allocation whose executable was never launched
  was accepted and failed the stream when reached: no launch had put memory there. It is
  refused when called (``InvalidValue``), changing nothing.
* A pointer made by hand at the address of an executable's kernel-argument chunk or of its
  conditional-handle cells (the runtime's own memory) was freed by ``free``; the
  executable's ``destroy`` then raised ``InvalidValue`` freeing it again. Both ``free`` and
  ``free_async`` refuse it now, as they refuse a symbol's storage.
* A free of a graph allocation whose queued launch had not committed it yet said only "not
  a live allocation"; it says that the launch has not run and that free does not wait.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import GatedHost, HeldKernel, loop_turns, run_together
from rings import CAPACITY, fill_ring, ring_of

KIB = 1024
M = ahg.GraphMemAttribute
SYMBOL = ahg.device_symbol("test_cross_device_free.symbol", 64)
RACES_ON_PURPOSE = pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="frees memory that work in flight uses, on purpose",
)


@ahg.kernel
def fill(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[:] = value


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def two_devices() -> tuple[ahg.Device, ahg.Device]:
    ahg.configure_devices(2)
    return ahg.get_device(0), ahg.get_device(1)


def refused_alike(
    d0: ahg.Device, d1: ahg.Device, ptr: Any, error: type[Exception] = ahg.InvalidValue
) -> str:
    """``d0.free(ptr)`` and ``d1.free(ptr)`` are refused with the same error and message,
    and change nothing on either device; returns the message."""
    before = (d0.statistics().memory, d1.statistics().memory)
    with pytest.raises(error) as through:
        d0.free(ptr)
    with pytest.raises(error) as own:
        d1.free(ptr)
    assert type(through.value) is type(own.value)
    assert str(through.value) == str(own.value)
    assert (d0.statistics().memory, d1.statistics().memory) == before
    return str(own.value)


# -- another device's pointer -------------------------------------------------------------------


def test_free_of_another_devices_pointer_frees_it_in_that_devices_allocator() -> None:
    d0, d1 = two_devices()
    free0, free1 = d0.memory_info(), d1.memory_info()
    ptr = d1.malloc(KIB)
    d0.free(ptr)
    assert d1.memory_info() == free1  # given back to device 1's allocator
    assert d0.memory_info() == free0
    assert d1.statistics().memory.allocations == 0
    message = refused_alike(d0, d1, ptr)  # a second free, through either device
    assert "not a live allocation of device 1" in message


def test_every_refusal_of_another_devices_free_is_that_devices_own() -> None:
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    assert "not a live allocation of device 1" in refused_alike(d0, d1, ptr + 8)
    assert "not a live allocation of device 1" in refused_alike(d0, d1, ptr + 1)  # odd
    assert "not a live allocation of device 1" in refused_alike(
        d0, d1, ahg.DevicePtr(1, 1 << 40)
    )  # device 0's range, named as device 1's
    assert "symbol's storage" in refused_alike(d0, d1, SYMBOL.address(d1))
    d0.free(ptr)  # every refusal left it the caller's


@pytest.mark.asyncio
async def test_free_through_another_device_of_memory_a_stream_will_free_is_refused() -> None:
    d0, d1 = two_devices()
    gate = GatedHost()
    ptr = d1.malloc(KIB)
    with d1.create_stream() as stream:
        await stream.launch_host_func(gate)
        freed = await stream.free_async(ptr)  # pending behind the gate
        assert "already being freed" in refused_alike(d0, d1, ptr)
        gate.open()
        await freed
        assert d1.statistics().memory.allocations == 0


@pytest.mark.asyncio
async def test_free_through_another_device_of_graph_memory_keeps_the_graph_rules() -> None:
    """Memory a graph frees itself, of an executable never launched, and a second free of a
    launch's memory: refused through device 0 as by device 1; a launch's memory is freed."""
    d0, d1 = two_devices()
    with ahg.Graph() as own, ahg.Graph() as graph, d1.create_stream() as stream:
        self_freed = own.add_mem_alloc_node(KIB, device=1).params.ptr
        own.add_mem_free_node(self_freed)
        ptr = graph.add_mem_alloc_node(KIB, device=1).params.ptr
        assert "not instantiated" in refused_alike(d0, d1, ptr)
        assert "graph that allocates it" in refused_alike(d0, d1, self_freed)
        with graph.instantiate(device=d1) as graph_exec:
            assert "never launched" in refused_alike(d0, d1, ptr)
            await (await graph_exec.launch(stream))
            assert d1.graph_mem_attribute(M.UsedMemCurrent) == KIB
            d0.free(ptr)  # the launch's memory, through device 0
            assert d1.graph_mem_attribute(M.UsedMemCurrent) == 0
            assert "was freed" in refused_alike(d0, d1, ptr)
            await (await graph_exec.launch(stream))  # memory to free again
            await (await stream.free_async(ptr))
    d1.graph_mem_trim()


# -- pointers of no device, odd pointers ---------------------------------------------------------


def test_free_of_a_pointer_of_a_device_that_no_longer_exists_is_invalid_value() -> None:
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    ahg.configure_devices(1)
    new0 = ahg.get_device(0)
    before = (new0.statistics().memory, d1.statistics().memory)
    for device in (new0, d0):  # the new device 0, and the one it replaced
        with pytest.raises(ahg.InvalidValue, match="names a device that does not exist"):
            device.free(ptr)
    assert (new0.statistics().memory, d1.statistics().memory) == before
    d1.free(ptr)  # the replaced device still gives back its own memory


def test_free_of_a_pointer_of_a_replaced_device_is_not_its_successors() -> None:
    _, d1 = two_devices()
    ptr = d1.malloc(KIB)
    new0, new1 = ahg.configure_devices(2)
    before = (new1.statistics().memory, d1.statistics().memory)
    with pytest.raises(ahg.InvalidValue, match="not a live allocation of device 1"):
        new0.free(ptr)
    assert (new1.statistics().memory, d1.statistics().memory) == before
    d1.free(ptr)


@pytest.mark.parametrize("ordinal", [-1, 2, 64, 1 << 70])
def test_free_of_a_pointer_naming_no_device_is_invalid_value(ordinal: int) -> None:
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    before = (d0.statistics().memory, d1.statistics().memory)
    with pytest.raises(ahg.InvalidValue, match="names a device that does not exist"):
        d0.free(ahg.DevicePtr(ordinal, ptr.address))
    assert (d0.statistics().memory, d1.statistics().memory) == before
    d0.free(ahg.DevicePtr(ordinal, 0))  # a null pointer: nothing, whatever its device
    d1.free(ptr)


@pytest.mark.parametrize(
    "device_field", [True, np.int64(1), 1.0, "1", None], ids=["bool", "np", "float", "str", "none"]
)
def test_a_hand_made_pointer_of_another_device_is_refused_and_frees_nothing(
    device_field: object,
) -> None:
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    before = (d0.statistics().memory, d1.statistics().memory)
    forged = ahg.DevicePtr(device_field, ptr.address)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="not a live allocation of device 0"):
        d0.free(forged)
    assert (d0.statistics().memory, d1.statistics().memory) == before
    d0.free(ptr)


@pytest.mark.parametrize("given", [1, True, 1 << 40, "ptr", 1.5], ids=str)
def test_free_of_what_is_not_a_pointer_is_type_error(given: object) -> None:
    d0, _ = two_devices()
    with pytest.raises(TypeError, match="expected a DevicePtr"):
        d0.free(given)  # type: ignore[arg-type]
    d0.free(None)  # hipFree(nullptr)
    d0.free(ahg.DevicePtr(1, 0))


# -- capture rules, the race checker, peers ------------------------------------------------------


@pytest.mark.asyncio
async def test_free_of_another_devices_pointer_during_a_global_capture_is_refused() -> None:
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    for capturing_device in (d0, d1):
        stream = capturing_device.create_stream()
        stream.begin_capture()  # GLOBAL: free() is refused, whichever device frees
        before = d1.statistics().memory
        with pytest.raises(ahg.StreamCaptureUnsupported):
            d0.free(ptr)
        assert d1.statistics().memory == before
        with pytest.raises(ahg.StreamCaptureInvalidated):
            stream.end_capture()
        stream.destroy()
    stream = d0.create_stream()
    stream.begin_capture(ahg.CaptureMode.RELAXED)  # allowed, as for a pointer of its own
    d0.free(ptr)
    stream.end_capture().destroy()
    stream.destroy()
    assert d1.statistics().memory.allocations == 0


@RACES_ON_PURPOSE
@pytest.mark.asyncio
async def test_free_through_another_device_is_told_to_the_race_checker() -> None:
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    held = HeldKernel()
    with d1.create_stream() as stream:
        with ahg.race_check(on_race="raise"):
            await held.launch(stream)
            await stream.launch_kernel(fill, 1, 1, (1, ptr))  # in flight: a host free races it
            with pytest.raises(ahg.RaceError):
                d0.free(ptr)
            assert d1.statistics().memory.allocations == 1  # raise mode: not freed
        held.release()
        await stream.synchronize()
        with ahg.race_check(on_race="collect") as check:
            await stream.launch_kernel(fill, 1, 1, (2, ptr))
            await stream.synchronize()
            d0.free(ptr)  # ordered after the kernel: no race
            assert check.reports == []
    assert d1.statistics().memory.allocations == 0


@pytest.mark.asyncio
async def test_a_peer_mapping_drops_its_views_of_memory_freed_through_a_third_device() -> None:
    """Device 0 maps device 1 and replays a graph using device 1's memory; device 2 frees
    that memory (through device 1's allocator): the replay must fault, not keep writing the
    freed buffer through the views it kept."""
    ahg.configure_devices(3)
    d0, d1, d2 = (ahg.get_device(i) for i in range(3))
    remote = d1.malloc(64)
    d0.enable_peer_access(d1)
    graph = ahg.Graph()
    for _ in range(3):
        graph.add_kernel_node(bump, 1, 1, (remote,))
    graph_exec = graph.instantiate(device=d0)
    stream = d0.create_stream()
    await (await graph_exec.launch(stream))
    old_bytes = d1.view(remote, np.int32, 1)  # keeps the freed buffer alive to look at
    assert old_bytes[0] == 3
    d2.free(remote)
    launch = await graph_exec.launch(stream)
    with pytest.raises(ahg.LaunchFailure) as caught:
        await launch
    assert isinstance(caught.value.__cause__, ahg.InvalidDevicePointer)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert old_bytes[0] == 3
    destroy(graph_exec, graph, stream)


# -- threads and loops -------------------------------------------------------------------------


def test_two_threads_freeing_one_pointer_through_two_devices_free_it_once() -> None:
    d0, d1 = two_devices()
    for _ in range(20):
        ptr = d1.malloc(KIB)
        errors = run_together(functools.partial(d0.free, ptr), functools.partial(d1.free, ptr))
        assert len(errors) == 1, errors
        assert isinstance(errors[0], ahg.InvalidValue), errors
        assert d1.statistics().memory.allocations == 0


@pytest.mark.asyncio
async def test_free_through_another_device_from_a_second_loop_while_the_first_is_busy() -> None:
    """A free is no stream work: it needs no loop, so one from a second loop in a thread is
    accepted while device 1 runs work on this loop (its memory is not that work's)."""
    d0, d1 = two_devices()
    busy, ptr = d1.malloc(KIB), d1.malloc(KIB)
    held = HeldKernel()
    with d1.create_stream() as stream:
        await held.launch(stream)
        await stream.launch_kernel(fill, 1, 1, (3, busy))
        errors: list[BaseException] = []

        async def free_there() -> None:
            d0.free(ptr)

        def other_loop() -> None:
            try:
                asyncio.run(free_there())
            except BaseException as error:  # reported below
                errors.append(error)

        thread = threading.Thread(target=other_loop)
        thread.start()
        thread.join()
        assert errors == []
        assert d1.statistics().memory.allocations == 1  # only the busy one left
        held.release()
        await stream.synchronize()
    assert d1.view(busy, np.int64, 1)[0] == 3
    d1.free(busy)


# -- the runtime's own memory -------------------------------------------------------------------


def runtime_allocations(device: ahg.Device, make: Any) -> tuple[Any, list[ahg.DevicePtr]]:
    """Call ``make()`` and return what it made with the pointers of the allocations it took,
    found as a user could: addresses are handed out in order, with a guard gap after each."""
    before, result, after = device.malloc(1), make(), device.malloc(1)
    found: list[ahg.DevicePtr] = []
    address = before.address + 2 * ALIGN
    while address < after.address:
        base, nbytes = device.memory.allocation_of(address) or (0, 0)
        assert base == address, "an allocation not where a hand-made pointer would look"
        found.append(ahg.DevicePtr(device.ordinal, base))
        address = base + -(-nbytes // ALIGN) * ALIGN + ALIGN
    device.free(before)
    device.free(after)
    return result, found


ALIGN = 256


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["arguments", "conditional"])
async def test_a_hand_made_pointer_to_an_executables_own_memory_is_never_freed(kind: str) -> None:
    """An executable's kernel-argument chunk and conditional-handle cells are the runtime's:
    a user free of them (a pointer made by hand at their address) freed them, and the
    executable's destroy then failed with InvalidValue freeing them again."""
    d0, d1 = two_devices()
    out = d0.malloc(64)
    graph = ahg.Graph()
    if kind == "arguments":
        graph.add_kernel_node(bump, 1, 1, (out,))
    else:
        handle = graph.conditional_handle(default=1)
        _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
        body.add_kernel_node(bump, 1, 1, (out,))
    graph_exec, owned = runtime_allocations(d0, graph.instantiate)
    assert owned
    stream = d0.create_stream()
    memory = (d0.statistics().memory, d1.statistics().memory)
    for ptr in owned:
        for freer in (d0, d1):
            with pytest.raises(ahg.InvalidValue, match="memory the runtime keeps"):
                freer.free(ptr)
        with pytest.raises(ahg.InvalidValue, match="memory the runtime keeps"):
            stream.free_async_nowait(ptr)
        with pytest.raises(ahg.InvalidValue, match="memory the runtime keeps"):
            await stream.free_async(ptr)
    assert (d0.statistics().memory, d1.statistics().memory) == memory
    for _ in range(2):
        await (await graph_exec.launch(stream))
    assert d0.view(out, np.int32, 1)[0] == 2
    graph_exec.destroy()  # gives its memory back, which no user free took
    destroy(graph, stream, out)
    assert d0.statistics().memory.allocations == 0


# -- a free while work using the memory is in flight -------------------------------------------


@RACES_ON_PURPOSE
@pytest.mark.asyncio
@pytest.mark.parametrize("through", [0, 1], ids=["through-device-0", "own-device"])
async def test_a_free_while_work_using_the_memory_is_queued_does_not_wait_and_fails_it(
    through: int,
) -> None:
    """``hipFree`` would wait for the work; ours does not (documented): the memory is given
    back at once, and the queued kernel and copy using it fail as a fault on a bad pointer,
    reported by the stream, rather than writing memory that is no longer there."""
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    free1 = d1.memory_info()
    held = HeldKernel()
    host = np.full(8, 9, np.int64)
    with d1.create_stream() as stream:
        await held.launch(stream)
        kernel = await stream.launch_kernel(fill, 1, 1, (5, ptr))
        copy = await stream.memcpy(host, ptr, 64)
        (d0, d1)[through].free(ptr)  # no wait: the work is still queued behind the held one
        assert d1.memory_info().free == free1.free + KIB
        assert d1.statistics().in_flight > 0
        held.release()
        with pytest.raises(ahg.LaunchFailure) as caught:
            await kernel
        assert isinstance(caught.value.__cause__, ahg.InvalidDevicePointer)
        with pytest.raises(ahg.HipError):
            await copy
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()  # the stream's first failure, reported once
        await stream.synchronize()
    assert host.tolist() == [9] * 8  # nothing was copied out of freed memory


# -- cancelled and destroyed while a free_async waits for room ----------------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["cancel", "destroy"])
async def test_a_parked_free_async_of_another_devices_graph_memory_claims_nothing(how: str) -> None:
    """A launch of device 1's graph memory was taken, and a ``free_async`` of it on a full
    ring of device 0 parks; cancelled, or its stream destroyed meanwhile, it holds no claim:
    a ``free`` through either device gives the launch's memory back afterwards."""
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=CAPACITY)
    ahg.configure_devices(2, properties)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    with ahg.Graph() as graph, d1.create_stream() as own:
        ptr = graph.add_mem_alloc_node(KIB, device=1).params.ptr
        with graph.instantiate(device=d1) as graph_exec:
            await (await graph_exec.launch(own))
            stream = d0.create_stream()
            held = await fill_ring(d0, stream)
            task = asyncio.ensure_future(stream.free_async(ptr))
            await loop_turns()  # checked, and parked for room
            assert ring_of(d0, stream).waiting_for_room == 1
            if how == "cancel":
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            else:
                stream.destroy()
                held.release()
                with pytest.raises(ahg.ContextIsDestroyed):
                    await asyncio.wait_for(task, 5)  # hang detector only
            assert d1.graph_mem_attribute(M.UsedMemCurrent) == KIB  # not freed, not claimed
            d0.free(ptr)
            assert d1.graph_mem_attribute(M.UsedMemCurrent) == 0
            held.release()
            await d0.synchronize()
            if how == "cancel":
                stream.destroy()
    d1.graph_mem_trim()


# -- never launched ----------------------------------------------------------------------------

NEVER_LAUNCHED = "executable was never launched"


@pytest.mark.asyncio
async def test_a_refused_launch_leaves_the_graph_allocation_never_launched(
    device: ahg.Device,
) -> None:
    """A launch refused from a second loop (the device busy on this one) took nothing: a free
    of the alloc node's address is still refused when called, not accepted to fail the
    stream."""
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            held = HeldKernel()
            await held.launch(stream)
            errors: list[BaseException] = []

            async def launch_there() -> None:
                await graph_exec.launch(stream)

            def other_loop() -> None:
                try:
                    asyncio.run(launch_there())
                except BaseException as error:  # checked below
                    errors.append(error)

            thread = threading.Thread(target=other_loop)
            thread.start()
            thread.join()
            assert [type(error) for error in errors] == [ahg.IllegalState]
            with pytest.raises(ahg.InvalidValue, match=NEVER_LAUNCHED):
                stream.free_async_nowait(ptr)
            held.release()
            await stream.synchronize()  # the stream holds no failure


@pytest.mark.asyncio
async def test_a_free_async_of_a_never_launched_allocation_on_a_full_ring_is_refused_at_once(
    small_ring: ahg.Device,
) -> None:
    device = small_ring
    with ahg.Graph() as graph, device.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB).params.ptr
        with graph.instantiate() as graph_exec:
            held = await fill_ring(device, stream)
            ring = ring_of(device, stream)
            with pytest.raises(ahg.InvalidValue, match=NEVER_LAUNCHED):
                stream.free_async_nowait(ptr)
            with pytest.raises(ahg.InvalidValue, match=NEVER_LAUNCHED):
                await asyncio.wait_for(stream.free_async(ptr), 5)  # hang detector only
            assert ring_of(device, stream) == ring  # nobody parked
            held.release()
            await (await graph_exec.launch(stream))
            await (await stream.free_async(ptr))
            assert device.graph_mem_attribute(M.UsedMemCurrent) == 0
    device.graph_mem_trim()


@pytest.mark.asyncio
async def test_a_free_before_the_queued_first_launch_commits_says_it_does_not_wait() -> None:
    """A launch of device 1's graph memory is queued (held by a gate on device 0's stream):
    a free does not wait for it, as ``hipFree`` would; it was refused as "not a live
    allocation", which did not say that the allocation is there once the launch runs."""
    d0, d1 = two_devices()
    gate = GatedHost()
    with ahg.Graph() as graph, d0.create_stream() as stream:
        ptr = graph.add_mem_alloc_node(KIB, device=1).params.ptr
        with graph.instantiate(device=d0) as graph_exec:
            await stream.launch_host_func(gate)
            launched = await graph_exec.launch(stream)
            message = refused_alike(d0, d1, ptr)
            assert "not a live allocation of device 1 yet" in message
            assert "does not wait for work in flight" in message
            gate.open()
            await launched
            d0.free(ptr)
            assert d1.graph_mem_attribute(M.UsedMemCurrent) == 0
    d1.graph_mem_trim()


def test_threads_allocating_on_one_device_and_freeing_through_the_other_leak_nothing() -> None:
    d0, d1 = two_devices()
    before = (d0.statistics().memory, d1.statistics().memory)

    def churn(owner: ahg.Device, freer: ahg.Device) -> None:
        for size in range(1, 200):
            freer.free(owner.malloc(size))

    errors = run_together(
        functools.partial(churn, d1, d0),
        functools.partial(churn, d0, d1),
        functools.partial(churn, d1, d1),
        functools.partial(churn, d0, d0),
    )
    assert errors == []
    after = (d0.statistics().memory, d1.statistics().memory)
    for old, new in zip(before, after, strict=True):
        assert (new.allocations, new.bytes_in_use) == (old.allocations, old.bytes_in_use)


@pytest.mark.asyncio
async def test_free_through_another_device_follows_the_capturing_tasks_thread_local_mode() -> None:
    """THREAD_LOCAL forbids ``free()`` only in the capturing task: another task frees."""
    d0, d1 = two_devices()
    first, second = d1.malloc(KIB), d1.malloc(KIB)
    stream = d0.create_stream()
    stream.begin_capture(ahg.CaptureMode.THREAD_LOCAL)

    async def elsewhere() -> None:
        d0.free(first)

    await asyncio.ensure_future(elsewhere())  # another task: not its capture
    assert d1.statistics().memory.allocations == 1
    with pytest.raises(ahg.StreamCaptureUnsupported):
        d0.free(second)  # this task's capture forbids it
    assert d1.statistics().memory.allocations == 1
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    stream.destroy()
    d0.free(second)


@pytest.mark.asyncio
async def test_devices_replaced_while_a_free_async_of_the_old_memory_is_pending() -> None:
    """The pending free keeps the old device 1's memory; a free of the pointer through any
    device resolves its ordinal in the table, so the new device 1 refuses it (its memory has
    no such allocation) and only the old device 1 still knows it, as being freed."""
    d0, d1 = two_devices()
    ptr = d1.malloc(KIB)
    held = HeldKernel()
    stream = d0.create_stream()
    await held.launch(stream)
    freed = await stream.free_async(ptr)
    new0, new1 = ahg.configure_devices(2)
    before = (new1.statistics().memory, d1.statistics().memory)
    for device in (new0, new1, d0):
        with pytest.raises(ahg.InvalidValue, match="not a live allocation of device 1"):
            device.free(ptr)
    with pytest.raises(ahg.InvalidValue, match="already being freed"):
        d1.free(ptr)
    assert (new1.statistics().memory, d1.statistics().memory) == before
    held.release()
    await freed  # the old device's stream frees the old device's memory
    assert d1.statistics().memory.allocations == 0
    await d0.synchronize()
    stream.destroy()
