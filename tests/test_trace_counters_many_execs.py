"""A trace's counter track with many live executables: exact figures, read from few of them.

The track samples signal sets in use, argument-arena bytes and device memory after every packet.
It used to take ``statistics()`` of every live executable per sample, so a traced launch cost
tens of milliseconds in a program holding a thousand executables. Now a sample reads the sets
of the executables in play (launched in the trace, or holding sets as it began) and a per-device
tally of arena bytes; these tests hold the figures to the executables' own statistics.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import GraphExec
from ahipgraph.exec.signal_pool import SignalSetPool
from ahipgraph.tools.trace import CounterRecord


def _empty_graph() -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_empty_node()
    return graph


@ahg.kernel
def _noop(t: ahg.Threads, x: ahg.int32) -> None:
    pass


def _kernel_graph() -> ahg.Graph:
    """A graph whose executables reserve argument-arena chunks (an empty one takes none)."""
    graph = ahg.Graph()
    graph.add_kernel_node(_noop, 1, 1, (7,))
    return graph


def _live_sums(execs: list[ahg.GraphExec]) -> tuple[int, int]:
    stats = [e.statistics() for e in execs if e.state is not ahg.ExecState.CLOSED]
    return (
        sum(s.signal_pool.in_use for s in stats),
        sum(s.arena.bytes_reserved for s in stats),
    )


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[GraphExec]:
    """Every executable whose signal-set pool or statistics a sample reads, in order."""
    seen: list[GraphExec] = []
    getter: Any = vars(GraphExec)["pool"].fget
    statistics = GraphExec.statistics

    def counted_pool(self: GraphExec) -> SignalSetPool:
        seen.append(self)
        pool: SignalSetPool = getter(self)
        return pool

    def counted_statistics(self: GraphExec) -> object:
        seen.append(self)
        return statistics(self)

    monkeypatch.setattr(GraphExec, "pool", property(counted_pool))
    monkeypatch.setattr(GraphExec, "statistics", counted_statistics)
    return seen


@pytest.mark.asyncio
async def test_a_sample_reads_only_the_executables_in_play(
    device: ahg.Device, reads: list[GraphExec]
) -> None:
    graph = _empty_graph()
    idle = [graph.instantiate() for _ in range(50)]
    busy = graph.instantiate()
    stream = device.create_stream()
    with ahg.tracing() as trace:
        reads.clear()  # beginning read each once, for the sets they held: never again
        for _ in range(5):
            await (await busy.launch(stream))
    assert trace.counters
    assert {id(e) for e in reads} == {id(busy)}  # never one of the 50 idle executables
    assert max(c.signal_sets_in_use for c in trace.counters) == 1
    for graph_exec in [*idle, busy]:
        graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_sets_held_as_tracing_begins_are_counted_until_given_back(
    device: ahg.Device,
) -> None:
    graph = _empty_graph()
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    done = [await graph_exec.launch(stream) for _ in range(3)]  # in flight as tracing begins
    assert graph_exec.statistics().signal_pool.in_use == 3
    with ahg.tracing() as trace:
        await stream.launch_host_func(lambda: None)  # a packet of the trace: a first sample
        for handle in done:
            await handle
        await stream.synchronize()
    sets = [c.signal_sets_in_use for c in trace.counters]
    assert sets[0] == 3  # the executable was never launched in the trace, yet is counted
    assert sets[-1] == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_arena_bytes_follow_instantiate_and_destroy_exactly(device: ahg.Device) -> None:
    graph = _kernel_graph()
    before = [graph.instantiate() for _ in range(3)]  # made before tracing began
    stream = device.create_stream()

    async def sample() -> CounterRecord:
        await stream.launch_host_func(lambda: None)
        await stream.synchronize()
        return trace.counters[-1]

    with ahg.tracing() as trace:
        first = await sample()
        assert (first.signal_sets_in_use, first.arena_bytes) == _live_sums(before)
        assert first.arena_bytes > 0
        during = [graph.instantiate() for _ in range(2)]  # never launched
        grown = await sample()
        assert grown.arena_bytes == _live_sums(before + during)[1] > first.arena_bytes
        before[0].destroy()
        during[1].destroy()
        shrunk = await sample()
        assert shrunk.arena_bytes == _live_sums(before + during)[1] < grown.arena_bytes
        for graph_exec in (before[1], before[2], during[0]):
            graph_exec.destroy()
    assert trace.counters[-1].arena_bytes == 0
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_a_failed_first_chunk_is_not_counted(device: ahg.Device) -> None:
    graph = _kernel_graph()
    stream = device.create_stream()
    hog = device.malloc(device.memory_info()[0])  # every byte: the arena's chunk cannot fit
    with ahg.tracing() as trace:
        with pytest.raises(ahg.OutOfMemory):
            graph.instantiate()
        device.free(hog)
        graph_exec = graph.instantiate()
        await (await graph_exec.launch(stream))
        assert trace.counters[-1].arena_bytes == graph_exec.statistics().arena.bytes_reserved
        graph_exec.destroy()
    assert trace.counters[-1].arena_bytes == 0
    graph.destroy()
    stream.destroy()
