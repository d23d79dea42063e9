"""Device work runs in a context of its own, whichever task woke the device.

Host functions already got a fresh context per call, but the device's pump itself was
scheduled in the context of whichever task woke it: every kernel body (sync or ``async``),
completion and destructor of that turn saw that task's context variables. A kernel launched by
a declared host function (``ahg.host_function(fn, reads=...)``) therefore ran as if it were
that function: its ``device.view`` was judged against the function's declaration and the
kernel failed with InvalidValue blaming the host function. And a kernel body saw the current
device of whichever task happened to wake the device first in that turn.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, loop_turns
from cleanup import destroy

REQUEST: ContextVar[str] = ContextVar("request", default="none")


@pytest.mark.asyncio
@pytest.mark.parametrize("body_kind", ["sync", "async"])
async def test_a_kernel_a_declared_host_function_launches_is_not_judged_by_its_declaration(
    device: ahg.Device, body_kind: str
) -> None:
    declared, other = device.malloc(8), device.malloc(8)

    @ahg.kernel
    def sync_body(t: ahg.Threads) -> None:
        device.view(other, np.int64, 1)[0] = 7  # outside the host function's declaration

    @ahg.kernel
    async def async_body(t: ahg.Threads) -> None:
        await asyncio.sleep(0)
        device.view(other, np.int64, 1)[0] = 7

    body = sync_body if body_kind == "sync" else async_body
    first, second = device.create_stream(), device.create_stream()
    launched: list[ahg.Completion] = []

    async def launches() -> None:
        launched.append(await second.launch_kernel(body, 1, 1, ()))

    done = await first.launch_host_func(ahg.host_function(launches, reads=[declared]))
    await done
    await launched[0]  # raised LaunchFailure (InvalidValue naming the host function)
    await second.synchronize()
    assert device.view(other, np.int64, 1)[0] == 7
    destroy(first, second, declared, other)


@pytest.mark.asyncio
async def test_a_kernel_body_sees_no_variable_of_the_task_that_woke_the_device(
    device: ahg.Device,
) -> None:
    seen: list[str] = []

    @ahg.kernel
    def body(t: ahg.Threads) -> None:
        seen.append(REQUEST.get())

    first, second = device.create_stream(), device.create_stream()

    async def launch(stream: ahg.Stream, name: str) -> None:
        REQUEST.set(name)
        await stream.launch_kernel(body, 1, 1, ())

    # Both kernels run in one turn of the pump, which the first task woke.
    await asyncio.gather(launch(first, "first task"), launch(second, "second task"))
    await device.synchronize()
    assert seen == ["none", "none"]
    destroy(first, second)


@pytest.mark.asyncio
async def test_a_kernel_body_starts_on_device_0_whatever_the_launching_task_chose() -> None:
    ahg.configure_devices(2)
    device = ahg.get_device(0)
    seen: list[int] = []

    @ahg.kernel
    async def body(t: ahg.Threads) -> None:
        seen.append(ahg.current_device().ordinal)

    stream = device.create_stream()

    async def launch() -> None:
        ahg.set_device(1)  # this task's choice, not the device work's
        await stream.launch_kernel(body, 1, 1, ())

    await asyncio.create_task(launch())
    await stream.synchronize()
    assert seen == [0]
    stream.destroy()


@pytest.mark.asyncio
async def test_what_a_kernel_body_sets_does_not_reach_later_work_of_the_turn() -> None:
    # A body that chose a device, a capture mode or a variable of its own left them set for
    # every later body of the pump's turn, another stream's included.
    ahg.configure_devices(2)
    device = ahg.get_device(0)
    seen: list[tuple[int, ahg.CaptureMode, str]] = []

    @ahg.kernel
    def chooses(t: ahg.Threads) -> None:
        ahg.set_device(1)
        ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
        REQUEST.set("the first body")

    @ahg.kernel
    def reads(t: ahg.Threads) -> None:
        mode = ahg.exchange_capture_mode(ahg.CaptureMode.GLOBAL)
        seen.append((ahg.current_device().ordinal, mode, REQUEST.get()))

    first, second = device.create_stream(), device.create_stream()
    # All three run in one turn of the pump: the launches only enqueue.
    await first.launch_kernel(chooses, 1, 1, ())
    await first.launch_kernel(reads, 1, 1, ())
    await second.launch_kernel(reads, 1, 1, ())
    await device.synchronize()
    assert seen == [(0, ahg.CaptureMode.GLOBAL, "none")] * 2
    destroy(first, second)


@pytest.mark.asyncio
async def test_a_graph_strand_that_parks_keeps_what_its_earlier_bodies_set(
    device: ahg.Device,
) -> None:
    # A strand's ops share one context: a later body saw what an earlier one set only if the
    # strand never parked between them (resumed on a later turn, it ran in a new context).
    seen: list[str] = []

    @ahg.kernel
    def sets(t: ahg.Threads) -> None:
        REQUEST.set("the strand's first body")

    @ahg.kernel
    def reads(t: ahg.Threads) -> None:
        seen.append(REQUEST.get())

    event = device.create_event()
    stream, other = device.create_stream(), device.create_stream()
    graph = ahg.Graph()
    first = graph.add_kernel_node(sets, 1, 1, ())
    wait = graph.add_event_wait_node(event, deps=[first])
    graph.add_kernel_node(reads, 1, 1, (), deps=[wait])
    held = HeldKernel()
    await held.launch(other)
    await other.record_event(event)
    graph_exec = graph.instantiate()
    await graph_exec.launch(stream)
    await held.started.wait()
    await loop_turns()  # the strand ran its first body and parked at the wait
    assert seen == []
    held.release()
    await device.synchronize()
    assert seen == ["the strand's first body"]
    destroy(graph_exec, graph, event, stream, other)
