"""A user object whose data refers to the graph that owns it (docs/design.md, *Forgotten handles*).

The data is held until the destructor runs, so a strong reference from it to an owning graph keeps
both alive until the graph is destroyed; a weak one lets a forgotten graph go, with its warning,
and the destructor still runs exactly once.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph import testing


@pytest.fixture
def baseline() -> Iterator[testing.Snapshot]:
    before = testing.snapshot()
    yield before
    ahg.collect_forgotten()
    assert testing.leak_report(before) is None


def _forget(box: list[Any]) -> None:
    box.clear()
    ahg.collect_forgotten()


def test_data_referring_weakly_to_its_graph_lets_a_forgotten_graph_go(
    baseline: testing.Snapshot,
) -> None:
    ran: list[object] = []
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    obj = ahg.UserObject(lambda ref: ran.append(ref()), weakref.ref(graph))
    graph.retain_user_object(obj, move=True)  # only the graph holds it
    box: list[Any] = [graph, graph_exec, obj]
    del graph, graph_exec, obj
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph"):
        _forget(box)
    assert ran == [None]  # ran once, after the graph was collected


def test_data_referring_to_its_graph_is_let_go_by_the_graph_s_destroy(
    baseline: testing.Snapshot,
) -> None:
    ran: list[bool] = []
    graph = ahg.Graph()
    graph.add_empty_node()
    obj = ahg.UserObject(lambda data: ran.append(data is graph), graph)
    graph.retain_user_object(obj, move=True)
    graph_exec = graph.instantiate()  # a second owner
    graph.destroy()
    assert ran == []
    assert obj.owners == {graph_exec}
    graph_exec.destroy()
    assert ran == [True]
    assert not obj.alive
    assert obj.data is None  # not kept after the destructor: the graph can go
