"""A launch refused for a destroyed event inside a child graph says how to fix it there.

``set_event_record_node_event`` / ``set_event_wait_node_event`` take only the executable's own
nodes, so for a node inside a child graph the refusal points at the child-graph node
(``set_child_graph_node_params``) or an update, which do make it launchable again.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["record", "wait"])
async def test_the_refusal_names_a_fix_that_works(device: ahg.Device, kind: str) -> None:
    gone, live = device.create_event(), device.create_event()
    child, fixed = ahg.Graph(), ahg.Graph()
    if kind == "record":
        inner = child.add_event_record_node(gone)
        fixed.add_event_record_node(live)
    else:
        inner = child.add_event_wait_node(gone)
        fixed.add_event_wait_node(live)
    parent = ahg.Graph()
    holder = parent.add_child_graph_node(child)
    graph_exec = parent.instantiate()
    stream = device.create_stream()
    gone.destroy()
    before = graph_exec.statistics()
    with pytest.raises(ahg.InvalidValue, match="set_child_graph_node_params") as refused:
        await graph_exec.launch(stream)
    assert f"set_event_{kind}_node_event" not in str(refused.value)
    assert graph_exec.statistics() == before
    setter = (
        graph_exec.set_event_record_node_event
        if kind == "record"
        else graph_exec.set_event_wait_node_event
    )
    with pytest.raises(ahg.InvalidValue):  # the inner node is not the executable's own
        setter(inner, live)
    graph_exec.set_child_graph_node_params(holder, fixed)  # what the message says works
    await (await graph_exec.launch(stream))
    assert graph_exec.statistics().launches == before.launches + 1
    destroy(graph_exec, parent, child, fixed, stream, live)


@pytest.mark.asyncio
async def test_a_top_level_node_still_names_its_own_setter(device: ahg.Device) -> None:
    gone = device.create_event()
    graph = ahg.Graph()
    graph.add_event_record_node(gone)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    gone.destroy()
    with pytest.raises(ahg.InvalidValue, match="set_event_record_node_event"):
        await graph_exec.launch(stream)
    destroy(graph_exec, graph, stream)
