"""Generic node records: one call adds or changes a node of any kind (``hipGraphAddNode``).

HIP's ``hipGraphNodeParams`` is a tagged union: a node type and the parameter record of that
type. :class:`GraphNodeParams` is the same pair. ``graph.add_node`` hands each kind to the
graph's own ``add_*_node`` method, so a generic add makes exactly the node (and runs exactly
the checks and error codes) the specific call would; ``node.set_params`` and
``exec.set_node_params`` likewise unwrap the record and call the specific setter.

A bad kind — not a node type, one a graph cannot hold (external semaphores, symbol copies), or
a record that is not of the kind named — is ``InvalidValue``, as in HIP; except that adding an
external-semaphore node is ``NotSupported``, HIP's answer for those two kinds in
``hipGraphAddNode`` (a simulated device has no external semaphores to signal or wait on).

Records by kind: Kernel → :class:`KernelParams`; Memcpy → :class:`MemcpyParams`; Memset →
:class:`MemsetParams`; Host → :class:`HostParams`; Graph → :class:`ChildGraphParams` (or a
:class:`Graph`, copied as by ``add_child_graph_node``); Empty → None; EventRecord/WaitEvent →
:class:`EventParams` (or an :class:`Event`); MemAlloc → :class:`MemAllocParams` (its ``nbytes``
and ``device``; the address is chosen by the add and read back from ``node.params.ptr``, as
HIP writes ``dptr`` back) or an int byte count; MemFree → :class:`MemFreeParams` (or a
:class:`DevicePtr`); Conditional → :class:`ConditionalNodeParams`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidValue, NotSupported
from ..core.ints import int_or_none
from ..device.pointer import DevicePtr
from ..runtime.event import Event
from ..runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.pitched import PitchedCopyParams
from .node_type import CREATABLE_NODE_TYPES, NodeType, a_node_of_type
from .params import (
    ChildGraphParams,
    EventParams,
    MemAllocParams,
    MemFreeParams,
    memcpy_params,
    revalidate,
)

if TYPE_CHECKING:
    from .builder import Deps
    from .graph import Graph
    from .node import GraphNode

__all__ = ["GraphNodeParams", "add_node", "check_kind", "node_record", "unwrap"]


@dataclass(frozen=True, slots=True)
class GraphNodeParams:
    """``hipGraphNodeParams``: a node type and the parameter record of that type."""

    type: NodeType
    params: Any = None


_EXTERNAL_SEMAPHORES = (NodeType.ExtSemaphoreSignal, NodeType.ExtSemaphoreWait)


def check_kind(kind: Any, *, adding: bool = False) -> NodeType:
    """The node type ``kind`` names, if a graph can hold it (else InvalidValue; an
    external-semaphore node being ``adding``, NotSupported, as ``hipGraphAddNode``)."""
    number = int_or_none(kind)
    if number is None:
        raise InvalidValue(f"{kind!r} is not a node type")
    try:
        node_type = NodeType(number)
    except ValueError:
        raise InvalidValue(f"{kind!r} is not a node type") from None
    if node_type not in CREATABLE_NODE_TYPES:
        if adding and node_type in _EXTERNAL_SEMAPHORES:
            raise NotSupported(f"{node_type.name} nodes are not supported (no external semaphores)")
        raise InvalidValue(f"{node_type.name} nodes cannot be created")
    return node_type


def _record(node_type: NodeType, params: Any, *types: type[Any]) -> Any:
    if not isinstance(params, types):
        names = " or ".join(t.__name__ for t in types)
        raise InvalidValue(f"a {node_type.name} node takes {names}, got {params!r}")
    return params


def unwrap(params: Any, *, adding: bool = False) -> tuple[NodeType, Any]:
    """The kind and record of a :class:`GraphNodeParams`.

    Raises:
        InvalidValue: ``params`` is None, or names a kind a graph cannot hold.
        NotSupported: ``adding`` an external-semaphore node.
        TypeError: ``params`` is not a GraphNodeParams.
    """
    if params is None:
        raise InvalidValue("node parameters are null")
    if not isinstance(params, GraphNodeParams):
        raise TypeError(f"expected ahg.GraphNodeParams(type, params), got {params!r}")
    return check_kind(params.type, adding=adding), params.params


def node_record(kind: NodeType, record: Any) -> Any:
    """``record`` as the node's own parameter class: the shorthand a generic add and the
    executable's generic setter take (a bare :class:`Graph` for a child-graph node, a bare
    :class:`Event` for an event node) is wrapped, so ``node.set_params`` takes it too."""
    from .graph import Graph

    if kind is NodeType.Graph and isinstance(record, Graph):
        return ChildGraphParams(record)
    if kind in (NodeType.EventRecord, NodeType.WaitEvent) and isinstance(record, Event):
        return EventParams(record)
    return record


def add_node(graph: Graph, params: GraphNodeParams, deps: Deps) -> GraphNode:
    """``hipGraphAddNode``: see the module notes."""
    from .conditional import ConditionalNodeParams

    kind, record = unwrap(params, adding=True)
    if kind is NodeType.Kernel:
        kernel = _record(kind, record, KernelParams)
        return graph._add_node(kind, deps, lambda: revalidate(kernel))
    if kind is NodeType.Memcpy:
        copy = _record(kind, record, MemcpyParams)
        if isinstance(copy, PitchedCopyParams):  # hipMemcpy3DParms: its rows, not its bytes
            return graph._add_node(kind, deps, copy.revalidated)
        return graph._add_node(  # as add_memcpy_node: a node of 0 bytes is refused
            kind,
            deps,
            lambda: memcpy_params(copy.dst, copy.src, copy.nbytes, copy.kind, allow_empty=False),
        )
    if kind is NodeType.Memset:
        fill = _record(kind, record, MemsetParams)
        return graph.add_memset_node(
            fill.dst,
            fill.value,
            fill.width,
            element_size=fill.element_size,
            height=fill.height,
            pitch=fill.pitch,
            deps=deps,
        )
    if kind is NodeType.Host:
        host = _record(kind, record, HostParams)
        return graph.add_host_node(host.fn, host.args, deps=deps)
    if kind is NodeType.Graph:
        from .graph import Graph

        child = _record(kind, record, ChildGraphParams, Graph)
        return graph.add_child_graph_node(
            child.graph if isinstance(child, ChildGraphParams) else child, deps=deps
        )
    if kind is NodeType.Empty:
        if record is not None:
            raise InvalidValue(f"an Empty node takes no parameters, got {record!r}")
        return graph.add_empty_node(deps=deps)
    if kind in (NodeType.EventRecord, NodeType.WaitEvent):
        event = _record(kind, record, EventParams, Event)
        event = event.event if isinstance(event, EventParams) else event
        if kind is NodeType.EventRecord:
            return graph.add_event_record_node(event, deps=deps)
        return graph.add_event_wait_node(event, deps=deps)
    if kind is NodeType.MemAlloc:
        if not isinstance(record, MemAllocParams | int):  # a size as the add takes it: numpy's
            size = int_or_none(record)
            record = record if size is None else size
        alloc = _record(kind, record, MemAllocParams, int)
        if isinstance(alloc, MemAllocParams):
            return graph.add_mem_alloc_node(alloc.nbytes, device=alloc.device, deps=deps)
        return graph.add_mem_alloc_node(alloc, deps=deps)
    if kind is NodeType.MemFree:
        free = _record(kind, record, MemFreeParams, DevicePtr)
        return graph.add_mem_free_node(
            free.ptr if isinstance(free, MemFreeParams) else free, deps=deps
        )
    assert kind is NodeType.Conditional
    cond = _record(kind, record, ConditionalNodeParams)
    node, _ = graph.add_conditional_node(cond.handle, cond.kind, cond.size, deps=deps)
    return node


def set_exec_node_params(graph_exec: Any, node: GraphNode, params: Any) -> None:
    """``hipGraphExecNodeSetParams``: unwrap and call the executable's specific setter.

    Raises:
        InvalidValue: a bad kind, a kind other than the node's, an Empty or Conditional node
            (nothing to set). NotSupported: a memory-alloc or memory-free node.
        Whatever the specific setter raises.
    """
    kind, record = unwrap(params)
    exec_node = graph_exec._node(node, *NodeType)
    if kind is not exec_node.type:
        raise InvalidValue(f"{node!r} is {a_node_of_type(exec_node.type)}, not {kind.name}")
    if kind is NodeType.Kernel:
        graph_exec._set_kernel_record(node, _record(kind, record, KernelParams))
    elif kind is NodeType.Memcpy:
        p = _record(kind, record, MemcpyParams)
        if isinstance(p, PitchedCopyParams):  # hipMemcpy3DParms: its rows, not its byte count
            graph_exec._set_memcpy_record(node, p)
        else:
            graph_exec.set_memcpy_node_params(node, p.dst, p.src, p.nbytes, p.kind)
    elif kind is NodeType.Memset:
        m = _record(kind, record, MemsetParams)
        graph_exec.set_memset_node_params(
            node, m.dst, m.value, m.width, element_size=m.element_size, height=m.height,
            pitch=m.pitch,
        )  # fmt: skip
    elif kind is NodeType.Host:
        h = _record(kind, record, HostParams)
        graph_exec.set_host_node_params(node, h.fn, h.args)
    elif kind is NodeType.Graph:
        from .graph import Graph

        c = _record(kind, record, ChildGraphParams, Graph)
        graph_exec.set_child_graph_node_params(
            node, c.graph if isinstance(c, ChildGraphParams) else c
        )
    elif kind in (NodeType.EventRecord, NodeType.WaitEvent):
        e = _record(kind, record, EventParams, Event)
        event = e.event if isinstance(e, EventParams) else e
        if kind is NodeType.EventRecord:
            graph_exec.set_event_record_node_event(node, event)
        else:
            graph_exec.set_event_wait_node_event(node, event)
    elif kind in (NodeType.MemAlloc, NodeType.MemFree):
        from ..core.errors import NotSupported

        raise NotSupported(f"{kind.name} node parameters cannot be changed")
    else:
        raise InvalidValue(f"{kind.name} nodes have no parameters an executable can change")
