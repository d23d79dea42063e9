"""``copy.copy``, ``copy.deepcopy`` and ``pickle`` of every ``HipError``.

Each round trip keeps the class, the code (and so ``hip_name``), the message and the
attributes set on the error. It used to rebuild from the message alone: the attributes were
lost (notes, an update failure's ``result``, a user's own fields), and a user's subclass whose
``__init__`` takes other arguments could not be copied or pickled at all.

Attributes that refer back to their error (the error itself, a list or dict holding it,
another error holding it) made the pickle's trial of each attribute pickle the whole error
again: with two of them the trials doubled at every level and the pickle never finished. A
user's subclass that keeps its fields in ``__slots__`` lost them in every copy, and one whose
``__setattr__`` refuses changes once it is made could not be copied at all.
"""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import errors

RoundTrip = Callable[[BaseException], Any]

ROUND_TRIPS: list[RoundTrip] = [
    copy.copy,
    copy.deepcopy,
    lambda error: pickle.loads(pickle.dumps(error)),
    lambda error: pickle.loads(pickle.dumps(error, protocol=0)),
]
IDS = ["copy", "deepcopy", "pickle", "pickle0"]

CLASSES = sorted(
    {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, ahg.HipError)
    },
    key=lambda cls: cls.__name__,
)
CODES = [code for code in ahg.ErrorCode if code is not ahg.ErrorCode.Success]


def _same(again: Any, error: ahg.HipError) -> None:
    assert type(again) is type(error)
    assert again.code is error.code
    assert again.code.hip_name == error.code.hip_name
    assert again.message == error.message
    assert str(again) == str(error)


@pytest.mark.parametrize("round_trip", ROUND_TRIPS, ids=IDS)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_class_keeps_class_code_and_message(
    cls: type[ahg.HipError], round_trip: RoundTrip
) -> None:
    for error in (cls("what went wrong"), cls()):
        _same(round_trip(error), error)


@pytest.mark.parametrize("round_trip", ROUND_TRIPS, ids=IDS)
@pytest.mark.parametrize("code", CODES, ids=lambda code: code.name)
def test_errors_built_from_a_code_and_destroyed_handle_errors(
    code: ahg.ErrorCode, round_trip: RoundTrip
) -> None:
    for error in (ahg.HipError(code, "by code"), ahg.HipError(code)):
        _same(round_trip(error), error)
    gone = errors.destroyed_error(code, "handle is gone")
    again = round_trip(gone)
    _same(again, gone)
    assert isinstance(again, ahg.Destroyed)


class _Plain(ahg.InvalidValue):
    pass


class _Positional(ahg.LaunchFailure):
    def __init__(self, what: str, count: int) -> None:
        super().__init__(f"{what} failed {count} times")
        self.what = what
        self.count = count


class _KeywordOnly(ahg.NotReady):
    def __init__(self, *, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _SkipsOurInit(ahg.HipError):
    def __init__(self, first: int, second: int) -> None:
        self.first = first


class _WithOSError(ahg.HipError, OSError):
    pass


_DESTROYED_CLASS: Any = type(errors.destroyed_error(ahg.ErrorCode.InvalidValue, ""))


class _MyDestroyed(_DESTROYED_CLASS):  # type: ignore[misc]
    """A user's subclass of the class a destroyed graph's use raises (``type(error)``)."""


@pytest.mark.parametrize("round_trip", ROUND_TRIPS, ids=IDS)
def test_users_own_subclasses_survive_with_their_fields(round_trip: RoundTrip) -> None:
    plain = _Plain("mine")
    _same(round_trip(plain), plain)
    by_code = _Plain(ahg.ErrorCode.InvalidValue, "mine by code")
    _same(round_trip(by_code), by_code)
    positional = _Positional("kernel", 3)
    again = round_trip(positional)
    _same(again, positional)
    assert (again.what, again.count) == ("kernel", 3)
    keyword = _KeywordOnly(reason="not yet")
    again = round_trip(keyword)
    _same(again, keyword)
    assert again.reason == "not yet"
    skips = _SkipsOurInit(1, 2)
    again = round_trip(skips)
    assert type(again) is _SkipsOurInit
    assert (again.first, again.args) == (1, (1, 2))
    both = _WithOSError("an OSError too")
    _same(round_trip(both), both)
    gone = _MyDestroyed("mine, of a destroyed handle")  # was rebuilt as its base class
    again = round_trip(gone)
    _same(again, gone)
    assert isinstance(again, ahg.Destroyed)


@pytest.mark.parametrize("round_trip", ROUND_TRIPS, ids=IDS)
def test_attributes_and_notes_are_kept(round_trip: RoundTrip) -> None:
    error = ahg.InvalidValue("bad size")
    error.add_note("while adding node 3")
    error.size = 12  # type: ignore[attr-defined]
    error.itself = error  # type: ignore[attr-defined]
    again = round_trip(error)
    _same(again, error)
    assert again.__notes__ == ["while adding node 3"]
    assert again.size == 12
    assert again.itself is (error if round_trip is copy.copy else again)  # a shallow copy shares


def _update_failure() -> ahg.GraphExecUpdateFailure:
    with ahg.Graph() as graph, ahg.Graph() as other:
        graph.add_empty_node()
        other.add_host_node(print)
        with graph.instantiate() as graph_exec, pytest.raises(ahg.GraphExecUpdateFailure) as info:
            graph_exec.update(other)
    return info.value


def test_an_update_failure_keeps_its_result_in_copies_and_drops_it_in_a_pickle() -> None:
    """Its ``result`` names a node of the new graph, a handle that cannot be pickled: the
    pickle drops it (as the class says); a copy keeps it, a deep copy shares it."""
    error = _update_failure()
    result = error.result
    assert result.kind is ahg.UpdateResultKind.NodeTypeChanged
    assert result.node is not None
    assert copy.copy(error).result is result
    deep = copy.deepcopy(error)
    _same(deep, error)
    assert deep.result is result
    again = pickle.loads(pickle.dumps(error))
    _same(again, error)
    assert not hasattr(again, "result")


# -- errors that refer back to themselves, slotted and frozen errors ------------------------


@pytest.mark.timeout(20)
def test_an_error_whose_attributes_refer_back_to_it_pickles_promptly() -> None:
    error: Any = ahg.InvalidValue("cyclic")
    error.itself = error
    error.again = error
    error.in_list = [error, 1]
    error.in_dict = {"error": error}
    error.lock = threading.Lock()  # does not pickle: dropped
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is ahg.InvalidValue
    assert again.message == "cyclic"
    assert again.itself is again
    assert again.again is again
    assert again.in_list[0] is again
    assert again.in_dict["error"] is again
    assert not hasattr(again, "lock")


@pytest.mark.timeout(20)
def test_two_errors_referring_to_each_other_pickle_promptly() -> None:
    first: Any = ahg.InvalidValue("first")
    second: Any = ahg.OutOfMemory("second")
    for name in ("a", "b", "c"):
        setattr(first, name, second)
        setattr(second, name, first)
    again = pickle.loads(pickle.dumps(first))
    assert type(again) is ahg.InvalidValue
    assert type(again.a) is ahg.OutOfMemory
    assert again.a.message == "second"
    assert again.a.b is again
    assert again.c is again.a


class _Slotted(ahg.InvalidValue):
    __slots__ = ("__hidden", "node", "where")

    def __init__(self, message: str, node: int) -> None:
        super().__init__(message)
        self.node = node
        self.__hidden = node * 2

    def hidden(self) -> int:
        return self.__hidden


class _HalfSet(ahg.OutOfMemory):
    __slots__ = "later"


@pytest.mark.parametrize("round_trip", ROUND_TRIPS, ids=IDS)
def test_a_users_slotted_error_keeps_its_slots(round_trip: RoundTrip) -> None:
    error: Any = _Slotted("slotted", 7)
    error.where = "set after it was made"  # not rebuilt by its __init__: copied from the slot
    error.add_note("a note")
    again = round_trip(error)
    assert type(again) is _Slotted
    assert (again.code, again.message, str(again)) == (error.code, "slotted", str(error))
    assert again.node == 7
    assert again.hidden() == 14
    assert again.where == "set after it was made"
    assert again.__notes__ == ["a note"]
    unset = round_trip(_HalfSet("half"))  # a slot never set stays unset
    assert type(unset) is _HalfSet
    assert not hasattr(unset, "later")
    half: Any = _HalfSet("half")
    half.later = 3
    assert round_trip(half).later == 3


class _Frozen(ahg.InvalidValue):
    """A user's error that refuses changes once it is made."""

    def __init__(self, message: str, node: int) -> None:
        super().__init__(message)
        self.node = node
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is frozen")
        super().__setattr__(name, value)


@pytest.mark.parametrize("round_trip", ROUND_TRIPS, ids=IDS)
def test_a_users_frozen_error_is_copied_without_its_setattr(round_trip: RoundTrip) -> None:
    """A copy's attributes go back where they were held; the program's ``__setattr__``,
    which refuses every change once the error is made, is not asked."""
    error = _Frozen("frozen", 4)
    again = round_trip(error)
    assert type(again) is _Frozen
    assert (again.message, again.node, str(again)) == ("frozen", 4, str(error))
    with pytest.raises(AttributeError, match="frozen"):
        again.node = 5
