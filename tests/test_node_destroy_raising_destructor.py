"""Destroying a node whose embedded graphs own user objects whose destructors raise.

A child-graph node embeds a copy of its graph, and a conditional node one body graph per
branch; destroying the node disposes of them and releases their user objects. A destructor is
user code and may raise anything: as for ``graph.destroy()``, every embedded graph still goes
and the first error is raised afterwards. An IF/ELSE node whose first body's destructor
raised left the second body registered for good, and its user object never destructed, even
once the parent graph was destroyed.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg


class Boom(Exception):
    pass


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_a_conditional_node_destroyed_disposes_every_body_when_a_destructor_raises(
    error: type[BaseException],
) -> None:
    ran: list[object] = []

    def raising(data: object) -> None:
        ran.append(data)
        raise error(data)

    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    node, (then, otherwise) = graph.add_conditional_node(handle, ahg.ConditionalKind.If, 2)
    then.retain_user_object(ahg.UserObject(raising, "then"), move=True)
    otherwise.retain_user_object(ahg.UserObject(ran.append, "else"), move=True)
    with pytest.raises(error, match="then"):
        node.destroy()
    assert ran == ["then", "else"]  # every body went, each destructor once
    assert not then.alive
    assert not otherwise.alive
    assert graph.statistics().nodes == 0
    graph.destroy()  # the leak check at teardown finds no body left registered


def test_a_child_graph_node_destroyed_reraises_its_copy_s_destructor_error() -> None:
    ran: list[object] = []

    def raising(data: object) -> None:
        ran.append(data)
        raise Boom(data)

    child = ahg.Graph()
    child.add_empty_node()
    child.retain_user_object(ahg.UserObject(raising, "copy"))  # the copy takes a reference
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    copy = node.params.graph
    child.destroy()  # the embedded copy holds the object now, with the program's reference
    assert ran == []
    obj = next(iter(copy.user_objects()))
    obj.release()  # the program's reference: the copy holds the last one
    with pytest.raises(Boom, match="copy"):
        node.destroy()
    assert ran == ["copy"]
    assert not copy.alive
    parent.destroy()
