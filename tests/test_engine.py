"""The device engine's event-loop hand-over (issue 9, items 8, 8b and 8c).

* A loop closed (plain ``loop.close()``) while tasks are parked on a launch's completion and on
  the signal-set pool: the abandoned work fails with IllegalState, everything it borrowed comes
  back, and the device works on the next loop.
* Two loops on two threads sharing one device: binding, submission and running are atomic
  under the engine's lock; work runs only on the loop that owns the device.
* The legacy null stream's view of the device's streams while other threads create and destroy
  streams.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.runtime.stream import STREAMS
from fakes import GatedHost


@ahg.kernel
def add_one(t: ahg.Threads, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] += 1


def _baseline(device: ahg.Device) -> tuple[int, int, int, int]:
    return len(EXECS), len(GRAPHS), len(STREAMS), device.memory.bytes_in_use


# -- item 8: a loop closed under parked tasks ------------------------------------------------


@pytest.mark.parametrize("parked_on", ["completion", "pool", "both"])
def test_a_loop_closed_under_parked_tasks_hands_the_device_to_the_next_loop(
    parked_on: str,
) -> None:
    device = ahg.get_device(0)
    before = _baseline(device)
    out = device.malloc(16)
    gates = GatedHost()
    graph = ahg.Graph()
    root = graph.add_host_node(gates)
    graph.add_kernel_node(add_one, 1, 1, (0, out), deps=[root])
    graph_exec = graph.instantiate(signal_sets=1)  # the second launch parks on the pool
    stream = device.create_stream()
    state: dict[str, Any] = {}

    async def first_loop() -> None:
        state["first"] = await graph_exec.launch(stream)
        await gates.started(0)  # the launch is held in its host node
        if parked_on in ("completion", "both"):
            state["waiter"] = asyncio.ensure_future(state["first"].wait())
        if parked_on in ("pool", "both"):
            state["launcher"] = asyncio.ensure_future(graph_exec.launch(stream))
            for _ in range(100):  # one turn each, until the launching task parks on the pool
                if graph_exec.statistics().signal_pool.waiters:
                    break
                await asyncio.sleep(0)
        await asyncio.sleep(0)  # one turn: the completion waiter parks

    loop = asyncio.new_event_loop()
    loop.run_until_complete(first_loop())
    loop.close()  # plain close: the parked tasks are never resumed or cancelled
    assert graph_exec.statistics().signal_pool.in_use == 1

    async def second_loop() -> None:
        # Work of the closed loop says why it failed, not a kernel's fault.
        with pytest.raises(ahg.IllegalState, match="event loop running this work closed"):
            await state["first"]
        with pytest.raises(ahg.IllegalState, match="closed"):
            await stream.synchronize()
        stats = graph_exec.statistics()
        assert (stats.in_flight, stats.signal_pool.free, stats.signal_pool.waiters) == (0, 1, 0)
        # The device and the executable work on this loop: the set came back.
        gates.open(1)
        await (await graph_exec.launch(stream))
        await device.synchronize()

    ahg.run(second_loop)
    assert device.view(out, np.int64, 1).tolist() == [1]  # only the second launch ran
    stats = graph_exec.statistics()
    assert (stats.in_flight, stats.completed) == (0, 2)
    assert stats.signal_pool.free == stats.signal_pool.sets == 1
    assert device.statistics().in_flight == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(out)
    assert _baseline(device) == before


# -- item 8b: two loops on two threads share one device -------------------------------------

_RAN: list[tuple[int, int]] = []  # (which thread submitted, which thread ran it)


@ahg.kernel
def record_thread(t: ahg.Threads, which: ahg.int32) -> None:
    _RAN.append((int(which), threading.get_ident()))


def test_two_loops_on_two_threads_share_a_device_one_owner_at_a_time(
    fast_switching: None,
) -> None:
    device = ahg.get_device(0)
    rounds = 60
    graphs = []
    for which in (0, 1):
        graph = ahg.Graph()
        first = graph.add_kernel_node(record_thread, 1, 1, (which,))
        graph.add_kernel_node(record_thread, 1, 1, (which,), deps=[first])
        graphs.append(graph)
    execs = [graph.instantiate(signal_sets=2) for graph in graphs]
    streams = [device.create_stream(), device.create_stream()]
    idents = [0, 0]
    launched = [0, 0]
    refused = [0, 0]
    errors: list[BaseException] = []
    start = threading.Barrier(2)
    messages: set[str] = set()
    _RAN.clear()

    async def work(which: int) -> None:
        stream, graph_exec = streams[which], execs[which]
        for _ in range(rounds):
            try:
                eager = await stream.launch_kernel(record_thread, 1, 1, (which,))
            except ahg.IllegalState as error:  # the other loop owns the busy device
                messages.add(str(error))
                refused[which] += 1
                await asyncio.sleep(0)
                continue
            replay = await graph_exec.launch(stream)  # the device is this loop's while busy
            launched[which] += 1
            await replay
            await eager
            await stream.synchronize()

    def thread(which: int) -> None:
        idents[which] = threading.get_ident()
        start.wait()
        try:
            asyncio.run(work(which))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=thread, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a loop hung"
    assert errors == []
    assert sum(launched) + sum(refused) == 2 * rounds
    assert all("busy on another event loop" in message for message in messages)
    # Every kernel ran on the thread of the loop that submitted it.
    by_thread = {idents[0]: 0, idents[1]: 1}
    assert len(_RAN) == 3 * sum(launched)
    for which, ran_on in _RAN:
        if by_thread[ran_on] != which:
            pytest.fail(f"work of thread {which} ran on thread {by_thread[ran_on]}")
    for which, graph_exec in enumerate(execs):
        stats = graph_exec.statistics()
        # A refused call took nothing: launches and completions match what was accepted.
        assert (stats.launches, stats.completed, stats.in_flight) == (launched[which],) * 2 + (0,)
        assert stats.signal_pool.free == stats.signal_pool.sets
        graph_exec.destroy()
    assert device.statistics().in_flight == 0
    assert all(queue.pending == 0 for queue in device.queues)
    for graph in graphs:
        graph.destroy()
    for stream in streams:
        stream.destroy()
