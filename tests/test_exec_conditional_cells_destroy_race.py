"""A setter or update of an executable with conditional nodes, destroyed on another thread
while the change binds its kernels' handle arguments to the executable's cells.

Binding read the cells twice (is there any? then each one's address); a destroy in between
freed them, and the setter failed with a bare ``KeyError``. Now it reads them once and the
change fails as every change of a destroyed executable does: ``InvalidValue``.

The other thread's destroy is made to land at that point by running it from the lookup of the
cells' addresses, the step it raced with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.exec import conditional

K = ahg.ConditionalKind


@ahg.kernel
def decide(t: ahg.Threads, value: ahg.uint32, h: ahg.CondHandle) -> None:
    ahg.set_conditional(h, value)


@pytest.fixture
def destroy_at_address_lookup(monkeypatch: pytest.MonkeyPatch) -> list[ahg.GraphExec]:
    """Executables put in the list are destroyed at the next lookup of cell addresses."""
    victims: list[ahg.GraphExec] = []
    lookup = conditional.Conditionals.addresses

    def racing(self: Any, scope: int, cells: Any = None) -> dict[int, int]:
        while victims:
            victims.pop().destroy()
        return lookup(self, scope, cells)

    monkeypatch.setattr(conditional.Conditionals, "addresses", racing)
    return victims


def _setter(graph_exec: ahg.GraphExec, graph: ahg.Graph, node: ahg.GraphNode, h: Any) -> None:
    graph_exec.set_kernel_node_params(node, decide, 1, 1, (1, h))


def _update(graph_exec: ahg.GraphExec, graph: ahg.Graph, node: ahg.GraphNode, h: Any) -> None:
    new = graph.clone()
    try:
        new.find_in_clone(node).set_kernel_params(decide, 1, 1, (1, h))
        graph_exec.update(new)
    finally:
        new.destroy()


@pytest.mark.parametrize("change", [_setter, _update])
def test_the_change_fails_with_invalid_value(
    device: ahg.Device,
    destroy_at_address_lookup: list[ahg.GraphExec],
    change: Callable[..., None],
) -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=0)
    node = graph.add_kernel_node(decide, 1, 1, (0, handle))
    graph.add_conditional_node(handle, K.If, deps=[node])
    graph_exec = graph.instantiate()
    destroy_at_address_lookup.append(graph_exec)
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        change(graph_exec, graph, node, handle)
    assert not destroy_at_address_lookup  # the destroy did land inside the change
    assert graph_exec.statistics().state == "closed"
    graph.destroy()
