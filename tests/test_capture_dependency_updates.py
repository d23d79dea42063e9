"""``update_capture_dependencies`` with every kind of node list, on origins and forks.

HIP's rules (HIP_SEMANTICS §2.6): a stream not capturing is IllegalState; more nodes than the
graph has, a null list, flags other than ADD/SET, or a node that is not a live node of the
capture graph is InvalidValue. ADD appends without duplicates; SET replaces, and what it
replaced no longer counts as an unjoined branch at ``end_capture``. A refused call changes
nothing: the dependency set, the graph and the capture are as they were.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import N, affine, no_capture_left, stream_and_buffer
from cleanup import destroy

ADD, SET = ahg.CaptureDependencies.ADD, ahg.CaptureDependencies.SET


@pytest.fixture
def kit(device: ahg.Device) -> Any:
    with stream_and_buffer(device) as kit:
        yield kit


async def _launch(stream: ahg.Stream, ptr: ahg.DevicePtr) -> ahg.GraphNode:
    work = await stream.launch_kernel(affine, 1, N, (N, 1, 1, ptr, ptr))
    node = work.node  # type: ignore[attr-defined]
    assert isinstance(node, ahg.GraphNode)
    return node


def _graph(stream: ahg.Stream) -> ahg.Graph:
    graph = stream.capture_info().graph
    assert graph is not None
    return graph


def _deps(stream: ahg.Stream) -> tuple[ahg.GraphNode, ...]:
    return stream.capture_info().dependencies


@pytest.mark.asyncio
async def test_refused_lists_change_nothing(kit: Any) -> None:
    stream, ptr = kit
    other = ahg.Graph()
    foreign = other.add_empty_node()
    stream.begin_capture()
    first = await _launch(stream, ptr)
    second = await _launch(stream, ptr)
    graph = _graph(stream)
    dead = graph.add_empty_node()
    dead.destroy()
    before = (_deps(stream), len(graph.nodes()), graph.edges())
    refused: list[tuple[Any, Any, type[Exception]]] = [
        ([foreign], ADD, ahg.InvalidValue),  # a node of another graph
        ([first, foreign], SET, ahg.InvalidValue),  # ... after a good one: nothing is taken
        ([dead], ADD, ahg.InvalidValue),  # a destroyed node
        ([None], ADD, ahg.InvalidValue),  # a null node
        (None, ADD, ahg.InvalidValue),  # a null list
        ([first, second, first], ADD, ahg.InvalidValue),  # more nodes than the graph has
        ([first], 2, ahg.InvalidValue),  # no such flag
        ([first], ADD | SET | 2, ahg.InvalidValue),
        ([first], True, ahg.InvalidValue),  # a bool is not a flag
        ([first], 1.0, ahg.InvalidValue),
        (first, ADD, TypeError),  # a lone node, not a list of them
        (True, ADD, TypeError),  # a bool, a number: said so, not a bare "not iterable"
        (-1, SET, TypeError),
        ([True], ADD, TypeError),
    ]
    for nodes, flags, error in refused:
        with pytest.raises(error) as raised:
            stream.update_capture_dependencies(nodes, flags)
        assert "not iterable" not in str(raised.value)
        assert (_deps(stream), len(graph.nodes()), graph.edges()) == before, (nodes, flags)
    assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE  # never invalidated
    stream.end_capture().destroy()
    destroy(other)
    no_capture_left()


@pytest.mark.asyncio
async def test_duplicates_are_taken_once_and_empty_lists_are_no_ops(kit: Any) -> None:
    stream, ptr = kit
    stream.begin_capture()
    first = await _launch(stream, ptr)
    second = await _launch(stream, ptr)
    await _launch(stream, ptr)
    stream.update_capture_dependencies([first, first], ADD)
    stream.update_capture_dependencies([first], ADD)  # already there
    deps = _deps(stream)
    assert len(deps) == 2
    assert deps[1] is first
    stream.update_capture_dependencies([], ADD)
    assert _deps(stream) == deps
    stream.update_capture_dependencies([second, first, second], SET)
    assert _deps(stream) == (second, first)
    last = await _launch(stream, ptr)
    assert set(last.dependencies()) == {first, second}
    stream.update_capture_dependencies([], SET)  # the next node is a root
    root = await _launch(stream, ptr)
    assert root.dependencies() == []
    # SET moved every replaced node out of the unjoined check: the graph ends cleanly
    graph = stream.end_capture()
    assert len(graph.nodes()) == 5
    destroy(graph)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_fork_updates_its_own_set_and_set_forgives_its_branch(
    device: ahg.Device, kit: Any
) -> None:
    origin, ptr = kit
    fork = device.create_stream()
    event = device.create_event()
    origin.begin_capture()
    head = await _launch(origin, ptr)
    await origin.record_event(event)
    await fork.wait_event(event)
    branch = await _launch(fork, ptr)
    fork.update_capture_dependencies([head], ADD)
    assert _deps(fork) == (branch, head)
    assert _deps(origin) == (head,)  # the origin's set is its own
    fork.update_capture_dependencies([], SET)  # the branch is replaced: not unjoined
    graph = origin.end_capture()
    assert len(graph.nodes()) == 2
    destroy(graph, fork, event)
    no_capture_left()


@pytest.mark.asyncio
async def test_manual_nodes_of_the_capture_graph_may_be_dependencies(kit: Any) -> None:
    stream, ptr = kit
    stream.begin_capture()
    captured = await _launch(stream, ptr)
    graph = _graph(stream)
    manual = graph.add_empty_node()  # added by hand while the capture runs
    stream.update_capture_dependencies([manual], ADD)
    joined = await _launch(stream, ptr)
    assert set(joined.dependencies()) == {captured, manual}
    destroy(stream.end_capture())
    no_capture_left()


@pytest.mark.asyncio
async def test_not_capturing_or_invalidated_or_destroyed(device: ahg.Device, kit: Any) -> None:
    stream, ptr = kit
    with pytest.raises(ahg.IllegalState):
        stream.update_capture_dependencies([], ADD)
    stream.begin_capture()
    await _launch(stream, ptr)
    with pytest.raises(ahg.StreamCaptureUnsupported):
        stream.query()
    with pytest.raises(ahg.IllegalState):  # an invalidated capture takes no updates
        stream.update_capture_dependencies([], ADD)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    gone = device.create_stream()
    gone.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        gone.update_capture_dependencies([], ADD)
    no_capture_left()


@pytest.mark.asyncio
async def test_the_capture_graph_destroyed_under_an_update(kit: Any) -> None:
    stream, ptr = kit
    stream.begin_capture()
    node = await _launch(stream, ptr)
    graph = _graph(stream)
    graph.destroy()  # invalidates the capture: it takes no updates, as any invalidated one
    with pytest.raises(ahg.IllegalState):
        stream.update_capture_dependencies([node], ADD)
    with pytest.raises(ahg.IllegalState):
        stream.update_capture_dependencies([], SET)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    no_capture_left()
