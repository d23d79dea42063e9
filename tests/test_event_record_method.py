"""`event.record(stream)` (HIP's `hipEventRecord`) and `start.elapsed_time(end)`.

The event-first spelling is the one HIP code uses; it must behave exactly as
``stream.record_event(event)``: same ordering, same timing, same errors.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy
from fakes import HeldKernel


@ahg.kernel(duration_ns=10_000)
def fixed_10us(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_record_on_a_stream_times_the_work_between(device: ahg.Device) -> None:
    stream = device.create_stream()
    start, end = device.create_event(), device.create_event()
    await start.record(stream)
    await stream.launch_kernel(fixed_10us, 1, 1)
    await end.record(stream)
    await end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) == ahg.elapsed_time(start, end)
    assert start.elapsed_time(end) >= 0.010  # the kernel's 10 µs at least
    assert end.elapsed_time(start) == -start.elapsed_time(end)
    destroy(start, end, stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("on", ["the stream", "the null stream", "the stream, nowait"])
async def test_record_completes_only_after_earlier_work(device: ahg.Device, on: str) -> None:
    stream = device.create_stream()  # blocking: the null stream waits for its work too
    held = HeldKernel()
    event = device.create_event()
    await held.launch(stream)
    if on == "the stream":
        await event.record(stream)
    elif on == "the null stream":
        await event.record()
    else:
        event.record_nowait(stream)
    assert not event.query()
    held.release()
    await event.synchronize()
    assert event.query()
    destroy(event, stream)


@pytest.mark.asyncio
async def test_record_errors_match_stream_record_event(device: ahg.Device) -> None:
    stream = device.create_stream()
    event = device.create_event()
    with pytest.raises(TypeError, match="Stream or None"):
        await event.record("stream")  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue):
        await event.record(stream, flags=7)
    gone = device.create_stream()
    gone.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await event.record(gone)
    destroy(stream)
    event.destroy()
    with pytest.raises(ahg.InvalidHandle):
        await event.record()
    with pytest.raises(ahg.InvalidHandle):
        event.record_nowait(None)


@pytest.mark.asyncio
async def test_elapsed_time_method_keeps_hips_errors(device: ahg.Device) -> None:
    stream = device.create_stream()
    timed = device.create_event()
    untimed = device.create_event(disable_timing=True)
    never = device.create_event()
    await timed.record(stream)
    await untimed.record(stream)
    await stream.synchronize()
    with pytest.raises(ahg.InvalidHandle, match="timing disabled"):
        timed.elapsed_time(untimed)
    with pytest.raises(ahg.InvalidHandle, match="not been recorded"):
        timed.elapsed_time(never)
    with pytest.raises(TypeError):
        timed.elapsed_time("end")  # type: ignore[arg-type]
    destroy(timed, untimed, never, stream)


@pytest.mark.asyncio
async def test_record_resolves_null_and_per_thread_streams_on_the_current_device() -> None:
    zero, one = ahg.configure_devices(2)
    held = HeldKernel()
    event = one.create_event()
    other = one.create_stream()
    ahg.set_device(1)
    try:
        await held.launch(other)  # a blocking stream of device 1: its null stream waits for it
        await event.record()
        assert not event.query()
        held.release()
        await event.synchronize()
        await event.record(ahg.STREAM_PER_THREAD)
        await event.synchronize()
        assert event.query()
    finally:
        ahg.set_device(0)
    assert zero.statistics().queues[0].submitted == 0  # nothing went to device 0
    destroy(event, other)
