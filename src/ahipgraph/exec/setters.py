"""The per-node setters and whole-graph update of :class:`~ahipgraph.GraphExec`.

Module functions over the executable's :class:`~.updater.Updater` (its explicit state); the
public methods of ``GraphExec`` are thin calls to these, and carry the user documentation.
Each setter validates in HIP's order — the executable, then the node handle, then the node's
type, then the new parameters (with the same ``make`` constructors streams and graph nodes
use) — and then hands the change to :meth:`Updater.apply`, which never disturbs a launch
already enqueued. The compatibility rules themselves live in :mod:`.update`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core import gcpause
from ..core.errors import GraphExecUpdateFailure, InvalidValue, Unknown
from ..core.ints import flag_or_none
from ..device.kernel import DimLike, Kernel
from ..device.pointer import DevicePtr, replacements
from ..device.properties import CopyKind
from ..graph.attributes import exec_attribute, exec_with_attribute
from ..graph.graph import live_graph
from ..graph.node import check_not_own_parent
from ..graph.node_type import NodeType
from ..graph.params import event_params, memcpy_1d_set_params, memset_width, revalidate
from ..runtime.event import Event
from ..runtime.launch_attributes import AttributeValue, KernelNodeAttribute
from ..runtime.params import Endpoint, HostParams, KernelParams, MemsetParams
from .conditional import check_handles_known
from .copy_setters import check_same_kind
from .flags import UpdateResult, UpdateResultKind
from .instantiate import check_pointer_origins
from .snapshot import ExecGraph, ExecNode, snapshot, snapshot_sources
from .update import (
    device_limits_problem,
    diff_graphs,
    launches_to_check,
    oversized_arguments,
    shape_difference,
)

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from .updater import Updater

__all__ = [
    "kernel_node_attribute",
    "node_enabled",
    "set_child_graph_node_params",
    "set_event_node_event",
    "set_host_node_params",
    "set_kernel_node_attribute",
    "set_kernel_node_params",
    "set_kernel_record",
    "set_memcpy_node_params",
    "set_memset_node_params",
    "set_node_enabled",
    "update",
]


def set_kernel_node_params(
    updater: Updater,
    node: GraphNode,
    kernel: Kernel,
    grid: DimLike,
    block: DimLike,
    args: Sequence[Any],
    shared_mem: int,
) -> None:
    """``hipGraphExecKernelNodeSetParams``; the node keeps its priority and attributes."""
    exec_node = updater.node(node, NodeType.Kernel)
    params = KernelParams.make(
        kernel, grid, block, args, shared_mem=shared_mem, device=updater.device
    )
    old = exec_node.params  # the node keeps its priority and attributes, as in HIP
    params = replace(params, priority=old.priority, attributes=old.attributes)
    updater.set(exec_node, params)


def kernel_node_attribute(
    updater: Updater, node: GraphNode, attr: KernelNodeAttribute | int
) -> AttributeValue:
    """The executable's value of a kernel node's attribute."""
    exec_node = updater.node(node, NodeType.Kernel)
    return exec_attribute(exec_node.params, attr)


def set_kernel_node_attribute(
    updater: Updater, node: GraphNode, attr: KernelNodeAttribute | int, value: Any
) -> None:
    """A kernel node's priority or access-policy window, in this executable only."""
    exec_node = updater.node(node, NodeType.Kernel)
    updater.set(exec_node, exec_with_attribute(exec_node.params, attr, value))


def set_kernel_record(updater: Updater, node: GraphNode, record: KernelParams) -> None:
    """A whole kernel record (generic setter): priority and attributes included."""
    exec_node = updater.node(node, NodeType.Kernel)
    params = revalidate(record)
    params.check_limits(updater.device)
    updater.set(exec_node, params)


def set_memcpy_node_params(
    updater: Updater,
    node: GraphNode,
    dst: Endpoint,
    src: Endpoint,
    nbytes: int | None,
    kind: CopyKind | int | None,
) -> None:
    """``hipGraphExecMemcpyNodeSetParams1D``: the direction must stay the same."""
    exec_node = updater.node(node, NodeType.Memcpy)
    check_same_kind(exec_node, kind)
    updater.set(exec_node, memcpy_1d_set_params(dst, src, nbytes, kind))


def set_memset_node_params(
    updater: Updater,
    node: GraphNode,
    dst: DevicePtr,
    value: int,
    width: int | None,
    nbytes: int | None,
    element_size: int,
    height: int,
    pitch: int | None,
) -> None:
    """``hipGraphExecMemsetNodeSetParams``."""
    exec_node = updater.node(node, NodeType.Memset)
    call = "GraphExec.set_memset_node_params()"
    params = MemsetParams.make(
        dst,
        value,
        memset_width(width, nbytes, element_size, height, call),
        element_size=element_size,
        height=height,
        pitch=pitch,
    )
    updater.set(exec_node, params)


def set_host_node_params(
    updater: Updater, node: GraphNode, fn: Callable[..., Any], args: Sequence[Any]
) -> None:
    """``hipGraphExecHostNodeSetParams``."""
    exec_node = updater.node(node, NodeType.Host)
    updater.set(exec_node, HostParams.make(fn, args))


def set_event_node_event(
    updater: Updater, node: GraphNode, event: Event, node_type: NodeType
) -> None:
    """``hipGraphExecEventRecordNodeSetEvent`` / ``...EventWaitNodeSetEvent``."""
    exec_node = updater.node(node, node_type)
    updater.apply([(exec_node, event_params(event))])  # null or destroyed: InvalidValue


_SHAPE_CHANGES = (UpdateResultKind.TopologyChanged, UpdateResultKind.NodeTypeChanged)


def set_child_graph_node_params(updater: Updater, node: GraphNode, child: Graph) -> None:
    """``hipGraphExecChildGraphNodeSetParams``: same topology, new node parameters.

    Another topology or node-type sequence is HIP's ``hipErrorUnknown``; a change a node's
    own setter refuses (a memcpy's direction, a 2D memset's shape) is that setter's error.
    """
    exec_node = updater.node(node, NodeType.Graph)
    child = live_graph(child, "child graph")
    check_not_own_parent(node, child)  # its graph, or the graph that was cloned from: Unknown
    new_copy, new_nodes = snapshot(child)
    if not new_copy.flat or child._replacements_seen != replacements():
        check_pointer_origins(_kernel_params(new_copy))  # as update refuses them
    assert exec_node.child is not None
    result, changes = diff_graphs(exec_node.child, new_copy, new_nodes, node, updater.device)
    if result.kind in _SHAPE_CHANGES:  # HIP's validateChildGraphNodeSetParams
        raise Unknown(f"child graph does not match: {result.reason}")
    # HIP compares the whole shape before any node's parameters: a shape that differs after
    # a node whose SetParams refuses the change (or a conditional node's bodies, anywhere in
    # the child) is reported first.
    shape = None if result.ok else shape_difference(exec_node.child, new_copy)
    if shape is None:
        shape = _bodies_difference(updater, exec_node.child, new_copy)
    if shape is not None:
        raise Unknown(f"child graph does not match: {shape}")
    if not result.ok:
        raise InvalidValue(f"child graph node cannot take the change: {result.reason}")
    check_handles_known(updater.conditionals, changes)  # a parameter, not the shape
    changes, why, _ = updater.settle_conditionals(changes)
    if why:  # a conditional node's bodies differ: its shape, not its parameters
        raise Unknown(f"child graph does not match: {why}")
    for _, params in launches_to_check(changes):  # each kernel as its own setter checks it
        params.check_limits(updater.device)
    updater.apply(changes)


def _bodies_difference(updater: Updater, old: ExecGraph, new: ExecGraph) -> str | None:
    """Why a conditional node of ``new`` (a child graph of ``old``'s shape) differs from the
    executable's, or None: an executable keeps the bodies it was made with, so they are part
    of the shape a child-graph setter must keep."""
    if updater.conditionals is None:  # no conditional node anywhere in the executable
        return None
    pairs = [
        (old_node, new_node.params)
        for old_node, new_node in zip(old.walk(), new.walk(), strict=True)
        if old_node.type is NodeType.Conditional
    ]
    _, why, _ = updater.settle_conditionals(pairs)
    return why or None


def set_node_enabled(updater: Updater, node: GraphNode, enabled: bool) -> None:
    """``hipGraphNodeSetEnabled`` on an executable's kernel, memcpy or memset node."""
    exec_node = updater.node(node, NodeType.Kernel, NodeType.Memcpy, NodeType.Memset)
    flag = flag_or_none(enabled)  # any non-zero enables, as in HIP
    if flag is None:
        raise TypeError(f"enabled must be a bool or an int, got {enabled!r}")
    with updater.lock:
        previous, exec_node.enabled = exec_node.enabled, bool(flag)
        try:
            updater.apply([(exec_node, exec_node.params)])
        except BaseException:
            exec_node.enabled = previous  # a failed call changes nothing
            raise


def node_enabled(updater: Updater, node: GraphNode) -> bool:
    """``hipGraphNodeGetEnabled``."""
    return updater.node(node, NodeType.Kernel, NodeType.Memcpy, NodeType.Memset).enabled


def update(updater: Updater, graph: Graph) -> UpdateResult:
    """``hipGraphExecUpdate``: all-or-nothing, every node checked before any is changed."""
    updater.owner._check_alive()
    graph = live_graph(graph)
    # The whole update is one bulk pass that makes several objects per node (the copy, the
    # changes, the new argument slots), none of them garbage: see core.gcpause. Left to the
    # collector, a million-node update ran two full passes over everything alive, a fifth of
    # its time.
    with gcpause.paused():
        new_copy, originals = snapshot_sources(graph)
        if not new_copy.flat or graph._replacements_seen != replacements():
            check_pointer_origins(_kernel_params(new_copy))  # as instantiate refuses them
        if updater.update_columns(new_copy):
            return UpdateResult(UpdateResultKind.Success)
        # The new graph's nodes in the copy's order name a failing node: made only here, as a
        # wide graph's are gathered from far apart in memory (see exec.snapshot.Originals).
        new_nodes = originals.in_order()
        result, changes = diff_graphs(updater.graph, new_copy, new_nodes, device=updater.device)
        # HIP goes index by index and reports the first node whose SetParams fails. The
        # changes are those of the nodes before the one diff_graphs stopped at (all nodes when
        # it passed), in the graph's order: the first of them that the device's limits or the
        # executable's conditional nodes refuse fails before it.
        kept, why, bad = updater.settle_conditionals(changes)
        problem = device_limits_problem(changes, updater.device)
        if problem is not None and (not why or _comes_first(changes, problem[2], bad)):
            kind, why, bad = problem
            result = UpdateResult(kind, _top_level(updater.graph, bad, new_nodes), why)
        elif why:
            culprit = _top_level(updater.graph, bad, new_nodes)
            result = UpdateResult(UpdateResultKind.ParametersChanged, culprit, why)
        changes = kept
        if not result.ok:
            updater.owner._check_alive()  # destroyed meanwhile: that, not what it made differ
            error = GraphExecUpdateFailure(f"{result.kind.name}: {result.reason}")
            error.result = result
            raise error
        try:
            updater.apply(changes)  # check, then commit: a refusal changed nothing
        except InvalidValue:
            # Looked for only once refused, to keep the bulk path free of a pass per node.
            oversized = oversized_arguments(changes, updater.arena.chunk_bytes)
            if oversized is None:
                raise
            updater.owner._check_alive()
            why, bad = oversized
            culprit = _top_level(updater.graph, bad, new_nodes)
            result = UpdateResult(UpdateResultKind.ParametersChanged, culprit, why)
            error = GraphExecUpdateFailure(f"{result.kind.name}: {result.reason}")
            error.result = result
            raise error from None
    return result


def _kernel_params(copy: ExecGraph) -> list[KernelParams]:
    """The parameters of ``copy``'s kernel nodes, its child graphs' included."""
    kernel = NodeType.Kernel
    if copy.flat:
        kinds = copy.types()
        return [
            params
            for kind, params in zip(kinds, copy.params_column(), strict=True)
            if kind is kernel
        ]
    return [node.params for node in copy.walk() if node.type is kernel]


def _comes_first(changes: list[Any], first: ExecNode | None, second: ExecNode | None) -> bool:
    """Whether ``first`` is changed before ``second`` in ``changes`` (the graph's order)."""
    for node, _ in changes:
        if node is first:
            return True
        if node is second:
            return False
    return True


def _top_level(
    graph: ExecGraph, bad: ExecNode | None, new_nodes: list[GraphNode]
) -> GraphNode | None:
    """The new graph's node standing for ``bad``: itself at the top level, else the child-graph
    node holding it, as every other failure inside a child graph names (HIP's error node)."""
    for index, node in enumerate(graph.nodes):
        if node is bad or (
            node.child is not None and any(inner is bad for inner in node.child.walk())
        ):
            return new_nodes[index]
    return None
