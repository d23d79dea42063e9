"""Rules for changing an executable's nodes: per-node setters and whole-graph update.

Pure functions: they compare parameters and graphs and say what may change; ``GraphExec`` then
applies the changes. Whole-graph update compares the new graph's topological order with the
executable's, node by node, as ``hipGraphExecUpdate`` does — but unlike HIP it validates every
node before applying any, so a failed update changes nothing.

Rules (HIP's, plus one of ours):
  * a memcpy node's direction cannot change; a 2D memset keeps its row size and height; a memset
    stays on its device;
  * a kernel node may change its kernel (as HIP allows), but not between a synchronous and an
    ``async`` body: an async body suspends its queue, a different launch mode, in the way CUDA
    refuses to switch a node between cooperative and ordinary launches
    (``UnsupportedFunctionChange``); nor between a cooperative and an ordinary launch, as CUDA
    documents for its update (``AttributesChanged``; the per-node setters say ``InvalidValue``);
  * node types, node count and each node's dependencies must match (``NodeTypeChanged``,
    ``TopologyChanged``); child graphs are compared too, however deep they nest;
  * a memory-alloc node of the same size and device is the same allocation: pointers into the
    new graph's reservation are moved to the executable's (see :func:`relocate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from itertools import repeat
from operator import attrgetter, is_, le
from typing import TYPE_CHECKING, Any

from ..core.errors import HipError, InvalidDevicePointer, InvalidValue
from ..device.kernel import Dim3
from ..device.pointer import DevicePtr
from ..device.table import check_range
from ..graph.node_type import NodeType
from ..graph.params import MemFreeParams, revalidate
from ..runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.pitched import PitchedCopyParams
from .flags import UpdateResult, UpdateResultKind
from .snapshot import ExecGraph, ExecNode

if TYPE_CHECKING:
    from ..graph.node import GraphNode
    from ..runtime.device import Device

__all__ = [
    "Change",
    "compatibility_problem",
    "device_limits_problem",
    "diff_graphs",
    "launches_to_check",
    "memory_problem",
    "fit_in_place",
    "same_kernels",
    "same_shape",
    "shape_difference",
]

Change = tuple[ExecNode, Any]
Move = tuple[DevicePtr, int, DevicePtr]  # a new graph's allocation, its size, the exec's


def _same_allocation(old: Any, new: Any) -> bool:
    return bool(old.nbytes == new.nbytes and old.device == new.device)


def relocate(params: Any, moves: list[Move]) -> Any:
    """``params`` with pointers into a new graph's allocations moved to the executable's.

    A recaptured graph's memory-alloc nodes reserve new addresses; an executable keeps its own
    (the memory it commits at run time lives there). An alloc node of the same size on the same
    device is the same allocation, so the nodes that use it are updated to the executable's
    address at the same offset (CUDA's PyTorch-style recapture-and-update pattern).
    """
    if not moves:
        return params

    def move(value: Any) -> Any:
        if isinstance(value, DevicePtr):
            for new, nbytes, old in moves:
                offset = value.address - new.address
                if value.device == new.device and 0 <= offset < nbytes:
                    return DevicePtr(old.device, old.address + offset)
        return value

    if isinstance(params, KernelParams):
        args = tuple(move(arg) for arg in params.args)
        if args == params.args:
            return params
        return dataclasses.replace(KernelParams.make(
            params.kernel, params.grid, params.block, args,
            shared_mem=params.shared_mem, priority=params.priority,
        ), attributes=params.attributes)  # fmt: skip
    if isinstance(params, MemcpyParams):
        return dataclasses.replace(params, dst=move(params.dst), src=move(params.src))
    if isinstance(params, MemsetParams):
        return dataclasses.replace(params, dst=move(params.dst))
    if isinstance(params, HostParams):
        return dataclasses.replace(params, args=tuple(move(arg) for arg in params.args))
    if isinstance(params, MemFreeParams):
        return MemFreeParams(move(params.ptr))
    return params


def compatibility_problem(node: ExecNode, params: Any) -> tuple[UpdateResultKind, str] | None:
    """Why ``params`` cannot replace ``node``'s parameters, or None if they can."""
    old = node.params
    if node.type is NodeType.Memcpy and params.kind != old.kind:
        return (
            UpdateResultKind.ParametersChanged,
            f"memcpy direction cannot change ({old.kind.name} -> {params.kind.name})",
        )
    if node.type is NodeType.Memset:
        if params.dst.device != old.dst.device:
            return UpdateResultKind.ParametersChanged, "memset destination moved to another device"
        two_d = old.height > 1 or params.height > 1
        if two_d and (
            params.width * params.element_size != old.width * old.element_size
            or params.height != old.height
        ):
            return (
                UpdateResultKind.ParametersChanged,
                "a 2D memset must keep its row size and height",
            )
    if node.type is NodeType.Kernel:
        if params.kernel.is_async != old.kernel.is_async:
            return (
                UpdateResultKind.UnsupportedFunctionChange,
                f"kernel {old.kernel.name!r} cannot switch between a synchronous and an async body",
            )
        if params.attributes.cooperative != old.attributes.cooperative:
            return (
                UpdateResultKind.AttributesChanged,
                "a kernel node cannot switch between a cooperative and an ordinary launch",
            )
    return None


def shape_difference(old: ExecGraph, new: ExecGraph) -> str | None:
    """How ``new``'s topology or node types differ from ``old``'s, child graphs included, or
    None: the whole comparison HIP's ``validateChildGraphNodeSetParams`` makes before any
    node's parameters are looked at."""
    pairs = [(old, new)]
    while pairs:
        old_graph, new_graph = pairs.pop()
        if len(old_graph) != len(new_graph):
            return "node count changed"
        for old_node, new_node in zip(old_graph.nodes, new_graph.nodes, strict=True):
            if old_node.type is not new_node.type:
                return f"{old_node.type.name} became {new_node.type.name}"
            if old_node.deps != new_node.deps and sorted(old_node.deps) != sorted(new_node.deps):
                return "dependencies changed"
            if old_node.child is not None and new_node.child is not None:
                pairs.append((old_node.child, new_node.child))
    return None


def check_setter(node: ExecNode, params: Any) -> None:
    """Per-node setters report an incompatible change as InvalidValue, as HIP's do."""
    problem = compatibility_problem(node, params)
    if problem is not None:
        raise InvalidValue(problem[1])


_COPY_TYPES = (NodeType.Memcpy, NodeType.Memset)


def memory_problem(
    node: ExecNode, params: Any, device: Device | None
) -> tuple[UpdateResultKind, str] | None:
    """Why a memcpy's or memset's new ``params`` fail the checks of its per-node setter now,
    or None.

    HIP's ``hipGraphExecUpdate`` calls the node's ``SetParams``, which validates the memory
    again as ``hipGraphExecMemsetNodeSetParams`` does: memory freed since the new graph's
    node was made fails there (InvalidValue or InvalidDevicePointer: ParametersChanged; any
    other code: NotSupported), instead of every launch failing on it. A range the
    executable already holds was checked when it was set, and is not looked up again (the
    common update: new values into the same buffers); memory freed under a running
    executable fails its launches either way.
    """
    old = node.params
    if params is old:
        return None
    try:
        kind = type(params)
        if kind is MemsetParams:  # the ranges the setter's own checks look up, no more
            dst = params.dst  # the same object (the usual case) compares without __eq__
            if (dst is not old.dst and dst != old.dst) or params.extent > old.extent:
                check_range(params.dst, params.extent)
        elif kind is MemcpyParams:
            for end, held in ((params.dst, old.dst), (params.src, old.src)):
                if type(end) is DevicePtr and (
                    (end is not held and (type(held) is not DevicePtr or end != held))
                    or params.nbytes > old.nbytes
                ):
                    check_range(end, params.nbytes)
        elif kind is PitchedCopyParams:
            params.revalidated(device)
        else:  # a subclass: its own checks
            revalidate(params)
    except (InvalidValue, InvalidDevicePointer) as error:
        return UpdateResultKind.ParametersChanged, str(error)
    except HipError as error:
        return UpdateResultKind.NotSupported, str(error)
    return None


def diff_graphs(
    old: ExecGraph,
    new: ExecGraph,
    new_nodes: list[GraphNode],
    top: GraphNode | None = None,
    device: Device | None = None,
) -> tuple[UpdateResult, list[Change]]:
    """Compare ``new`` with the executable's copy ``old``; return the result and the changes.

    ``device`` is the executable's, whose limits a pitched copy's new pitch is checked
    against (the current device's when None).

    ``new_nodes`` are the new graph's handles in ``new``'s order, used to name the node a
    failure concerns (for a child graph, ``top`` is the child-graph node of the outer graph).
    On a failure the changes are those of the nodes before the failing one (HIP checks index
    by index, so one of them whose ``SetParams`` fails is the one reported).
    """
    if len(old) != len(new):
        return UpdateResult(UpdateResultKind.TopologyChanged, top, "node count changed"), []
    changes: list[Change] = []
    append = changes.append
    moves: list[Move] = []
    # A work list of what to compare, not recursion: child graphs may nest arbitrarily deep.
    # A child graph's nodes are compared where the child-graph node stands, as HIP's order.
    # Each item: the old node, the new node's type, dependencies (None when the whole graph's
    # types and dependencies were found equal at once, see _same_shape), parameters and child
    # copy, and the handle to name. A new copy without child graphs is read by its columns, so
    # its node records are never made. A for loop resumes an iterator where a child graph
    # interrupted it.
    stack = [_compared(old, new, new_nodes)]
    mark = 0  # changes of the top-level nodes before the child graph being compared
    while stack:
        for old_node, new_type, new_deps, new_node_params, new_child, handle in stack[-1]:
            if new_type is NodeType.Kernel and new_deps is None:
                # The common node, its type and dependencies known equal: the checks below
                # that concern a kernel, in their order.
                new_params = relocate(new_node_params, moves) if moves else new_node_params
                old_params = old_node.params
                # compatibility_problem compares the kernels' is_async and the attributes'
                # cooperative: the same objects compare equal, so it need not be called.
                if new_params.kernel is not old_params.kernel or (
                    new_params.attributes is not old_params.attributes
                ):
                    problem = compatibility_problem(old_node, new_params)
                    if problem is not None:
                        culprit = top if top is not None else handle
                        return _failed(
                            UpdateResult(problem[0], culprit, problem[1]), changes, mark, len(stack)
                        )
                append((old_node, new_params))
                continue
            culprit = top if top is not None else handle
            if new_deps is not None:
                if old_node.type is not new_type:
                    reason = f"{old_node.type.name} became {new_type.name}"
                    return _failed(
                        UpdateResult(UpdateResultKind.NodeTypeChanged, culprit, reason),
                        changes,
                        mark,
                        len(stack),
                    )
                # The same dependencies added in another order are the same topology (HIP
                # compares their count, CUDA the edge set): only another set is a change.
                if old_node.deps != new_deps and sorted(old_node.deps) != sorted(new_deps):
                    # hipGraphExecUpdate checks a top-level memcpy's kind before the node's
                    # dependencies (a child graph's topology is checked first, as a whole).
                    if (
                        new_type is NodeType.Memcpy
                        and top is None
                        and len(stack) == 1
                        and new_node_params.kind != old_node.params.kind
                    ):
                        problem = compatibility_problem(old_node, new_node_params)
                        assert problem is not None
                        return _failed(
                            UpdateResult(problem[0], culprit, problem[1]), changes, mark, len(stack)
                        )
                    reason = "dependencies changed"
                    return _failed(
                        UpdateResult(UpdateResultKind.TopologyChanged, culprit, reason),
                        changes,
                        mark,
                        len(stack),
                    )
            if new_type is NodeType.Graph:
                assert old_node.child is not None
                assert new_child is not None
                assert culprit is not None
                if len(old_node.child) != len(new_child):
                    reason = "node count changed"
                    return _failed(
                        UpdateResult(UpdateResultKind.TopologyChanged, culprit, reason),
                        changes,
                        mark,
                        len(stack),
                    )
                if len(stack) == 1:
                    mark = len(changes)
                stack.append(_compared(old_node.child, new_child, [culprit] * len(new_child)))
                break  # the child's nodes next; then this graph's, from the node after it
            if new_type is NodeType.MemAlloc and _same_allocation(old_node.params, new_node_params):
                moves.append((new_node_params.ptr, new_node_params.nbytes, old_node.params.ptr))
                continue
            new_params = relocate(new_node_params, moves)
            if new_type in (NodeType.Empty, NodeType.MemAlloc, NodeType.MemFree):
                if new_params != old_node.params:
                    kind = (
                        UpdateResultKind.ParametersChanged
                        if new_type is NodeType.Empty
                        else UpdateResultKind.NotSupported
                    )
                    reason = "memory nodes cannot be updated"
                    return _failed(UpdateResult(kind, culprit, reason), changes, mark, len(stack))
                continue
            problem = compatibility_problem(old_node, new_params)
            if problem is None and new_type in _COPY_TYPES:
                problem = memory_problem(old_node, new_params, device)
            if problem is not None:
                return _failed(
                    UpdateResult(problem[0], culprit, problem[1]), changes, mark, len(stack)
                )
            append((old_node, new_params))
        else:
            stack.pop()
    return UpdateResult(UpdateResultKind.Success), changes


def _failed(
    result: UpdateResult, changes: list[Change], mark: int, depth: int
) -> tuple[UpdateResult, list[Change]]:
    """A failure and the changes checked before it: a child graph's shape is compared as a
    whole before its nodes' parameters, so a failure inside one keeps none of its changes."""
    return result, changes if depth == 1 else changes[:mark]


_type_of = attrgetter("type")
_deps_of = attrgetter("deps")
_params_of = attrgetter("params")
_child_of = attrgetter("child")


def _compared(
    old: ExecGraph, new: ExecGraph, handles: list[Any]
) -> Iterator[tuple[ExecNode, NodeType, tuple[int, ...] | None, Any, ExecGraph | None, Any]]:
    """What :func:`diff_graphs` compares, node by node, for ``old`` and ``new`` of one length.

    Each node's dependencies are None when :func:`_same_shape` found all of them, and every
    type, equal: the per-node checks of both cannot fail, and the tuples are never made.
    """
    old_nodes = old.nodes
    same = same_shape(old, new)
    if new.made or not new.flat:
        nodes = new.nodes
        return zip(
            old_nodes,
            map(_type_of, nodes),
            repeat(None, len(nodes)) if same else map(_deps_of, nodes),
            map(_params_of, nodes),
            map(_child_of, nodes),
            handles,
            strict=True,
        )
    return zip(
        old_nodes,
        new.types(),
        repeat(None) if same else map(new.deps_of, range(len(new))),
        new.params_column(),
        repeat(None),
        handles,
        strict=False,  # repeat is endless; the others are of one length
    )


def same_shape(old: ExecGraph, new: ExecGraph) -> bool:
    """Whether ``new``'s nodes have ``old``'s types and dependencies, index for index.

    Compared as whole columns (lists of types, an array of first dependencies and the few
    nodes' tuples aside), at C speed: a node's record holds the type and dependencies its
    copy's columns hold, and neither ever changes. Equal columns mean no node's type or
    dependencies differ; unequal ones send every node through the per-node checks, which
    find the first difference in HIP's order (and accept the same dependencies added in
    another order).
    """
    return old.types() == new.types() and old.first_deps() == new.first_deps()


def same_kernels(old: list[KernelParams], new: list[KernelParams]) -> bool:
    """Whether each of ``new`` has the very kernel and attributes of the one of ``old`` at its
    index: what :func:`diff_graphs` needs of a kernel node to skip its compatibility checks
    (compared at C speed, as :func:`same_shape` compares the columns)."""
    return all(map(is_, map(_kernel_of, new), map(_kernel_of, old))) and all(
        map(is_, map(_attributes_of, new), map(_attributes_of, old))
    )


def fit_in_place(old: list[KernelParams], new: list[KernelParams]) -> bool:
    """Whether each of ``new``'s argument bytes is no longer than those of the one of ``old``
    at its index, so that it fits the slot holding them (compared at C speed).

    The same kernel object may pack more bytes than it did: a kernel's ``layout`` can be
    replaced (another parameter list), and parameters made since pack to it. The general path
    gives such a node a new slot; written in place, its bytes would run into the next slot.
    """
    return all(map(le, map(len, map(_arg_bytes_of, new)), map(len, map(_arg_bytes_of, old))))


_kernel_of = attrgetter("kernel")
_attributes_of = attrgetter("attributes")
_arg_bytes_of = attrgetter("arg_bytes")
# A change for launches_to_check: an executable's node (its type says whether it is a kernel),
# or None for a kernel node read from the columns, with no record (see Updater.update_columns).
LaunchChange = tuple[ExecNode | None, Any]


def launches_to_check(changes: Iterable[LaunchChange]) -> Iterator[LaunchChange]:
    """The kernel changes whose launch configuration must be checked, in ``changes``' order:
    the caller checks each (``params.check_limits(device)``) and stops at the first failure.

    A check depends on nothing but the device's properties (fixed for a device's life) and
    the grid, block and shared-memory size. A large graph has a handful of launch shapes, and
    its nodes share the very ``Dim3`` objects of each (see ``runtime/params.py``), so a node
    whose three objects are those of the last launch that passed its check (asked for the next
    change after it) is left out: an immutable ``Dim3`` of exact ``int`` s and an ``int``
    check as they did a moment before. Failures are never remembered, so the first failing
    node is still the one checked, and each check is one of :class:`KernelParams` itself
    (a subclass's may check more). Anything else is checked as before.
    """
    grid = block = shared_mem = None  # the last shape that passed
    for change in changes:
        node, params = change
        if (node is not None and node.type is not NodeType.Kernel) or (
            params.grid is grid and params.block is block and params.shared_mem is shared_mem
        ):
            continue
        yield change  # the caller checks it; asking for the next one means it passed
        if type(params) is KernelParams and _plain_shape(params):
            grid, block, shared_mem = params.grid, params.block, params.shared_mem


def _plain_shape(params: KernelParams) -> bool:
    """Whether ``params``' shape is made of values that cannot change: a ``Dim3`` of exact
    ``int`` s for grid and block, an exact ``int`` of shared memory."""
    grid, block = params.grid, params.block
    return (
        type(grid) is Dim3
        and type(block) is Dim3
        and type(params.shared_mem) is int
        and all(type(value) is int for value in (*grid, *block))
    )


def oversized_arguments(
    changes: Iterable[LaunchChange], chunk_bytes: int
) -> tuple[str, ExecNode | None] | None:
    """A kernel node whose new arguments cannot fit in one of the executable's argument chunks
    (sized at instantiate: the graph's argument bytes plus ``arena_headroom``): why, and the
    node; or None. Its setter refuses it (``InvalidValue``); an update reports it as HIP maps
    a ``SetParams`` failure, ParametersChanged."""
    for node, params in changes:
        if type(params) is KernelParams and params.kernel.layout.size > chunk_bytes:
            size = params.kernel.layout.size
            return (
                f"{size} bytes of kernel arguments exceed the executable's {chunk_bytes}-byte "
                "argument chunk (instantiate with a larger arena_headroom)",
                node,
            )
    return None


def device_limits_problem(
    changes: Iterable[LaunchChange], device: Device
) -> tuple[UpdateResultKind, str, ExecNode | None] | None:
    """Check new kernel parameters against the executable's device (they were validated
    against the default device when the new graph was built): the first failure's kind, why,
    and its node, or None.

    A bad value (shared memory) is ParametersChanged; anything else (a launch configuration
    the device cannot run) is NotSupported, as HIP maps its ``SetParams`` failures.
    """
    for node, params in launches_to_check(changes):
        try:
            params.check_limits(device)
        except InvalidValue as error:
            return UpdateResultKind.ParametersChanged, str(error), node
        except HipError as error:
            return UpdateResultKind.NotSupported, str(error), node
    return None
