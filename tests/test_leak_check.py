"""The leak check every test runs under: what it reports, and what it must not.

A device's own things (its null stream, a thread's per-thread stream, symbol storage) are not
the user's leaks; replacing the devices retires them, so the stream registry does not keep old
devices alive. A user's stream, allocation or graph left behind is reported, by kind.
"""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.testing import fresh_devices, leak_report, snapshot

SYMBOL = ahg.device_symbol("test_leak_check.table", dtype=np.int32, shape=(4,))


def live(kind: str) -> int:
    return snapshot(collect=False).handles[kind]


def test_replacing_the_devices_retires_their_null_and_per_thread_streams() -> None:
    before = live("stream")
    device = ahg.get_device(0)
    null = device.null_stream
    mine = device.per_thread_stream()  # this OS thread's own stream (no task running)
    made: list[ahg.Stream] = []
    worker = threading.Thread(target=lambda: made.append(device.per_thread_stream()))
    worker.start()
    worker.join()
    assert live("stream") == before + 3
    assert device.statistics().implicit_streams == 3
    assert leak_report(snapshot()) is None  # the device's own streams are no leak

    ahg.configure_devices(1)

    assert live("stream") == before  # was: every replaced device's streams stayed registered
    assert not null.alive
    assert not mine.alive
    assert not made[0].alive
    fresh_null = ahg.get_device(0).null_stream
    assert fresh_null.alive
    assert fresh_null is not null


def test_a_user_stream_outlives_its_replaced_device_until_destroyed() -> None:
    before = live("stream")
    stream = ahg.get_device(0).create_stream()
    ahg.configure_devices(1)
    assert stream.alive  # the user's handle: only the user ends it
    assert live("stream") == before + 1
    stream.destroy()
    assert live("stream") == before


@pytest.mark.asyncio
async def test_work_on_the_null_stream_and_symbols_is_not_reported() -> None:
    def used_the_device_s_own_things() -> None:
        with fresh_devices(1) as (device,):

            async def run() -> None:
                await device.memcpy_to_symbol(SYMBOL, np.arange(4, dtype=np.int32))
                await device.synchronize()

            asyncio.run(run())
            assert device.memory.statistics().static_allocations == 1
            assert device.memory.statistics().static_bytes == 16

    await asyncio.to_thread(used_the_device_s_own_things)  # a loop of its own, no LeakError


def test_a_freed_symbol_storage_stops_counting_as_the_device_s() -> None:
    device = ahg.get_device(0)
    ptr = SYMBOL.address(device)
    assert device.memory.statistics().static_allocations == 1
    device.free(ptr)  # HIP would refuse; the simulator frees, and stops calling it static
    stats = device.memory.statistics()
    assert (stats.static_allocations, stats.static_bytes) == (0, 0)


def test_the_report_names_each_kind_left_and_says_what_to_do() -> None:
    graphs: list[ahg.Graph] = []

    def leave_some() -> None:
        with fresh_devices(1) as (device,):
            device.malloc(32)
            graphs.append(ahg.Graph())
            graphs[0].add_empty_node()
            device.null_stream  # noqa: B018 - the device's own: not in the report

    with pytest.raises(testing.LeakError) as caught:
        leave_some()
    text = str(caught.value)
    assert "device 0: 1 allocation still allocated, 32 bytes in use" in text
    assert "live handles: 1 graph, 1 graph node" in text
    assert "stream" not in text.split("(destroy")[0]
    assert "destroy()" in text
    graphs[0].destroy()
