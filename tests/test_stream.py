"""Streams: in-order work, copies and fills, host functions, legacy null-stream ordering."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime.stream import STREAMS
from cleanup import destroy
from fakes import HeldKernel, loop_turns


@ahg.kernel
def append_tag(t: ahg.Threads, tag: ahg.int32, out: ahg.Ptr[ahg.int32]) -> None:
    # Appends ``tag`` after the last non-zero entry: a device-side log of kernel order.
    used = int(np.count_nonzero(out))
    out[used] = tag


_MADE: list[ahg.Stream] = []  # what streams_off_queue_zero made for this test


@pytest.fixture(autouse=True)
def _destroy_made() -> Iterator[None]:
    yield
    while _MADE:
        made = _MADE.pop()
        if made.alive:  # a test may destroy a stream itself
            made.destroy()


def streams_off_queue_zero(device: ahg.Device, n: int, **flags: Any) -> list[ahg.Stream]:
    """``n`` streams none of which shares hardware queue 0 with the null stream."""
    filler = device.create_stream()  # round-robin: the first stream takes queue 0
    streams = [device.create_stream(**flags) for _ in range(n)]
    _MADE.extend(streams)
    filler.destroy()
    assert all(s.queue is not device.null_stream.queue for s in streams)
    return streams


# -- in-order execution ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_work_on_one_stream_runs_in_submission_order(device: ahg.Device) -> None:
    log: list[str] = []
    out = device.malloc(64)
    stream = device.create_stream()
    await stream.launch_host_func(log.append, "host 1")
    await stream.launch_kernel(append_tag, 1, 1, (11, out))
    await stream.launch_host_func(log.append, "host 2")
    await stream.launch_kernel(append_tag, 1, 1, (22, out))
    await stream.memset(out + 8, 33, 1)
    await stream.launch_kernel(append_tag, 1, 1, (44, out))
    await stream.launch_host_func(log.append, "host 3")
    await stream.synchronize()
    assert log == ["host 1", "host 2", "host 3"]
    assert device.view(out, np.int32, 5).tolist() == [11, 22, 33, 44, 0]
    destroy(out, stream)


@pytest.mark.asyncio
async def test_a_held_operation_holds_everything_behind_it(device: ahg.Device) -> None:
    log: list[str] = []
    held = HeldKernel("held", log)
    stream = device.create_stream()
    first = await stream.launch_host_func(log.append, "before")
    blocker = await held.launch(stream)
    after = await stream.launch_host_func(log.append, "after")
    await held.started.wait()
    await loop_turns()  # "after" would run now if the queue were not held
    assert log == ["before", "held start"]
    assert first.done()
    assert not blocker.done()
    assert not after.done()
    assert not stream.query()
    held.release()
    await after
    assert log == ["before", "held start", "held end", "after"]
    assert blocker.done()
    assert stream.query()
    destroy(stream)


@pytest.mark.asyncio
async def test_launch_returns_once_enqueued_and_completion_resolves_later(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    stream = device.create_stream()
    completion = await stream.launch_host_func(log.append, "ran")
    # Enqueued, not run: device work starts when the submitting task yields.
    assert log == []
    assert not completion.done()
    assert completion.end_ns is None
    assert completion.exception() is None
    assert "pending" in repr(completion)
    await completion
    assert log == ["ran"]
    assert completion.done()
    assert completion.end_ns == device.properties.cost.host_callback_ns
    assert "done" in repr(completion)
    destroy(stream)


@pytest.mark.asyncio
async def test_separate_streams_do_not_wait_for_each_other(device: ahg.Device) -> None:
    held = HeldKernel()
    busy, free = streams_off_queue_zero(device, 2)
    assert busy.queue is not free.queue
    await held.launch(busy)
    await held.started.wait()
    log: list[str] = []
    await (await free.launch_host_func(log.append, "free ran"))
    assert log == ["free ran"]
    assert not busy.query()
    held.release()
    await busy.synchronize()


@pytest.mark.asyncio
async def test_streams_sharing_a_hardware_queue_run_in_submission_order() -> None:
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=1))
    held = HeldKernel()
    a, b = device.create_stream(), device.create_stream()
    assert a.queue is b.queue
    await held.launch(a)
    log: list[str] = []
    b_done = await b.launch_host_func(log.append, "b")
    await held.started.wait()
    await loop_turns()  # b's packet sits behind a's on the one queue
    assert log == []
    held.release()
    await b_done
    assert log == ["b"]
    destroy(a, b)


def test_streams_take_hardware_queues_round_robin() -> None:
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=3))
    streams = [device.create_stream() for _ in range(7)]
    assert [s.queue.index for s in streams] == [0, 1, 2, 0, 1, 2, 0]
    assert device.null_stream.queue.index == 0
    destroy(*streams)


# -- memcpy ------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_memcpy_in_every_direction(device: ahg.Device) -> None:
    stream = device.create_stream()
    src = np.arange(16, dtype=np.int32)
    a, b = device.malloc(src.nbytes), device.malloc(src.nbytes)
    await stream.memcpy(a, src)  # host to device, size from the array
    await stream.memcpy(b + 8, a, 32)  # device to device, with an offset
    out = np.zeros(16, dtype=np.int32)
    await stream.memcpy(out, b, 40)  # device to host, part of it
    host_copy = np.zeros(16, dtype=np.int32)
    await stream.memcpy(host_copy, src)  # host to host
    await stream.synchronize()
    assert out.tolist() == [0, 0, *range(8)] + [0] * 6
    assert host_copy.tolist() == src.tolist()
    destroy(stream, a, b)


@pytest.mark.asyncio
async def test_memcpy_size_defaults_to_the_smaller_host_array(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = device.malloc(64)
    await stream.memcpy(ptr, np.full(4, 7, dtype=np.uint8))
    small = np.zeros(2, dtype=np.uint8)
    await stream.memcpy(small, np.arange(5, dtype=np.uint8))
    await stream.synchronize()
    assert device.view(ptr, np.uint8, 6).tolist() == [7, 7, 7, 7, 0, 0]
    assert small.tolist() == [0, 1]
    destroy(stream, ptr)


@pytest.mark.asyncio
async def test_memcpy_of_zero_bytes_is_a_valid_no_op(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = device.malloc(4)
    await (await stream.memcpy(ptr, np.ones(4, np.uint8), 0))
    assert not device.view(ptr, np.uint8).any()
    destroy(stream, ptr)


@pytest.mark.parametrize(
    ("kind", "dst_dev", "src_dev"),
    [
        (ahg.CopyKind.HostToDevice, True, False),
        (ahg.CopyKind.DeviceToHost, False, True),
        (ahg.CopyKind.DeviceToDevice, True, True),
        (ahg.CopyKind.HostToHost, False, False),
    ],
)
@pytest.mark.asyncio
async def test_memcpy_kind_must_match_the_endpoints(
    device: ahg.Device, kind: ahg.CopyKind, dst_dev: bool, src_dev: bool
) -> None:
    stream = device.create_stream()

    def end(on_device: bool) -> Any:
        return device.malloc(8) if on_device else np.zeros(8, np.uint8)

    dst, src = end(dst_dev), end(src_dev)
    await stream.memcpy(dst, src, 8, kind)  # the right kind is accepted
    await stream.memcpy(dst, src, 8, ahg.CopyKind.Default)  # Default means "infer"
    await stream.memcpy(dst, src, 8, int(kind))  # plain ints work too
    for wrong in set(ahg.CopyKind) - {kind, ahg.CopyKind.Default}:
        with pytest.raises(ahg.InvalidMemcpyDirection, match=wrong.name):
            await stream.memcpy(dst, src, 8, wrong)
    await stream.synchronize()
    destroy(stream, *(end for end in (dst, src) if isinstance(end, ahg.DevicePtr)))


@pytest.mark.parametrize("kind", [7, -1, "HostToDevice"])
@pytest.mark.asyncio
async def test_memcpy_kind_that_is_not_a_kind_is_invalid_direction(
    device: ahg.Device, kind: Any
) -> None:
    stream, dst = device.create_stream(), device.malloc(8)
    with pytest.raises(ahg.InvalidMemcpyDirection, match="not a memcpy kind"):
        await stream.memcpy(dst, np.zeros(8, np.uint8), 8, kind)
    destroy(stream, dst)


@pytest.mark.asyncio
async def test_memcpy_bad_inputs_are_rejected_before_anything_is_enqueued(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    ptr = device.malloc(16)
    freed = device.malloc(16)
    device.free(freed)
    host = np.zeros(16, np.uint8)
    cases: list[tuple[type[Exception], str, tuple[Any, ...]]] = [
        (ahg.InvalidValue, "past the end", (ptr, host, 17)),
        (ahg.InvalidValue, "past the end", (ptr + 8, host, 9)),
        (ahg.InvalidValue, "past the end", (host, ptr + 12, 8)),
        (ahg.InvalidDevicePointer, "not inside", (freed, host, 4)),
        (ahg.InvalidDevicePointer, "not inside", (host, freed, 4)),
        (ahg.InvalidDevicePointer, "not inside", (ptr + 4096, host, 4)),
        (ahg.InvalidValue, "null", (ahg.NULL, host, 4)),
        (ahg.InvalidValue, "null", (host, ahg.NULL, 4)),
        (ahg.InvalidValue, "is null", (None, host, 4)),
        (ahg.InvalidValue, "negative", (ptr, host, -1)),
        (ahg.InvalidValue, "exceed", (ptr, np.zeros(4, np.uint8), 8)),
        (ahg.InvalidValue, "exceed", (np.zeros(4, np.uint8), ptr, 8)),
        (ahg.InvalidValue, "device-to-device", (ptr, ptr + 8, None)),
        (ValueError, "contiguous", (ptr, np.zeros(32, np.uint8)[::2], 8)),
        (ValueError, "read-only", (np.frombuffer(bytes(16), np.uint8), ptr, 8)),
        (TypeError, "DevicePtr or a numpy array", (ptr, [0] * 16, 8)),
        (TypeError, "nbytes", (ptr, host, 8.0)),
    ]
    for error, match, args in cases:
        with pytest.raises(error, match=match):
            await stream.memcpy(*args)
    assert stream.submitted == 0
    assert device.in_flight == 0
    destroy(stream, ptr)


# -- memset ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("element_size", "value", "dtype", "expected"),
    [
        (1, 0xAB, np.uint8, 0xAB),
        (2, 0x1234, np.uint16, 0x1234),
        (4, 0xDEADBEEF, np.uint32, 0xDEADBEEF),
        (1, -1, np.uint8, 0xFF),
        (2, -2, np.uint16, 0xFFFE),
        (4, -1, np.uint32, 0xFFFFFFFF),
    ],
)
@pytest.mark.asyncio
async def test_memset_writes_elements_of_1_2_or_4_bytes(
    device: ahg.Device, element_size: int, value: int, dtype: Any, expected: int
) -> None:
    stream = device.create_stream()
    ptr = device.malloc(32)
    await stream.memset(ptr + 8, value, 16 // element_size, element_size=element_size)
    await stream.synchronize()
    everything = device.view(ptr, dtype).tolist()
    per_8_bytes = 8 // element_size
    assert everything == [0] * per_8_bytes + [expected] * 2 * per_8_bytes + [0] * per_8_bytes
    destroy(stream, ptr)


@pytest.mark.asyncio
async def test_memset_bad_inputs_are_rejected_before_anything_is_enqueued(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    ptr = device.malloc(16)
    freed = device.malloc(16)
    device.free(freed)
    cases: list[tuple[type[Exception], str, tuple[Any, ...], dict[str, Any]]] = [
        (ahg.InvalidValue, "past the end", (ptr, 0, 17), {}),
        (ahg.InvalidValue, "past the end", (ptr + 12, 0, 2), {"element_size": 4}),
        (ahg.InvalidDevicePointer, "not inside", (freed, 0, 4), {}),
        (ahg.InvalidValue, "null", (ahg.NULL, 0, 4), {}),
        (ahg.InvalidValue, "null", (None, 0, 4), {}),
        (ahg.InvalidValue, "negative", (ptr, 0, -4), {}),
        (ahg.InvalidValue, "negative", (ptr, 0, -4), {"element_size": 2}),
        (ahg.InvalidValue, "element size", (ptr, 0, 3), {"element_size": 3}),
        (ValueError, "does not fit", (ptr, 256, 4), {}),
        (ValueError, "does not fit", (ptr, 1 << 16, 4), {"element_size": 2}),
        (ValueError, "does not fit", (ptr, -129, 4), {}),
        (TypeError, "must be an int", (ptr, 1.5, 4), {}),
        (TypeError, "DevicePtr", (np.zeros(4, np.uint8), 0, 4), {}),
    ]
    for error, match, args, kwargs in cases:
        with pytest.raises(error, match=match):
            await stream.memset(*args, **kwargs)
    assert stream.submitted == 0
    assert device.in_flight == 0
    destroy(stream, ptr)


# -- host functions ----------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_host_functions_get_their_arguments_and_run_in_stream_order(
    device: ahg.Device,
) -> None:
    calls: list[tuple[Any, ...]] = []

    def record(*args: Any) -> None:
        calls.append(args)

    stream = device.create_stream()
    for i in range(5):
        await stream.launch_host_func(record, i, f"call {i}")
    await stream.synchronize()
    assert calls == [(i, f"call {i}") for i in range(5)]
    destroy(stream)


@pytest.mark.asyncio
async def test_host_function_return_values_are_ignored(device: ahg.Device) -> None:
    log: list[str] = []
    stream = device.create_stream()
    await stream.launch_host_func(lambda: 42)
    await stream.launch_host_func(dict.fromkeys, "ab")
    await stream.launch_host_func(log.append, "still running")
    # Bounded turns rather than synchronize(): a queue broken by a return value would hang it.
    await loop_turns()
    assert log == ["still running"]
    assert stream.query()
    destroy(stream)


@pytest.mark.asyncio
async def test_async_host_function_holds_its_queue_until_it_finishes(device: ahg.Device) -> None:
    log: list[str] = []
    entered, gate = asyncio.Event(), asyncio.Event()

    async def host(tag: str) -> None:
        log.append(f"{tag} start")
        entered.set()
        await gate.wait()
        log.append(f"{tag} end")

    stream = device.create_stream()
    held = await stream.launch_host_func(host, "async")
    after = await stream.launch_host_func(log.append, "after")
    await entered.wait()
    await loop_turns()  # "after" would run now if the host function did not hold the queue
    assert log == ["async start"]
    assert not held.done()
    gate.set()
    await after
    assert log == ["async start", "async end", "after"]
    destroy(stream)


def test_host_function_must_be_callable() -> None:
    async def check() -> None:
        stream = ahg.get_device(0).create_stream()
        with pytest.raises(ahg.InvalidValue, match="null"):
            await stream.launch_host_func(None)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="callable"):
            await stream.launch_host_func(42)  # type: ignore[arg-type]
        assert stream.submitted == 0
        stream.destroy()

    ahg.run(check)


# -- kernel launches through a stream ----------------------------------------------------------


@pytest.mark.asyncio
async def test_bad_kernel_launches_are_rejected_before_anything_is_enqueued(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    out = device.malloc(16)
    cases: list[tuple[type[Exception], tuple[Any, ...]]] = [
        (ahg.InvalidConfiguration, (append_tag, 0, 1, (1, out))),
        (ahg.InvalidConfiguration, (append_tag, 1, 0, (1, out))),
        (ahg.InvalidConfiguration, (append_tag, 1, 2048, (1, out))),
        (ahg.InvalidConfiguration, (append_tag, (1, 70000), 1, (1, out))),
        (TypeError, (append_tag, 1, 1, (1,))),
        (TypeError, (append_tag, 1, 1, (1, out, 3))),
        (TypeError, (append_tag, 1, 1, (1.0, out))),
        (TypeError, (append_tag, 1, 1, (1, 1234))),
        (ValueError, (append_tag, 1, 1, (2**31, out))),
    ]
    for error, args in cases:
        with pytest.raises(error):
            await stream.launch_kernel(*args)
    assert stream.submitted == 0
    assert device.in_flight == 0
    destroy(stream, out)


# -- stream lifecycle --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_destroyed_stream_rejects_every_operation(device: ahg.Device) -> None:
    stream = device.create_stream()
    ptr = device.malloc(8)
    event = device.create_event()
    stream.destroy()
    operations = [
        stream.launch_kernel(append_tag, 1, 1, (1, ptr)),
        stream.memcpy(ptr, np.zeros(8, np.uint8)),
        stream.memset(ptr, 0, 8),
        stream.launch_host_func(print),
        stream.record_event(event),
        stream.wait_event(event),
        stream.synchronize(),
    ]
    for operation in operations:
        with pytest.raises(ahg.ContextIsDestroyed, match="destroyed"):
            await operation
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.query()
    with pytest.raises(ahg.InvalidHandle, match="already destroyed"):
        stream.destroy()
    assert "state=destroyed" in repr(stream)
    assert stream not in device.streams
    destroy(ptr, event)


@pytest.mark.asyncio
async def test_work_enqueued_before_destroy_still_completes(device: ahg.Device) -> None:
    held = HeldKernel()
    stream = device.create_stream()
    completion = await held.launch(stream)
    log: list[str] = []
    after = await stream.launch_host_func(log.append, "after destroy")
    stream.destroy()
    held.release()
    await completion
    await after
    assert log == ["after destroy"]


@pytest.mark.asyncio
async def test_a_new_stream_in_a_recycled_slot_does_not_revive_the_old_one(
    device: ahg.Device,
) -> None:
    old = device.create_stream()
    old.destroy()
    new = device.create_stream()
    assert new.hid.slot == old.hid.slot
    assert new.hid != old.hid
    assert STREAMS.get(old.hid) is None
    assert STREAMS.get(new.hid) is new
    with pytest.raises(ahg.InvalidHandle):
        old.destroy()  # a stale destroy cannot take the new stream down
    with pytest.raises(ahg.ContextIsDestroyed):
        await old.synchronize()
    assert new.query()
    new.destroy()


def test_null_stream_cannot_be_destroyed(device: ahg.Device) -> None:
    with pytest.raises(ahg.InvalidHandle, match="null stream"):
        device.null_stream.destroy()
    assert device.null_stream is device.null_stream


def test_priority_is_clamped_to_hips_range(device: ahg.Device) -> None:
    # HIP's three levels: -1 (greatest), 0 (the default) and 1 (least); the least is a level
    # of its own, not clamped to the default.
    cases = ((5, 1), (1, 1), (0, 0), (-7, -1), (-1, -1), (2**64, 1), (-(2**64), -1))
    for given, clamped in cases:
        with device.create_stream(priority=given) as stream:
            assert stream.priority == clamped
    with pytest.raises(TypeError, match="priority"):
        device.create_stream(priority=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority"):
        device.create_stream(priority=True)


@pytest.mark.asyncio
async def test_statistics_and_repr(device: ahg.Device) -> None:
    held = HeldKernel()
    stream = device.create_stream()
    assert stream.statistics().pending is False
    await held.launch(stream)
    stats = stream.statistics()
    assert (stats.device, stats.queue, stats.submitted, stats.pending, stats.error) == (
        0,
        stream.queue.index,
        1,
        True,
        False,
    )
    held.release()
    await stream.synchronize()
    assert stream.statistics().pending is False
    assert repr(stream).startswith(f"<Stream #{stream.hid.slot}.{stream.hid.generation} device=0")
    assert repr(device.null_stream).startswith("<Stream null device=0 queue=0")
    destroy(stream)


# -- legacy default (null) stream --------------------------------------------------------------


@pytest.mark.asyncio
async def test_null_stream_waits_for_earlier_work_of_blocking_streams(device: ahg.Device) -> None:
    log: list[str] = []
    held = HeldKernel("blocking", log)
    (blocking,) = streams_off_queue_zero(device, 1)
    null = device.null_stream
    await held.launch(blocking)
    null_done = await null.launch_host_func(log.append, "null")
    await held.started.wait()
    await loop_turns()  # the null stream's work would run now if it did not wait
    assert log == ["blocking start"]
    assert not null.query()
    held.release()
    await null_done
    assert log == ["blocking start", "blocking end", "null"]


@pytest.mark.asyncio
async def test_blocking_streams_wait_for_earlier_null_stream_work(device: ahg.Device) -> None:
    log: list[str] = []
    held = HeldKernel("null", log)
    (blocking,) = streams_off_queue_zero(device, 1)
    await held.launch(device.null_stream)
    blocked = await blocking.launch_host_func(log.append, "blocking")
    await held.started.wait()
    await loop_turns()  # the blocking stream's work would run now if it did not wait
    assert log == ["null start"]
    held.release()
    await blocked
    assert log == ["null start", "null end", "blocking"]


@pytest.mark.asyncio
async def test_non_blocking_streams_are_not_ordered_with_the_null_stream(
    device: ahg.Device,
) -> None:
    (free,) = streams_off_queue_zero(device, 1, non_blocking=True)
    null = device.null_stream
    log: list[str] = []

    held = HeldKernel("free")
    await held.launch(free)
    await held.started.wait()
    await (await null.launch_host_func(log.append, "null ran"))  # not behind the held kernel
    assert null.query()  # the null stream does not even count non-blocking work as its own
    held.release()
    await free.synchronize()

    held = HeldKernel("null")
    await held.launch(null)
    await held.started.wait()
    await (await free.launch_host_func(log.append, "free ran"))  # not behind the null stream
    held.release()
    await null.synchronize()
    assert log == ["null ran", "free ran"]


@pytest.mark.asyncio
async def test_null_stream_synchronize_covers_every_blocking_stream(device: ahg.Device) -> None:
    held = [HeldKernel(f"k{i}") for i in range(2)]
    streams = streams_off_queue_zero(device, 2)
    for kernel, stream in zip(held, streams, strict=True):
        await kernel.launch(stream)
    sync = asyncio.ensure_future(device.null_stream.synchronize())
    await loop_turns()  # the synchronize parks on the blocking streams' tails
    assert not sync.done()
    held[0].release()
    await loop_turns()  # one stream is done, the other still holds
    assert not sync.done()
    held[1].release()
    await sync
    assert all(stream.query() for stream in streams)


@pytest.mark.asyncio
async def test_every_operation_gets_start_and_end_times_from_the_cost_model(
    device: ahg.Device,
) -> None:
    @ahg.kernel(duration_ns=7_000)
    def timed(t: ahg.Threads) -> None:
        pass

    cost = device.properties.cost
    stream = device.create_stream()
    first = await stream.launch_kernel(timed, 1, 1)
    second = await stream.launch_kernel(timed, 1, 1)
    assert first.start_ns is None  # not known before the work has run
    await second
    kernel_ns = cost.kernel_launch_ns + 7_000
    assert first.start_ns is not None
    assert first.end_ns == first.start_ns + kernel_ns
    assert second.start_ns == first.end_ns  # in order on one queue
    assert second.end_ns == second.start_ns + kernel_ns
    destroy(stream)
