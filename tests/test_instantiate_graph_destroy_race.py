"""A graph destroyed on another thread while it is being instantiated.

DESIGN.md §3: instantiate takes one reference to each user object, and the destructor runs when
the last reference goes. ``graph.instantiate()`` and ``graph.destroy()`` on two threads either
fail the instantiate (the graph was gone first: ``InvalidValue``) or give an executable that
holds its user objects until it is freed. The executable's reference must therefore be taken
while the graph still owns the object, not once the executable is assembled: a destroy landing
in between dropped the graph's last reference, and the destructor ran under a live executable.

The window is opened deterministically by running the other thread's call at the moment the
executable is being assembled (the first part it builds is its launcher).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec import graph_exec as graph_exec_module
from cleanup import destroy, run_once
from fakes import run_together


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


@pytest.fixture
def while_assembling(monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], object]], None]:
    """``while_assembling(action)``: the next executable made runs ``action`` on another
    thread after instantiate checked the graph and before the executable is complete."""

    def install(action: Callable[[], object]) -> None:
        real = graph_exec_module.Launcher

        def launcher(*args: object, **kwargs: object) -> object:
            monkeypatch.setattr(graph_exec_module, "Launcher", real)
            assert run_together(action) == []  # the other thread's call, now
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(graph_exec_module, "Launcher", launcher)

    return install


def counting_graph(out: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    return graph


def owning_graph(out: ahg.DevicePtr, ran: list[object]) -> tuple[ahg.Graph, ahg.UserObject]:
    """A graph holding the only reference to a user object whose destructor logs to ``ran``."""
    obj = ahg.UserObject(ran.append, "data")
    graph = counting_graph(out)
    graph.retain_user_object(obj, move=True)
    return graph, obj


@pytest.mark.asyncio
async def test_a_graph_destroyed_as_its_executable_is_assembled_leaves_it_its_user_objects(
    device: ahg.Device, while_assembling: Callable[[Callable[[], object]], None]
) -> None:
    ran: list[object] = []
    out = device.malloc(8)
    graph, obj = owning_graph(out, ran)
    while_assembling(graph.destroy)
    graph_exec = graph.instantiate()
    assert not graph.alive
    assert ran == []  # the executable's reference keeps it
    stats = obj.statistics()
    assert (stats.refcount, stats.owners, stats.owned) == (1, 1, 1)
    assert obj.owners == {graph_exec}
    await run_once(graph_exec, device)
    assert int(device.view(out, np.int64, 1)[0]) == 1
    graph_exec.destroy()
    assert ran == ["data"]  # exactly once, when the executable let go
    destroy(out)


def test_a_graph_releasing_its_user_object_as_the_executable_is_assembled(
    device: ahg.Device, while_assembling: Callable[[Callable[[], object]], None]
) -> None:
    ran: list[object] = []
    out = device.malloc(8)
    graph, obj = owning_graph(out, ran)
    while_assembling(lambda: graph.release_user_object(obj))
    graph_exec = graph.instantiate()
    assert ran == []
    assert obj.statistics().refcount == 1
    graph_exec.destroy()
    assert ran == ["data"]
    destroy(graph, out)


def test_the_program_and_the_graph_letting_go_as_the_executable_is_assembled(
    device: ahg.Device, while_assembling: Callable[[Callable[[], object]], None]
) -> None:
    """The program's ``destroy()`` gives back the program's references only: the one taken
    for the executable is an owner's, not the program's, even before the executable has it."""
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data")  # the program's reference
    out = device.malloc(8)
    graph = counting_graph(out)
    graph.retain_user_object(obj)  # and the graph's own

    def let_go() -> None:
        obj.destroy()
        graph.destroy()

    while_assembling(let_go)
    graph_exec = graph.instantiate()
    assert ran == []
    assert obj.statistics().refcount == 1
    graph_exec.destroy()
    assert ran == ["data"]
    destroy(out)


def test_a_parent_destroyed_as_its_executable_is_assembled_leaves_it_a_child_s_user_objects(
    device: ahg.Device, while_assembling: Callable[[Callable[[], object]], None]
) -> None:
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "child data")
    out = device.malloc(8)
    child = counting_graph(out)
    child.retain_user_object(obj)  # the child, then the parent's embedded copy, own it
    parent = ahg.Graph()
    parent.add_child_graph_node(child)
    child.destroy()
    obj.release()  # the embedded copy holds the only reference
    while_assembling(parent.destroy)
    graph_exec = parent.instantiate()
    assert ran == []
    graph_exec.destroy()
    assert ran == ["child data"]
    destroy(out)


def test_instantiate_racing_destroy_on_threads_never_runs_a_destructor_under_an_executable(
    device: ahg.Device, fast_switching: None
) -> None:
    """Real threads, no hook: whichever wins, a live executable keeps its user object."""
    out = device.malloc(8)
    for _ in range(40):
        ran: list[object] = []
        graph, _ = owning_graph(out, ran)
        made: list[object] = []

        def instantiate(graph: ahg.Graph = graph, made: list[object] = made) -> None:
            try:
                made.append(graph.instantiate())
            except ahg.InvalidValue as error:  # the destroy came first
                made.append(error)

        errors = run_together(instantiate, graph.destroy)
        assert errors == []
        (result,) = made
        if isinstance(result, ahg.GraphExec):
            assert ran == []
            result.destroy()
        assert ran == ["data"]
    destroy(out)
