"""Reductions of what long randomised runs found, each the smallest program that showed it."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


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
