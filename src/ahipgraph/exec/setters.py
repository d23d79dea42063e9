"""The per-node setters and whole-graph update of :class:`~ahipgraph.exec.graph_exec.GraphExec`.

Each setter validates in HIP's order — the executable, then the node handle, then the node's
type, then the new parameters (with the same ``make`` constructors streams and graph nodes
use) — and then hands the change to the executable's ``_apply``, which never disturbs a launch
already enqueued. The compatibility rules themselves live in :mod:`.update`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..core import gcpause
from ..core.errors import GraphExecUpdateFailure, InvalidValue, Unknown
from ..device.kernel import DimLike, Kernel
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..graph.attributes import exec_attribute, exec_with_attribute
from ..graph.graph import live_graph
from ..graph.node_type import NodeType
from ..graph.params import event_params, memcpy_params, revalidate
from ..runtime.event import Event
from ..runtime.launch_attributes import KernelNodeAttribute
from ..runtime.params import Endpoint, HostParams, KernelParams, MemsetParams
from .flags import UpdateResult, UpdateResultKind
from .snapshot import ExecGraph, ExecNode, snapshot
from .update import Change, check_setter, device_limits_problem, diff_graphs

if TYPE_CHECKING:
    from ..graph.generic import GraphNodeParams
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from ..runtime.device import Device

__all__ = ["NodeSetters"]


class NodeSetters:
    """Mixin of :class:`GraphExec`: what users call to change an executable's nodes."""

    __slots__ = ()

    device: Device
    _graph: ExecGraph
    _lock: AbstractContextManager[Any]

    def check_alive(self) -> None:
        raise NotImplementedError

    def _node(self, node: GraphNode, *types: NodeType) -> ExecNode:
        raise NotImplementedError

    def _apply(self, changes: list[Change]) -> None:
        raise NotImplementedError

    def _settle_conditionals(
        self, changes: list[Change]
    ) -> tuple[list[Change], str, ExecNode | None]:
        raise NotImplementedError

    def _set(self, exec_node: ExecNode, params: Any) -> None:
        check_setter(exec_node, params)
        self._apply([(exec_node, params)])

    def set_kernel_node_params(
        self,
        node: GraphNode,
        kernel: Kernel,
        grid: DimLike,
        block: DimLike,
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
    ) -> None:
        """``hipGraphExecKernelNodeSetParams``: new kernel, configuration or arguments.

        Launches already enqueued keep the arguments they were enqueued with.
        """
        exec_node = self._node(node, NodeType.Kernel)
        params = KernelParams.make(
            kernel, grid, block, args, shared_mem=shared_mem, device=self.device
        )
        old = exec_node.params  # the node keeps its priority and attributes, as in HIP
        params = replace(params, priority=old.priority, attributes=old.attributes)
        self._set(exec_node, params)

    def kernel_node_attribute(self, node: GraphNode, attr: KernelNodeAttribute | int) -> Any:
        """The executable's value of a kernel node's attribute (see ``node.get_attribute``)."""
        exec_node = self._node(node, NodeType.Kernel)
        return exec_attribute(exec_node.params, attr)

    def set_kernel_node_attribute(
        self, node: GraphNode, attr: KernelNodeAttribute | int, value: Any
    ) -> None:
        """Change a kernel node's priority or access-policy window in this executable only.

        The executable's plan was made at instantiate, so a new priority does not move the
        node to another parallel stream; it is what the executable reports and passes on.

        Raises:
            InvalidValue: as ``node.set_attribute``; or a different cooperative value (fixed
                at instantiate).
        """
        exec_node = self._node(node, NodeType.Kernel)
        self._set(exec_node, exec_with_attribute(exec_node.params, attr, value))

    def set_node_params(self, node: GraphNode, params: GraphNodeParams) -> None:
        """``hipGraphExecNodeSetParams``: new parameters for a node of any kind.

        ``params`` is an :class:`ahipgraph.GraphNodeParams` of the node's own kind; the
        kind's own setter does the rest, with its checks.

        Raises:
            InvalidValue: a bad kind, a kind other than the node's, an empty or conditional
                node. NotSupported: a memory-alloc or memory-free node.
        """
        from ..graph.generic import set_exec_node_params

        set_exec_node_params(self, node, params)

    def _set_kernel_record(self, node: GraphNode, record: KernelParams) -> None:
        """A whole kernel record (generic setter): priority and attributes included."""
        exec_node = self._node(node, NodeType.Kernel)
        params = revalidate(record)
        params.check_limits(self.device)
        self._set(exec_node, params)

    def set_memcpy_node_params(
        self,
        node: GraphNode,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParams1D``: the direction must stay the same.

        Raises:
            InvalidValue: as HIP: a ``kind`` other than the node's own (``Default`` included),
                endpoints that change the direction, or a count of 0.
        """
        exec_node = self._node(node, NodeType.Memcpy)
        original = exec_node.params.kind
        if kind is not None:
            try:
                given = CopyKind(kind)
            except ValueError:
                raise InvalidValue(f"{kind!r} is not a memcpy kind") from None
            if given is not original:
                raise InvalidValue(
                    f"a memcpy node's kind is fixed: {original.name}, not {given.name}"
                )
        self._set(exec_node, memcpy_params(dst, src, nbytes, kind, allow_empty=False))

    def set_memset_node_params(
        self,
        node: GraphNode,
        dst: DevicePtr,
        value: int,
        width: int,
        *,
        element_size: int = 1,
        height: int = 1,
        pitch: int | None = None,
    ) -> None:
        """``hipGraphExecMemsetNodeSetParams``."""
        exec_node = self._node(node, NodeType.Memset)
        params = MemsetParams.make(
            dst, value, width, element_size=element_size, height=height, pitch=pitch
        )
        self._set(exec_node, params)

    def set_host_node_params(
        self, node: GraphNode, fn: Callable[..., Any], args: Sequence[Any] = ()
    ) -> None:
        """``hipGraphExecHostNodeSetParams``."""
        exec_node = self._node(node, NodeType.Host)
        self._set(exec_node, HostParams.make(fn, args))

    def set_event_record_node_event(self, node: GraphNode, event: Event) -> None:
        """``hipGraphExecEventRecordNodeSetEvent``: takes effect from the next launch."""
        exec_node = self._node(node, NodeType.EventRecord)
        self._apply([(exec_node, event_params(event))])  # null or destroyed: InvalidValue

    def set_event_wait_node_event(self, node: GraphNode, event: Event) -> None:
        """``hipGraphExecEventWaitNodeSetEvent``: takes effect from the next launch."""
        exec_node = self._node(node, NodeType.WaitEvent)
        self._apply([(exec_node, event_params(event))])  # null or destroyed: InvalidValue

    def set_child_graph_node_params(self, node: GraphNode, child: Graph) -> None:
        """``hipGraphExecChildGraphNodeSetParams``: same topology, new node parameters.

        Raises:
            InvalidValue: bad handles. Unknown: ``child`` is the executable's own graph, or its
                topology or node types differ from the embedded child's (HIP's codes).
        """
        exec_node = self._node(node, NodeType.Graph)
        child = live_graph(child, "child graph")
        if child is node.graph:
            raise Unknown("a child graph node cannot take its own parent graph")
        new_copy, new_nodes = snapshot(child)
        assert exec_node.child is not None
        result, changes = diff_graphs(exec_node.child, new_copy, new_nodes, node)
        if result.ok:
            changes, why, _ = self._settle_conditionals(changes)
            if why:
                raise Unknown(f"child graph does not match: {why}")
            result = device_limits_problem(changes, self.device, node)
        if not result.ok:
            raise Unknown(f"child graph does not match: {result.reason}")
        self._apply(changes)

    def set_node_enabled(self, node: GraphNode, enabled: bool) -> None:
        """``hipGraphNodeSetEnabled``: a disabled kernel/memcpy/memset node does nothing but
        keeps its place in the ordering. Other node types → InvalidValue."""
        exec_node = self._node(node, NodeType.Kernel, NodeType.Memcpy, NodeType.Memset)
        if not isinstance(enabled, int):  # bool is an int; any non-zero enables, as in HIP
            raise TypeError(f"enabled must be a bool or an int, got {enabled!r}")
        with self._lock:
            previous, exec_node.enabled = exec_node.enabled, bool(enabled)
            try:
                self._apply([(exec_node, exec_node.params)])
            except BaseException:
                exec_node.enabled = previous  # a failed call changes nothing
                raise

    def node_enabled(self, node: GraphNode) -> bool:
        """``hipGraphNodeGetEnabled``."""
        return self._node(node, NodeType.Kernel, NodeType.Memcpy, NodeType.Memset).enabled

    def update(self, graph: Graph) -> UpdateResult:
        """``hipGraphExecUpdate``: take the parameters of a graph with the same topology.

        All-or-nothing: every node is checked before any is changed.

        Returns:
            An :class:`UpdateResult` of kind Success.

        Raises:
            InvalidValue: the executable or ``graph`` was destroyed, or ``graph`` has a cycle.
            GraphExecUpdateFailure: with ``.result`` naming the kind (TopologyChanged,
                NodeTypeChanged, ParametersChanged, UnsupportedFunctionChange) and the node.
        """
        self.check_alive()
        graph = live_graph(graph)
        with gcpause.paused():  # a bulk copy that makes no garbage: see core.gcpause
            new_copy, new_nodes = snapshot(graph)
        result, changes = diff_graphs(self._graph, new_copy, new_nodes)
        if result.ok:
            changes, why, bad = self._settle_conditionals(changes)
            if why:
                top = self._graph.nodes
                culprit = next((new_nodes[i] for i, n in enumerate(top) if n is bad), None)
                result = UpdateResult(UpdateResultKind.ParametersChanged, culprit, why)
        if result.ok:
            result = device_limits_problem(changes, self.device)
        if not result.ok:
            error = GraphExecUpdateFailure(f"{result.kind.name}: {result.reason}")
            error.result = result  # type: ignore[attr-defined]
            raise error
        self._apply(changes)
        return result
