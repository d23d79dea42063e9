"""A user object's destructor taken by the releaser and by a last release at the same moment.

DESIGN.md §3: the destructor runs exactly once. A user object dropped in a reference cycle is
finalized (weak references first) before the ``__del__`` of an object in the same cycle, which
may still release it: the finalizer hands the object's record to the releaser thread, which
runs the destructor, while the collecting thread's ``__del__`` drops the last reference, which
runs it too unless the releaser took it first. Whoever comes second must find nothing: taking
the destructor and its data is one step for every thread.

The moment is made deterministic: a trace hook runs the releaser's step on the collecting
thread inside the last release's own taking of the destructor.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

import pytest

import ahipgraph as ahg


@pytest.fixture
def releaser_step_inside_take() -> Iterator[list[ahg.UserObject]]:
    """Objects appended to the yielded list have the releaser's step (the forgotten handle's
    release) run inside the last release's taking of their destructor: at its second line,
    after the first has run."""
    targets: list[ahg.UserObject] = []

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if frame.f_code.co_name != "take":
            return None
        record = frame.f_locals.get("self")
        seen = [0]

        def lines(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                seen[0] += 1
                if seen[0] == 2 and any(obj._life is record for obj in targets):
                    record.release()  # the releaser thread's step, at this very moment
            return lines

        return lines

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield targets
    finally:
        sys.settrace(previous)


def test_a_last_release_racing_the_releaser_runs_the_destructor_once(
    releaser_step_inside_take: list[ahg.UserObject],
) -> None:
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data")
    releaser_step_inside_take.append(obj)
    assert obj.release()  # the last reference: this call runs the destructor ...
    assert ran == ["data"]  # ... or found the releaser had: once either way
    assert not obj.alive
