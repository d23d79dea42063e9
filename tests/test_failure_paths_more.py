"""Failure paths that must neither lose a failure nor mix things up.

A stream dropped without ``destroy()`` still owes the failure of its work: HIP reports an
asynchronous failure at the next synchronizing call, and ``Device.synchronize`` is the one
left once the stream is gone. It reports it once, as it does for a destroyed stream.
"""

from __future__ import annotations

import warnings
import weakref

import pytest

import ahipgraph as ahg
from ahipgraph.core.registry import HandleRegistry
from ahipgraph.runtime.stream import STREAMS


@ahg.kernel
def fails(t: ahg.Threads) -> None:
    raise ValueError("kernel body failed")


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
