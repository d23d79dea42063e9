"""Attacks on several devices at once: what a refused or failed call leaves behind.

Each test names the combination it pins down; see also ``test_multi_device.py`` and
``test_cross_device_destroy_race.py``.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from fakes import GatedHost


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


@pytest.mark.asyncio
async def test_a_cross_device_launch_refused_for_a_destroyed_event_submits_no_wait() -> None:
    """The home stream's wait for the user's stream was submitted before the launch's own
    checks ran: a launch refused for an event node naming a destroyed event left that wait on
    the executable's device, which then stayed busy until the other device's work ended."""
    d0, d1 = ahg.configure_devices(2)
    out = d0.malloc(8)
    event = d0.create_event()
    graph = ahg.Graph()
    kernel = graph.add_kernel_node(add_one, 1, 1, (out,))
    graph.add_event_record_node(event, deps=[kernel])
    graph_exec = graph.instantiate(device=d0)
    graph.destroy()
    stream = d1.create_stream()
    gate = GatedHost()
    await stream.launch_host_func(gate)  # the user's stream has work: the launch must wait
    event.destroy()
    before = d0.statistics()
    with pytest.raises(ahg.InvalidValue, match="destroyed event"):
        await graph_exec.launch(stream)
    assert d0.statistics() == before
    assert d0.in_flight == 0
    assert graph_exec.statistics().launches == 0
    assert graph_exec.statistics().signal_pool.in_use == 0
    gate.open(0)
    await stream.synchronize()
    await d0.synchronize()
    graph_exec.destroy()
    stream.destroy()
    d0.free(out)


@pytest.mark.asyncio
async def test_a_cross_device_launch_the_race_checker_refuses_submits_no_wait() -> None:
    """The same window with the race checker's raise mode: it refuses the launch as the
    launch commits, which came after the home stream's wait had been submitted."""
    d0, d1 = ahg.configure_devices(2)
    out = d0.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph_exec = graph.instantiate(device=d0)
    graph.destroy()
    own, user = d0.create_stream(), d1.create_stream()
    gate = GatedHost()
    with ahg.race_check(on_race="raise"):
        await user.launch_host_func(gate)  # the user's stream has work: the launch must wait
        await own.launch_kernel(add_one, 1, 1, (out,))  # unordered with the graph's kernel
        before = d0.statistics()
        with pytest.raises(ahg.RaceError):
            await graph_exec.launch(user)
        assert d0.statistics() == before
        assert graph_exec.statistics().launches == 0
        gate.open(0)
        await user.synchronize()
        await own.synchronize()
    graph_exec.destroy()
    own.destroy()
    user.destroy()
    d0.free(out)


async def _launch(graph_exec: ahg.GraphExec, stream: ahg.Stream | None, nowait: bool) -> None:
    if nowait:
        graph_exec.launch_nowait(stream)
    else:
        await graph_exec.launch(stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True])
async def test_an_empty_executable_of_a_replaced_device_is_not_launched(nowait: bool) -> None:
    """A graph with no nodes submits nothing, so its launch never reached the engine's claim
    that refuses a replaced device: it answered success where a graph with nodes is
    ``InvalidDevice``, on a stream of the new devices and on one kept from the old."""
    old0, old1 = ahg.configure_devices(2)
    graph = ahg.Graph()
    graph_exec = graph.instantiate(device=old0)
    kept = old1.create_stream()
    ahg.configure_devices(2)
    new1 = ahg.get_device(1)
    stream = new1.create_stream()
    for target in (stream, kept, None):
        with pytest.raises(ahg.InvalidDevice, match="replaced"):
            await _launch(graph_exec, target, nowait)
    assert graph_exec.statistics().launches == 0
    # An empty executable of a configured device on a stream kept from the old devices.
    fresh = graph.instantiate(device=ahg.get_device(0))
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await _launch(fresh, kept, nowait)
    await (await fresh.launch(stream))  # a stream of the configured devices: a no-op
    for handle in (fresh, graph_exec, graph, kept, stream):
        handle.destroy()


@pytest.mark.asyncio
async def test_uploading_an_executable_of_a_replaced_device_is_invalid_device() -> None:
    """It was ``InvalidValue`` saying a stream "belongs to device 0, not device 0"."""
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate(device=ahg.get_device(0))
    ahg.configure_devices(1)
    stream = ahg.get_device(0).create_stream()
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await graph_exec.upload(stream)
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        graph_exec.upload_nowait(stream)
    for handle in (graph_exec, graph, stream):
        handle.destroy()


@pytest.mark.asyncio
async def test_uploading_on_a_stream_kept_from_a_replaced_device_is_invalid_device() -> None:
    """A live executable uploaded on a stream of the devices ``configure_devices`` replaced was
    ``InvalidValue`` saying the stream "belongs to device 0, not device 0"."""
    kept = ahg.get_device(0).create_stream()
    ahg.configure_devices(1)
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        await graph_exec.upload(kept)
    with pytest.raises(ahg.InvalidDevice, match="replaced"):
        graph_exec.upload_nowait(kept)
    for handle in (graph_exec, graph, kept):
        handle.destroy()
