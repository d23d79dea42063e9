"""Pickles and copies of errors that refer back to themselves, and of users' slotted errors.

A pickle drops the attributes that do not pickle, which it learns by trying each. An attribute
that refers back to its error (the error itself, a list or dict holding it, another error
holding it) used to make that trial pickle the whole error again, trying each attribute again:
with two such attributes the trials doubled at every level and the pickle never finished.
A user's subclass that keeps its fields in ``__slots__`` lost them in every copy.
"""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg

RoundTrip = Callable[[BaseException], Any]

ROUND_TRIPS: list[RoundTrip] = [
    copy.copy,
    copy.deepcopy,
    lambda error: pickle.loads(pickle.dumps(error)),
    lambda error: pickle.loads(pickle.dumps(error, protocol=0)),
]
IDS = ["copy", "deepcopy", "pickle", "pickle0"]


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
