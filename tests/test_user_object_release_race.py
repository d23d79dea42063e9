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

import ahipgraph as ahg
from racing_step import step_inside


def _clears(line: str) -> bool:
    """The line about to run takes the destructor away (clears or pops it)."""
    return "= None" in line or ".pop()" in line


def test_a_last_release_racing_the_releaser_runs_the_destructor_once() -> None:
    ran: list[object] = []
    obj = ahg.UserObject(ran.append, "data")
    record = obj._life  # what the releaser thread frees for a forgotten object
    with step_inside(record, "take", _clears, record.release):
        assert obj.release()  # the last reference: this call runs the destructor ...
    assert ran == ["data"]  # ... or finds the releaser did: once either way
    assert not obj.alive
