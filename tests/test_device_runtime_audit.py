"""Devices, memory, kernels, streams, events and errors, used as a HIP user would: each test
names what the call did before it was fixed."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.core.errors import error_class


@pytest.mark.parametrize("code", [True, False, 719.0, 1.0, None, "1", b"\x01", [1]])
def test_an_error_code_that_is_not_an_integer_is_a_type_error(code: object) -> None:
    """``ErrorCode(True)`` is ``InvalidValue`` and ``ErrorCode(719.0)`` is ``LaunchFailure``
    (an enum lookup by equal value), and anything else that is no member made an ``Unknown``
    error: ``from_code(True)`` built an InvalidValue and ``from_code(None)`` an Unknown
    instead of refusing the mistake, as every other integer argument does."""
    with pytest.raises(TypeError, match=r"an error code must be an int or an ahg\.ErrorCode"):
        ahg.HipError.from_code(code, "message")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="an error code must be an int"):
        error_class(code)  # type: ignore[arg-type]


def test_an_integer_error_code_still_finds_its_class() -> None:
    numpy_code: object = np.int32(719)
    assert type(ahg.HipError.from_code(numpy_code, "m")) is ahg.LaunchFailure  # type: ignore[arg-type]
    assert type(ahg.HipError.from_code(ahg.ErrorCode.NotReady)) is ahg.NotReady
    assert type(ahg.HipError.from_code(2**70)) is ahg.Unknown
    assert type(ahg.HipError.from_code(-1)) is ahg.Unknown


@pytest.mark.parametrize(
    ("grid", "block"),
    [(ahg.Dim3(1.5), 1), (ahg.Dim3(True), 1), (ahg.Dim3("2"), 1), (1, ahg.Dim3(2, 1.0))],
    ids=["float", "bool", "str", "float-block"],
)
def test_threads_refuse_a_hand_made_dim3_that_is_not_ints(grid: object, block: object) -> None:
    """A ``Dim3`` is a named tuple of anything: ``Threads(Dim3(1.5), 1)`` was taken as it was,
    with a count of 1.5 and ids of ``arange(1.5)`` (two threads), where a launch refuses the
    same configuration; a body unit-tested with it ran over the wrong threads."""
    with pytest.raises(TypeError, match="must be an int or a tuple of up to 3 ints"):
        ahg.Threads(grid, block)  # type: ignore[arg-type]


def test_threads_take_a_dim3_of_numpy_ints_as_ints_and_refuse_negative_shared_memory() -> None:
    threads = ahg.Threads(ahg.Dim3(np.int64(2), 3), ahg.Dim3(4))  # type: ignore[arg-type]
    assert threads.grid == (2, 3, 1)
    assert type(threads.grid.x) is int
    assert threads.count == 24
    assert threads.ids.tolist() == list(range(24))
    with pytest.raises(ahg.InvalidValue, match="negative"):
        ahg.Threads(1, 1, -1)


@pytest.mark.asyncio
async def test_a_host_function_may_view_bytes_it_declared_in_pieces(device: ahg.Device) -> None:
    """A view was checked against one declared region at a time: a buffer declared in two
    halves, or as a read next to a write, could not be viewed whole (``InvalidValue``,
    "outside the reads and writes it declared") though every byte of it was declared. The
    pieces now cover what they span together; a view reaching a read is read-only."""
    ptr = device.malloc(64)
    device.view(ptr, np.uint8)[:] = np.arange(64, dtype=np.uint8)
    seen: dict[str, Any] = {}

    def body() -> None:
        halves = device.view(ptr, np.uint8, 32)
        seen["halves"] = (halves.flags.writeable, halves.tolist())
        mixed = device.view(ptr + 24, np.uint8, 16)  # 8 written bytes, then 8 read ones
        seen["mixed"] = (mixed.flags.writeable, mixed.tolist())
        for name, start, count in (("gap", 40, 16), ("past", 24, 17)):
            try:
                device.view(ptr + start, np.uint8, count)
            except ahg.InvalidValue as error:
                seen[name] = error

    declared = ahg.host_function(
        body, writes=[(ptr, 16), (ptr + 16, 16)], reads=[(ptr + 32, 8), (ptr + 56, 8)]
    )
    with device.create_stream() as stream:
        await stream.launch_host_func(declared)
        await stream.synchronize()
    assert seen["halves"] == (True, list(range(32)))
    assert seen["mixed"] == (False, list(range(24, 40)))
    assert "outside the reads and writes it declared" in str(seen["gap"])  # 40..48 undeclared
    assert "outside the reads and writes it declared" in str(seen["past"])  # byte 40 too
    device.free(ptr)


def test_a_negative_view_count_is_named_as_the_count_given(device: ahg.Device) -> None:
    """``view(ptr, np.int32, -1)`` was refused as "negative size -4": the bytes it would
    have been, a number the caller never passed."""
    ptr = device.malloc(16)
    for count in (-1, -(2**64)):
        with pytest.raises(ahg.InvalidValue, match=rf"negative count {count}$"):
            device.view(ptr, np.int32, count)
    assert device.view(ptr, np.int32, 0).shape == (0,)
    device.free(ptr)


@ahg.kernel(duration_ns=1_000_000)
def _one_millisecond(t: ahg.Threads) -> None:
    pass


async def _device_ran(stream: ahg.Stream) -> None:
    """Return once the device has run ``stream``'s work so far, without the host observing
    it (no synchronize or query: the host's clock stays where it was)."""
    ran = asyncio.Event()
    await stream.launch_host_func(ran.set)
    await ran.wait()


@pytest.mark.asyncio
async def test_work_after_a_wait_on_a_record_the_device_already_ran_starts_after_it(
    device: ahg.Device,
) -> None:
    """A wait on a record the device had already reached enqueued nothing, whatever the
    simulated time of that record: the waiting stream's next work was stamped at the host's
    clock (its kernel started at 0 ns, the record being at 1.002 ms), as if it ran before the
    work it waits for, and ``elapsed_time`` from the record to work after it could be
    negative."""
    with device.create_stream() as first, device.create_stream() as second:
        start, end = device.create_event(), device.create_event()
        await first.launch_kernel(_one_millisecond, 1, 1, ())
        await first.record_event(start)
        await _device_ran(first)  # step 1: the record is reached; the host has not seen it
        assert start.signal is not None
        assert start.signal.value <= 0
        await second.wait_event(start)  # step 2: the record is still ahead of `second`
        after = await second.launch_kernel(_one_millisecond, 1, 1, ())
        await second.record_event(end)
        await device.synchronize()
        assert after.start_ns is not None
        assert start.time_ns is not None
        assert after.start_ns >= start.time_ns
        assert ahg.elapsed_time(start, end) >= 1.0
        # Once the host has seen the record, a wait on it adds nothing (HIP's no-op).
        submitted = second.submitted
        await second.wait_event(start)
        assert second.submitted == submitted
        start.destroy()
        end.destroy()


@pytest.mark.asyncio
async def test_legacy_ordering_after_the_null_stream_holds_once_the_device_ran_its_work(
    device: ahg.Device,
) -> None:
    """The same for the legacy null stream: a blocking stream orders after the null stream's
    earlier work only while that work was unfinished, so once the device had run it, the
    blocking stream's next work was stamped before it."""
    with (
        device.create_stream(),  # takes the null stream's queue
        device.create_stream() as blocking,
        device.create_stream(non_blocking=True) as free,
    ):
        # A queue of its own: one it shared with the null stream would order it anyway.
        assert blocking.queue is not device.null_stream.queue
        done, after = device.create_event(), device.create_event()
        await device.null_stream.launch_kernel(_one_millisecond, 1, 1, ())
        await device.null_stream.record_event(done)
        await _device_ran(device.null_stream)  # the null stream's work ran, unseen
        await blocking.record_event(after)
        ignored = await free.launch_kernel(_one_millisecond, 1, 1, ())
        await device.synchronize()
        assert done.time_ns is not None
        assert after.time_ns is not None
        assert after.time_ns >= done.time_ns
        assert ignored.start_ns is not None
        assert ignored.start_ns < done.time_ns
        done.destroy()
        after.destroy()


@pytest.mark.asyncio
async def test_a_launch_on_another_devices_stream_starts_after_work_the_device_already_ran() -> (
    None
):
    """The same for a graph launched on a stream of another device: the executable's device
    waited for the stream's earlier work only while it was unfinished, so once that device
    had run it, the graph started at 0 ns, before the 1 ms kernel it is ordered after."""
    with testing.fresh_devices(2) as (home, other):
        graph = ahg.Graph()
        graph.add_kernel_node(_one_millisecond, 1, 1, ())
        with graph, graph.instantiate() as graph_exec, other.create_stream() as stream:
            assert graph_exec.device is home
            before = await stream.launch_kernel(_one_millisecond, 1, 1, ())
            await _device_ran(stream)  # `other` ran it; nobody has seen it
            launch = await graph_exec.launch(stream)
            await launch
            await other.synchronize()
            assert before.end_ns is not None
            assert launch.start_ns is not None
            assert launch.start_ns >= before.end_ns


@ahg.kernel
def _store_five(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = 5


@pytest.mark.asyncio
async def test_a_completion_seen_done_orders_the_hosts_later_work_after_it(
    device: ahg.Device,
) -> None:
    """``Completion.done()`` is the non-blocking twin of ``await``, yet only the await moved
    the host's clock: polled until True, it left the clock behind, so a record on an idle
    stream made next was stamped at 0 ns, before the 1 ms kernel the host had seen end."""
    with device.create_stream() as busy, device.create_stream() as idle:
        start, after = device.create_event(), device.create_event()
        await busy.record_event(start)
        kernel = await busy.launch_kernel(_one_millisecond, 1, 1, ())
        await _device_ran(busy)  # the kernel ran; the host has not seen it
        assert kernel.done()  # now it has
        await idle.record_event(after)
        await device.synchronize()
        assert kernel.end_ns is not None
        assert after.time_ns is not None
        assert after.time_ns >= kernel.end_ns
        assert ahg.elapsed_time(start, after) >= 1.0
        start.destroy()
        after.destroy()


@pytest.mark.asyncio
async def test_a_host_view_after_a_completion_seen_done_is_no_race(device: ahg.Device) -> None:
    """The race checker took ``done()`` as nothing: a host view of memory a kernel wrote,
    made once ``done()`` said True, was reported as a write-after-write race whose fix
    said to await the completion, which is what ``done()`` answers without waiting."""
    ptr = device.malloc(16)
    with ahg.race_check(on_race="collect") as check, device.create_stream() as stream:
        kernel = await stream.launch_kernel(_store_five, 1, 1, (ptr,))
        await _device_ran(stream)
        assert kernel.done()
        assert device.view(ptr, np.int32, 1).tolist() == [5]
    assert check.reports == []
    device.free(ptr)


@pytest.mark.asyncio
async def test_work_after_a_stream_wait_starts_after_the_write_that_released_it(
    device: ahg.Device,
) -> None:
    """A stream memory wait took no time from the write that satisfied it: released by a
    ``write_value_32`` made after a 1 ms kernel on another stream, the waiting stream's next
    record was stamped at 500 ns, a millisecond before the write."""
    word = device.malloc(8)
    with device.create_stream() as writer, device.create_stream() as waiter:
        written, released = device.create_event(), device.create_event()
        await waiter.wait_value_32(word, 1, ahg.StreamWaitFlag.EQ)  # polls until the write
        await waiter.record_event(released)
        await writer.launch_kernel(_one_millisecond, 1, 1, ())
        await writer.write_value_32(word, 1)
        await writer.record_event(written)
        await device.synchronize()
        assert written.time_ns is not None
        assert released.time_ns is not None
        assert released.time_ns >= written.time_ns
        # A write the device already ran when the wait is enqueued: satisfied at once, and
        # still ordered after the write.
        later = device.create_event()
        await writer.launch_kernel(_one_millisecond, 1, 1, ())
        await writer.write_value_32(word, 2)
        await writer.record_event(written)
        await _device_ran(writer)
        await waiter.wait_value_32(word, 2, ahg.StreamWaitFlag.EQ)
        await waiter.record_event(later)
        await device.synchronize()
        assert later.time_ns is not None
        assert written.time_ns is not None
        assert later.time_ns >= written.time_ns
        for event in (written, released, later):
            event.destroy()
    device.free(word)
