"""Enqueues made by a finalizer or a ``gc.callbacks`` hook that the collector ran in the middle of
another enqueue on the same thread.

Any allocation can start a collection, and an enqueue allocates while it holds its device's
engine lock (a packet, a handle on the loop). A hook or ``__del__`` that enqueued work there
(``memset_nowait``, a graph's ``launch_nowait``) waited for that lock, held by the enqueue it
had interrupted: the thread hung for ever. Now such an enqueue is refused at once
(``IllegalState``) and takes nothing; what needs no submission (making or destroying a stream,
freeing memory, querying) works there; and the same hook outside an enqueue still enqueues.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import leak_report, snapshot
from cleanup import destroy

Window = Callable[[Awaitable[Any]], Awaitable[Any]]


@contextmanager
def collector_window(hook: Callable[[], None]) -> Iterator[Window]:
    """A wrapper for awaited calls: while one runs, every allocation of a tracked object
    starts a (young) collection, each of which runs ``hook`` on this thread first, so the
    hook runs at each point of the call that allocates, inside its enqueue too. Outside the
    calls nothing changes: work the hook enqueued runs later, without running it again."""
    thread = threading.get_ident()
    open_ = busy = False

    def on_collect(phase: str, info: dict[str, Any]) -> None:
        nonlocal busy
        if phase != "start" or not open_ or busy or threading.get_ident() != thread:
            return
        busy = True  # the hook's own allocations do not run it again
        try:
            hook()
        finally:
            busy = False

    async def window(call: Awaitable[Any]) -> Any:
        nonlocal open_
        thresholds = gc.get_threshold()
        gc.set_threshold(1, 1 << 30, 1 << 30)  # young passes only: the suite's heap is large
        open_ = True
        try:
            return await call
        finally:
            open_ = False
            gc.set_threshold(*thresholds)

    gc.callbacks.append(on_collect)
    try:
        yield window
    finally:
        gc.callbacks.remove(on_collect)


async def _enqueue_work(device: ahg.Device, ptr: ahg.DevicePtr, window: Window) -> None:
    """Eager enqueues of every kind and a graph launch, each inside ``window``."""
    stream = device.create_stream()
    other = device.create_stream()
    event = device.create_event()
    graph = ahg.Graph()
    fill = graph.add_memset_node(ptr, 3, 8)
    graph.add_host_node(lambda: None, deps=[fill])
    exec_ = graph.instantiate()
    try:
        for _ in range(3):
            await window(stream.memset(ptr, 2, 8))
            await window(stream.memcpy(ptr + 8, np.ones(8, np.uint8)))
            await window(stream.launch_host_func(lambda: None))
            await window(stream.record_event(event))
            await window(other.wait_event(event))
            await (await window(exec_.launch(other)))
        await device.synchronize()
    finally:
        destroy(exec_, graph, event, other, stream)


@pytest.mark.asyncio
async def test_an_enqueue_from_a_collector_hook_inside_an_enqueue_is_refused_not_a_hang(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(64)
    target = device.create_stream()
    outcomes: list[str] = []
    messages: list[str] = []
    submitted_after_refusal: list[int] = []

    def hook() -> None:
        before = target.statistics().submitted
        try:
            target.memset_nowait(ptr + 32, 1, 8)
        except ahg.IllegalState as error:
            messages.append(str(error))
            submitted_after_refusal.append(target.statistics().submitted - before)
            outcomes.append("refused")
        else:
            assert target.statistics().submitted == before + 1
            outcomes.append("enqueued")

    baseline = snapshot()
    with collector_window(hook) as window:
        await _enqueue_work(device, ptr, window)
    await target.synchronize()
    assert "refused" in outcomes  # some collections came inside an enqueue
    assert all("finalizer or garbage-collector callback" in message for message in messages)
    assert set(submitted_after_refusal) == {0}  # a refused enqueue took nothing
    assert "enqueued" in outcomes  # and others outside it, where the same call works
    assert device.view(ptr + 32, np.uint8, 8).tolist() == [1] * 8
    destroy(target)
    device.free(ptr)
    assert leak_report(baseline) is None


async def _launch_from_a_collector_hook(device: ahg.Device, target_device: ahg.Device) -> None:
    """Launches of a graph on ``device`` onto a stream of ``target_device``, made by a collector
    hook: refused while the hook interrupts an enqueue, run otherwise; nothing left taken."""
    ptr = device.malloc(64)
    graph = ahg.Graph()
    graph.add_memset_node(ptr + 32, 5, 8)
    # Sets for every launch the hook makes outside an enqueue (a few hundred at most): with
    # none free, a launch is refused for that first (NotReady) and never reaches the check.
    exec_ = graph.instantiate(signal_sets=1024)
    target = target_device.create_stream()
    outcomes: list[str] = []
    completions: list[ahg.Completion] = []

    def hook() -> None:
        try:
            completions.append(exec_.launch_nowait(target))
        except ahg.IllegalState:
            outcomes.append("refused")
        else:
            outcomes.append("launched")

    baseline = snapshot()
    with collector_window(hook) as window:
        await _enqueue_work(device, ptr, window)
    for completion in completions:
        await completion
    await target.synchronize()
    assert "refused" in outcomes
    assert "launched" in outcomes
    stats = exec_.statistics()
    assert stats.launches == len(completions) == outcomes.count("launched")
    assert stats.in_flight == 0
    assert stats.signal_pool.free == stats.signal_pool.sets
    assert device.view(ptr + 32, np.uint8, 8).tolist() == [5] * 8
    destroy(exec_, graph, target)
    device.free(ptr)
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_a_graph_launch_from_a_collector_hook_inside_an_enqueue_takes_nothing(
    device: ahg.Device,
) -> None:
    await _launch_from_a_collector_hook(device, device)


@pytest.mark.asyncio
async def test_a_finalizer_inside_an_enqueue_may_make_free_and_destroy_handles(
    device: ahg.Device,
) -> None:
    """What needs no submission works wherever the collector runs it."""
    ptr = device.malloc(64)
    runs: list[int] = []

    def hook() -> None:
        stream = device.create_stream()
        event = device.create_event()
        scratch = device.malloc(16)
        assert stream.query()
        assert event.query()
        device.free(scratch)
        destroy(event, stream)
        runs.append(1)

    baseline = snapshot()
    with collector_window(hook) as window:
        await _enqueue_work(device, ptr, window)
    assert runs
    device.free(ptr)
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_a_cross_device_launch_from_a_collector_hook_inside_an_enqueue_takes_nothing() -> (
    None
):
    """A launch onto another device's stream takes both devices' locks itself: it too is
    refused inside an enqueue (it went through, and two launches of one executable then ran
    at once, the nested one unordered against the one it interrupted)."""
    device, other_device = ahg.configure_devices(2)
    await _launch_from_a_collector_hook(device, other_device)
