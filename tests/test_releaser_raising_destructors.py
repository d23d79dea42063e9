"""Destructors that raise on the releaser thread.

A forgotten graph's user objects are released on the releaser thread, and a destructor that
raises is reported through ``sys.unraisablehook``, as Python reports an error in ``__del__``.
The report handed the hook a ``SimpleNamespace``; Python's own hook (what a program has when
nothing replaced it: pytest installs a lenient one) accepts only the arguments Python makes
and raised ``TypeError``, which ended the releaser thread. From then on nothing forgotten was
freed and every ``ahg.collect_forgotten()`` timed out. Python's own hook now gets what it
would write, and a failing report never ends the releaser.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import pytest

import ahipgraph as ahg


def _forget_a_graph_owning(destructor: Any) -> None:
    graph = ahg.Graph()
    graph.retain_user_object(ahg.UserObject(destructor), move=True)
    del graph


@pytest.mark.parametrize("error", [ValueError("dtor"), KeyboardInterrupt(), SystemExit(3)])
def test_a_raising_destructor_under_pythons_own_hook_leaves_the_releaser_running(
    device: ahg.Device,
    error: BaseException,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)

    def raises(data: object) -> None:
        raise error

    ran: list[object] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        _forget_a_graph_owning(raises)
        ahg.collect_forgotten(timeout=20)
        _forget_a_graph_owning(ran.append)  # the next forgotten handle is freed as well
        ahg.collect_forgotten(timeout=20)
    assert ran == [None]
    err = capsys.readouterr().err
    assert "Exception ignored while freeing graph" in err
    assert type(error).__name__ in err


def test_a_raising_unraisable_hook_leaves_the_releaser_running(
    device: ahg.Device, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_hook(args: Any) -> None:
        raise RuntimeError("the hook is broken")

    monkeypatch.setattr(sys, "unraisablehook", broken_hook)

    def raises(data: object) -> None:
        raise ValueError("dtor")

    ran: list[object] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        _forget_a_graph_owning(raises)
        ahg.collect_forgotten(timeout=20)
        _forget_a_graph_owning(ran.append)
        ahg.collect_forgotten(timeout=20)
    assert ran == [None]
    assert "ValueError: dtor" in capsys.readouterr().err


def test_collect_forgotten_with_no_time_to_wait_succeeds_when_nothing_is_pending(
    device: ahg.Device,
) -> None:
    """``collect_forgotten(timeout=0)`` asked the releaser thread to answer within no time
    at all, so once that thread existed it raised "forgotten handles are still being freed"
    even with nothing left to free. Now it waits only for what is pending."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
        _forget_a_graph_owning(lambda data: None)  # the releaser thread now exists
        ahg.collect_forgotten(timeout=20)
    for _ in range(3):
        ahg.collect_forgotten(timeout=0)  # nothing pending: no TimeoutError
