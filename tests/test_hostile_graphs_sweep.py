"""A hostile sweep of graphs, executables and user objects: what it found, pinned down.

Each test here failed before the fix it names. The sweep's other attacks (every bad value in
every argument of every add, setter, getter and executable call; callbacks raising
``BaseException``; cancelled launches; calls from a second event loop and from threads;
destroys while launches are in flight) found no other fault the suite did not cover already.
"""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import registry_statistics
from cleanup import destroy


def forget(box: list[Any]) -> list[str]:
    """Drop the handles in ``box`` (the test's only references), collect them, and return the
    ForgottenHandleWarning messages given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        box.clear()
        ahg.collect_forgotten()
    assert all(issubclass(w.category, ahg.ForgottenHandleWarning) for w in caught)
    return [str(w.message) for w in caught]


# -- a clone kept its original alive: a forgotten original was never freed while it lived ----


def test_a_forgotten_child_graph_is_freed_while_the_parent_holds_its_copy() -> None:
    # The usual way to build a child graph: made, embedded, dropped. The embedded copy referred
    # to it as its original, so it stayed alive (nodes, user-object references) until the
    # parent graph was destroyed, and no finalizer ever told the user.
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, "child's")
    box: list[Any] = [ahg.Graph()]
    box[0].add_empty_node()
    box[0].retain_user_object(obj, move=True)  # the child takes the user's reference
    parent = ahg.Graph()
    parent.add_child_graph_node(box[0])
    assert obj.refcount == 2  # the child's and its embedded copy's
    gone = weakref.ref(box[0])
    messages = forget(box)
    assert gone() is None
    assert len(messages) == 1
    assert messages[0].startswith("unclosed graph #")
    assert obj.refcount == 1
    assert ran == []
    parent.destroy()
    assert ran == ["child's"]
    assert obj.refcount == 0


def test_a_clone_loop_that_forgets_each_old_graph_holds_one_graph() -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    before = registry_statistics()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        for _ in range(50):
            graph = graph.clone()  # the old one is dropped, not destroyed
        ahg.collect_forgotten()
    after = registry_statistics()
    assert after["graph"].live == before["graph"].live == 1
    assert after["graph node"].live == before["graph node"].live == 1
    assert graph.original is None
    graph.destroy()


def test_find_in_clone_reaches_past_a_forgotten_graph_in_the_chain() -> None:
    first = ahg.Graph()
    node = first.add_empty_node()
    middle = first.clone()
    last = middle.clone()
    assert last.original is middle
    box: list[Any] = [middle]
    del middle
    gone = weakref.ref(box[0])
    assert len(forget(box)) == 1
    assert gone() is None
    assert last.original is first  # the nearest live graph it descends from
    twin = last.find_in_clone(node)
    assert twin.id == node.id
    assert first.find_in_clone(twin) is node
    destroy(first, last)


def test_a_forgotten_graph_s_conditional_handle_stays_usable_in_its_clone() -> None:
    first = ahg.Graph()
    middle = first.clone()
    handle = middle.conditional_handle()
    last = middle.clone()
    box: list[Any] = [middle]
    del middle
    assert len(forget(box)) == 1
    gc.collect()
    # ``last`` descends from the graph that made the handle: its nodes may use it
    node, bodies = last.add_conditional_node(handle, ahg.ConditionalKind.If)
    assert node.type is ahg.NodeType.Conditional
    assert len(bodies) == 1
    destroy(first, last)


# -- a node's graph and id could be reassigned, corrupting both graphs ------------------------


def test_a_node_s_graph_and_id_cannot_be_reassigned() -> None:
    # Moved to another graph, a node passed that graph's membership checks without being in
    # it: an edge to it made both graphs report a cycle, and destroying it raised KeyError.
    # Given another node's id, destroying it took that node out of the graph's index.
    graph, other = ahg.Graph(), ahg.Graph()
    node = graph.add_empty_node()
    later = graph.add_empty_node(deps=node)
    stranger = other.add_empty_node()
    with pytest.raises(AttributeError):
        node.graph = other  # type: ignore[misc]
    with pytest.raises(AttributeError):
        node.id = later.id  # type: ignore[misc]
    assert node.graph is graph
    assert node.id != later.id
    with pytest.raises(ahg.InvalidValue, match="another graph"):
        other.add_dependencies(node, stranger)
    node.destroy()
    assert graph.nodes() == [later]
    assert other.nodes() == [stranger]
    destroy(graph, other)


# -- a handle's registry id could be reassigned: its destroy then retired another handle -------


def test_an_exec_s_registry_handle_cannot_be_reassigned() -> None:
    # Given another executable's handle, destroying one retired the other's registration: the
    # other then said "already destroyed" to its own destroy() and was never freed.
    graph = ahg.Graph()
    graph.add_empty_node()
    first, second = graph.instantiate(), graph.instantiate()
    with pytest.raises(AttributeError):
        first.hid = second.hid  # type: ignore[misc]
    before = registry_statistics()["graph exec"].live
    first.destroy()
    assert second.alive
    second.destroy()
    assert registry_statistics()["graph exec"].live == before - 2
    graph.destroy()


def test_a_graph_s_and_a_user_object_s_registry_handles_cannot_be_reassigned() -> None:
    graph, other = ahg.Graph(), ahg.Graph()
    with pytest.raises(AttributeError):
        graph.hid = other.hid  # type: ignore[misc]
    ran: list[str] = []
    obj, kept = ahg.UserObject(ran.append, "obj"), ahg.UserObject(ran.append, "kept")
    with pytest.raises(AttributeError):
        obj.hid = kept.hid  # type: ignore[misc]
    before = registry_statistics()["user object"].live
    assert obj.release()
    assert registry_statistics()["user object"].live == before - 1
    assert kept.release()
    assert registry_statistics()["user object"].live == before - 2
    assert ran == ["obj", "kept"]
    destroy(graph, other)


@pytest.mark.parametrize("kind", ["stream", "event"])
def test_a_stream_s_and_an_event_s_registry_handles_cannot_be_reassigned(kind: str) -> None:
    # As an executable's: given another's handle, destroying one retired the other, whose own
    # destroy() then said "was already destroyed" (InvalidHandle).
    device = ahg.get_device(0)
    make = device.create_stream if kind == "stream" else device.create_event
    registry = "stream" if kind == "stream" else "event"
    before = registry_statistics()[registry].live
    first, second = make(), make()
    with pytest.raises(AttributeError):
        first.hid = second.hid  # type: ignore[misc]
    first.destroy()
    assert second.alive
    second.destroy()
    assert registry_statistics()[registry].live == before


def test_a_graph_s_id_and_lock_cannot_be_reassigned() -> None:
    # HIP's id names the graph (DOT output, the conditional handles it makes) and is fixed; a
    # plain Lock in place of its RLock hung the first nested section (a conditional node's
    # add takes the lock twice).
    graph, other = ahg.Graph(), ahg.Graph()
    with pytest.raises(AttributeError):
        graph.id = other.id  # type: ignore[misc]
    with pytest.raises(AttributeError):
        graph.lock = threading.Lock()  # type: ignore[misc,assignment]
    assert graph.id != other.id
    node, bodies = graph.add_conditional_node(graph.conditional_handle(), ahg.ConditionalKind.If)
    assert len(bodies) == 1
    assert f'"graph_{graph.id}_node_{node.id}"' in graph.to_dot()
    destroy(graph, other)


def test_an_exec_s_device_and_state_cannot_be_reassigned(
    ahg_devices: Callable[..., list[ahg.Device]],
) -> None:
    # Given another device, a destroyed executable freed its conditional cells there: the
    # cell on its own device stayed allocated for good.
    first, second = ahg_devices(2)
    graph = ahg.Graph()
    _, bodies = graph.add_conditional_node(graph.conditional_handle(1), ahg.ConditionalKind.If)
    bodies[0].add_empty_node()
    in_use = first.memory_info().free
    graph_exec = graph.instantiate()
    assert first.memory_info().free < in_use  # its cell
    for name, value in (
        ("device", second),
        ("flags", ahg.InstantiateFlags.UPLOAD),
        ("state", ahg.ExecState.CLOSED),
        ("arena", None),
    ):
        with pytest.raises(AttributeError):
            setattr(graph_exec, name, value)
    assert graph_exec.device is first
    assert graph_exec.state is ahg.ExecState.OPEN
    graph_exec.destroy()
    assert first.memory_info().free == in_use
    graph.destroy()


def test_emptying_an_exec_s_user_objects_does_not_keep_their_references() -> None:
    # The executable's own list was public: emptied, its references were never given back
    # and the destructor never ran.
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, "obj")
    graph = ahg.Graph()
    graph.add_empty_node()
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()
    assert graph_exec.user_objects == (obj,)
    with pytest.raises(AttributeError):
        graph_exec.user_objects = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        graph_exec.user_objects.clear()  # type: ignore[attr-defined]
    graph.destroy()
    assert ran == []
    graph_exec.destroy()
    assert ran == ["obj"]
    assert obj.refcount == 0


# -- an executable kept the graph it was made from alive, through its embedded graphs ---------


def _with_child_graph(graph: ahg.Graph) -> None:
    child = ahg.Graph()
    child.add_empty_node()
    graph.add_child_graph_node(child)
    child.destroy()


def _with_conditional(graph: ahg.Graph) -> None:
    _, bodies = graph.add_conditional_node(graph.conditional_handle(1), ahg.ConditionalKind.If)
    bodies[0].add_empty_node()


def _with_conditional_in_child(graph: ahg.Graph) -> None:
    child = ahg.Graph()
    _with_conditional(child)
    graph.add_child_graph_node(child)
    child.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "build", [_with_child_graph, _with_conditional, _with_conditional_in_child]
)
async def test_a_forgotten_graph_is_freed_while_its_executable_lives(
    device: ahg.Device, build: Callable[[ahg.Graph], None]
) -> None:
    # The executable's copy of a child-graph node kept the node's embedded graph, and an
    # embedded graph (a conditional body too) kept its node, so the graph it was made from,
    # dropped, was never freed while the executable lived: its nodes, and its user-object
    # references, with no ForgottenHandleWarning.
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, "obj")
    box: list[Any] = [ahg.Graph()]
    build(box[0])
    box[0].retain_user_object(obj, move=True)
    graph_exec = box[0].instantiate()
    assert obj.refcount == 2  # the graph's and the executable's
    gone = weakref.ref(box[0])
    messages = forget(box)
    assert gone() is None
    assert any(message.startswith("unclosed graph #") for message in messages)
    assert obj.refcount == 1
    await (await graph_exec.launch())  # still runs: it has its own copy
    assert ran == []
    graph_exec.destroy()
    assert ran == ["obj"]
