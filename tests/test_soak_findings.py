"""Reductions of what long randomised runs found, each the smallest program that showed it."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device import hooks


@ahg.kernel
def end_loop(t: ahg.Threads, handle: ahg.CondHandle) -> None:
    ahg.set_conditional(handle, 0)


@pytest.mark.asyncio
async def test_a_conditional_bodys_copy_into_a_host_array_is_no_host_write(
    device: ahg.Device,
) -> None:
    """Two launches in a row on one stream: the second's upload from ``host`` was fingerprinted
    when it was enqueued, then the first's IF body downloaded into ``host``. The race check
    was told of copies into host arrays when they finished, which a conditional node's body
    never reports, and blamed the host for the device's own write (found by the slow
    differential test under ``AHIPGRAPH_RACE_CHECK=warn``, seed 104)."""
    stream = device.create_stream()
    uploaded, downloaded = device.malloc(16), device.malloc(16)
    host = np.zeros(16, np.uint8)
    graph = ahg.Graph()
    upload = graph.add_memcpy_node(uploaded, host, 16)
    handle = graph.conditional_handle(1, assign_default=True)
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If, deps=[upload])
    body.add_memcpy_node(host, downloaded, 16)
    exec_ = graph.instantiate()
    await stream.memset(downloaded, 7, 16)
    with ahg.race_check(on_race="collect") as check:
        first = await exec_.launch(stream)
        second = await exec_.launch(stream)
        await first
        await second
    assert check.reports == []
    assert device.view(uploaded, np.uint8, 16).tolist() == [7] * 16  # the second upload's bytes
    exec_.destroy()
    graph.destroy()
    stream.destroy()
    device.free(uploaded)
    device.free(downloaded)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "kind", [ahg.ConditionalKind.If, ahg.ConditionalKind.While], ids=["if", "while"]
)
async def test_a_stream_copy_fed_by_a_conditional_bodys_download_is_no_host_race(
    device: ahg.Device, kind: ahg.ConditionalKind
) -> None:
    """A launch whose only copy into ``host`` sits in a conditional body, then an upload from
    ``host`` enqueued on the same stream behind it: the race check watched only a launch's
    top-level copies, so it never saw the body's download and took the bytes the device
    wrote for a host write (the slow differential test's event mode under
    ``AHIPGRAPH_RACE_CHECK=warn``, seed 5135)."""
    stream = device.create_stream()
    uploaded, downloaded = device.malloc(16), device.malloc(16)
    host = np.zeros(16, np.uint8)
    graph = ahg.Graph()
    handle = graph.conditional_handle(1, assign_default=True)
    _, (body,) = graph.add_conditional_node(handle, kind)
    if kind is ahg.ConditionalKind.While:
        body.add_kernel_node(end_loop, 1, 1, (handle,))  # one iteration
    body.add_memcpy_node(host, downloaded, 16)
    exec_ = graph.instantiate()
    await stream.memset(downloaded, 7, 16)
    with ahg.race_check(on_race="collect") as check:
        launched = await exec_.launch(stream)
        await stream.memcpy(uploaded, host, 16)
        await launched
        await stream.synchronize()
    assert check.reports == []
    assert device.view(uploaded, np.uint8, 16).tolist() == [7] * 16
    exec_.destroy()
    graph.destroy()
    stream.destroy()
    device.free(uploaded)
    device.free(downloaded)


@pytest.mark.asyncio
async def test_a_watched_conditional_node_gives_the_device_its_plain_loop_back(
    device: ahg.Device,
) -> None:
    """The race check watches the device's ops while a launch whose conditional body copies
    into a host array is in flight, and stops once that launch has ended, inside the check
    too: it used to stay on every later op (and ``tracing`` found an observer it never made)."""
    stream = device.create_stream()
    downloaded = device.malloc(16)
    host = np.zeros(16, np.uint8)
    graph = ahg.Graph()
    handle = graph.conditional_handle(1, assign_default=True)
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_memcpy_node(host, downloaded, 16)
    exec_ = graph.instantiate()
    observers = hooks.observers  # None but under a tracer or the environment's race check
    with ahg.race_check(on_race="collect") as check:
        await (await exec_.launch(stream))
        assert hooks.observers == observers
    assert check.reports == []
    exec_.destroy()
    graph.destroy()
    stream.destroy()
    device.free(downloaded)
