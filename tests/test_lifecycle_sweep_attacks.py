"""Handle lifecycles under attack: what a sweep of destroy orders and forgotten handles found.

* ``collect_forgotten`` returned while a handle that a release had just dropped was still
  waiting for the releaser: the flush waited only for a marker queued behind what was pending
  when it was called, and a release (a user-object destructor letting go of its data) puts the
  record of the handle it drops behind that marker. Its destructors then ran after the leak
  check, in the middle of whatever came next.
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import lifecycle


def _wait_until(condition: Any, seconds: float) -> bool:
    """Poll ``condition`` on the releaser thread (it cannot park on the caller: the caller is
    the one being observed) until it holds or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.001)
    return True


def test_collect_forgotten_waits_for_a_handle_a_release_dropped() -> None:
    ran: list[str] = []
    returned = threading.Event()

    def second_destructor(data: object) -> None:
        # Runs on the releaser once the first graph's release dropped the second graph. If
        # collect_forgotten already returned, the main thread says so within the bound.
        ran.append("late" if returned.wait(0.2) else "in time")

    def first_destructor(data: object) -> None:
        # On the releaser, freeing the first graph: hold on until collect_forgotten has queued
        # its marker, so the second graph's record (put when ``data`` goes, after this
        # returns) lands behind it.
        _wait_until(lambda: not lifecycle._RELEASER._queue.empty(), 5.0)
        ran.append("first")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        second = ahg.Graph()
        second.retain_user_object(ahg.UserObject(second_destructor), move=True)
        first = ahg.Graph()
        first.retain_user_object(ahg.UserObject(first_destructor, data=second), move=True)
        cycle: list[object] = [first]
        cycle.append(cycle)  # only a collection frees the first graph: collect_forgotten's
        del first, second, cycle
        ahg.collect_forgotten()
        returned.set()
    assert ran == ["first", "in time"]
    gc.collect()


class _Unprintable(Exception):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_a_with_block_s_exception_survives_a_destructor_that_raises_on_leaving() -> None:
    """Leaving a graph's ``with`` block by an exception destroys the graph, which runs a user
    object's destructor: one that raises must not replace the block's exception, which the
    user must see (the destructor's error rides along as a note)."""

    def raising(_: object) -> None:
        raise ValueError("destructor failed")

    def unprintable(_: object) -> None:
        raise _Unprintable

    for destructor, shown in (
        (raising, "ValueError('destructor failed')"),
        (unprintable, "_Unprintable"),
    ):
        try:
            with ahg.Graph() as graph:
                graph.retain_user_object(ahg.UserObject(destructor), move=True)
                raise KeyError("the block's own")
        except KeyError as error:
            notes = getattr(error, "__notes__", [])
            assert notes == [f"and destroy() on leaving the with block failed: {shown}"]
        assert not graph.alive
    # Without a block exception, the destructor's error is the one raised.
    with pytest.raises(ValueError, match="destructor failed"), ahg.Graph() as graph:
        graph.retain_user_object(ahg.UserObject(raising), move=True)
