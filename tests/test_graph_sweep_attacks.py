"""Hostile inputs to the graph layer that once left a graph inconsistent.

* An add given its dependencies as a one-node list kept that list (the fast path of the
  dependency check), then converted its other arguments, which may run user code (an
  ``__index__``). Code that changed the list then had the node added with the list as it was
  afterwards, unchecked: an edge from a node of another graph, a node listed twice, or the
  caller's own list kept as the node's dependency list, which later changes to it edited.
* ``to_dot(races=...)`` refused a list item with no race parts as not a race report, but one
  with its nodes and no kind, a node that is not a node, or a suggested edge that is not two
  nodes raised AttributeError or IndexError from inside the overlay.
* A node setter converted its arguments (user code), then stored them without looking at the
  node again: one destroyed meanwhile took them and the call succeeded.
* ``graph.add_node(GraphNodeParams(MemAlloc, size))`` refused a numpy integer size that
  ``add_mem_alloc_node`` takes.
* ``to_dot`` with host-node tables read the host function's ``__qualname__`` (user code): a
  callable whose attribute lookup raised made the whole graph unprintable.
* ``release_user_object`` whose destructor raised left the object in the graph's own set:
  the graph kept the dead object alive and its repr counted it as owned.
* ``Graph.owner_node`` had a public setter: ``embedded.owner_node = None`` let the embedded
  copy be destroyed under its live child-graph node (the parent then drew and cloned a
  destroyed graph), and ``graph.owner_node = node`` made a user's graph impossible to destroy
  and silent when dropped.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from types import SimpleNamespace as Namespace
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from reentrant import Converting


@ahg.kernel
def touch(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    pass


def _add(kind: str, graph: ahg.Graph, ptr: ahg.DevicePtr, value: Any, deps: Any) -> ahg.GraphNode:
    if kind == "kernel":
        return graph.add_kernel_node(touch, 1, 1, (ptr, value), deps=deps)
    return graph.add_memset_node(ptr, value, 8, deps=deps)


@pytest.mark.parametrize("kind", ["kernel", "memset"])
@pytest.mark.parametrize("change", ["foreign", "append", "twice"])
def test_a_deps_list_changed_by_a_conversion_is_read_as_it_was_checked(
    device: ahg.Device, kind: str, change: str
) -> None:
    ptr = device.malloc(64)
    graph, other = ahg.Graph(), ahg.Graph()
    root, spare = graph.add_empty_node(), graph.add_empty_node()
    foreign = other.add_empty_node()
    deps: list[Any] = [root]
    edit: dict[str, Callable[[], None]] = {
        "foreign": lambda: deps.__setitem__(0, foreign),
        "append": lambda: deps.append(spare),
        "twice": lambda: deps.append(root),
    }
    node = _add(kind, graph, ptr, Converting(1, edit[change]), deps)
    assert node.dependencies() == [root]
    assert foreign.dependents() == []
    assert root.dependents() == [node]
    assert spare.dependents() == []
    assert graph.statistics().edges == 1
    assert other.statistics().edges == 0
    deps.append(spare)  # the caller's list is still the caller's own
    assert node.dependencies() == [root]
    graph.destroy()
    other.destroy()
    device.free(ptr)


def _report(first: object, second: object, **more: object) -> Namespace:
    return Namespace(first=Namespace(node=first), second=Namespace(node=second), **more)


def test_a_malformed_race_report_is_refused_as_one() -> None:
    graph = ahg.Graph()
    a, b = graph.add_empty_node(), graph.add_empty_node()
    bad = [
        _report(a, b),  # no kind
        _report(1, None, kind="write-after-write"),
        _report(a, "b", kind="write-after-write"),
        _report(a, b, kind="write-after-write", fix_edge=(a,)),
        _report(a, b, kind="write-after-write", fix_edge=(None, b)),
        _report(a, b, kind="write-after-write", fix_edge=a),
    ]
    for report in bad:
        with pytest.raises(TypeError, match="not a race report"):
            graph.to_dot(races=[report])
    good = graph.to_dot(races=[_report(a, b, kind="write-after-write", fix_edge=(a, b))])
    assert "add this edge" in good
    graph.destroy()


SETTERS = ["kernel", "memset", "attribute", "params"]


def _set(kind: str, node: ahg.GraphNode, ptr: ahg.DevicePtr, value: Any) -> None:
    if kind == "kernel":
        node.set_kernel_params(touch, 1, 1, (ptr, value))
    elif kind == "memset":
        node.set_memset_params(ptr, value, 8)
    elif kind == "attribute":
        node.set_attribute(ahg.KernelNodeAttribute.Priority, value)
    else:
        node.params = ahg.MemsetParams(
            dst=ptr, value=value, element_size=1, width=8, height=1, pitch=8
        )


@pytest.mark.parametrize("kind", SETTERS)
@pytest.mark.parametrize("victim", ["node", "graph"])
def test_a_setter_whose_conversion_destroys_its_node_reports_it(
    device: ahg.Device, kind: str, victim: str
) -> None:
    # The setter converted its arguments (user code), then stored them on the node without
    # looking again: a node destroyed meanwhile took the new parameters and the call succeeded.
    ptr = device.malloc(64)
    graph = ahg.Graph()
    if kind in ("kernel", "attribute"):
        node = graph.add_kernel_node(touch, 1, 1, (ptr, 1))
    else:
        node = graph.add_memset_node(ptr, 1, 8)
    kill = node.destroy if victim == "node" else graph.destroy
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        _set(kind, node, ptr, Converting(0, kill))
    assert not node.alive
    if not graph.destroyed:
        assert graph.nodes() == []
        graph.destroy()
    device.free(ptr)


@pytest.mark.parametrize("size", [np.int64(64), np.uint32(64)])
def test_a_generic_alloc_node_takes_a_numpy_size(device: ahg.Device, size: Any) -> None:
    graph = ahg.Graph()
    node = graph.add_node(ahg.GraphNodeParams(ahg.NodeType.MemAlloc, size))
    assert node.params.nbytes == graph.add_mem_alloc_node(size).params.nbytes == 64
    with pytest.raises(ahg.InvalidValue, match="takes MemAllocParams or int"):
        graph.add_node(ahg.GraphNodeParams(ahg.NodeType.MemAlloc, 64.0))
    with pytest.raises(TypeError, match="nbytes must be an int"):
        graph.add_node(ahg.GraphNodeParams(ahg.NodeType.MemAlloc, True))
    assert graph.statistics().nodes == 2
    graph.destroy()


class _NamelessCallable:
    """A callable whose name lookup raises."""

    def __call__(self, *args: object) -> None:
        pass

    def __getattribute__(self, name: str) -> Any:
        if name == "__qualname__":
            raise ZeroDivisionError("no name")
        return object.__getattribute__(self, name)


def test_to_dot_prints_a_host_node_whose_callable_cannot_name_itself() -> None:
    graph = ahg.Graph()
    graph.add_host_node(_NamelessCallable())
    for flags in (ahg.DotFlags.Verbose, ahg.DotFlags.HostNodeParams):
        assert "{fn | args} | {_NamelessCallable | 0}" in graph.to_dot(flags)
    graph.destroy()


class _DestructorError(BaseException):
    pass


def _raising_destructor(data: object) -> None:
    raise _DestructorError(data)


def test_a_release_whose_destructor_raises_still_lets_go_of_the_object() -> None:
    graph = ahg.Graph()
    obj = ahg.UserObject(_raising_destructor, "data")
    graph.retain_user_object(obj, 1, move=True)  # the graph holds the only reference
    with pytest.raises(_DestructorError):
        graph.release_user_object(obj, 1)
    assert graph.user_objects() == {}
    assert "user_objects=0" in repr(graph)
    gone = weakref.ref(obj)
    del obj
    gc.collect()
    assert gone() is None
    graph.destroy()


def test_owner_node_cannot_be_reassigned() -> None:
    graph, child = ahg.Graph(), ahg.Graph()
    child.add_empty_node()
    node = graph.add_child_graph_node(child)
    embedded = node.get_child_graph()
    with pytest.raises(AttributeError):
        embedded.owner_node = None  # type: ignore[misc]
    with pytest.raises(AttributeError):
        child.owner_node = node  # type: ignore[misc]
    assert embedded.owner_node is node
    assert child.owner_node is None
    with pytest.raises(ahg.InvalidValue, match="destroy that node"):
        embedded.destroy()
    assert embedded.alive
    child.destroy()
    graph.destroy()
    assert not embedded.alive


def test_the_graph_s_lineage_and_memory_node_flags_cannot_be_reassigned(
    device: ahg.Device,
) -> None:
    """``has_mem_nodes`` decides whether a graph may be cloned or embedded (two copies of one
    alloc node would reserve one range twice), ``instantiated`` whether it may be instantiated
    again, and ``original`` which graphs a child-graph setter refuses: none is the user's."""
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    with pytest.raises(AttributeError):
        graph.has_mem_nodes = False  # type: ignore[misc]
    assert graph.has_mem_nodes
    with pytest.raises(ahg.NotSupported):
        graph.clone()
    graph_exec = graph.instantiate()
    with pytest.raises(AttributeError):
        graph.instantiated = False  # type: ignore[misc]
    assert graph.instantiated
    with pytest.raises(ahg.NotSupported):
        graph.instantiate()
    plain = ahg.Graph()
    plain.add_empty_node()
    copy = plain.clone()
    with pytest.raises(AttributeError):
        copy.original = None  # type: ignore[misc]
    assert copy.original is plain
    graph_exec.destroy()
    for each in (graph, plain, copy):
        each.destroy()
