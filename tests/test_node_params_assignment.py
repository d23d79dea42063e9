"""A node's parameters are readable and settable through ``node.params``, as API.md says.

``node.params`` reads any node's parameter record, and ``node.set_params(record)`` (HIP's
``hipGraphNodeSetParams``) replaces it with every check; a user who reads API.md's "its
parameters readable and settable" writes ``node.params = replace(node.params, value=7)``, and
gets exactly what ``set_params`` does.
"""

from __future__ import annotations

import dataclasses

import pytest

import ahipgraph as ahg
from cleanup import destroy


def test_assigning_params_sets_them_with_set_params_checks(device: ahg.Device) -> None:
    buf = device.malloc(64)
    graph = ahg.Graph()
    node = graph.add_memset_node(buf, 0, 64)
    try:
        node.params = dataclasses.replace(node.params, value=7)
        assert node.params.value == 7
        with pytest.raises(ahg.InvalidValue):  # another node type's record: refused
            node.params = ahg.HostParams(print, ())
        assert node.params.value == 7
    finally:
        destroy(graph)
        device.free(buf)


def test_set_params_sets_them(device: ahg.Device) -> None:
    """The method form, which the assignment calls."""
    buf = device.malloc(64)
    graph = ahg.Graph()
    node = graph.add_memset_node(buf, 0, 64)
    node.set_params(dataclasses.replace(node.params, value=7))
    assert node.params.value == 7
    destroy(graph)
    device.free(buf)
