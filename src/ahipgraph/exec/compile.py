"""Turning a plan into replay programs: one op list per strand, built once at instantiate.

Every node becomes at most one op (a child graph becomes its nodes' ops, in order, on its
segment's strand), so a node can be found again by its (strand, position) when an update replaces
its op. Kernel nodes get their argument bytes written into the executable's arena here, and
their ops dispatch straight from the arena.

Signal numbering inside a launch's signal set: ``[0, num_signals)`` are the plan's pooled
completion signals; then ``PREV`` (the previous launch's completion) and one binding per event
node, which the launch fills in at enqueue time, in topological order, as HIP does.
"""

from __future__ import annotations

import contextlib
import threading
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, compress, count, repeat
from operator import attrgetter, is_, or_
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import gcpause
from ..core.errors import HipError
from ..core.int_array import IntArray
from ..device.kernel import Kernel, Threads
from ..device.ops import KernelOp, Op, SignalIndexOp, WaitSignalIndicesOp
from ..graph.memnodes import memory_of
from ..graph.node_type import NodeType
from ..runtime.params import KernelParams
from .arena import ArgSlot, ArgSpan, KernelArgArena
from .planner import Plan, SegmentNodes, SegmentTable
from .snapshot import ExecGraph, ExecNode, Positions

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..device.pointer import DevicePtr
    from ..device.program import Program
    from ..device.signal import Signal
    from ..runtime.device import Device
    from .conditional import Conditionals

__all__ = [
    "Compiled",
    "DisabledOp",
    "EventBinding",
    "IndexRun",
    "compile_plan",
    "kernel_op",
    "node_op",
    "reads_same",
]


class DisabledOp(Op):
    """A disabled kernel, memcpy or memset node: no work, ordering kept."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(0)

    def run(self, program: Program) -> None:
        return None


DISABLED = DisabledOp()


class EventRecordOp(Op):
    """An event-record node: completes this launch's record of the event."""

    __slots__ = ("binding",)
    is_sync = True

    def __init__(self, binding: int) -> None:
        super().__init__(0)
        self.binding = binding

    def run(self, program: Program) -> None:
        program.signals[self.binding].decrement(program.time)

    def written_signal(self, program: Program) -> Signal:
        """The signal this op reaches (see ``device/work_waits.py``)."""
        return program.signals[self.binding]


class MemAllocOp(Op):
    """A memory-alloc node: back the node's reserved addresses with memory.

    The addresses are on the node's own device, which need not be the executable's: the
    memory is committed (and its graph pool charged) there.
    """

    __slots__ = ("memory", "ptr")

    def __init__(self, device: Device, ptr: DevicePtr) -> None:
        super().__init__(0)
        self.memory, self.ptr = memory_of(ptr) or device.memory, ptr

    def run(self, program: Program) -> None:
        self.memory.commit(self.ptr)


class MemFreeOp(Op):
    """A memory-free node (or auto-free-on-launch): return the memory, keep the addresses."""

    __slots__ = ("frees",)
    is_sync = True  # frees still happen after a failure, so nothing leaks

    def __init__(self, device: Device, ptrs: tuple[DevicePtr, ...]) -> None:
        super().__init__(0)
        # Each on its own device's memory, as MemAllocOp commits it.
        self.frees = tuple((memory_of(ptr) or device.memory, ptr) for ptr in ptrs)

    def run(self, program: Program) -> None:
        for memory, ptr in self.frees:
            with contextlib.suppress(HipError):  # already released by the user
                memory.decommit(ptr)


class NodeFreeOp(MemFreeOp):
    """A memory-free node: as :class:`MemFreeOp`, except that a free whose memory an
    unordered auto-free relaunch freed first fails its launch, rather than free the memory
    that relaunch commits (see ``DeviceMemory.free_by_node``)."""

    __slots__ = ()

    def run(self, program: Program) -> None:
        ((memory, ptr),) = self.frees
        memory.free_by_node(ptr)


@dataclass(slots=True)
class EventBinding:
    """A per-launch signal binding for an event node."""

    index: int
    node: ExecNode
    is_record: bool


_RUNS_LOCK = threading.Lock()


@dataclass(slots=True, eq=False)
class Compiled:
    """The replay programs and where each node's op lives."""

    strand_ops: list[list[Op]]
    # Keyed by the ExecNode itself (identity: ExecNode has no __eq__), not by id(node), so a
    # million-node executable does not hold a million key ints per map.
    _locations: dict[ExecNode, tuple[int, int]]  # node -> (strand, position); see locations
    _arg_places: dict[ExecNode, ArgSlot]  # node -> its kernel-argument slot; see arg_slots
    bindings: list[EventBinding]
    prev_index: int
    extra: int  # binding signal indices after the pooled signals
    alloc_ptrs: list[DevicePtr] = field(default_factory=list)
    # The memory each alloc node's range lives in, fixed here: the launch check and the give
    # back at destroy use it, never the ordinal again (a replaced device's ordinal names a new
    # memory, whose reservations reuse the same addresses).
    alloc_memory: dict[DevicePtr, DeviceMemory] = field(default_factory=dict)
    unfreed_ptrs: list[DevicePtr] = field(default_factory=list)
    # What the free nodes free of other graphs' allocations: each launch announces these
    # frees as it is taken (see DeviceMemory.announce_free), for those graphs' relaunches.
    foreign_frees: list[tuple[DeviceMemory, DevicePtr]] = field(default_factory=list)
    # Runs of kernel nodes compiled together: (strand, position of the first, the nodes), each
    # node's op at the next position. Their locations are entered on first use.
    # The nodes are records, or indices into the ExecGraph given with them (whose records are
    # then made on first use too, see ExecGraph.nodes).
    _runs: list[tuple[int, int, ExecGraph | None, Sequence[Any]]] = field(default_factory=list)
    # The argument places of those runs, as the arena gave them (KernelArgArena.place_spans):
    # their ArgSlot objects are made on first use.
    _arg_spans: list[tuple[ExecGraph | None, Sequence[Any], list[ArgSpan]]] = field(
        default_factory=list
    )
    # Each node index of the runs' one graph -> (its run, its position in the run), made on
    # the first lookup of one node (see location_of): two C ints a node. () when the runs
    # cannot be read by index (records, or several graphs).
    _run_places: tuple[ExecGraph, Any, Any] | tuple[()] | None = None

    @property
    def locations(self) -> dict[ExecNode, tuple[int, int]]:
        """Where each node's op lives: node -> (strand, position in the strand's program).

        The entries of kernel runs are made on first use (an executable setter, an update,
        a plan check or a trace): until then a run costs a pointer per node, where an entry
        costs a tuple, an int and a slot of the map.
        """
        if self._runs:
            # two first users: one enters the runs, the other waits for it; an entry per node,
            # none of them garbage (see core.gcpause): the pause outside the lock, as in
            # ExecGraph.nodes, so no pass it ends with runs with the lock held
            with gcpause.paused(), _RUNS_LOCK:
                for strand, first, graph, items in self._runs:
                    located = self._locations
                    nodes = _records(graph, items)
                    for position, node in enumerate(nodes, first):
                        located[node] = (strand, position)
                self._runs = []
        return self._locations

    @property
    def arg_slots(self) -> dict[ExecNode, ArgSlot]:
        """Each kernel node's argument slot: node -> :class:`ArgSlot`.

        The slots of kernel runs are made on first use (an update, a setter of a disabled
        node): until then a million-node run holds its places as spans (a ``range`` of
        offsets, usually) and no object per node for the garbage collector to walk.
        """
        if self._arg_spans:
            # two first users: one makes the slots, the other waits for it (see locations)
            with gcpause.paused(), _RUNS_LOCK:
                places = self._arg_places
                for graph, items, spans in self._arg_spans:
                    each = iter(_records(graph, items))
                    for chunk, buffer, offsets, sizes in spans:
                        # each last: zip stops at the span's end without taking a node
                        for offset, size, node in zip(offsets, sizes, each, strict=False):
                            if node not in places:  # one made alone, or moved by an update
                                places[node] = ArgSlot(chunk, buffer, offset, size)
                self._arg_spans = []
        return self._arg_places

    def location_of(self, node: ExecNode) -> tuple[int, int] | None:
        """``locations.get(node)``, made for ``node`` alone while its run's entries are not.

        A setter changes one node of what may be a million: it finds the node's place in its
        run by the node's index, where :attr:`locations` would enter every run's nodes.
        """
        located = self._locations.get(node)
        if located is not None or not self._runs:
            return located
        with _RUNS_LOCK:
            runs = self._runs
            found = self._run_position(node) if runs else None
            if found is not None:
                run, position = found
                if run < 0:  # in no run: its entry, if it has one, was made with its op
                    return self._locations.get(node)
                strand, first = runs[run][0], runs[run][1]
                located = self._locations[node] = (strand, first + position)
                return located
        return self.locations.get(node)  # the runs hold records: every entry, made at once

    def arg_slot_of(self, node: ExecNode) -> ArgSlot:
        """``arg_slots[node]``, made for ``node`` alone while its run's slots are not (see
        :meth:`location_of`).

        Raises:
            KeyError: ``node`` has no argument slot (it is not a kernel node).
        """
        arg_slot = self._arg_places.get(node)
        if arg_slot is not None or not self._arg_spans:
            return self._arg_places[node]
        with _RUNS_LOCK:
            spans = self._arg_spans
            found = self._run_position(node) if spans else None
            if found is not None:
                run, position = found
                if run < 0:
                    return self._arg_places[node]
                for chunk, buffer, offsets, sizes in spans[run][2]:
                    if position < len(offsets):
                        arg_slot = ArgSlot(chunk, buffer, offsets[position], sizes[position])
                        self._arg_places[node] = arg_slot
                        return arg_slot
                    position -= len(offsets)
                raise AssertionError("unreachable: a run's spans place each of its nodes")
        return self.arg_slots[node]

    def move_arg_slot(self, node: ExecNode, arg_slot: ArgSlot) -> None:
        """Give ``node`` another argument slot (an update's new one)."""
        self._arg_places[node] = arg_slot  # arg_slots never replaces an entry it finds

    def _run_position(self, node: ExecNode) -> tuple[int, int] | None:
        """``node``'s run and position in it by its index ((-1, -1): in no run); None when
        the runs cannot be read by index, or ``node`` is not a record of their graph.
        Caller holds ``_RUNS_LOCK``."""
        places = self._run_places
        if places is None:
            places = self._run_places = self._places_by_index()
        if not places:
            return None
        graph, run_of, position_of = places
        index = node.index
        if not graph.made or not 0 <= index < len(graph) or graph.nodes[index] is not node:
            return None
        return int(run_of[index]), int(position_of[index])

    def _places_by_index(self) -> tuple[ExecGraph, Any, Any] | tuple[()]:
        """Each index of the runs' graph -> its run and position (see ``_run_places``)."""
        items_of = [(graph, items) for _, _, graph, items in self._runs] or [
            (graph, items) for graph, items, _ in self._arg_spans
        ]
        graph = items_of[0][0] if items_of else None
        if graph is None or any(each is not graph for each, _ in items_of):
            return ()
        run_of = np.full(len(graph), -1, dtype=np.int32)
        position_of = np.zeros(len(graph), dtype=np.int32)
        for run, (_, items) in enumerate(items_of):
            indices = (
                np.arange(items.start, items.stop, items.step)
                if isinstance(items, range)
                else np.fromiter(items, dtype=np.int64, count=len(items))
            )
            run_of[indices] = run
            position_of[indices] = np.arange(len(indices), dtype=np.int32)
        return graph, run_of, position_of

    def index_runs(self, graph: ExecGraph) -> list[IndexRun] | None:
        """Every node's op and argument place, when all are kernel runs of ``graph``'s nodes by
        index: each run as ``(strand, position of the first op, indices, argument spans)``.

        None once any node has an entry of its own (its location or slot made on first use,
        or emitted alone), or a run holds records: then only :attr:`locations` and
        :attr:`arg_slots` say where a node is. The runs of an executable no setter or
        update has touched tell it without an object per node.
        """
        with _RUNS_LOCK:
            runs, spans = self._runs, self._arg_spans
            if self._locations or self._arg_places or len(runs) != len(spans):
                return None
            out: list[IndexRun] = []
            for (strand, first, run_graph, items), (span_graph, _, places) in zip(
                runs, spans, strict=True
            ):
                if run_graph is not graph or span_graph is not graph:
                    return None
                out.append((strand, first, items, places))
            if sum(len(run[2]) for run in out) != len(graph):
                return None
            return out


# A kernel run of an executable's copy read by index: strand, first position, node indices
# in run order, and the arena spans of their argument slots (see Compiled.index_runs).
IndexRun = tuple[int, int, Sequence[int], list[ArgSpan]]


def _records(graph: ExecGraph | None, items: Sequence[Any]) -> Iterable[ExecNode]:
    """A run's nodes: ``items`` themselves, or the records of ``graph`` at indices ``items``."""
    if graph is None:
        return items
    return map(graph.nodes.__getitem__, items)


def kernel_op(device: Device, params: KernelParams, arg_slot: ArgSlot, arena: KernelArgArena) -> Op:
    """The dispatch op of a kernel node reading its arguments from ``arg_slot``."""
    if arena._strict:
        return StrictKernelOp(params, device, arg_slot, arena)
    return params.op(device, arg_slot.buffer, arg_slot.offset, arena)


def reads_same(op: Op, params: KernelParams, buffer: memoryview, offset: int) -> bool:
    """Whether ``op`` is the dispatch :func:`kernel_op` would build for ``params`` in the slot
    at ``offset`` of ``buffer``.

    An op reads its arguments from its slot when it runs, so after an in-place rewrite of the
    slot's bytes an op of the same kernel and launch shape needs no replacing (an update of a
    million nodes then builds no op). Only a plain enabled dispatch qualifies: a disabled node's
    op or a strict-flush op is rebuilt as before.
    """
    return (
        isinstance(op, KernelOp)
        and op.kernel is params.kernel
        and op.threads is params.threads
        and op.buffer is buffer
        and op.offset == offset
    )


class StrictKernelOp(Op):
    """A kernel dispatch that fails if its argument bytes were written but never flushed."""

    __slots__ = ("arena", "arg_slot", "inner")

    def __init__(
        self, params: KernelParams, device: Device, arg_slot: ArgSlot, arena: KernelArgArena
    ) -> None:
        self.inner = params.op(device, arg_slot.buffer, arg_slot.offset, arena)
        super().__init__(self.inner.cost_ns)
        self.arg_slot, self.arena = arg_slot, arena

    def run(self, program: Program) -> Any:
        if not self.arena.is_flushed(self.arg_slot):
            raise RuntimeError(
                f"dispatch would read unflushed kernel arguments at {self.arg_slot!r}"
            )
        return self.inner.run(program)

    def fault(self, exc: BaseException) -> HipError:
        return self.inner.fault(exc)


def node_op(
    device: Device,
    node: ExecNode,
    compiled: Compiled,
    arena: KernelArgArena,
    params: Any = None,
    arg_slot: ArgSlot | None = None,
) -> Op | None:
    """The op for a single-op node: in its current state (params, enabled), or with
    ``params`` (and, for a kernel, its arguments in ``arg_slot``) it is about to take."""
    kind = node.type
    if kind in (NodeType.Kernel, NodeType.Memcpy, NodeType.Memset) and not node.enabled:
        return DISABLED
    if params is None:
        params = node.params
    if kind is NodeType.Kernel:
        return kernel_op(device, params, arg_slot or compiled.arg_slot_of(node), arena)
    if kind in (NodeType.Memcpy, NodeType.Memset, NodeType.Host):
        op: Op = params.op(device)
        return op
    return None


_KERNEL = NodeType.Kernel
# A class per kernel, launch shape and arena chunk: past this many in one executable (a graph
# of many launch shapes), runs get an op holding all its fields instead.
_MAX_SHARED_CLASSES = 64
# A run shorter than this gets an op object per node (KernelOp.make_each, the objects
# KernelOp.make makes) rather than a class of its own: making a class (and, since a class is its
# own reference cycle, collecting it, with the arena chunk its ops read, in a later pass of the
# garbage collector) costs more than twenty or thirty op objects do. Below it (a small graph's
# whole chain) the objects are cheaper, and everything they keep is freed by reference counting
# when the executable is.
_SHARED_RUN_MIN = 32
_kernel_of = attrgetter("kernel")
_type_of = attrgetter("type")
_threads_of = attrgetter("threads")
_arg_bytes_of = attrgetter("arg_bytes")
_layout_size_of = attrgetter("kernel.layout.size")


class _Builder:
    def __init__(
        self,
        device: Device,
        arena: KernelArgArena,
        num_signals: int,
        conditionals: Conditionals | None = None,
        uniform: tuple[Kernel, Threads] | None = None,
    ) -> None:
        self.device = device
        # Every kernel node's kernel and launch shape, when all have the same (instantiate
        # knows): a run then needs no pass over its nodes to find out.
        self.uniform = uniform
        self.arena = arena
        self.compiled = Compiled([], {}, {}, [], num_signals, 1)
        # A kernel's modelled cost depends on the kernel and its launch shape only, and nodes
        # of one shape share a Threads object: compute it once per (kernel, Threads).
        self._costs: dict[tuple[Kernel, Threads], int] = {}
        # The classes runs of one kernel and launch shape share (KernelOp.make_shared).
        self._classes: dict[tuple[Any, ...], type[Any]] = {}
        self.conditionals = conditionals

    def _kernel_cost(self, params: KernelParams) -> int:
        key = (params.kernel, params.threads)
        cost = self._costs.get(key)
        if cost is None:
            cost = self._costs[key] = params.cost_ns(self.device)
        return cost

    def emit_node(self, node: ExecNode, strand: int, ops: list[Op]) -> None:
        """Emit ``node``'s op; a child graph's nodes in its order, however deep it nests."""
        if node.type is not NodeType.Graph:
            self._emit_one(node, strand, ops)
            return
        assert node.child is not None
        stack = [iter(node.child.nodes)]
        while stack:
            inner = next(stack[-1], None)
            if inner is None:
                stack.pop()
            elif inner.type is NodeType.Graph:
                assert inner.child is not None
                stack.append(iter(inner.child.nodes))
            else:
                self._emit_one(inner, strand, ops)

    def emit_kernels(self, run: list[ExecNode], strand: int, ops: list[Op]) -> None:
        """What :meth:`_emit_one` does for each of ``run``: enabled kernel nodes, arena not strict.

        Their arguments are placed in one pass through the arena (:meth:`KernelArgArena.
        place_many`), and consecutive nodes of one kernel and launch shape share one cost
        lookup: the same slots, ops and maps, for less work per node.
        """
        self.emit_kernel_run(None, run, [node.params for node in run], strand, ops)

    def emit_kernel_run(
        self,
        graph: ExecGraph | None,
        items: Sequence[Any],
        params_run: list[KernelParams],
        strand: int,
        ops: list[Op],
    ) -> None:
        """:meth:`emit_kernels` for the nodes ``items`` (records, or indices into ``graph``,
        whose records are then not made) with parameters ``params_run``."""
        compiled = self.compiled
        arena = self.arena
        first = params_run[0]
        uniform = self.uniform is not None
        one_kernel = uniform or len(set(map(id, map(_kernel_of, params_run)))) == 1
        # A slot's size is its kernel's: one kernel, one size, read once.
        sizes = (
            [first.kernel.layout.size] * len(params_run)
            if one_kernel
            else list(map(_layout_size_of, params_run))
        )
        spans = arena.place_spans(list(map(_arg_bytes_of, params_run)), sizes)
        compiled._runs.append((strand, len(ops), graph, items))  # their locations, one record
        compiled._arg_spans.append((graph, items, spans))  # their slots, in one record
        if len(spans) == 1:
            buffers: Any = repeat(spans[0][1], len(items))
            offsets: Any = spans[0][2]
        else:
            buffers = chain.from_iterable(repeat(span[1], len(span[2])) for span in spans)
            offsets = chain.from_iterable(span[2] for span in spans)
        make = KernelOp.make
        if one_kernel and (
            uniform or len(set(map(id, map(_threads_of, params_run)))) == 1
        ):  # one kernel, one launch shape: one cost, and the ops made without a Python loop
            count = len(items)
            cost = self._kernel_cost(first)
            if count >= _SHARED_RUN_MIN and len(self._classes) < _MAX_SHARED_CLASSES:
                made = [
                    KernelOp.make_shared(
                        first.kernel,
                        first.threads,
                        span[1],
                        span[2],
                        cost,
                        arena,
                        self.device.memory,
                        self._classes,
                    )
                    for span in spans
                ]
                if made[0] is not None:  # a synchronous body: ops sharing a class
                    for each in made:
                        assert each is not None
                        ops.extend(each)
                    return
            if count < _SHARED_RUN_MIN and len(spans) == 1:  # a short run: an object each
                ops.extend(
                    KernelOp.make_each(
                        first.kernel, first.threads, spans[0][1], offsets, cost, arena
                    )
                )
                return
            ops.extend(
                map(
                    make,
                    repeat(first.kernel, count),
                    repeat(first.threads, count),
                    buffers,
                    offsets,
                    repeat(cost, count),
                    repeat(arena, count),
                )
            )
            return
        append = ops.append
        kernel: Any = None
        threads: Any = None
        cost = 0
        for params, buffer, offset in zip(params_run, buffers, offsets, strict=True):
            if params.kernel is not kernel or params.threads is not threads:
                kernel, threads = params.kernel, params.threads
                cost = self._kernel_cost(params)
            append(make(kernel, threads, buffer, offset, cost, arena))

    def _emit_one(self, node: ExecNode, strand: int, ops: list[Op]) -> None:
        compiled = self.compiled
        kind = node.type
        if kind is NodeType.Kernel:
            params: KernelParams = node.params
            arena = self.arena
            kernel = params.kernel
            arg_slot = arena.place(params.arg_bytes, kernel.layout.size)
            compiled._arg_places[node] = arg_slot  # arg_slots would make a run's slots first
            if node.enabled and not arena._strict:  # the common case, without node_op's dispatch
                compiled._locations[node] = (strand, len(ops))
                cost = self._costs.get((kernel, params.threads))
                if cost is None:
                    cost = self._kernel_cost(params)
                ops.append(
                    KernelOp.make(
                        kernel, params.threads, arg_slot.buffer, arg_slot.offset, cost, arena
                    )
                )
                return
        op: Op | None
        if kind in (NodeType.EventRecord, NodeType.WaitEvent):
            index = compiled.prev_index + compiled.extra
            compiled.extra += 1
            compiled.bindings.append(EventBinding(index, node, kind is NodeType.EventRecord))
            op = (
                EventRecordOp(index)
                if kind is NodeType.EventRecord
                else WaitSignalIndicesOp((index,))
            )
        elif kind is NodeType.MemAlloc:
            op = MemAllocOp(self.device, node.params.ptr)
            compiled.alloc_ptrs.append(op.ptr)
            compiled.alloc_memory[op.ptr] = op.memory
        elif kind is NodeType.MemFree:
            op = NodeFreeOp(self.device, (node.params.ptr,))
            compiled.foreign_frees.extend(op.frees)  # its own allocations dropped at the end
        elif kind is NodeType.Conditional:
            assert self.conditionals is not None
            op = self.conditionals.op(node, lambda inner, body: self.emit_node(inner, strand, body))
        else:
            op = node_op(self.device, node, compiled, self.arena)
        if op is not None:
            compiled._locations[node] = (strand, len(ops))
            ops.append(op)


def _unfreed(graph: ExecGraph) -> list[DevicePtr]:
    if graph.flat and not graph.has_type(NodeType.MemAlloc):  # no record made
        return []
    nodes = graph.walk()
    if NodeType.MemAlloc not in set(map(_type_of, nodes)):  # most graphs: no loop in Python
        return []
    allocated: list[DevicePtr] = []
    freed: set[DevicePtr] = set()
    for node in nodes:  # one walk for both
        kind = node.type
        if kind is NodeType.MemAlloc:
            allocated.append(node.params.ptr)
        elif kind is NodeType.MemFree:
            freed.add(node.params.ptr)
    return [ptr for ptr in allocated if ptr not in freed]


def _emit_pending(
    builder: _Builder,
    graph: ExecGraph,
    params: list[Any] | None,
    table: SegmentTable,
    pending: list[int],
    strand: int,
    ops: list[Op],
) -> list[Any] | None:
    """Emit the kernel-run segments ``pending`` (segment ids of ``table``) as one run; empty it.

    Returns the parameters column (read on first use: nothing changes it while compiling), or
    None while the copy holds them as read.
    One segment's indices are kept as they are (a ``range``, usually); several are kept as
    their segment ids (:class:`SegmentNodes`: a machine int per segment, none per node).

    A copy holding its parameters as read (:meth:`ExecGraph.read_order`: a wide graph put in
    Kahn's order by positions) is read through its positions, never permuted as a whole.
    """
    items: Sequence[int]
    read = graph.read_order() if params is None else None
    if read is not None:
        order, read_params = read
        ids = array("q", pending)
        items = table.nodes(pending[0]) if len(pending) == 1 else SegmentNodes(table, ids)
        params_run = _gather(read_params, order[_segment_indices(table, ids)])
        pending.clear()
        builder.emit_kernel_run(graph, items, params_run, strand, ops)
        return None
    if params is None:
        params = graph.params_column()
    if len(pending) == 1:
        items = table.nodes(pending[0])
        params_run = table.take(params, pending[0])
    else:
        ids = array("q", pending)
        items = SegmentNodes(table, ids)
        params_run = _take_segments(table, params, ids)
    pending.clear()
    builder.emit_kernel_run(graph, items, params_run, strand, ops)
    return params


def _take_segments(table: SegmentTable, column: list[Any], ids: IntArray) -> list[Any]:
    """``column``'s entries at the nodes of segments ``ids``, one segment after the other: what
    :meth:`SegmentTable.take` gives for each, joined.

    A merged run holds many short segments (a wide fork-join's branches): their node indices
    are made with a few array operations for all of them, and the entries read in one pass,
    rather than a slice per segment. Segments with uneven nodes are read one by one.
    """
    sids = np.frombuffer(ids, dtype=np.int64)
    steps = np.frombuffer(table.step, dtype=np.int64)[sids]
    if not steps.all():  # a segment with an uneven node list
        return list(chain.from_iterable(map(partial(table.take, column), ids)))
    return list(map(column.__getitem__, _segment_indices(table, ids).tolist()))


def _gather(column: list[Any], at: Positions) -> list[Any]:
    """``column``'s entries at ``at``, in order.

    Where ``at`` runs through consecutive indices (a wide fork-join's branch, built in one
    go, is consecutive as read), each such stretch is one slice; else an entry at a time.
    """
    count = len(at)
    if count < 2:
        return [column[i] for i in at.tolist()]
    breaks = np.flatnonzero(np.diff(at) != 1) + 1
    if len(breaks) * 4 > count:  # stretches of 4 or fewer, on average: an entry at a time
        return list(map(column.__getitem__, at.tolist()))
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [count]))
    slices = map(slice, at[starts].tolist(), (at[ends - 1] + 1).tolist())
    return list(chain.from_iterable(map(column.__getitem__, slices)))


def _segment_indices(table: SegmentTable, ids: IntArray) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The node indices of segments ``ids``, one segment after the other, as an array (a few
    array operations for evenly spaced segments; uneven ones are joined as listed)."""
    sids = np.frombuffer(ids, dtype=np.int64)
    steps = np.frombuffer(table.step, dtype=np.int64)[sids]
    if not steps.all():  # a segment with an uneven node list
        return np.fromiter(chain.from_iterable(map(table.nodes, ids)), dtype=np.int64)
    sizes = np.frombuffer(table.size, dtype=np.int64)[sids]
    firsts = np.frombuffer(table.first, dtype=np.int64)[sids]
    if len(sids) == 1:  # one segment: its range
        return np.arange(int(sizes[0]), dtype=np.int64) * int(steps[0]) + int(firsts[0])
    starts = np.cumsum(sizes) - sizes  # each segment's first place in the run
    within = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(starts, sizes)
    return np.repeat(firsts, sizes) + within * np.repeat(steps, sizes)


def compile_plan(
    graph: ExecGraph,
    plan: Plan,
    device: Device,
    arena: KernelArgArena,
    *,
    auto_free: bool,
    conditionals: Conditionals | None = None,
    uniform: tuple[Kernel, Threads] | None = None,
) -> Compiled:
    """Build the per-strand replay programs of ``plan``, packing kernel arguments into ``arena``.

    ``uniform``: the kernel and launch shape (``Threads``) of every kernel node, when they all
    share one (instantiate finds out as it checks launch shapes), else None.
    """
    builder = _Builder(device, arena, plan.num_signals, conditionals, uniform)
    compiled = builder.compiled
    compiled.unfreed_ptrs = _unfreed(graph)
    table = plan.segments
    waits_of, signal_of = table.waits.get, table.signal.get
    types = graph.types()
    # A graph of kernel nodes only (most large graphs) needs no type test per segment.
    only_kernels = not len(graph) or graph.only(_KERNEL)  # one set comparison, not one per type
    # ... and when no setter made the records, every node is enabled: each segment is a run.
    plain = only_kernels and not arena._strict and not graph.made
    # The parameters column, read once: nothing changes a node's parameters while compiling.
    params: list[Any] | None = None
    for strand, segment_ids in enumerate(plan.strands):
        ops: list[Op] = []
        if strand == 0:
            ops.append(WaitSignalIndicesOp((compiled.prev_index,)))
            if auto_free and compiled.unfreed_ptrs:
                ops.append(MemFreeOp(device, tuple(compiled.unfreed_ptrs)))
            defaults = conditionals.defaults_op() if conditionals is not None else None
            if defaults is not None:  # handles take their defaults before any strand starts
                ops.append(defaults)
            if plan.start_signal is not None:
                ops.append(SignalIndexOp(plan.start_signal))
        else:
            assert plan.start_signal is not None
            ops.append(WaitSignalIndicesOp((plan.start_signal,)))
        # Kernel-run segments that follow one another on this strand with no wait or signal
        # between them (the branches of a wide fork-join, mostly) are emitted as one run: the
        # same ops in the same order, one arena placement and one run record for all of them.
        pending: list[int] = []
        if plain:  # every segment a kernel run: only waits and signals split the runs
            # The segments that wait or signal, found in one pass: the others between them
            # join the pending run a slice at a time.
            marked = map(
                or_,
                map(table.waits.__contains__, segment_ids),
                map(table.signal.__contains__, segment_ids),
            )
            done = 0
            for at in compress(count(), marked):
                segment_id = segment_ids[at]
                pending.extend(segment_ids[done:at])
                waits = waits_of(segment_id)
                if waits:
                    if pending:
                        params = _emit_pending(builder, graph, params, table, pending, strand, ops)
                    ops.append(WaitSignalIndicesOp([table.signal[w] for w in waits]))
                pending.append(segment_id)
                signal = signal_of(segment_id)
                if signal is not None:
                    params = _emit_pending(builder, graph, params, table, pending, strand, ops)
                    ops.append(SignalIndexOp(signal))
                done = at + 1
            pending.extend(segment_ids[done:])
        for segment_id in () if plain else segment_ids:  # the general case
            waits = waits_of(segment_id)
            if waits:
                if pending:
                    params = _emit_pending(builder, graph, params, table, pending, strand, ops)
                ops.append(WaitSignalIndicesOp([table.signal[w] for w in waits]))
            indices = table.nodes(segment_id)
            if (
                not arena._strict
                and (
                    only_kernels or all(map(is_, map(types.__getitem__, indices), repeat(_KERNEL)))
                )
                and graph.all_enabled(indices)
            ):  # a chain of plain kernel nodes: by index, no node record made
                pending.append(segment_id)
            else:
                if pending:
                    params = _emit_pending(builder, graph, params, table, pending, strand, ops)
                nodes = graph.nodes
                emit_one = builder._emit_one
                for node in map(nodes.__getitem__, indices):
                    if node.type is NodeType.Graph:
                        builder.emit_node(node, strand, ops)
                    else:  # what emit_node does first, without its call
                        emit_one(node, strand, ops)
            signal = signal_of(segment_id)
            if signal is not None:
                if pending:
                    params = _emit_pending(builder, graph, params, table, pending, strand, ops)
                ops.append(SignalIndexOp(signal))
        if pending:
            params = _emit_pending(builder, graph, params, table, pending, strand, ops)
        if strand == 0 and plan.final_waits:
            ops.append(WaitSignalIndicesOp([table.signal[w] for w in plan.final_waits]))
        compiled.strand_ops.append(list(ops))  # a copy is sized exactly: no spare room
    if compiled.foreign_frees:
        own = compiled.alloc_memory
        compiled.foreign_frees = [free for free in compiled.foreign_frees if free[1] not in own]
    if len(compiled.bindings) > 1:
        _bind_in_graph_order(compiled, graph)
    arena.flush()
    return compiled


def _bind_in_graph_order(compiled: Compiled, graph: ExecGraph) -> None:
    """Put the event bindings in the graph's topological order, not the strands' order.

    A launch re-records events in binding order, so an event with two record nodes ends
    pointing at the later one's record, as HIP's launch (which makes its commands in
    topological order) leaves it. A binding of a node the walk does not reach keeps the order
    it was emitted in.
    """
    rank = {node: at for at, node in enumerate(graph.walk())}
    bindings = compiled.bindings
    if all(binding.node in rank for binding in bindings):
        bindings.sort(key=lambda binding: rank[binding.node])
