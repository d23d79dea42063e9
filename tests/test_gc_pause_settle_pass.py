"""Adversarial programs against the collector pause of a burst (``core/gcpause.py``).

A burst ends with one settle pass (``gc.collect``) on the loop's next turn. Whatever lands in
that pass (a Ctrl-C, a program that edits the collector from a finalizer) must still end the
pause and give the program back the thresholds it set.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause
from ahipgraph.graph import graph as graph_module
from loops import LOOPS

BULK = 300_000  # young objects: above the size whose burst ends with a settle pass


@pytest.fixture
def collector() -> Iterator[tuple[int, ...]]:
    """The collector as the program set it, checked unchanged after the test."""
    assert not gcpause.is_paused()
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    yield thresholds
    assert not gcpause.is_paused(), "the collector was left paused"
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    assert gc.callbacks == callbacks


def _interrupt_after_collect() -> Callable[[FrameType, str, Any], None]:
    """A profiler that raises KeyboardInterrupt as ``gc.collect`` returns: a Ctrl-C that
    lands exactly at the end of the settle pass."""

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_return" and arg is gc.collect:
            sys.setprofile(None)
            raise KeyboardInterrupt

    return profile


def _burst_leaving(
    factory: Callable[[], asyncio.AbstractEventLoop], *garbage: Callable[[], object]
) -> None:
    """On a new loop of ``factory``, a burst of ``BULK`` young objects that leaves what each
    of ``garbage`` makes (self-referencing objects with finalizers) to its settle pass."""

    async def burst() -> list[list[int]]:
        gcpause.pause_until_yield()
        keep: list[list[int]] = [[] for _ in range(BULK)]
        for make in garbage:
            make()
        await asyncio.sleep(0)
        return keep

    loop = factory()
    try:
        loop.run_until_complete(burst())
    finally:
        loop.close()


@pytest.mark.parametrize("factory", LOOPS)
@pytest.mark.usefixtures("collector")
def test_ctrl_c_in_the_settle_pass_still_ends_the_pause(
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    async def burst() -> list[list[int]]:
        gcpause.pause_until_yield()
        assert gcpause.is_paused()
        keep: list[list[int]] = [[] for _ in range(BULK)]
        sys.setprofile(_interrupt_after_collect())
        try:
            await asyncio.sleep(0)
        finally:
            sys.setprofile(None)
        return keep

    loop = factory()
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.run_until_complete(burst())
    finally:
        loop.close()
    assert not gcpause.is_paused()


@pytest.mark.parametrize("factory", LOOPS)
@pytest.mark.usefixtures("collector")
def test_a_finalizer_that_sets_thresholds_in_the_settle_pass_keeps_them(
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """The program's own thresholds, set from a finalizer the settle pass runs, stay."""
    before = gc.get_threshold()
    chosen = (before[0] + 1, before[1], before[2])

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            gc.set_threshold(*chosen)

    _burst_leaving(factory, Cycle)
    try:
        assert not gcpause.is_paused()
        assert gc.get_threshold() == chosen
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize("factory", LOOPS)
@pytest.mark.usefixtures("collector")
def test_a_finalizer_that_raises_in_the_settle_pass_ends_the_pause(
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    ran: list[str] = []

    class Cycle:
        def __init__(self, error: BaseException) -> None:
            self.me = self
            self.error = error

        def __del__(self) -> None:
            ran.append(type(self.error).__name__)
            raise self.error

    hook = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: None
    try:
        _burst_leaving(
            factory, lambda: Cycle(KeyboardInterrupt()), lambda: Cycle(ValueError("boom"))
        )
    finally:
        sys.unraisablehook = hook
    assert sorted(ran) == ["KeyboardInterrupt", "ValueError"]
    assert not gcpause.is_paused()


@pytest.mark.usefixtures("collector")
def test_a_stopped_loop_run_again_ends_its_pause_once() -> None:
    loop = asyncio.new_event_loop()
    try:

        def build() -> None:
            gcpause.pause_until_yield()
            loop.stop()

        loop.call_soon(build)
        loop.run_forever()
        # stopped in the very iteration that paused: the pause's callback is still queued
        assert gcpause.is_paused()
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert not gcpause.is_paused()
    finally:
        loop.close()


@pytest.mark.usefixtures("collector")
def test_collect_and_disable_inside_a_burst() -> None:
    """gc.collect, gc.disable and gc.freeze mid-burst: the program's choices stand after."""

    async def burst() -> None:
        gcpause.pause_until_yield()
        gc.collect()
        gc.freeze()
        gc.disable()
        assert gcpause.is_paused()
        await asyncio.sleep(0)
        assert not gcpause.is_paused()
        assert not gc.isenabled()
        gcpause.pause_until_yield()  # switched off by the program: no pause
        assert not gcpause.is_paused()

    try:
        asyncio.run(burst())
    finally:
        # What the burst froze stays frozen: gc.unfreeze() would also thaw what the suite froze
        # once collected (tests/conftest.py), and every later collection of the run would walk
        # it again.
        gc.enable()


# -- builds where the program does not expect them ------------------------------------------------


@ahg.kernel
def noop(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing: only building is exercised."""


SMALL_BULK = 50


@pytest.fixture
def small_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk build (one that pauses the collector) from SMALL_BULK nodes."""
    monkeypatch.setattr(graph_module, "BULK_BUILD_NODES", SMALL_BULK)


def _build(size: int) -> ahg.Graph:
    graph = ahg.Graph()
    for i in range(size):
        graph.add_kernel_node(noop, 1, 1, (i,))
    return graph


@pytest.mark.asyncio
@pytest.mark.usefixtures("collector", "small_bulk")
async def test_a_build_inside_a_host_function_ends_its_pause(device: ahg.Device) -> None:
    built: list[ahg.Graph] = []
    paused: list[bool] = []

    def host(_arg: object) -> None:
        built.append(_build(SMALL_BULK * 2))
        paused.append(gcpause.is_paused())

    with device.create_stream() as stream:
        await stream.launch_host_func(host, None)
        await stream.synchronize()
    assert paused == [True]  # the pump's turn is the burst ...
    assert not gcpause.is_paused()  # ... and the loop's next turn ended it
    built[0].destroy()


@pytest.mark.parametrize("factory", LOOPS)
@pytest.mark.usefixtures("collector", "small_bulk")
def test_a_build_inside_a_finalizer_run_by_the_settle_pass(
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """A finalizer run by the settle pass builds a bulk graph: it neither nests a second
    pause nor leaves one behind."""
    built: list[ahg.Graph] = []

    class Holder:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            built.append(_build(SMALL_BULK * 2))

    _burst_leaving(factory, Holder)
    gc.collect()  # the settle pass may have been a young one
    assert len(built) == 1
    assert not gcpause.is_paused()
    built[0].destroy()


@pytest.mark.usefixtures("collector")
def test_callbacks_cleared_mid_burst_and_the_loop_run_again() -> None:
    """A program that empties gc.callbacks during a burst whose loop stops: the loop's next
    run still ends the pause, and the callbacks stay as the program left them (empty)."""
    saved = list(gc.callbacks)
    loop = asyncio.new_event_loop()
    try:

        def build() -> None:
            gcpause.pause_until_yield()
            gc.callbacks.clear()
            loop.stop()

        loop.call_soon(build)
        loop.run_forever()
        assert gcpause.is_paused()
        gc.collect()  # no callback left to end it: the loop must
        assert gcpause.is_paused()
        loop.call_soon(loop.stop)
        loop.run_forever()
        assert not gcpause.is_paused()
        assert gc.callbacks == []
    finally:
        loop.close()
        gc.callbacks[:] = saved


@pytest.mark.parametrize("factory", LOOPS)
@pytest.mark.usefixtures("collector")
def test_a_loop_stopped_by_its_burst_then_closed_ends_the_pause(
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """Closing the loop drops the queued end of the pause, which ends it as it is freed,
    while the program still holds the closed loop."""
    loop = factory()

    def build() -> None:
        gcpause.pause_until_yield()
        loop.stop()

    loop.call_soon(build)
    loop.run_forever()
    loop.close()
    assert not gcpause.is_paused()
    assert loop.is_closed()
