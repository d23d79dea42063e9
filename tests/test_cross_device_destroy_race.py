"""An executable destroyed on another thread while its first cross-device launch starts.

A launch on another device's stream runs on the executable's own *home* stream, made by the
first such launch (``exec/cross_device.py``). It is made outside the executable's lock (making
a stream takes the engine's lock), so another thread may destroy the executable, and free it,
in between. The freed executable's close() has already run: a home stream installed after it
was never destroyed, and stayed registered for good. The launch must be refused
(``InvalidValue``, the executable was destroyed) with nothing left behind.

The window is opened deterministically: the other thread's destroy runs at the moment the
home stream is being made.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from ahipgraph.exec import launcher as launcher_module
from ahipgraph.testing import leak_report, snapshot
from fakes import GatedHost, loop_turns, run_together


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


@pytest.mark.asyncio
async def test_an_executable_freed_while_its_home_stream_is_made_refuses_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d0, d1 = ahg.configure_devices(2)
    baseline = snapshot()
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data")
    out = d0.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate(device=d0)
    graph.destroy()
    stream = d1.create_stream()
    real = launcher_module.Stream

    class RacingStream:
        """Makes the home stream as the launcher does, with a destroy racing it."""

        @staticmethod
        def _create(*args: object, **kwargs: object) -> ahg.Stream:
            monkeypatch.setattr(launcher_module, "Stream", real)
            assert run_together(graph_exec.destroy) == []  # nothing in flight: freed at once
            return real._create(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(launcher_module, "Stream", RacingStream)
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        await graph_exec.launch(stream)
    assert ran == ["data"]
    stats = graph_exec.statistics()
    assert (stats.state, stats.launches, stats.in_flight) == ("closed", 0, 0)
    assert stats.signal_pool.acquires == 0  # the refused launch gave its set back
    await stream.synchronize()  # nothing was submitted to the user's stream
    assert stream.statistics().submitted == 0
    stream.destroy()
    d0.free(out)
    assert leak_report(baseline) is None  # no home stream left registered


@pytest.mark.asyncio
async def test_a_home_stream_made_before_the_destroy_is_destroyed_with_the_executable() -> None:
    """The other order: the launch that made the home stream ran; destroying frees it."""
    d0, d1 = ahg.configure_devices(2)
    baseline = snapshot()
    out = d0.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph_exec = graph.instantiate(device=d0)
    graph.destroy()
    stream = d1.create_stream()
    await (await graph_exec.launch(stream))
    assert run_together(graph_exec.destroy) == []
    with pytest.raises(ahg.InvalidValue):
        await graph_exec.launch(stream)
    await stream.synchronize()
    stream.destroy()
    assert int(d0.view(out, "int64", 1)[0]) == 1
    d0.free(out)
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_a_cross_device_launch_refused_after_waiting_for_a_set_submits_nothing() -> None:
    """A cross-device launch parked for a signal set is handed one, and the executable is
    destroyed before the launch resumes (with another launch still in flight, so it is not
    freed yet): the launch is refused (InvalidValue) before it submits anything. It used to
    put its barrier on the executable's home stream first, and only then be refused."""
    d0, d1 = ahg.configure_devices(2)
    baseline = snapshot()
    out = d0.malloc(8)
    gates = GatedHost()
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,), deps=[graph.add_host_node(gates)])
    graph_exec = graph.instantiate(device=d0, signal_sets=2)
    graph.destroy()
    stream = d1.create_stream()
    first = await graph_exec.launch(stream)
    second = await graph_exec.launch(stream)
    parked = asyncio.ensure_future(graph_exec.launch(stream))
    await loop_turns()
    assert graph_exec.statistics().signal_pool.waiters == 1
    submitted = sum(q.submitted for q in d0.statistics().queues)

    async def destroy_after_first() -> None:
        await first  # woken before the parked launch, which the same completion hands a set
        graph_exec.destroy()

    destroyer = asyncio.ensure_future(destroy_after_first())
    gates.open(0)
    await destroyer
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        await parked
    assert sum(q.submitted for q in d0.statistics().queues) == submitted
    gates.open(1)
    await second
    await stream.synchronize()
    assert int(d0.view(out, "int64", 1)[0]) == 2
    assert graph_exec.statistics().state == "closed"
    stream.destroy()
    d0.free(out)
    assert leak_report(baseline) is None
