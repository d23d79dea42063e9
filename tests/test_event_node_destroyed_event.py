"""A launch whose event node names a destroyed event is refused, and changes nothing.

HIP's event-record and event-wait nodes keep the raw ``hipEvent_t``: launching after
``hipEventDestroy`` uses freed memory. ahipgraph refuses the launch instead, before it takes a
signal set, counts itself or records anything (InvalidValue, the code a graph event node gives
for a destroyed event); giving the executable's node a live event makes it launchable again.
The graph and the executable are still made: the event is only needed by a launch.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["record", "wait"])
async def test_a_destroyed_event_refuses_the_launch_until_the_node_gets_a_live_one(
    device: ahg.Device, kind: str
) -> None:
    out = device.malloc(8)
    gone, live = device.create_event(), device.create_event()
    graph = ahg.Graph()
    first = graph.add_kernel_node(put, 1, 1, [1, out])
    if kind == "record":
        node = graph.add_event_record_node(gone, deps=[first])
    else:
        node = graph.add_event_wait_node(gone, deps=[first])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    gone.destroy()
    before = graph_exec.statistics()
    with pytest.raises(ahg.InvalidValue, match=f"event-{kind} node .* destroyed event"):
        await graph_exec.launch(stream)
    with pytest.raises(ahg.InvalidValue, match="destroyed event"):
        graph_exec.launch_nowait(stream)
    assert graph_exec.statistics() == before  # no launch counted, every signal set back
    assert stream.query()  # nothing was enqueued
    assert int(device.view(out, np.int64)[0]) == 0
    if kind == "record":
        graph_exec.set_event_record_node_event(node, live)
    else:
        graph_exec.set_event_wait_node_event(node, live)
    await (await graph_exec.launch(stream))
    assert int(device.view(out, np.int64)[0]) == 1
    if kind == "record":
        assert live.query()  # the launch recorded the live event
    destroy(graph_exec, graph, stream, live, out)


@pytest.mark.asyncio
async def test_an_event_node_in_a_child_graph_is_checked_too(device: ahg.Device) -> None:
    gone = device.create_event()
    child = ahg.Graph()
    child.add_event_record_node(gone)
    parent = ahg.Graph()
    parent.add_child_graph_node(child)
    graph_exec = parent.instantiate()
    stream = device.create_stream()
    gone.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed event"):
        await graph_exec.launch(stream)
    assert graph_exec.statistics().launches == 0
    destroy(graph_exec, parent, child, stream)
