"""A retain or release count of the user's own integer type, whose ``__index__`` destroys the
graph.

The count is converted after the graph is checked, under the graph's lock, in the calling
thread, which the lock lets back in. A retain then took its references for a graph already
destroyed: nothing would ever give them back, and the destructor never ran. The graph is
checked again once the count is an int; the call is refused and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import ahipgraph as ahg


class DestroyingCount:
    """The int 1, whose conversion destroys ``graph`` first (once)."""

    def __init__(self, graph: ahg.Graph) -> None:
        self.graph = graph

    def __index__(self) -> int:
        if self.graph.alive:
            self.graph.destroy()
        return 1


@pytest.mark.parametrize("call", ["retain", "release"])
def test_a_count_that_destroys_the_graph_is_refused(call: str) -> None:
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, data="ran", initial_refcount=1)
    graph = ahg.Graph()
    graph.retain_user_object(obj, 2)
    method: Callable[..., None] = getattr(graph, f"{call}_user_object")
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        method(obj, DestroyingCount(graph))
    assert graph.destroyed
    assert obj.refcount == 1  # the graph's two references went with it; none was taken
    assert obj.statistics().owners == 0
    obj.release()
    assert ran == ["ran"]
