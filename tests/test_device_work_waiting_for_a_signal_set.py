"""Device work that launches its own executable when the signal-set pool has no free set.

A launch returns its set when it completes, and the body of a kernel or host node (an async
body, running as device work) completes only when it ends; every later launch of the same
executable waits for it. So a body whose launch of its own executable must wait for a set
(the default ``"wait"`` policy, every set in use) would wait for good. The wait is refused
with IllegalState: the body's launch fails with it as its LaunchFailure's cause, and the
device and the executable go on. Waits for a set that does come back still park and end.

``asyncio.wait_for`` is only a guard: before the refusal, each refused launch hung for good.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy

GUARD = 10.0
WHY = "waited for a signal set of"


async def _refused(done: ahg.Completion) -> None:
    """``done``'s launch failed with the refusal as its LaunchFailure's cause."""
    with pytest.raises(ahg.LaunchFailure) as caught:
        await asyncio.wait_for(done.wait(), GUARD)
    cause = caught.value.__cause__
    assert isinstance(cause, ahg.IllegalState), repr(cause)
    assert WHY in str(cause)


async def _still_works(
    device: ahg.Device, stream: ahg.Stream, executable: ahg.GraphExec, ran: list[str]
) -> None:
    """After a refusal: the failure is reported to the stream once, every set is back, and
    the executable launches and completes again."""
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(stream.synchronize(), GUARD)
    pool = executable.statistics().signal_pool
    assert (pool.in_use, pool.waiters) == (0, 0)
    before = len(ran)
    await asyncio.wait_for((await executable.launch(stream)).wait(), GUARD)
    await asyncio.wait_for(device.synchronize(), GUARD)
    assert len(ran) == before + 1
    assert executable.statistics().in_flight == 0


def _launching_itself_once(
    stream: ahg.Stream, **options: int
) -> tuple[ahg.Graph, ahg.GraphExec, list[str]]:
    """A graph of one async host node whose first run launches its own executable on
    ``stream``; the list records every run of the node."""
    graph = ahg.Graph()
    ran: list[str] = []
    box: list[ahg.GraphExec] = []

    async def body() -> None:
        ran.append("body")
        if len(ran) == 1:
            await box[0].launch(stream)

    graph.add_host_node(body)
    box.append(graph.instantiate(**options))
    return graph, box[0], ran


@pytest.mark.asyncio
async def test_a_host_node_launching_its_graph_with_its_only_set_in_use_fails(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph, executable, ran = _launching_itself_once(stream, num_sets=1)
    await _refused(await executable.launch(stream))  # the one set is this launch's own
    assert ran == ["body"]  # the refused launch took nothing and ran nothing
    assert executable.statistics().launches == 1
    await _still_works(device, stream, executable, ran)
    destroy(executable, graph, stream)


@pytest.mark.asyncio
async def test_a_body_launching_its_graph_with_every_default_set_in_use_fails(
    device: ahg.Device,
) -> None:
    """The default pool (sixteen sets, ``"wait"``) with sixteen launches queued: each later
    launch waits for the body's, so no set can come back before the body ends. An ordinary
    task parked for a set meanwhile is not refused, and gets its set once the body failed."""
    stream = device.create_stream()
    graph, executable, ran = _launching_itself_once(stream)
    sets = executable.statistics().signal_pool.sets
    first = await executable.launch(stream)
    for _ in range(sets - 1):
        await executable.launch(stream)
    assert executable.statistics().signal_pool.in_use == sets
    waiting = asyncio.ensure_future(executable.launch(stream))  # parks: no free set
    await _refused(first)
    last = await asyncio.wait_for(waiting, GUARD)
    await asyncio.wait_for(last.wait(), GUARD)
    assert ran == ["body"] * (sets + 1)
    await _still_works(device, stream, executable, ran)
    destroy(executable, graph, stream)


_launched_by_kernel: list[tuple[ahg.GraphExec, ahg.Stream]] = []


@ahg.kernel
async def launches_its_graph(t: ahg.Threads) -> None:
    if _launched_by_kernel:  # once: a later launch's body does nothing
        executable, stream = _launched_by_kernel.pop()
        await executable.launch(stream)


@pytest.mark.asyncio
async def test_an_async_kernel_body_launching_its_graph_with_no_free_set_fails(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(launches_its_graph, 1, 1)
    executable = graph.instantiate(num_sets=1)
    _launched_by_kernel[:] = [(executable, stream)]
    await _refused(await executable.launch(stream))
    assert _launched_by_kernel == []
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(stream.synchronize(), GUARD)
    await asyncio.wait_for((await executable.launch(stream)).wait(), GUARD)
    await asyncio.wait_for(device.synchronize(), GUARD)
    assert executable.statistics().completed == 2
    assert executable.statistics().signal_pool.in_use == 0
    destroy(executable, graph, stream)


@pytest.mark.asyncio
async def test_a_body_launching_its_graph_with_a_set_free_runs(device: ahg.Device) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    ran: list[str] = []
    inner: list[ahg.Completion] = []
    box: list[ahg.GraphExec] = []

    async def body() -> None:
        ran.append("body")
        if len(ran) == 1:
            inner.append(await box[0].launch(stream))

    graph.add_host_node(body)
    executable = graph.instantiate(num_sets=2)
    box.append(executable)
    await asyncio.wait_for((await executable.launch(stream)).wait(), GUARD)
    await asyncio.wait_for(inner[0].wait(), GUARD)
    assert ran == ["body", "body"]
    assert executable.statistics().signal_pool.misses == 0
    destroy(executable, graph, stream)


@pytest.mark.asyncio
async def test_a_body_waiting_for_another_graphs_set_parks_and_gets_it(
    device: ahg.Device,
) -> None:
    """The other executable's only set is held by a launch on another queue that does not
    need the body: the body's launch parks until that launch returns it."""
    stream, other = device.create_stream(), device.create_stream()
    assert stream.queue.index != other.queue.index
    gate = asyncio.Event()
    ran: list[str] = []

    async def held() -> None:
        await gate.wait()
        ran.append("held")

    held_graph = ahg.Graph()
    held_graph.add_host_node(held)
    held_exec = held_graph.instantiate(num_sets=1)
    inner: list[ahg.Completion] = []

    async def body() -> None:
        assert held_exec.statistics().signal_pool.free == 0  # so the launch must park
        gate.set()
        inner.append(await held_exec.launch(other))
        ran.append("body")

    graph = ahg.Graph()
    graph.add_host_node(body)
    executable = graph.instantiate(num_sets=1)
    await held_exec.launch(other)
    await asyncio.wait_for((await executable.launch(stream)).wait(), GUARD)
    await asyncio.wait_for(inner[0].wait(), GUARD)
    assert ran == ["held", "body", "held"]
    assert held_exec.statistics().signal_pool.misses == 0
    destroy(executable, graph, held_exec, held_graph, stream, other)


@pytest.mark.asyncio
async def test_a_task_waiting_for_a_set_while_device_work_runs_parks_and_gets_it(
    device: ahg.Device,
) -> None:
    """An ordinary task parked for the set a running body's launch holds is not device work:
    it waits for that launch and then launches."""
    stream = device.create_stream()
    gate = asyncio.Event()
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    ran: list[str] = []

    async def body() -> None:
        ran.append("body")
        if not started.done():
            started.set_result(None)
        await gate.wait()

    graph = ahg.Graph()
    graph.add_host_node(body)
    executable = graph.instantiate(num_sets=1)
    first = await executable.launch(stream)
    second = asyncio.ensure_future(executable.launch(stream))
    await asyncio.wait_for(started, GUARD)
    assert executable.statistics().signal_pool.waiters == 1
    gate.set()
    await asyncio.wait_for(first.wait(), GUARD)
    await asyncio.wait_for((await asyncio.wait_for(second, GUARD)).wait(), GUARD)
    assert ran == ["body", "body"]
    destroy(executable, graph, stream)
