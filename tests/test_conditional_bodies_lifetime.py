"""An executable does not hold on to the body graphs of its graph's conditional nodes.

Instantiate copies each body, as it copies a child graph; the executable runs its copies. A
body graph belongs to its conditional node: dropped with its graph (collected, with the
graph's ``ForgottenHandleWarning``) or destroyed with it, it is gone, whatever executables
were made from the graph. (The executable's copy once held the node's parameters as they
were, bodies included: a forgotten graph's bodies and their nodes then stayed registered,
with no owner, for as long as the executable lived; a destroyed graph's stayed in memory.)
Race reports at instantiate still name the body's nodes: the graph is alive then.
"""

from __future__ import annotations

import warnings
import weakref

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import registry_statistics
from cleanup import destroy, replayed_int64


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> None:
    x[0] += 1


def live() -> dict[str, int]:
    """Live handles of each kind, the forgotten ones collected first."""
    ahg.collect_forgotten()
    return {kind: stats.live for kind, stats in registry_statistics().items()}


def conditional_graph(x: ahg.DevicePtr, nested: bool) -> tuple[ahg.Graph, weakref.ref[ahg.Graph]]:
    """A graph whose IF node's body bumps ``x`` (with ``nested``, inside an IF in the body);
    returns it and a weak reference to the innermost body."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    if nested:
        _, (body,) = body.add_conditional_node(handle, ahg.ConditionalKind.If)
    body.add_kernel_node(bump, 1, 1, (x,))
    return graph, weakref.ref(body)


@pytest.mark.asyncio
@pytest.mark.parametrize("nested", [False, True])
async def test_a_forgotten_graph_s_bodies_leave_no_handle_registered(
    device: ahg.Device, nested: bool
) -> None:
    x = device.malloc(8)
    before = live()
    box = [conditional_graph(x, nested)]
    graph_exec = box[0][0].instantiate()
    body = box[0][1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        after = live()
    assert [str(w.message).split(" #")[0] for w in caught] == ["unclosed graph"]
    assert body() is None
    assert after == {**before, "graph exec": before["graph exec"] + 1}
    np.testing.assert_array_equal(await replayed_int64(device, graph_exec, x, 1), [1])
    destroy(graph_exec, x)


@pytest.mark.asyncio
@pytest.mark.parametrize("nested", [False, True])
async def test_a_destroyed_graph_s_bodies_are_freed_while_its_executable_lives(
    device: ahg.Device, nested: bool
) -> None:
    x = device.malloc(8)
    graph, body = conditional_graph(x, nested)
    graph_exec = graph.instantiate()
    graph.destroy()
    del graph
    live()
    assert body() is None
    np.testing.assert_array_equal(await replayed_int64(device, graph_exec, x, 1), [1])
    destroy(graph_exec, x)


def test_an_executable_checked_for_races_holds_no_body_either(device: ahg.Device) -> None:
    x = device.malloc(8)
    graph, body = conditional_graph(x, nested=True)
    graph_exec = graph.instantiate(check_races=True)
    graph.destroy()
    del graph
    live()
    assert body() is None
    destroy(graph_exec, x)


def test_an_update_from_the_same_graph_keeps_the_bodies_unchanged(device: ahg.Device) -> None:
    """The copy no longer holds the bodies it was made from: an update compares the new
    graph's bodies with the copies, and an unchanged graph is still no change."""
    x = device.malloc(8)
    graph, _ = conditional_graph(x, nested=True)
    graph_exec = graph.instantiate()
    result = graph_exec.update(graph)
    assert result.ok
    destroy(graph_exec, graph, x)
