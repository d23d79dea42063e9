"""A conditional handle is a value, as HIP's is: its fields cannot change after it is made.

Its default, flag, graph and token were plain attributes. Changing one after a node took the
handle bypassed ``conditional_handle``'s checks: a default of -5 or 2**40 then failed
instantiate with numpy's ``OverflowError``, a new token pointed kernels at another handle's
cell, and a new graph id made the handle's own graph refuse it.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

import ahipgraph as ahg

K = ahg.ConditionalKind


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("default", -5),
        ("default", 2**40),
        ("assign_default", "yes"),
        ("graph_id", 999),
        ("token", 5),
    ],
)
def test_no_field_can_be_set_or_deleted(name: str, value: Any) -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    before = repr(handle), handle.token
    with pytest.raises(AttributeError, match="immutable"):
        setattr(handle, name, value)
    with pytest.raises(AttributeError, match="immutable"):
        delattr(handle, name)
    assert (repr(handle), handle.token) == before
    graph.add_conditional_node(handle, K.If)  # still the graph's own, with its default
    graph_exec = graph.instantiate()
    graph_exec.destroy()
    graph.destroy()


def test_a_copy_is_the_handle_and_a_pickle_is_refused() -> None:
    graph = ahg.Graph()
    handle = graph.conditional_handle()
    assert copy.copy(handle) is handle
    assert copy.deepcopy(handle) is handle
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(handle)
    graph.destroy()
