"""Failure paths that must neither lose a failure nor mix things up.

A stream dropped without ``destroy()`` still owes the failure of its work: HIP reports an
asynchronous failure at the next synchronizing call, and ``Device.synchronize`` is the one
left once the stream is gone. It reports it once, as it does for a destroyed stream.

Each device keeps its own clock. An event of device 0 recorded by a graph launched on device 1
(an event-record node, or a record captured with ``hipEventRecordExternal``) is stamped by
device 1's clock: ``elapsed_time`` refuses to set it against a record of device 0, as it
refuses two events of different devices (``InvalidHandle``, HIP's
``hipErrorInvalidResourceHandle``), and the host observes it on device 1's clock.
"""

from __future__ import annotations

import asyncio
import warnings
import weakref
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.core.registry import HandleRegistry
from ahipgraph.runtime.stream import STREAMS
from cleanup import destroy


@ahg.kernel
def fails(t: ahg.Threads) -> None:
    raise ValueError("kernel body failed")


@ahg.kernel
def idle(t: ahg.Threads) -> None:
    pass


async def busy(stream: ahg.Stream) -> None:
    """Move ``stream``'s device clock well past zero, and wait for it."""
    for _ in range(4):
        await stream.launch_kernel(idle, 1024, 256, ())
    await stream.synchronize()


def forget_stream(box: list[ahg.Stream]) -> None:
    """Drop the stream in ``box`` (the test's only reference) and collect it, with the
    warning a forgotten stream gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    assert [str(w.message).split(" #")[0] for w in caught] == ["unclosed stream"]


def registered(registry: HandleRegistry[ahg.Stream]) -> int:
    return registry.statistics().live


# -- a forgotten stream's failure ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_forgotten_stream_s_failure_reaches_device_synchronize_once(
    device: ahg.Device,
) -> None:
    before = registered(STREAMS)
    box = [device.create_stream()]
    failed = await box[0].launch_kernel(fails, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure):
        await failed  # the work is done; the stream still owes the report
    del failed
    collected = weakref.ref(box[0])
    forget_stream(box)
    assert collected() is None  # the failure does not keep the stream alive
    assert registered(STREAMS) == before
    with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
        await device.synchronize()
    await device.synchronize()  # reported once


@pytest.mark.asyncio
async def test_a_stream_forgotten_with_its_failing_work_queued_reports_it_once(
    device: ahg.Device,
) -> None:
    box = [device.create_stream()]
    failed = await box[0].launch_kernel(fails, 1, 1, ())
    dropped = weakref.ref(box[0])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        assert dropped() is not None  # the queued kernel keeps it until it has run
        with pytest.raises(ahg.LaunchFailure):
            await failed  # fails after the stream was dropped
        del failed
        ahg.collect_forgotten()
    assert dropped() is None
    assert [str(w.message).split(" #")[0] for w in caught] == ["unclosed stream"]
    with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
        await device.synchronize()
    await device.synchronize()


@pytest.mark.asyncio
async def test_a_forgotten_stream_s_graph_launch_failure_reaches_device_synchronize(
    device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(fails, 1, 1, ())
    graph_exec = graph.instantiate()
    box = [device.create_stream()]
    launch = await graph_exec.launch(box[0])
    with pytest.raises(ahg.LaunchFailure):
        await launch
    del launch
    forget_stream(box)
    with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
        await device.synchronize()
    await device.synchronize()
    graph_exec.destroy()
    graph.destroy()


@pytest.mark.asyncio
async def test_a_forgotten_stream_s_failure_is_not_another_stream_s(device: ahg.Device) -> None:
    other = device.create_stream()
    box = [device.create_stream()]
    failed = await box[0].launch_kernel(fails, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure):
        await failed
    del failed
    forget_stream(box)
    await other.synchronize()  # not this stream's failure
    assert not other.statistics().error
    other.destroy()
    with pytest.raises(ahg.LaunchFailure):
        await device.synchronize()


@pytest.mark.asyncio
async def test_a_forgotten_stream_whose_failure_was_reported_leaves_nothing(
    device: ahg.Device,
) -> None:
    box = [device.create_stream()]
    failed = await box[0].launch_kernel(fails, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure):
        await box[0].synchronize()  # reported here: nothing left to owe
    with pytest.raises(ahg.LaunchFailure):
        await failed
    del failed
    forget_stream(box)
    await device.synchronize()


@pytest.mark.asyncio
async def test_destroy_leaves_a_known_failure_to_device_synchronize_as_forgetting_does(
    device: ahg.Device,
) -> None:
    """``hipStreamDestroy`` reports no failure of the stream's work: the device's next
    synchronize does, once, for a destroyed stream as for a forgotten one."""
    destroyed, box = device.create_stream(), [device.create_stream()]
    for stream in (destroyed, box[0]):
        failed = await stream.launch_kernel(fails, 1, 1, ())
        with pytest.raises(ahg.LaunchFailure):
            await failed
    del failed, stream
    destroyed.destroy()  # does not raise
    forget_stream(box)
    for _ in range(2):
        with pytest.raises(ahg.LaunchFailure, match="kernel body failed"):
            await device.synchronize()
    await device.synchronize()


@pytest.mark.leaks_allowed("its first loop abandons work on purpose; the test reads the report")
@pytest.mark.parametrize("ending", ["destroy", "forget"])
def test_a_gone_stream_s_failure_of_abandoned_work_is_counted_until_reported(ending: str) -> None:
    """``abandoned_earlier`` (what the leak report reads) counts the failure of work an earlier
    loop abandoned on a stream destroyed or forgotten since, as it does an open stream's."""
    with testing.fresh_devices(1, check=False) as (device,):
        box = [device.create_stream()]
        other = device.create_stream()
        out = device.malloc(8)
        baseline = testing.snapshot()

        async def leave_running() -> None:
            held = testing.HeldKernel("left_running")
            await held.launch(box[0])
            await held.started.wait()

        asyncio.run(leave_running())  # its loop closes: the kernel fails as abandoned
        if ending == "destroy":
            box.pop().destroy()
        else:
            forget_stream(box)

        async def unrelated_work() -> None:  # takes the device over, never synchronizes it
            await (await other.memset(out, 0, 8))

        asyncio.run(unrelated_work())
        assert device.statistics().abandoned_earlier == 1
        report = testing.leak_report(baseline)
        assert report is not None
        assert "the unreported failure of work an earlier" in report

        async def look() -> None:
            with pytest.raises(ahg.LaunchFailure, match="abandoned"):
                await device.synchronize()

        asyncio.run(look())
        assert device.statistics().abandoned_earlier == 0
        assert testing.leak_report(baseline) is None
        device.free(out)
        other.destroy()


# -- events recorded on another device's clock -----------------------------------------------------


async def record_by_graph_on(device: ahg.Device, *events: ahg.Event) -> None:
    """Record ``events`` (in order) by a graph of event-record nodes launched on ``device``."""
    graph = ahg.Graph()
    node = None
    for event in events:
        node = graph.add_event_record_node(event, deps=() if node is None else [node])
    graph_exec = graph.instantiate(device=device)
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    destroy(graph_exec, graph, stream)


async def record_by_capture_on(device: ahg.Device, event: ahg.Event) -> None:
    """Record ``event`` by a graph captured on ``device`` (an external record)."""
    stream = device.create_stream()
    stream.begin_capture(ahg.CaptureMode.GLOBAL)
    await stream.record_event(event, 1)  # hipEventRecordExternal: an EventRecord node
    graph = stream.end_capture()
    graph_exec = graph.instantiate(device=device)
    await (await graph_exec.launch(stream))
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("record_on", [record_by_graph_on, record_by_capture_on])
async def test_elapsed_time_refuses_a_record_made_on_another_device_s_clock(
    record_on: Any,
) -> None:
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    stream0 = device0.create_stream()
    await busy(stream0)  # device 0's clock is ahead; device 1's is at zero
    start, end = device0.create_event(), device0.create_event()
    await stream0.record_event(start)
    await record_on(device1, end)
    await end.synchronize()
    for pair in ((start, end), (end, start)):
        with pytest.raises(ahg.InvalidHandle, match="different devices"):
            ahg.elapsed_time(*pair)
    await stream0.record_event(end)  # recorded again, on its own device: comparable again
    await end.synchronize()
    assert ahg.elapsed_time(start, end) >= 0.0
    destroy(stream0, start, end)


@pytest.mark.asyncio
async def test_two_records_by_one_graph_on_another_device_are_timed_on_its_clock() -> None:
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    start, end = device0.create_event(), device0.create_event()
    await record_by_graph_on(device1, start, end)
    assert ahg.elapsed_time(start, end) >= 0.0
    destroy(start, end)


@pytest.mark.asyncio
@pytest.mark.parametrize("wait", ["query", "synchronize"])
async def test_the_host_observes_a_record_made_on_another_device_on_that_device_s_clock(
    wait: str,
) -> None:
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    stream1 = device1.create_stream()
    await busy(stream1)  # device 1's clock is ahead; device 0's is at zero
    event = device0.create_event()
    graph = ahg.Graph()
    graph.add_event_record_node(event)
    graph_exec = graph.instantiate(device=device1)
    launched = await graph_exec.launch(stream1)
    if wait == "query":
        await launched
        assert event.query()
    else:
        await event.synchronize()  # waits for device 1's work
        assert launched.done()
    recorded = event.time_ns
    assert recorded is not None
    assert device0.clock.now < recorded  # device 0's clock did not take device 1's time
    assert device1.clock.now >= recorded
    destroy(graph_exec, graph, stream1, event)
