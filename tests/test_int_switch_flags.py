"""Integer arguments the one rule (``core/ints.py``) missed: HIP's switch flags.

``set_node_enabled``, the cooperative launch attribute and ``retain_user_object(move=)`` take
a bool or any int (non-zero meaning on); numpy integers, and the ``numpy.bool_`` a numpy
comparison gives, are the same values. Anything else is refused, and a refused call changes
nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


@ahg.kernel
def noop(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing: only the flags are exercised."""


ON = [True, 1, 5, np.True_, np.int64(1), np.uint8(3), np.int32(-1)]
OFF = [False, 0, np.False_, np.int64(0), np.uint16(0)]
BAD = [None, 1.0, "1", np.float64(1.0), [1]]


@pytest.fixture
def kernel_exec() -> Any:
    graph = ahg.Graph()
    node = graph.add_kernel_node(noop, 1, 1, (1,))
    executable = graph.instantiate()
    yield graph, node, executable
    executable.destroy()
    graph.destroy()


def test_set_node_enabled_takes_numpy_flags(kernel_exec: Any) -> None:
    _, node, executable = kernel_exec
    for off, on in zip(OFF, ON, strict=False):
        executable.set_node_enabled(node, off)
        assert executable.node_enabled(node) is False
        executable.set_node_enabled(node, on)
        assert executable.node_enabled(node) is True
    executable.set_node_enabled(node, np.False_)
    for bad in BAD:
        with pytest.raises(TypeError, match="enabled must be a bool or an int"):
            executable.set_node_enabled(node, bad)
        assert executable.node_enabled(node) is False


def test_cooperative_attribute_takes_numpy_flags(kernel_exec: Any) -> None:
    _, node, _ = kernel_exec
    attr = ahg.KernelNodeAttribute.Cooperative
    for off, on in zip(OFF, ON, strict=False):
        node.set_attribute(attr, on)
        assert node.get_attribute(attr) is True
        node.set_attribute(attr, off)
        assert node.get_attribute(attr) is False
    for bad in BAD[1:]:  # (None is a null value: InvalidValue, as HIP)
        with pytest.raises(TypeError, match="cooperative must be a bool"):
            node.set_attribute(attr, bad)
        assert node.get_attribute(attr) is False


@pytest.mark.parametrize("move", [np.True_, np.int64(1), np.uint8(1)])
def test_retain_user_object_move_takes_numpy_flags(move: Any) -> None:
    ran: list[int] = []
    graph = ahg.Graph()
    obj = ahg.UserObject(ran.append, 1)
    graph.retain_user_object(obj, 1, move=move)
    assert obj.refcount == 1  # moved, not added
    graph.destroy()
    assert ran == [1]


@pytest.mark.parametrize("move", [np.False_, np.int64(0)])
def test_retain_user_object_no_move_takes_numpy_flags(move: Any) -> None:
    graph = ahg.Graph()
    with ahg.UserObject(lambda _d: None) as obj:
        graph.retain_user_object(obj, 1, move=move)
        assert obj.refcount == 2
    graph.destroy()


@pytest.mark.parametrize(
    ("move", "error"),
    [(np.int64(2), ahg.InvalidValue), (2, ahg.InvalidValue), (1.0, TypeError), (None, TypeError)],
)
def test_retain_user_object_refuses_other_flags(move: Any, error: type[Exception]) -> None:
    graph = ahg.Graph()
    with ahg.UserObject(lambda _d: None) as obj:
        with pytest.raises(error):
            graph.retain_user_object(obj, 1, move=move)
        assert obj.refcount == 1
    graph.destroy()
