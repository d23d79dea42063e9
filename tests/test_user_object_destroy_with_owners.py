"""Adversarial programs against ``UserObject.destroy()`` and ``with`` combined with owners.

``destroy`` releases the program's own references; graphs, clones and executables that own
references keep the object alive, and the last of them to let go runs the destructor once.
"""

from __future__ import annotations

import gc
import threading
import warnings

import pytest

import ahipgraph as ahg


def test_destroy_leaves_owners_holding_it_and_forgetting_it_then_is_quiet() -> None:
    ran: list[str] = []
    graph = ahg.Graph()
    graph.add_empty_node()
    obj = ahg.UserObject(ran.append, "a")
    graph.retain_user_object(obj)
    obj.destroy()
    assert obj.alive
    clone = graph.clone()
    graph.destroy()
    assert obj.alive
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del obj
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert ran == []
    clone.destroy()
    assert ran == ["a"]


@pytest.mark.asyncio
async def test_an_executable_keeps_it_through_a_launch_in_flight(device: ahg.Device) -> None:
    ran: list[str] = []
    graph = ahg.Graph()
    graph.add_empty_node()
    with ahg.UserObject(ran.append, "x") as obj:
        graph.retain_user_object(obj, 2)
        executable = graph.instantiate()
        graph.destroy()
    assert obj.alive  # the executable owns it
    stream = device.create_stream()
    handle = await executable.launch(stream)
    executable.destroy()
    await handle
    await stream.synchronize()
    gc.collect()
    assert ran == ["x"]
    assert not obj.alive
    obj.destroy()  # again: nothing
    assert obj.release() is False
    stream.destroy()


def test_a_raising_destructor_under_with_raises_once_and_ends_the_object() -> None:
    calls: list[int] = []

    def bad(_data: object) -> None:
        calls.append(1)
        raise ValueError("destructor failed")

    with pytest.raises(ValueError, match="destructor failed"), ahg.UserObject(bad) as obj:
        pass
    assert not obj.alive
    obj.destroy()
    assert calls == [1]


def test_destroy_from_many_threads_runs_the_destructor_once() -> None:
    ran: list[int] = []
    graph = ahg.Graph()
    obj = ahg.UserObject(ran.append, 7, initial_refcount=5)
    graph.retain_user_object(obj, 3)
    barrier = threading.Barrier(8)

    def hit() -> None:
        barrier.wait()
        obj.destroy()

    threads = [threading.Thread(target=hit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert obj.alive
    assert obj.refcount == 3  # the graph's
    assert ran == []
    graph.release_user_object(obj, 3)
    assert ran == [7]
    graph.destroy()


def test_a_moved_reference_is_the_owners_not_the_programs() -> None:
    ran: list[str] = []
    graph = ahg.Graph()
    obj = ahg.UserObject(ran.append, "m", initial_refcount=2)
    graph.retain_user_object(obj, 1, move=True)
    obj.destroy()  # the one reference that is still the program's
    assert obj.refcount == 1
    assert ran == []
    graph.destroy()
    assert ran == ["m"]


def test_a_forgotten_object_in_a_cycle_whose_finalizer_then_destroys_it() -> None:
    """A user object dropped in a reference cycle with an object whose ``__del__`` destroys
    it: the collector runs the forgotten-handle finalizer first (weak references before
    ``__del__``), which runs the destructor with a warning; the ``destroy()`` that follows
    must then do nothing, not fail on a destructor already taken."""
    ran = threading.Event()
    calls: list[int] = []
    errors: list[BaseException] = []

    def destructor(_data: object) -> None:
        calls.append(1)
        ran.set()

    class Holder:
        def __init__(self) -> None:
            self.me = self
            self.obj = ahg.UserObject(destructor)

        def __del__(self) -> None:
            ran.wait(30)  # the forgotten-handle finalizer's run comes first
            try:
                self.obj.destroy()
            except BaseException as exc:  # reported to the test, not swallowed as unraisable
                errors.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the forgotten object's warning
        Holder()
        gc.collect()
    assert ran.is_set()
    assert errors == []
    assert calls == [1]


@pytest.mark.parametrize("error", [KeyboardInterrupt, SystemExit, ValueError])
def test_a_destructor_raising_at_graph_destroy_leaves_no_other_object_owned(
    error: type[BaseException],
) -> None:
    """Destroying a graph gives back every user object it owns (its children's too), even
    when a destructor raises a KeyboardInterrupt; the first error comes out after."""
    ran: list[str] = []

    def bad(_data: object) -> None:
        ran.append("bad")
        raise error("destructor")

    graph = ahg.Graph()
    child = ahg.Graph()
    child_obj = ahg.UserObject(ran.append, "child")
    child.retain_user_object(child_obj, move=True)
    graph.add_child_graph_node(child)
    child.destroy()
    objects = [
        ahg.UserObject(bad),
        ahg.UserObject(ran.append, "a"),
        ahg.UserObject(ran.append, "b"),
    ]
    for obj in objects:
        graph.retain_user_object(obj, move=True)
    with pytest.raises(error, match="destructor"):
        graph.destroy()
    assert sorted(ran) == ["a", "b", "bad", "child"]
    assert not any(obj.alive for obj in [*objects, child_obj])
