"""The updater of an executable: versions, copy-on-write and argument-slot retirement.

A :class:`~ahipgraph.GraphExec` owns one :class:`Updater`; its setters and ``update()``
(:mod:`.setters`, :mod:`.copy_setters`) validate in HIP's order and hand the changes here.

Updates never touch bytes or ops an enqueued launch will read:

* **Versions.** A launch holds the :class:`Version` (the per-strand op lists) current when it was
  enqueued. With launches in flight an update copies the op lists first (a new version,
  copy-on-write); without, it edits them in place.
* **Argument slots.** With launches in flight new kernel arguments go to new arena slots;
  without, and when they fit, they are rewritten in place. A superseded slot is *retired*
  with the launch count at the time, and freed once every launch enqueued before the update
  has completed (launches of one executable complete in order, because each waits for the
  previous one): the launcher's completion calls :meth:`Updater.free_retired`.
* **Check, then commit.** Every argument slot a change needs is allocated first (all or none),
  and every op it needs is made (making one asks the device's cost model, which may be user
  code that raises), so a failed update leaves the executable, its arena and the device as
  they were.

The updater reads the launch counts from the launcher, under the executable's lock (the one
lock for launches and updates).
"""

from __future__ import annotations

import builtins
import threading
from collections import deque
from collections.abc import Mapping
from itertools import repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import InvalidValue
from ..device.ops import Op
from ..graph.node import GraphNode, live_node
from ..graph.node_type import NodeType, a_node_of_type
from ..runtime.params import KernelParams
from .arena import ArgSlot, KernelArgArena
from .compile import Compiled, IndexRun, node_op, reads_same
from .conditional import Conditionals, check_handles_known, settle_update, takes_handle
from .races import ExecRaces
from .snapshot import ExecGraph, ExecNode, find_source
from .update import (
    Change,
    check_setter,
    device_limits_problem,
    fit_in_place,
    same_kernels,
    same_shape,
)

if TYPE_CHECKING:
    from ..runtime.device import Device
    from .graph_exec import GraphExec
    from .launcher import Launcher

__all__ = ["Updater", "Version"]


class Version:
    """One generation of the replay programs. Launches hold the version they were enqueued with."""

    __slots__ = ("in_flight", "strand_ops")

    def __init__(self, strand_ops: list[list[Op]]) -> None:
        self.strand_ops = strand_ops  # one op list per strand of the plan
        self.in_flight = 0


class Updater:
    """Changes an executable's nodes without disturbing launches. See the module notes."""

    __slots__ = (
        "_unread",
        "_unread_at",
        "arena",
        "compiled",
        "conditionals",
        "device",
        "graph",
        "launcher",
        "lock",
        "owner",
        "races",
        "retired",
        "sources",
        "version",
        "versions",
    )

    def __init__(
        self,
        owner: GraphExec,
        lock: threading.RLock,
        launcher: Launcher,
        *,
        device: Device,
        graph: ExecGraph,
        sources: Mapping[Any, ExecNode],
        compiled: Compiled,
        arena: KernelArgArena,
        conditionals: Conditionals | None,
        races: ExecRaces | None,
    ) -> None:
        self.owner = owner
        self.lock = lock  # the executable's: launches and updates are one critical section
        self.launcher = launcher  # the launch counts
        self.device = device
        self.graph = graph
        self.sources = sources  # original node handle -> its copy
        self.compiled = compiled
        self.arena = arena
        self.conditionals = conditionals
        self.races = races
        self.version = Version(compiled.strand_ops)
        self.versions = 1
        # (launches enqueued when the slot was superseded, the slot)
        self.retired: deque[tuple[int, ArgSlot]] = deque()
        # The kernel nodes given a new slot while launches were in flight, since launch
        # ``_unread_at`` was enqueued: no launch reads those slots yet, so a setter called again
        # before the next launch rewrites them in place instead of taking one more slot each
        # time (a loop of setters during a long launch would grow the arena without bound).
        self._unread: builtins.set[ExecNode] = builtins.set()
        self._unread_at = 0

    # -- finding nodes --------------------------------------------------------------------------

    def node(self, node: GraphNode, *types: NodeType) -> ExecNode:
        """Find the copy of an original node: exec first, then node handle, then node type."""
        self.owner._check_alive()
        node = live_node(node)
        exec_node = find_source(self.sources, node.hid)
        if exec_node is None:
            raise InvalidValue(f"{node!r} is not a node of the graph this executable was made from")
        if exec_node.type not in types:
            names = "/".join(t.name for t in types)
            raise InvalidValue(f"{node!r} is {a_node_of_type(exec_node.type)}, not {names}")
        return exec_node

    def settle_conditionals(
        self, changes: list[Change]
    ) -> tuple[list[Change], str, ExecNode | None]:
        """An update's changes without unchanged conditional nodes, or why it cannot be made."""
        return settle_update(self.conditionals, changes)

    # -- applying changes -----------------------------------------------------------------------

    def set(self, exec_node: ExecNode, params: Any) -> None:
        """A per-node setter's change: HIP's compatibility rules (InvalidValue), then apply."""
        check_setter(exec_node, params)
        check_handles_known(self.conditionals, [(exec_node, params)])
        self.apply([(exec_node, params)])

    def apply(self, changes: list[Change]) -> None:
        """Give nodes new parameters without disturbing any launch already enqueued.

        Check, then commit: every argument slot the changes need is allocated first (all or
        none, :meth:`KernelArgArena.allocate_all`), so a full device or an oversized slot fails
        here with the executable, its arena and the device exactly as they were; then every op
        they need is made (a cost model raising gives the new slots back). Nothing after that
        runs user code.

        The executable is checked again under the lock: a setter checked it before validating
        its arguments, and user code run by that validation (an argument's ``__index__``) or
        another thread may have destroyed it since; its arena may already be given back.
        """
        if self.conditionals is not None:  # kernels' handle arguments point at our cells
            changes = [(node, self.conditionals.bind(params, node)) for node, params in changes]
        with self.lock:
            self.owner._check_alive()  # InvalidValue: destroyed since the setter's first check
            if self.races is not None:  # check_races: recheck the changed nodes only
                self.races.check_changes(changes)
            elif len(changes) >= MEMORY_ORDER_FROM:
                changes = in_memory_order(changes)
            if len(changes) >= BULK_LOOKUPS:  # every run's entries at once, not node by node
                self.compiled.locations  # noqa: B018 - made on first use
                self.compiled.arg_slots  # noqa: B018
            fresh = self._allocate_arguments(changes)
            try:
                # Making an op asks the device's cost model (user code): every op is made
                # before anything changes, so one that raises leaves the executable as it was.
                new_ops = self._new_ops_of(changes, fresh)
            except BaseException:
                for arg_slot in fresh.values():
                    self.arena.free(arg_slot)
                raise
            version = self._writable_version()
            for node, params in changes:
                if node.type is NodeType.Kernel and not _same_bytes(node, params):
                    self._store_arguments(node, params, fresh.get(node))
                node.params = params
            for (strand, position), op in new_ops:
                version.strand_ops[strand][position] = op
            self.arena.flush()
            if self.races is not None:
                self.races.commit(changes)

    def _new_ops_of(
        self, changes: list[Change], fresh: dict[ExecNode, ArgSlot]
    ) -> list[tuple[tuple[int, int], Op]]:
        """The op each changed node will need, with its location (strand, position); none for
        a node whose op already reads its new arguments, or that has no op of its own.

        A kernel node's new bytes go to its ``fresh`` slot when it has one (see
        :meth:`_allocate_arguments`), else to its own: an op of the same kernel and launch
        shape reading that slot needs no replacing (an update of a million nodes then makes
        no op). Event nodes bind at launch instead.
        """
        compiled = self.compiled
        strand_ops = self.version.strand_ops
        made: list[tuple[tuple[int, int], Op]] = []
        for node, params in changes:
            location = compiled.location_of(node)
            if location is None:
                continue
            arg_slot = None
            if node.type is NodeType.Kernel:
                arg_slot = fresh.get(node) or compiled.arg_slot_of(node)
                if node.enabled and reads_same(
                    strand_ops[location[0]][location[1]], params, arg_slot.buffer, arg_slot.offset
                ):
                    continue
            op = node_op(self.device, node, compiled, self.arena, params, arg_slot)
            if op is not None:
                made.append((location, op))
        return made

    def update_columns(self, new: ExecGraph) -> bool:
        """A whole-graph update of a graph of kernels made from the copies' columns, if it can
        be: True when made, False (nothing changed) when :func:`~.update.diff_graphs` and
        :meth:`apply` must make it.

        An executable only ever launched holds its nodes as columns and its kernels as runs
        (see :meth:`Compiled.index_runs`): no record, location or slot object per node. The
        general path makes all three for every node on the first update, four hundred bytes
        a node kept for the executable's life and most of a million-node update's time. When
        the new copy has the same shape and every node the same kernel and attributes, no
        check of the general path can fail but the device's limits, checked here too; with
        no launch in flight every slot is rewritten in place. The update is then the new
        parameters column, the changed slots' bytes and an op for each node whose launch
        shape changed: what the general path leaves behind, without the per-node objects.

        Anything else (launches in flight, a race checker, conditional nodes, a strict
        arena, records already made, a handle argument, another kernel, shape or length,
        longer argument bytes than a slot holds, a failing limit) takes the general path,
        which finds and names the failure.
        """
        old = self.graph
        if (
            self.races is not None
            or self.conditionals is not None
            or self.arena._strict
            or old.made
            or new.made
            or len(old) != len(new)
            or not old.only(NodeType.Kernel)
            or not same_shape(old, new)
        ):
            return False
        with self.lock:
            self.owner._check_alive()
            runs = self.compiled.index_runs(old)
            if runs is None or self.launcher.in_flight:
                return False
            # Both copies' parameters as read, in the order they were made, when both were
            # read in one order: checked in memory order, and neither put in the copy's.
            old_read, new_read = old.read_order(), new.read_order()
            at: list[int] | None = None
            if (
                old_read is not None
                and new_read is not None
                and np.array_equal(old_read[0], new_read[0])
            ):
                at = old_read[0].tolist()
                old_params, new_params = old_read[1], new_read[1]
            else:
                old_params, new_params = old.params_column(), new.params_column()
            if (
                not same_kernels(old_params, new_params)
                or takes_handle(params.kernel for params in old_params)
                or not fit_in_place(old_params, new_params)  # a kernel's layout grew since
            ):
                return False
            if device_limits_problem(zip(repeat(None), new_params), self.device) is not None:
                return False
            # Making an op asks the device's cost model (user code): every op is made before
            # anything changes, so one that raises leaves the executable as it was.
            new_ops = self._new_ops(runs, old_params, new_params, at)
            if not old.replace_params(list(new_params), as_read=at is not None):  # read meanwhile
                return False
            if new_ops:
                strand_ops = self._writable_version().strand_ops
                for strand, position, op in new_ops:
                    strand_ops[strand][position] = op
            try:
                written = self._rewrite_runs(runs, old_params, new_params, at)
            except BaseException:  # stopped part way: what was written is still read anew
                self.arena.count_writes(1)
                raise
            self.arena.count_writes(written)  # every dispatch that kept decoded ones decodes
            self.arena.flush()
            return True

    def _new_ops(
        self,
        runs: list[IndexRun],
        old_params: list[Any],
        new_params: list[Any],
        at: list[int] | None,
    ) -> list[tuple[int, int, Op]]:
        """The op of each node of ``runs`` whose launch shape changes, with its strand and
        position (an op is made for one kernel and launch shape; its arguments are read from
        its slot whatever they are). Most updates change no shape: found at C speed."""
        if all(map(is_, map(_threads_of, new_params), map(_threads_of, old_params))):
            return []
        device, arena = self.device, self.arena
        made: list[tuple[int, int, Op]] = []
        for strand, position, indices, spans in runs:
            each = iter(indices) if at is None else map(at.__getitem__, indices)
            places = ((buffer, offset) for _, buffer, offsets, _ in spans for offset in offsets)
            for (buffer, offset), index in zip(places, each, strict=True):
                params = new_params[index]
                if params.threads is not old_params[index].threads:
                    made.append((strand, position, params.op(device, buffer, offset, arena)))
                position += 1
        return made

    def _rewrite_runs(
        self,
        runs: list[IndexRun],
        old_params: list[Any],
        new_params: list[Any],
        at: list[int] | None,
    ) -> int:
        """Write the new argument bytes of every node of ``runs`` whose bytes changed into its
        slot; the count written. The parameters are by node index, or at ``at[index]``."""
        written = 0
        for _, _, indices, spans in runs:
            each = iter(indices) if at is None else map(at.__getitem__, indices)
            for _, buffer, offsets, _ in spans:
                # each last: zip stops at the span's end without taking an index
                for offset, index in zip(offsets, each, strict=False):
                    params = new_params[index]
                    previous = old_params[index]
                    if params is not previous:
                        data = params.arg_bytes
                        if data != previous.arg_bytes:
                            buffer[offset : offset + len(data)] = data
                            written += 1
        return written

    def _writable_version(self) -> Version:
        version = self.version
        if version.in_flight:  # launches hold these op lists: copy them (copy-on-write)
            version = Version([list(ops) for ops in version.strand_ops])
            self.version = version
            self.versions += 1
        return version

    def _allocate_arguments(self, changes: list[Change]) -> dict[ExecNode, ArgSlot]:
        """The new argument slots ``changes`` need (by node), allocated all at once.

        A node's arguments are rewritten in place when no launch is in flight and they fit in
        its slot; otherwise they go to a new slot. A node whose argument bytes do not change
        (an enable or disable, a new priority, a whole-graph update's unchanged nodes) keeps
        its slot: the bytes there are already these.
        """
        needs: dict[ExecNode, int] = {}
        compiled = self.compiled
        in_flight = self.launcher.in_flight
        unread = self._unread_arguments()
        for node, params in changes:
            if node.type is NodeType.Kernel and not _same_bytes(node, params):
                size = max(params.kernel.layout.size, 1)
                if (in_flight and node not in unread) or compiled.arg_slot_of(node).size < size:
                    needs[node] = size
        if not needs:
            return {}
        return dict(zip(needs, self.arena.allocate_all(list(needs.values())), strict=True))

    def _store_arguments(
        self, node: ExecNode, params: KernelParams, fresh: ArgSlot | None = None
    ) -> None:
        """Write a node's new arguments: into ``fresh`` (allocated beforehand) or in place."""
        arg_slot = self.compiled.arg_slot_of(node)
        if fresh is None:
            self.arena.write(arg_slot, params.arg_bytes)  # nothing in flight reads it: in place
            return
        self.arena.write(fresh, params.arg_bytes)
        self.compiled.move_arg_slot(node, fresh)
        launcher = self.launcher
        unread = self._unread_arguments()
        if launcher.in_flight and node not in unread:
            # free once every launch enqueued so far has completed
            self.retired.append((launcher.launches, arg_slot))
        else:  # no launch reads it: nothing in flight, or it was made since the last launch
            self.arena.free(arg_slot)
        if launcher.in_flight:
            unread.add(node)

    def _unread_arguments(self) -> builtins.set[ExecNode]:
        """The nodes whose slot no launch has read: given one since the last launch was
        enqueued (a launch since empties the set). Caller holds the executable's lock."""
        launches = self.launcher.launches
        if self._unread_at != launches:
            self._unread.clear()
            self._unread_at = launches
        return self._unread

    def free_retired(self, completed: int) -> None:
        """Free the retired argument slots no launch reads once ``completed`` launches are done.

        Called by the launcher's completion, under the executable's lock.
        """
        retired = self.retired
        while retired and retired[0][0] <= completed:
            self.arena.free(retired.popleft()[1])


# From this many changes on, an update applies them in the order their parameters sit in
# memory (see in_memory_order). Below it everything an update reads fits in the CPU's caches,
# and the sort would only add its own cost.
MEMORY_ORDER_FROM = 50_000
# From this many changes on, apply enters every node's location and slot at once (see
# Compiled.locations) rather than one by one as a setter's few nodes are.
BULK_LOOKUPS = 1_000
_threads_of = attrgetter("threads")


def in_memory_order(changes: list[Change]) -> list[Change]:
    """``changes`` sorted by where their new parameter records sit in memory.

    Each change is applied on its own (its argument slot, its op), so any order gives the same
    executable. The executable's order is its replay order; in a wide graph that order takes
    one node from each branch in turn, so it strides across the new graph, whose records (and
    the old ones they replace) were made branch by branch. At a million nodes every such step
    misses the caches. Records made one after another lie one after another (``id`` is the
    address in CPython), so this order reads both graphs' records in sequence. A chain's
    changes are in that order already, which the sort finds in one pass.
    """
    return sorted(changes, key=_params_address)


def _params_address(change: Change) -> int:
    return id(change[1])


def _same_bytes(node: ExecNode, params: KernelParams) -> bool:
    """Whether kernel node ``node``'s slot already holds ``params``' argument bytes (it always
    holds those of the node's current parameters)."""
    old: KernelParams = node.params
    return params is old or params.arg_bytes == old.arg_bytes
