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
            while not graph_exec.statistics().signal_pool.waiters:
                await asyncio.sleep(0)  # one turn: the launching task parks on the pool
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
