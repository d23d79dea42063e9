"""The leak check every test runs under: what it reports, and what it must not.

A device's own things (its null stream, a thread's per-thread stream, symbol storage) are not
the user's leaks; replacing the devices retires them, so the stream registry does not keep old
devices alive. A user's stream, allocation or graph left behind is reported, by kind.
"""

from __future__ import annotations

import asyncio
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.testing import fresh_devices, leak_report, snapshot

pytest_plugins = ["pytester"]

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


def test_a_symbol_storage_cannot_be_freed_and_stays_the_device_s() -> None:
    device = ahg.get_device(0)
    ptr = SYMBOL.address(device)
    assert device.memory.statistics().static_allocations == 1
    with pytest.raises(ahg.InvalidValue):
        device.free(ptr)  # as HIP refuses: freed, the symbol would be dead on this device
    stats = device.memory.statistics()
    assert (stats.static_allocations, stats.static_bytes) == (1, 16)


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


FORGETFUL_SUITE = """
import ahipgraph as ahg


def test_forgets_a_graph_in_a_cycle():
    graph = ahg.Graph()
    graph.add_empty_node()
    cycle = [graph]
    cycle.append(cycle)  # only the collector frees it, after the test body returns


def test_after_it():
    ahg.Graph().destroy()
"""


@pytest.mark.leaks_allowed("the suite it runs in this process forgets a graph on purpose")
def test_a_forgotten_handle_fails_the_test_that_forgot_it(pytester: pytest.Pytester) -> None:
    """The project's warning filters make ``ForgottenHandleWarning`` an error, and the autouse
    fixture collects at teardown, so the report lands on the forgetful test, not a later one."""
    root = Path(__file__).parent
    pytester.makeconftest((root / "conftest.py").read_text())
    pytester.makepyfile(cleanup=(root / "cleanup.py").read_text())
    options = tomllib.loads((root.parent / "pyproject.toml").read_text())["tool"]["pytest"]
    filters = "".join(f"\n    {line}" for line in options["ini_options"]["filterwarnings"])
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        f"filterwarnings ={filters}\nmarkers =\n    leaks_allowed(reason): no leak check\n"
    )
    pytester.makepyfile(test_forgetful=FORGETFUL_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_forgets_a_graph_in_a_cycle*"])
    result.stdout.fnmatch_lines(["*ForgottenHandleWarning*graph*"])
