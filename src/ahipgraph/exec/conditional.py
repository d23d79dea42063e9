"""Conditional nodes in an executable: body graphs compiled with their parent, run on the device.

At instantiate (:func:`prepare`), under the graph's lock, every conditional node's bodies are
copied (as child graphs are) and the handles the executable uses are collected: those of its
conditional nodes and those passed to its kernels. :meth:`Conditionals.allocate` gives each
handle a cell of device memory (one per child-graph copy holding its conditional node: see
:class:`Conditionals`); :meth:`Conditionals.bind` rewrites each kernel's copy of its
arguments so a ``CondHandle`` parameter points at that cell (see
:mod:`ahipgraph.device.conditional_arg`).

A conditional node compiles to one :class:`ConditionalOp` holding each body as an op list,
compiled by the same builder as the parent (a body runs its nodes in topological order, on the
node's own strand). When the op runs it reads the handle's cell and runs the chosen body inline,
in the same program — no host involvement. Its position inside a body survives parking (an
async kernel, a nested node yielding), because launches of one executable never overlap, so at
most one program runs a given op at a time.

A WHILE node yields to the event loop between iterations (a signal decremented on the loop's
next turn), so a body that never ends cannot starve the host: ``exec.destroy()`` stops it at
the next iteration (the launch then fails with ``IllegalState`` and returns what it borrowed),
and a task awaiting it can be cancelled. Once its launch has failed, a WHILE node starts
no further iteration (the failed work may be what would have ended the loop). With
``assign_default`` the handles get their defaults at the start of every launch, before any
strand starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import HipError, IllegalState, InvalidValue, NotSupported
from ..device import hooks, kernel_args
from ..device.conditional_arg import bind_handles, handle_fields
from ..device.ops import DefaultsOp, Op
from ..device.program import INTERRUPTS
from ..device.signal import Signal
from ..graph.conditional import (
    ConditionalHandle,
    ConditionalKind,
    ConditionalNodeParams,
    owns_handle,
)
from ..graph.node_type import NodeType
from ..graph.params import ChildGraphParams
from ..runtime.params import KernelParams
from .snapshot import ExecGraph, ExecNode, snapshot

_kernel_of = attrgetter("kernel")

if TYPE_CHECKING:
    from ..device.kernel import Kernel
    from ..device.pointer import DevicePtr
    from ..device.program import Program
    from ..graph.graph import Graph
    from ..lifetime.user_object import UserObject
    from ..runtime.device import Device

__all__ = [
    "MAX_CONDITIONAL_DEPTH",
    "BodyCopies",
    "ConditionalOp",
    "Conditionals",
    "check_foreign_handles",
    "check_handles_known",
    "takes_handle",
    "unknown_handle",
    "copy_bodies",
    "prepare",
    "prepare_plain",
]

MAX_CONDITIONAL_DEPTH = 64
"""How deep conditional nodes may nest (a body's conditional node's body, ...), child graphs
in between not counted. A nested body compiles and runs as a call inside its node's (see
:class:`ConditionalOp`), so past a depth Python's recursion limit would end the instantiate or
the launch with a ``RecursionError``; it is refused at instantiate instead (``NotSupported``).
CUDA names no limit; real graphs nest a few levels."""

_UINT32 = np.dtype(np.uint32)
_BODY_TYPES = frozenset(
    {
        NodeType.Kernel,
        NodeType.Memcpy,
        NodeType.Memset,
        NodeType.Empty,
        NodeType.Graph,
        NodeType.Conditional,
    }
)


class _Control:
    """Shared by an executable's conditional ops: set when the executable is destroyed."""

    __slots__ = ("stopped",)

    def __init__(self) -> None:
        self.stopped = False


class ConditionalOp(Op):
    """An IF, WHILE or SWITCH node: read the handle, run the chosen body inline."""

    __slots__ = ("address", "bodies", "control", "kind", "state")

    def __init__(
        self, kind: ConditionalKind, address: int, bodies: list[list[Op]], control: _Control
    ) -> None:
        super().__init__(0)
        self.kind = kind
        self.address = address
        self.bodies = bodies
        self.control = control
        # (program, body, next position) while a body is under way in ``program``
        self.state: tuple[Program, list[Op], int] | None = None

    def _choose(self, program: Program) -> list[Op] | None:
        memory = program.memory
        assert memory is not None
        value = int(memory.view(self.address, _UINT32)[0])
        if self.kind is ConditionalKind.Switch:
            return self.bodies[value] if value < len(self.bodies) else None
        if value:
            return self.bodies[0]
        if self.kind is ConditionalKind.If and len(self.bodies) == 2:
            return self.bodies[1]
        return None

    def run(self, program: Program) -> Any:
        state = self.state
        if state is not None and state[0] is program:
            _, body, position = state
        else:
            chosen = self._choose(program)
            if chosen is None:
                self.state = None
                return None
            body, position = chosen, 0
        # Fault injection fails or holds a kernel as it starts: a body's ops, run here rather
        # than by the program's observed loop, are offered to the observers the same way.
        watchers = hooks.observers
        while True:
            while position < len(body):
                op = body[position]
                try:
                    blocker = None if watchers is None else hooks.op_starting(watchers, program, op)
                    if blocker is None:
                        blocker = op.run(program)
                except INTERRUPTS:
                    self.state = None  # the program abandons its work, this node included
                    raise
                except BaseException as exc:  # the op's own failure, as a program records it
                    program._record(op.fault(exc))
                    position += 1
                    continue
                if blocker is None:
                    position += 1
                    continue
                if type(blocker) is Signal:  # a nested node parks: run it again later
                    self.state = (program, body, position)
                    return blocker
                self.state = (program, body, position + 1)  # an async body: park until it ends
                return _signal_when_done(blocker, op, program)
            if self.kind is not ConditionalKind.While or program.error is not None:
                # A failed launch starts no further iteration: the body that failed may never
                # have set the handle that ends the loop, and a device that faulted stops.
                self.state = None
                return None
            chosen = self._choose(program)
            if chosen is None:  # the loop ends here: a destroy has no iteration to stop
                self.state = None
                return None
            if self.control.stopped:
                self.state = None
                raise IllegalState("the executable was destroyed while its WHILE node looped")
            # Next iteration, after one turn of the event loop: a body that never ends must
            # not starve the host that would destroy the executable.
            self.state = (program, chosen, 0)
            return _next_turn(program)

    def __repr__(self) -> str:
        return f"<ConditionalOp {self.kind.name} bodies={len(self.bodies)}>"


def _next_turn(program: Program) -> Signal:
    signal = Signal(1)
    assert program.queue is not None
    program.queue._engine.call_soon(signal.decrement, program.time)
    return signal


def _signal_when_done(awaitable: Any, op: Op, program: Program) -> Signal:
    signal = Signal(1)
    assert program.queue is not None
    future = program.queue._engine.start(awaitable, program.queue)

    def done(f: asyncio.Future[Any]) -> None:
        program.settle_body(f, op)  # as the program settles a body it runs itself
        signal.decrement(program.time)

    future.add_done_callback(done)
    return signal


class BodyCopies(dict[int, list[ExecGraph]]):
    """Each conditional node's body copies, by ``id`` of its exec node, however deep; and the
    body graphs they were copied from, held weakly (:meth:`sources`).

    A body graph belongs to its conditional node, and so to the user's graph: the copies are
    what an executable runs, and it must not keep the graphs themselves, as it keeps no
    child-graph node's embedded graph (see ``snapshot``). Held by the executable, a forgotten
    graph's bodies (and their nodes) would stay registered with no owner, and a destroyed
    one's stay in memory, for as long as the executable. What still asks for the graphs is
    the race check at instantiate, whose reports name the body nodes, while the user's
    graph (and so its bodies) is alive.
    """

    __slots__ = ("_sources",)

    def __init__(self) -> None:
        super().__init__()
        self._sources: dict[int, tuple[weakref.ref[Graph], ...]] = {}

    def add(self, node: ExecNode, bodies: tuple[Graph, ...], copies: list[ExecGraph]) -> None:
        """``copies`` are the copies of the body graphs ``bodies`` of conditional ``node``."""
        self[id(node)] = copies
        self._sources[id(node)] = tuple(map(weakref.ref, bodies))

    def sources(self, node: ExecNode) -> tuple[Graph | None, ...]:
        """The body graphs ``node``'s copies were made from, in order (None: gone since)."""
        return tuple(source() for source in self._sources.get(id(node), ()))


def _without_bodies(copy: ExecGraph) -> None:
    """Let the node records of ``copy`` (made, all of them) hold their conditional nodes'
    parameters without the body graphs, and drop the parameters column the records were made
    from: from now on the records and the :class:`BodyCopies` are the copy (``snapshot``
    does the same for a child-graph node's embedded graph). Only the body graphs go: the
    handle, kind and size stay, which is all an update compares the copy's node with."""
    for node in copy.nodes:
        if node.type is NodeType.Conditional and node.params.bodies:
            node.params = dataclasses.replace(node.params, bodies=())
    copy._params = None  # the records are the copy (as in snapshot._copy_one)


class Conditionals:
    """An executable's conditional nodes: their bodies, handles, cells and control flag.

    Handles are scoped by child-graph copy. A child-graph node runs its own copy of its graph,
    so a conditional node inside it, and the kernels there that set its handle, use a cell of
    that copy's own: the same graph embedded twice runs as two independent graphs, each copy's
    handle starting from its default, as two executables of one graph do. Scope 0 is the
    executable's graph (with its conditional bodies); each child-graph copy, however deep,
    opens a scope inside the one that holds it. A kernel's handle argument names the cell of
    the innermost enclosing scope whose conditional nodes use that handle, else scope 0's.
    """

    def __init__(self) -> None:
        self.bodies = BodyCopies()  # id(ExecNode) -> its bodies' copies
        self.handles: dict[int, ConditionalHandle] = {}  # token -> handle (scope 0)
        # scope > 0 -> the handles of its conditional nodes, by token
        self.owned: dict[int, dict[int, ConditionalHandle]] = {}
        self.parents: list[int] = [0]  # scope -> the scope holding it
        self.scope_of: dict[ExecNode, int] = {}  # each node inside a child-graph copy
        self.read: set[int] = set()  # the tokens of the handles conditional nodes read
        self.cells: dict[tuple[int, int], DevicePtr] = {}  # (scope, token) -> its cell
        self._addresses: dict[int, dict[int, int]] = {}  # scope -> token -> cell address
        self.control = _Control()

    @property
    def user_objects(self) -> list[UserObject]:
        """The user objects owned by any body copy (and its child graphs), each once."""
        owned: dict[UserObject, None] = {}
        for copies in self.bodies.values():
            for copy in copies:
                owned.update(dict.fromkeys(copy.user_objects))
        return list(owned)

    def walk(self, graph: ExecGraph) -> list[ExecNode]:
        """Every node of ``graph``, child graphs and conditional bodies included."""
        out: list[ExecNode] = []
        pending = [graph]
        while pending:
            for node in pending.pop().walk():
                out.append(node)
                pending.extend(self.bodies.get(id(node), ()))
        return out

    def knows(self, token: int, node: ExecNode | None) -> bool:
        """The kernel ``node`` (None: one of the executable's own graph) has a cell for the
        handle ``token``: its scope, or one around it, holds the handle."""
        scope = self.scope_of.get(node, 0) if node is not None else 0
        while scope:
            if token in self.owned.get(scope, ()):
                return True
            scope = self.parents[scope]
        return token in self.handles

    def _scoped_handles(self) -> list[tuple[tuple[int, int], ConditionalHandle]]:
        every = [((0, token), handle) for token, handle in self.handles.items()]
        for scope, handles in self.owned.items():
            every.extend(((scope, token), handle) for token, handle in handles.items())
        return every

    def allocate(self, device: Device) -> None:
        """One cell per handle and scope (8 bytes of device memory), its default written in."""
        self._addresses = {}
        for key, handle in self._scoped_handles():
            ptr = device.memory.malloc(8, runtime=True)  # the executable's: no user frees it
            self.cells[key] = ptr
            device.memory.view(ptr.address, _UINT32)[0] = handle.default

    def free(self, device: Device) -> None:
        cells, self.cells = self.cells, {}
        self._addresses = {}
        for ptr in cells.values():
            with contextlib.suppress(HipError):  # the device was reconfigured under us
                device.memory.free(ptr, runtime=True)

    def addresses(
        self, scope: int, cells: dict[tuple[int, int], DevicePtr] | None = None
    ) -> dict[int, int]:
        """Token -> cell address, as a node in ``scope`` sees the handles (made once).

        ``cells``: the cells as the caller read them (default: now). :meth:`free` replaces the
        dict, never empties it, so a caller that read it once is not failed with a KeyError
        by an executable destroyed on another thread meanwhile (its check of the executable
        then says it was destroyed).
        """
        found = self._addresses.get(scope)
        if found is None:
            if cells is None:
                cells = self.cells
            chain = []
            while scope:
                chain.append(scope)
                scope = self.parents[scope]
            found = {token: cells[0, token].address for token in self.handles}
            for outer in reversed(chain):
                for token in self.owned.get(outer, ()):
                    found[token] = cells[outer, token].address
            self._addresses[chain[0] if chain else 0] = found
        return found

    def bind(self, params: Any, node: ExecNode | None = None) -> Any:
        """Kernel parameters whose CondHandle arguments point at this executable's cells, as
        ``node`` (the kernel node taking them; None: one of the executable's own graph) sees
        them."""
        cells = self.cells  # read once: see addresses()
        if not isinstance(params, KernelParams) or not cells:
            return params
        addresses = self.addresses(self.scope_of.get(node, 0) if node is not None else 0, cells)
        packed = bind_handles(params.kernel.layout, params.args, params.kernel.name, addresses)
        if packed is None or packed == params.arg_bytes:
            return params
        return dataclasses.replace(params, arg_bytes=packed)

    def bind_all(self, graph: ExecGraph) -> None:
        for node in self.walk(graph):
            if node.type is NodeType.Kernel:
                node.params = self.bind(node.params, node)

    def defaults_op(self) -> Op | None:
        cells = [
            (self.cells[key].address, handle.default)
            for key, handle in self._scoped_handles()
            if handle.assign_default
        ]
        return DefaultsOp(cells) if cells else None

    def same(self, old: ExecNode, params: Any) -> bool:
        """Whether conditional node ``old`` would be unchanged by new parameters ``params``."""
        was: ConditionalNodeParams = old.params
        if not isinstance(params, ConditionalNodeParams):
            return False
        if (params.handle.token, params.kind, params.size) != (
            was.handle.token,
            was.kind,
            was.size,
        ):
            return False
        for old_body, body in zip(self.bodies[id(old)], params.bodies, strict=True):
            copy, _ = snapshot(body)
            if not _same_graph(self, old_body, copy):
                return False
        return True

    def op(self, node: ExecNode, emit: Any) -> ConditionalOp:
        """The op of conditional node ``node``; ``emit(node, ops)`` compiles a body node."""
        params: ConditionalNodeParams = node.params
        bodies: list[list[Op]] = []
        for body in self.bodies[id(node)]:
            ops: list[Op] = []
            for inner in body.nodes:
                emit(inner, ops)
            bodies.append(ops)
        address = self.addresses(self.scope_of.get(node, 0))[params.handle.token]
        return ConditionalOp(params.kind, address, bodies, self.control)


def prepare(graph: ExecGraph) -> Conditionals | None:
    """Copy every conditional node's bodies and collect the handles (graph lock held).

    Returns None for a graph without conditional nodes or handle arguments.

    Raises:
        NotSupported: a body holds a node kind bodies cannot hold, or conditional nodes nest
            deeper than :data:`MAX_CONDITIONAL_DEPTH`.
        InvalidValue: a body has a cycle, or a kernel sets a handle that only conditional
            nodes of child-graph copies it is not inside read (see :func:`_check_reachable`).
    """
    found = Conditionals()
    originals: list[ExecGraph] = []  # the copies whose conditional nodes hold body graphs
    read_at_top: set[int] = set()  # tokens of the handles scope 0's conditional nodes read
    # (a copy, its scope, how many conditional bodies enclose it)
    pending: list[tuple[ExecGraph, int, int]] = [(graph, 0, 0)]
    kernel_args: list[tuple[int, ConditionalHandle]] = []  # handle arguments in scopes > 0
    kernel, conditional, child = NodeType.Kernel, NodeType.Conditional, NodeType.Graph
    while pending:
        copy, scope, depth = pending.pop()
        if not scope and copy.flat and not copy.has_type(conditional):  # the columns: no
            _find_handle_args(copy, found.handles)  # node record is made
            continue
        if copy.has_type(conditional):
            originals.append(copy)
        for node in copy.nodes:
            if scope:
                found.scope_of[node] = scope
            kind = node.type
            if kind is kernel:
                for arg in node.params.args:
                    if isinstance(arg, ConditionalHandle):
                        if scope:
                            kernel_args.append((scope, arg))
                        else:
                            found.handles[arg.token] = arg
                continue
            if kind is child:  # its own copy: a scope of its own, if it can own a handle
                copy_of_child = node.child
                assert copy_of_child is not None
                if copy_of_child.flat and not copy_of_child.has_type(conditional):
                    pending.append((copy_of_child, scope, depth))  # owns none: sees what we see
                else:
                    found.parents.append(scope)
                    pending.append((copy_of_child, len(found.parents) - 1, depth))
                continue
            if kind is not conditional:
                continue
            if depth == MAX_CONDITIONAL_DEPTH:
                raise NotSupported(
                    f"conditional nodes nest deeper than {MAX_CONDITIONAL_DEPTH} levels"
                )
            params: ConditionalNodeParams = node.params
            owned = found.owned.setdefault(scope, {}) if scope else found.handles
            owned[params.handle.token] = params.handle
            if not scope:
                read_at_top.add(params.handle.token)
            found.read.add(params.handle.token)
            copies = []
            for body in params.bodies:
                body_copy, _ = snapshot(body)
                for inner in body_copy.walk():
                    if inner.type not in _BODY_TYPES:
                        raise NotSupported(
                            f"a conditional body cannot hold {inner.type.name} nodes"
                        )
                copies.append(body_copy)
            found.bodies.add(node, params.bodies, copies)
            pending.extend((body_copy, scope, depth + 1) for body_copy in copies)
    for copy in originals:  # every body copied: the executable keeps none of the graphs
        _without_bodies(copy)
    for scope, handle in kernel_args:  # a handle no enclosing scope's node uses: scope 0's
        while scope and handle.token not in found.owned.get(scope, ()):
            scope = found.parents[scope]
        if not scope:
            found.handles[handle.token] = handle
    if found.owned:
        _check_reachable(found, read_at_top)
    if not found.handles and not found.owned:
        return None
    return found


def check_foreign_handles(conditionals: Conditionals | None, graph: Graph) -> None:
    """Refuse a kernel passing another graph's handle that no conditional node here reads.

    A handle belongs to the graph that made it (HIP refuses another graph's handle for a
    conditional node). A kernel may take one of its graph's handles, or of a graph around
    a child graph holding it; a handle of an unrelated graph would set a value no node of
    this executable reads, while the user meant the other graph's node: refused at
    instantiate, where the graph's ownership is known, not at each kernel node's add.

    Raises:
        InvalidValue: such a kernel argument.
    """
    if conditionals is None:
        return
    for token, handle in conditionals.handles.items():
        if (
            token not in conditionals.read
            and not owns_handle(graph, handle)
            and _set_outside_its_graph(graph, handle)
        ):
            raise InvalidValue(
                f"a kernel sets {handle!r}, which belongs to another graph than {graph!r} "
                "and no conditional node here reads"
            )


def _set_outside_its_graph(graph: Graph, handle: ConditionalHandle) -> bool:
    """Whether a kernel of ``graph``, or of a graph inside it (a child graph's copy or a body,
    however deep), sets ``handle`` though the graph holding that kernel does not own it (see
    :func:`owns_handle`).

    A kernel of a child graph may set its own graph's handle that nothing reads, as it may in
    that graph instantiated alone: the copy embedded here was cloned from the graph that made
    the handle. Only looked at when ``graph`` does not own the handle itself.
    """
    pending = [graph]
    while pending:
        current = pending.pop()
        with current.lock:
            if not current.alive:  # destroyed since the copy was made: nothing inside to ask
                continue
            params_of = [node._params for node in current._nodes]
        for params in params_of:
            if isinstance(params, ChildGraphParams):
                pending.append(params.graph)
            elif isinstance(params, ConditionalNodeParams):
                pending.extend(params.bodies)
            elif (
                isinstance(params, KernelParams)
                and any(
                    isinstance(arg, ConditionalHandle) and arg.token == handle.token
                    for arg in params.args
                )
                and not owns_handle(current, handle)
            ):
                return True
    return False


def _check_reachable(found: Conditionals, read_at_top: set[int]) -> None:
    """Refuse a kernel whose handle argument only conditional nodes of other scopes read.

    Each child-graph copy holding conditional nodes keeps its own cell for the handles they
    read, and a kernel sets the cell of the nearest scope around it that reads the handle, or
    else the executable's own. A kernel outside such a copy (in the parent, or in a sibling
    child graph) setting a handle only that copy reads would write a cell no conditional node
    reads: the value would be lost without a word, so instantiate refuses it.

    Raises:
        InvalidValue: such a kernel argument.
    """
    for token, handle in found.handles.items():
        if token in read_at_top:
            continue
        if any(token in owned for owned in found.owned.values()):
            raise InvalidValue(
                f"a kernel sets {handle!r}, which only conditional nodes inside a child "
                "graph it is not part of read: each child-graph node runs its own copy of "
                "that graph, with its own value of the handle; set the handle from a kernel "
                "inside that child graph"
            )


def takes_handle(kernels: Iterable[Kernel]) -> bool:
    """Whether any of ``kernels`` takes a conditional handle argument (each kernel looked at
    once; none is when no kernel of this process was made with a handle argument)."""
    if not kernel_args.any_handle_layout:  # no kernel of this process takes a handle
        return False
    distinct = {id(kernel): kernel for kernel in kernels}
    return any(handle_fields(kernel.layout) for kernel in distinct.values())


def unknown_handle(
    conditionals: Conditionals | None, changes: list[tuple[ExecNode, Any]]
) -> tuple[ConditionalHandle, ExecNode] | None:
    """A handle argument of new kernel parameters that the executable has no value for, and
    its node; None if there is none.

    An executable gives each handle its cells when it is made, for the nodes that use it then.
    A handle made later, one of a graph the executable never saw, or one only a child-graph
    copy elsewhere reads has none: its token would stay in the arguments, pointing at no
    memory, and every launch would fail on the device with a bad address. Each kernel is
    looked at once (most take no handle), not every node's arguments.
    """
    if not takes_handle(p.kernel for _, p in changes if isinstance(p, KernelParams)):
        return None
    for node, params in changes:
        if not isinstance(params, KernelParams):
            continue
        for index in handle_fields(params.kernel.layout):
            handle = params.args[index]
            if conditionals is None or not conditionals.knows(handle.token, node):
                return handle, node
    return None


def _no_value_message(handle: ConditionalHandle) -> str:
    return (
        f"{handle!r} has no value in this executable: a handle gets one when the executable "
        "is made, for the nodes that use it then (instantiate again)"
    )


def check_handles_known(
    conditionals: Conditionals | None, changes: list[tuple[ExecNode, Any]]
) -> None:
    """A setter's check: refuse new kernel parameters passing a handle the executable has no
    value for (see :func:`unknown_handle`), changing nothing.

    Raises:
        InvalidValue: such a handle argument.
    """
    found = unknown_handle(conditionals, changes)
    if found is not None:
        raise InvalidValue(_no_value_message(found[0]))


def copy_bodies(graph: ExecGraph) -> BodyCopies:
    """Every conditional node's bodies copied, by id(exec node), however deep (inside child
    graphs and inside other bodies): what ``graph.check_races()`` counts at each conditional
    node's place, as :func:`prepare` gives instantiate's check.

    Unlike :func:`prepare`, no node kind is refused and no handle is collected: the check needs
    no device work, so a graph that cannot be instantiated can still be checked.
    """
    bodies = BodyCopies()
    pending = [graph]
    while pending:
        copy = pending.pop()
        if copy.flat and not copy.has_type(NodeType.Conditional):  # no record is made
            continue
        for node in copy.walk():
            if node.type is NodeType.Conditional:
                params: ConditionalNodeParams = node.params
                copies = [snapshot(body)[0] for body in params.bodies]
                bodies.add(node, params.bodies, copies)
                pending.extend(copies)
    return bodies


def prepare_plain(
    kernels: list[KernelParams] | Callable[[], list[KernelParams]], distinct: Iterable[Kernel]
) -> Conditionals | None:
    """:func:`prepare` for a graph without child graphs or conditional nodes, from what
    instantiate found already: its kernel nodes' parameters and their kernels, each once.

    Such a graph has no bodies to copy, only handle arguments to collect; instantiate lists
    its kernel nodes and their kernels anyway (to check launch shapes and size the argument
    arena), so the scan reads those rather than walking the copy's columns again. Returns None,
    as :func:`prepare` does, when no kernel takes a handle (almost every graph, and every
    graph captured from plain kernel launches). ``kernels`` may be a function that makes the
    list: it is called only when a kernel takes a handle.
    """
    found = Conditionals()
    _enter_handle_args(kernels, distinct, found.handles)
    return found if found.handles else None


def _find_handle_args(copy: ExecGraph, handles: dict[Any, ConditionalHandle]) -> None:
    """Enter in ``handles`` every conditional handle a kernel node of ``copy`` takes as an
    argument (a graph without child graphs or conditional nodes)."""
    kernels = list(compress(copy.params_column(), map(is_, copy.types(), repeat(NodeType.Kernel))))
    of_kernels = list(map(_kernel_of, kernels))
    distinct = dict(zip(map(id, of_kernels), of_kernels, strict=True))
    _enter_handle_args(kernels, distinct.values(), handles)


def _enter_handle_args(
    kernels: list[KernelParams] | Callable[[], list[KernelParams]],
    distinct: Iterable[Kernel],
    handles: dict[Any, ConditionalHandle],
) -> None:
    # Only a CondHandle parameter takes a handle (every other parameter type refuses one), and
    # most kernels have none: look at each kernel once, not at every node's arguments.
    if not any(handle_fields(kernel.layout) for kernel in distinct):
        return
    if callable(kernels):
        kernels = kernels()
    for params in kernels:
        for arg in params.args:
            if isinstance(arg, ConditionalHandle):
                handles[arg.token] = arg


def _same_graph(conditionals: Conditionals, old: ExecGraph, new: ExecGraph) -> bool:
    """``new`` (a fresh snapshot) has ``old``'s nodes, edges and parameters, however nested."""
    pairs = [(old, new)]
    while pairs:
        a, b = pairs.pop()
        if len(a.nodes) != len(b.nodes):
            return False
        for x, y in zip(a.nodes, b.nodes, strict=True):
            # The same edges added in another order are the same body, as they are the same
            # topology to an update of the graph around it (exec.update.diff_graphs).
            if x.type is not y.type or (x.deps != y.deps and sorted(x.deps) != sorted(y.deps)):
                return False
            if x.type is NodeType.Graph:
                assert x.child is not None
                assert y.child is not None
                pairs.append((x.child, y.child))
            elif x.type is NodeType.Conditional:
                if not conditionals.same(x, y.params):
                    return False
            elif not _same_params(x.params, conditionals.bind(y.params, x)):
                return False
    return True


def _same_params(old: Any, new: Any) -> bool:
    """Whether a body node's parameters are unchanged: field by field, a host array by
    identity (a copy node reads the very array it was given, at each launch; numpy's ``==``
    would compare it element by element, and fail to give one answer)."""
    if old is new:
        return True
    if type(old) is not type(new) or not dataclasses.is_dataclass(old):
        return bool(old == new)
    for field in dataclasses.fields(old):
        was, now = getattr(old, field.name), getattr(new, field.name)
        if was is now:
            continue
        if isinstance(was, np.ndarray) or isinstance(now, np.ndarray) or was != now:
            return False
    return True


def settle_update(
    conditionals: Conditionals | None, changes: list[Any]
) -> tuple[list[Any], str, ExecNode | None]:
    """Drop unchanged conditional nodes from an update's ``changes``.

    Returns the remaining changes and, if a conditional node's handle, kind, size or bodies
    differ, or a kernel passes a handle the executable has no value for (see
    :func:`unknown_handle`), why the update cannot be made (an executable keeps the bodies
    and handles it was made with) and that node: the first such node of ``changes`` (they
    are in the graph's order, and HIP's update reports the first node that fails). An
    executable without conditional nodes (``conditionals`` None, see :func:`prepare`; an
    update never adds a node) has none to drop: ``changes`` as they are.
    """
    unknown = unknown_handle(conditionals, changes)
    if conditionals is None:
        if unknown is not None:
            return [], _no_value_message(unknown[0]), unknown[1]
        return changes, "", None
    kept = []
    for node, params in changes:
        if unknown is not None and node is unknown[1]:
            return [], _no_value_message(unknown[0]), node
        if node.type is not NodeType.Conditional:
            kept.append((node, params))
            continue
        if not conditionals.same(node, params):
            why = (
                "a conditional node's handle, kind, size or bodies changed; an executable "
                "keeps the bodies it was made with (instantiate again)"
            )
            return [], why, node
    return kept, "", None
