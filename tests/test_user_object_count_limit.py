"""A user object's count stays within HIP's C ``int``: a retain past INT_MAX is refused."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.lifetime.user_object import INT_MAX


def test_a_retain_past_int_max_is_refused_and_changes_nothing() -> None:
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data", initial_refcount=2)
    with pytest.raises(ahg.InvalidValue, match="more than"):
        obj.retain(INT_MAX - 1)
    assert obj.statistics().refcount == 2
    obj.retain(INT_MAX - 2)  # exactly INT_MAX
    assert obj.statistics().refcount == INT_MAX
    with pytest.raises(ahg.InvalidValue):
        obj.retain()
    obj.release(INT_MAX)
    assert ran == ["data"]


def test_a_graph_retain_past_int_max_is_refused_and_the_graph_owns_nothing_new() -> None:
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data", initial_refcount=2)
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue, match="more than"):
        graph.retain_user_object(obj, INT_MAX - 1)
    stats = obj.statistics()
    assert (stats.refcount, stats.owners) == (2, 0)
    # With move the graph takes over references: its share may not pass INT_MAX either.
    graph.retain_user_object(obj, INT_MAX, move=True)
    with pytest.raises(ahg.InvalidValue, match="more than"):
        graph.retain_user_object(obj, 1, move=True)
    assert obj.statistics().owned == INT_MAX
    graph.destroy()  # gives back what the graph holds: the two references, then the destructor
    assert ran == ["data"]


def test_a_graph_retain_past_int_max_of_its_own_share_is_refused_after_a_move() -> None:
    """A move hands the graph INT_MAX references of a count of 1 (HIP does not check a moved
    count): a retain of new references then fits the object's total, but not the graph's
    share, which would pass INT_MAX."""
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data")
    graph = ahg.Graph()
    graph.retain_user_object(obj, INT_MAX, move=True)
    before = obj.statistics()
    assert (before.refcount, before.owned) == (1, INT_MAX)
    with pytest.raises(ahg.InvalidValue, match="more than"):
        graph.retain_user_object(obj, 1)
    assert obj.statistics() == before
    graph.destroy()
    assert ran == ["data"]
