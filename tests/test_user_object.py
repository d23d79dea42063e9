"""User objects: counts, destructor timing, graph ownership (retain, move, clone, destroy)."""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.lifetime.user_object import INT_MAX, USER_OBJECTS
from cleanup import destroy


class Destructor:
    """Records every call, so a test can assert 'exactly once, with this data'."""

    def __init__(self) -> None:
        self.calls: list[Any] = []

    def __call__(self, data: Any) -> None:
        self.calls.append(data)


# -- creation ------------------------------------------------------------------------------------


def test_create_starts_with_initial_refcount_and_is_registered() -> None:
    before = len(USER_OBJECTS)
    obj = ahg.UserObject(Destructor(), "payload", initial_refcount=3)
    assert obj.refcount == 3
    assert obj.alive
    assert obj.data == "payload"
    assert obj.owners == frozenset()
    assert len(USER_OBJECTS) == before + 1
    assert USER_OBJECTS.get(obj.hid) is obj
    obj.release(3)
    assert len(USER_OBJECTS) == before


@pytest.mark.parametrize("initial", [0, -1, INT_MAX + 1])
def test_create_rejects_out_of_range_initial_count(initial: int) -> None:
    with pytest.raises(ahg.InvalidValue):
        ahg.UserObject(Destructor(), initial_refcount=initial)


def test_create_requires_a_destructor() -> None:
    with pytest.raises(ahg.InvalidValue):
        ahg.UserObject(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ahg.UserObject("not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ahg.UserObject(Destructor(), initial_refcount=1.5)  # type: ignore[arg-type]


def test_initial_refcount_may_be_int_max() -> None:
    obj = ahg.UserObject(Destructor(), initial_refcount=INT_MAX)
    assert obj.refcount == INT_MAX
    assert obj.release(INT_MAX)


# -- the user's retain / release -----------------------------------------------------------------


def test_destructor_runs_once_with_data_when_count_reaches_zero() -> None:
    dtor = Destructor()
    data = object()
    obj = ahg.UserObject(dtor, data, initial_refcount=2)
    obj.retain(3)
    assert obj.refcount == 5
    assert obj.release(4) is False
    assert dtor.calls == []
    assert obj.release(1) is True
    assert dtor.calls == [data]
    assert not obj.alive
    assert "destroyed" in repr(obj)


def test_destructor_gets_none_when_created_without_data() -> None:
    dtor = Destructor()
    ahg.UserObject(dtor).release()
    assert dtor.calls == [None]


def test_over_release_is_a_silent_no_op_and_the_object_survives() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor, initial_refcount=2)
    assert obj.release(3) is False
    assert obj.refcount == 2
    assert dtor.calls == []
    obj.release(2)
    assert dtor.calls == [None]


def test_retain_and_release_of_a_dead_object_do_nothing() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    obj.release()
    obj.retain(5)
    assert obj.refcount == 0
    assert obj.release() is False
    assert dtor.calls == [None]


@pytest.mark.parametrize("count", [0, -3, INT_MAX + 1])
def test_retain_and_release_reject_bad_counts(count: int) -> None:
    obj = ahg.UserObject(Destructor())
    with pytest.raises(ahg.InvalidValue):
        obj.retain(count)
    with pytest.raises(ahg.InvalidValue):
        obj.release(count)
    assert obj.refcount == 1
    destroy(obj)


def test_destructor_exception_reaches_the_releasing_caller_and_the_object_stays_dead() -> None:
    def boom(_: Any) -> None:
        raise RuntimeError("destructor failed")

    obj = ahg.UserObject(boom)
    with pytest.raises(RuntimeError, match="destructor failed"):
        obj.release()
    assert not obj.alive
    assert USER_OBJECTS.get(obj.hid) is None
    assert obj.release() is False  # no second run


# -- the owner hook (adopt / disown) -------------------------------------------------------------


def test_adopt_adds_references_for_an_owner_and_disown_gives_them_back() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    owner = object()
    assert obj._adopt(owner, 3)
    assert obj.refcount == 4
    assert obj._owned_by(owner) == 3
    assert obj.owners == {owner}
    assert obj._disown(owner) is False
    assert obj.refcount == 1
    assert obj.owners == frozenset()
    assert obj.release() is True
    assert dtor.calls == [None]


def test_disown_of_last_references_runs_destructor() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    owner = object()
    obj._adopt(owner, 1, move=True)  # the owner takes over the only reference
    assert obj.refcount == 1
    assert obj._disown(owner) is True
    assert dtor.calls == [None]


def test_adopt_on_dead_object_is_a_no_op() -> None:
    obj = ahg.UserObject(Destructor())
    obj.release()
    assert obj._adopt(object(), 2) is False
    assert obj.refcount == 0
    assert obj.owners == frozenset()


def test_move_more_than_the_caller_holds_succeeds_as_in_hip_and_destructs_once() -> None:
    destructor = Destructor()
    obj = ahg.UserObject(destructor, initial_refcount=2)
    first, second = object(), object()
    obj._adopt(first, 2, move=True)
    assert obj._adopt(second, 5, move=True) is True  # HIP never checks a moved count
    assert obj.refcount == 2
    assert obj.owners == {first, second}
    assert obj._disown(first) is True  # the last two references go: the destructor runs
    assert obj._disown(second) is False
    assert destructor.calls == [None]


def test_disown_more_than_held_or_by_stranger_is_a_no_op() -> None:
    obj = ahg.UserObject(Destructor())
    owner = object()
    obj._adopt(owner, 2)
    assert obj._disown(owner, 3) is False
    assert obj._disown(object()) is False
    assert obj.refcount == 3
    assert obj._disown(owner, 1) is False
    assert obj._owned_by(owner) == 1
    assert obj.refcount == 2
    destroy(obj)


def test_disown_after_user_over_released_owner_references_still_destroys_once() -> None:
    # HIP lets a plain release take references an owner thinks it holds; disown then only
    # drops what is left, and the destructor still runs exactly once.
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    owner = object()
    obj._adopt(owner, 2)
    assert obj.release(2) is False  # refcount 1, owner still "holds" 2
    assert obj._disown(owner) is True
    assert dtor.calls == [None]
    assert obj.refcount == 0


def test_user_release_to_zero_clears_owner_table() -> None:
    obj = ahg.UserObject(Destructor())
    owner = object()
    obj._adopt(owner, 1)
    assert obj.release(2) is True
    assert obj.owners == frozenset()
    assert obj._disown(owner) is False


def test_statistics_and_repr() -> None:
    obj = ahg.UserObject(Destructor(), initial_refcount=2)
    obj._adopt("graph-a", 3)
    stats = obj.statistics()
    assert (stats.refcount, stats.owners, stats.owned, stats.alive) == (5, 1, 3, True)
    assert "refcount=5" in repr(obj)
    assert "owners=1" in repr(obj)
    destroy(obj)


# -- graphs as owners ----------------------------------------------------------------------------


def test_graph_retain_adds_references_and_destroy_releases_them() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor, "d")
    graph = ahg.Graph()
    graph.retain_user_object(obj, 3)
    assert obj.refcount == 4
    assert graph.user_objects() == {obj: 3}
    assert obj.owners == {graph}
    obj.release()
    assert dtor.calls == []
    graph.destroy()  # the destructor runs inside destroy
    assert dtor.calls == ["d"]


def test_graph_retain_with_move_takes_over_the_callers_references() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor, initial_refcount=2)
    graph = ahg.Graph()
    graph.retain_user_object(obj, 2, move=True)
    assert obj.refcount == 2
    assert graph.user_objects() == {obj: 2}
    graph.destroy()
    assert dtor.calls == [None]


def test_graph_release_runs_destructor_on_last_reference() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    graph = ahg.Graph()
    graph.retain_user_object(obj, 1, move=True)
    graph.release_user_object(obj, 1)
    assert dtor.calls == [None]
    assert graph.user_objects() == {}
    graph.destroy()
    assert dtor.calls == [None]


def test_graph_release_of_an_object_it_does_not_own_is_a_no_op() -> None:
    obj = ahg.UserObject(Destructor())
    owner, stranger = ahg.Graph(), ahg.Graph()
    owner.retain_user_object(obj, 1)
    stranger.release_user_object(obj, 1)
    owner.release_user_object(obj, 5)  # more than it owns: also a no-op (HIP goes negative)
    assert obj.refcount == 2
    assert owner.user_objects() == {obj: 1}
    destroy(obj, owner, stranger)


def test_graph_release_in_parts() -> None:
    obj = ahg.UserObject(Destructor())
    graph = ahg.Graph()
    graph.retain_user_object(obj, 4)
    graph.release_user_object(obj, 3)
    assert graph.user_objects() == {obj: 1}
    assert obj.refcount == 2
    graph.release_user_object(obj)
    assert graph.user_objects() == {}
    assert obj.owners == frozenset()
    destroy(obj, graph)


def test_graph_retain_of_dead_object_is_a_no_op() -> None:
    obj = ahg.UserObject(Destructor())
    obj.release()
    graph = ahg.Graph()
    graph.retain_user_object(obj, 2)
    assert graph.user_objects() == {}
    assert obj.refcount == 0
    destroy(graph)


def test_graph_user_object_calls_validate_arguments_in_hip_order() -> None:
    obj = ahg.UserObject(Destructor())
    graph = ahg.Graph()
    with pytest.raises(ahg.InvalidValue):
        graph.retain_user_object(None, 1)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue):
        graph.retain_user_object(obj, 0)
    with pytest.raises(ahg.InvalidValue):
        graph.release_user_object(obj, INT_MAX + 1)
    with pytest.raises(TypeError):
        graph.retain_user_object("obj", 1)  # type: ignore[arg-type]
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph.retain_user_object(obj, 1)
    with pytest.raises(ahg.InvalidValue):
        graph.release_user_object(obj, 1)
    with pytest.raises(ahg.InvalidValue):
        graph.user_objects()
    assert obj.refcount == 1
    destroy(obj)


def test_clone_takes_one_reference_per_owned_object_whatever_the_source_owns() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    graph = ahg.Graph()
    graph.retain_user_object(obj, 5)
    clone = graph.clone()
    assert clone.user_objects() == {obj: 1}
    assert obj.refcount == 1 + 5 + 1
    assert obj.owners == {graph, clone}
    obj.release()
    graph.destroy()
    assert dtor.calls == []
    assert obj.owners == {clone}
    clone.destroy()
    assert dtor.calls == [None]


def test_child_graph_copy_owns_a_reference_released_when_the_node_goes() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    child = ahg.Graph()
    child.retain_user_object(obj, 1, move=True)
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    embedded = node.params.graph
    assert embedded.user_objects() == {obj: 1}
    assert obj.refcount == 2
    child.destroy()
    assert dtor.calls == []
    node.destroy()  # destroys the embedded copy, which held the last reference
    assert dtor.calls == [None]
    parent.destroy()


def test_parent_destroy_releases_embedded_copies_references() -> None:
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    child = ahg.Graph()
    child.retain_user_object(obj, 1, move=True)
    parent = ahg.Graph()
    parent.add_child_graph_node(child)
    child.destroy()
    assert dtor.calls == []
    parent.destroy()
    assert dtor.calls == [None]


def test_graph_destroy_reraises_destructor_failure_after_releasing_everything() -> None:
    def boom(_: Any) -> None:
        raise RuntimeError("boom")

    dtor = Destructor()
    failing = ahg.UserObject(boom)
    fine = ahg.UserObject(dtor)
    graph = ahg.Graph()
    graph.retain_user_object(failing, 1, move=True)
    graph.retain_user_object(fine, 1, move=True)
    with pytest.raises(RuntimeError, match="boom"):
        graph.destroy()
    assert graph.destroyed
    assert not failing.alive
    assert dtor.calls == [None]


def test_executable_style_owner_keeps_object_alive_after_graph_destroy() -> None:
    # The hook the executable layer uses: it adopts one reference per object the graph owns.
    dtor = Destructor()
    obj = ahg.UserObject(dtor)
    graph = ahg.Graph()
    graph.retain_user_object(obj, 1, move=True)
    fake_exec = object()
    for owned in graph.user_objects():
        owned._adopt(fake_exec, 1)
    graph.destroy()
    assert dtor.calls == []
    assert obj.owners == {fake_exec}
    obj._disown(fake_exec)
    assert dtor.calls == [None]


# -- destroy() and `with`: the program's own references ----------------------------------------


def test_a_with_block_releases_the_program_s_references_and_runs_the_destructor() -> None:
    before = len(USER_OBJECTS)
    destructor = Destructor()
    with ahg.UserObject(destructor, "data", initial_refcount=3) as obj:
        obj.retain(2)
        assert destructor.calls == []
    assert destructor.calls == ["data"]
    assert not obj.alive
    assert obj.refcount == 0
    assert len(USER_OBJECTS) == before


def test_destroy_leaves_the_references_graphs_own() -> None:
    destructor = Destructor()
    graph = ahg.Graph()
    obj = ahg.UserObject(destructor, initial_refcount=2)
    graph.retain_user_object(obj, 3)
    obj.destroy()
    assert obj.alive
    assert obj.statistics() == ahg.UserObjectStatistics(3, 1, 3, True)
    obj.destroy()  # nothing of the program's left: no change
    assert obj.refcount == 3
    graph.destroy()
    assert destructor.calls == [None]


def test_destroy_after_a_move_leaves_what_the_graph_took_over() -> None:
    destructor = Destructor()
    graph = ahg.Graph()
    with ahg.UserObject(destructor) as obj:
        graph.retain_user_object(obj, move=True)
    assert destructor.calls == []  # the graph holds the one reference
    graph.destroy()
    assert destructor.calls == [None]


def test_destroy_of_a_dead_object_does_nothing() -> None:
    destructor = Destructor()
    obj = ahg.UserObject(destructor)
    obj.release()
    obj.destroy()
    obj.destroy()
    assert destructor.calls == [None]


def test_destroy_after_plain_releases_took_an_owner_s_references_does_nothing() -> None:
    """HIP lets a plain release drop references an owner thinks it holds: the program then
    holds none of its own, and destroy() must not drop the owner's rest."""
    destructor = Destructor()
    graph = ahg.Graph()
    obj = ahg.UserObject(destructor)
    graph.retain_user_object(obj, 2)
    obj.release(2)  # count 1, the graph "holds" 2
    obj.destroy()
    assert obj.refcount == 1
    graph.destroy()
    assert destructor.calls == [None]
    assert obj.refcount == 0


def test_a_raising_destructor_reaches_the_with_block_s_caller_and_the_object_is_dead() -> None:
    def boom(_data: object) -> None:
        raise KeyboardInterrupt("destructor")

    with pytest.raises(KeyboardInterrupt, match="destructor"), ahg.UserObject(boom) as obj:
        pass
    assert not obj.alive


def test_destroy_from_many_threads_runs_the_destructor_once() -> None:
    import threading

    destructor = Destructor()
    obj = ahg.UserObject(destructor, initial_refcount=1000)
    barrier = threading.Barrier(8)

    def end() -> None:
        barrier.wait(10)
        obj.destroy()
        obj.release()

    threads = [threading.Thread(target=end) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert destructor.calls == [None]
    assert obj.refcount == 0


def test_destroy_inside_a_with_block_then_leaving_it_is_no_error() -> None:
    destructor = Destructor()
    with ahg.UserObject(destructor) as obj:
        obj.destroy()
    assert destructor.calls == [None]
