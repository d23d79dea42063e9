"""``GraphExec``: a graph instantiated once and replayed with ``await exec.launch(stream)``.

Instantiate does all the expensive work: copy the graph, plan segments and slots, pack kernel
arguments into the arena, build one op list per slot, and create the signal-set pool and the
internal streams. A launch then only borrows a signal set, fills a few per-launch bindings and
submits one prepared program per slot — its host cost does not depend on the number of nodes.

Lifetime: the executable is reference counted — one reference for the handle, one per launch in
flight. ``destroy()`` retires the handle at once (later calls → ``InvalidValue``) and drops the
handle's reference; arena chunks, signal sets, internal streams and user-object references are
freed when the last reference goes, which may be in the completion of the last launch. A launch's
completion (its slot-0 program's ``on_done``) returns the signal set, frees superseded argument
slots and drops the launch's reference, in plain synchronous code that cannot be interrupted.
An executable dropped without ``destroy()`` is freed by its :class:`_ExecRecord` once it is
collected, which a launch in flight prevents (the launch holds it), with a warning.

Updates never touch bytes or ops an enqueued launch will read: with launches in flight, the op
lists are copied (a new *version*) and new arguments go to new arena slots; superseded slots are
freed once every launch enqueued before the update has completed (launches of one executable
complete in order, because each waits for the previous one). The public setters and
``update()`` are in :mod:`.setters`; the rules for what may change are in :mod:`.update`.
"""

from __future__ import annotations

import contextlib
import enum
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core import gcpause
from ..core.errors import (
    HipError,
    InvalidValue,
    NotReady,
    NotSupported,
)
from ..core.lifecycle import (
    DestroyOnExit,
    FactoryOnly,
    HandleRecord,
    check_live,
    destroyed,
    report_unraisable,
)
from ..core.registry import HandleRegistry
from ..core.surface import own_mixin_methods
from ..device.ops import Op
from ..device.program import Program
from ..device.signal import Signal
from ..graph.memnodes import RESERVATIONS
from ..graph.node import GraphNode, live_node
from ..graph.node_type import NodeType
from ..runtime import observe
from ..runtime.completion import Completion
from ..runtime.device import Device, get_device
from ..runtime.params import KernelParams
from ..runtime.stream import Stream, StreamState, launch_stream
from .arena import HEADROOM_BYTES, ArenaStatistics, ArgSlot, KernelArgArena
from .compile import Compiled, compile_plan, node_op, reads_same
from .conditional import prepare as prepare_conditionals
from .conditional import settle_update
from .copy_setters import ExecCopySetters
from .cross_device import enqueue_cross_device
from .flags import InstantiateFlags, check_instantiate_flags
from .planner import Plan, plan_graph
from .races import ExecRaces, RaceError, check_exec_graph
from .setters import NodeSetters
from .signal_pool import REACHED, SignalPoolStatistics, SignalSet, SignalSetPool
from .snapshot import ExecGraph, ExecNode, snapshot, source_map
from .update import Change

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..lifetime.user_object import UserObject

__all__ = ["EXECS", "ExecState", "ExecStatistics", "GraphExec", "MAX_PARALLEL_STREAMS"]

EXECS: HandleRegistry[GraphExec] = HandleRegistry("graph exec")
MAX_PARALLEL_STREAMS = 4  # HIP's DEBUG_HIP_FORCE_GRAPH_QUEUES default
_FACTORY = FactoryOnly("executables are created with graph.instantiate()")


class ExecState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # destroyed, launches still in flight
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ExecStatistics:
    state: str
    nodes: int
    segments: int
    slots: int
    launches: int
    in_flight: int
    completed: int
    versions: int
    signal_pool: SignalPoolStatistics
    arena: ArenaStatistics


class _Version:
    """One generation of the replay programs. Launches hold the version they were enqueued with."""

    __slots__ = ("in_flight", "slot_ops")

    def __init__(self, slot_ops: list[list[Op]]) -> None:
        self.slot_ops = slot_ops
        self.in_flight = 0


class _Launch:
    """Book-keeping of one launch in flight, released by its completion."""

    __slots__ = ("done", "exec", "signal_set", "stream", "version")

    def __init__(
        self, graph_exec: GraphExec, version: _Version, signal_set: SignalSet, stream: Stream
    ) -> None:
        self.exec = graph_exec
        self.version = version
        self.signal_set = signal_set
        self.stream = stream
        self.done = Signal(1)

    def slot_finished(self, program: Program) -> None:
        if program.error is not None and self.done.error is None:
            self.done.error = program.error

    def finished(self, program: Program) -> None:
        self.exec._launch_finished(self)


class _ExecRecord(HandleRecord):
    """What a forgotten executable gives back: what ``_free_resources`` frees, and its
    user-object references (owned through this record, so they never refer to the executable).

    Launches in flight hold the executable itself (``_Launch.exec``), so it is collected, and
    this runs, only after the last of them completed.
    """

    __slots__ = (
        "alloc_ptrs",
        "arena",
        "conditionals",
        "device",
        "home",
        "internal_streams",
        "pool",
        "user_objects",
    )

    releases = True

    def __init__(self, graph_exec: GraphExec) -> None:
        hid = graph_exec.hid
        super().__init__(graph_exec, f"graph exec #{hid.slot}.{hid.generation}")
        self.arena = graph_exec.arena
        self.pool = graph_exec.pool
        self.internal_streams = graph_exec._internal_streams
        self.home = graph_exec._home
        self.conditionals = graph_exec._conditionals
        self.device = graph_exec.device
        self.alloc_ptrs = graph_exec._compiled.alloc_ptrs
        self.user_objects = graph_exec.user_objects

    def release(self) -> None:
        self.arena.close()
        self.pool.close()
        for stream in self.internal_streams:
            stream.destroy()
        if self.home is not None:
            self.home.destroy()
        if self.conditionals is not None:
            self.conditionals.free(self.device)
        for ptr in self.alloc_ptrs:
            RESERVATIONS.forget(ptr)
            with contextlib.suppress(HipError):
                self.device.memory.unreserve(ptr)
        first: BaseException | None = None
        for obj in self.user_objects:  # every destructor runs, then the first error is raised
            try:
                obj.disown(self)
            except BaseException as error:
                if first is None:
                    first = error
        if first is not None:
            raise first


@own_mixin_methods
class GraphExec(NodeSetters, ExecCopySetters, DestroyOnExit):
    """An executable graph. Made by ``graph.instantiate()``; it has no public constructor."""

    __slots__ = (
        "__weakref__",
        "_compiled",
        "_completed",
        "_conditionals",
        "_graph",
        "_home",
        "_internal_streams",
        "_last_done",
        "_launches",
        "_life",
        "_lock",
        "_plan",
        "_races",
        "_refcount",
        "_retired_slots",
        "_sources",
        "_version",
        "_versions",
        "arena",
        "device",
        "flags",
        "hid",
        "pool",
        "state",
        "user_objects",
    )

    def __init__(
        self, graph: Graph, flags: int, device: Device, options: Any, _key: object
    ) -> None:
        _FACTORY.check(_key)
        # References: one for the handle, one per launch in flight. Private: users destroy.
        self._refcount = 1
        self.flags = check_instantiate_flags(flags)
        self.device = device
        # One lock for the reference count and the launch/update book-keeping, so a launch
        # checks the state, takes its reference and binds its version in one critical section.
        self._lock = threading.RLock()
        with graph.lock:
            _check_instantiable(graph)
            exec_graph, originals = snapshot(graph)  # InvalidValue on a cycle, nothing created
            self._conditionals = prepare_conditionals(exec_graph)  # bodies, handles
        conditionals = self._conditionals
        every = exec_graph.walk() if conditionals is None else conditionals.walk(exec_graph)
        checked: set[tuple[Any, ...]] = set()
        for node in every:
            if node.type is NodeType.Kernel:
                # Added against the default device's limits; this executable runs on its own.
                # Nodes of one launch shape pass or fail alike: check each shape once.
                params = node.params
                shape = (params.grid, params.block, params.shared_mem)
                if shape not in checked:
                    params.check_limits(device)
                    checked.add(shape)
        self._races: ExecRaces | None = None
        if options.get("check_races", False):  # before anything is built: a race changes nothing
            self._races, reports = check_exec_graph(exec_graph, originals, graph)
            if reports:
                raise RaceError(reports)
        self._graph: ExecGraph = exec_graph
        self._sources = source_map(originals, exec_graph)
        max_streams = min(MAX_PARALLEL_STREAMS, len(device.queues))
        self._plan: Plan = plan_graph(
            exec_graph,
            max_streams=max_streams,
            use_priority=self.flags is InstantiateFlags.USE_NODE_PRIORITY,
        )
        kernels = [n for n in every if n.type is NodeType.Kernel]
        arg_bytes = sum(-(-max(n.params.kernel.layout.size, 1) // 16) * 16 for n in kernels)
        self.arena = KernelArgArena(
            device,
            arg_bytes + options.get("arena_headroom", HEADROOM_BYTES),
            strict=options.get("strict_flush", False),
        )
        self._internal_streams: list[Stream] = []
        self._home: Stream | None = None  # for launches on other devices' streams
        self.user_objects: list[UserObject] = []
        self._life: _ExecRecord | None = None
        try:
            if conditionals is not None:  # handle cells, and kernels pointed at them
                conditionals.allocate(device)
                conditionals.bind_all(exec_graph)
            self._compiled: Compiled = compile_plan(
                exec_graph,
                self._plan,
                device,
                self.arena,
                auto_free=self.flags is InstantiateFlags.AUTO_FREE_ON_LAUNCH,
                conditionals=conditionals,
            )
            self.pool = SignalSetPool(
                self._plan.num_signals,
                extra=self._compiled.extra,
                num_sets=options.get("signal_sets", 16),
                wait_when_empty=_signal_set_policy(options) == "wait",
            )
            self._internal_streams = [
                Stream._create(device, non_blocking=True, owned=True)
                for _ in range(self._plan.num_slots - 1)
            ]
            with graph.lock:  # the graph may have changed hands while we prepared
                _check_instantiable(graph)
                graph.mark_instantiated()  # from here on this executable owns alloc ranges
        except BaseException:
            self._free_resources(unreserve=False)
            raise
        self._version = _Version(self._compiled.slot_ops)
        self._versions = 1
        self._retired_slots: deque[tuple[int, ArgSlot]] = deque()
        self._launches = 0
        self._completed = 0
        self._last_done: Signal = REACHED
        self.state = ExecState.OPEN
        self.user_objects = list(exec_graph.user_objects)
        if conditionals is not None:  # bodies' user objects too, each once
            self.user_objects = list(dict.fromkeys(self.user_objects + conditionals.user_objects))
        self.hid = EXECS.register(self)
        # From here a forgotten executable is freed by its record (which owns the user-object
        # references), once no launch in flight holds it any more.
        self._life = _ExecRecord(self)
        for obj in self.user_objects:
            obj.adopt(self, 1)

    @classmethod
    def _instantiate(
        cls, graph: Graph, flags: int = 0, *, device: Device | None = None, **options: Any
    ) -> GraphExec:
        """``graph.instantiate``: check every argument, then build; with UPLOAD, upload.

        Raises:
            TypeError / ValueError: an unknown option, or an option of the wrong type.
            NotSupported: ``DEVICE_LAUNCH`` (the simulator has no device-side launch).
        """
        checked = check_instantiate_flags(flags)
        _check_options(options)
        _signal_set_policy(options)  # a bad policy fails before anything is built
        if device is None:
            device = get_device()  # the calling task's current device
        elif not isinstance(device, Device):
            raise TypeError(f"device must be a Device (ahg.get_device(n)), got {device!r}")
        if checked is InstantiateFlags.DEVICE_LAUNCH:
            raise NotSupported("device-side graph launch is not simulated")
        upload_stream = options.get("upload_stream")
        if upload_stream is not None and checked is not InstantiateFlags.UPLOAD:
            raise ValueError("upload_stream is only used with InstantiateFlags.UPLOAD")
        if checked is InstantiateFlags.UPLOAD:
            launch_stream(upload_stream, device)  # checked before anything is built
        with gcpause.paused():  # a bulk build that makes no garbage: see core.gcpause
            graph_exec = cls(graph, flags, device, options, _FACTORY)
        if checked is InstantiateFlags.UPLOAD:
            graph_exec._upload(upload_stream)
        return graph_exec

    # -- handle checks --------------------------------------------------------------------------

    def check_alive(self) -> None:
        """Raises InvalidValue once the executable was destroyed (HIP: not in graphExecSet_)."""
        if self.state is not ExecState.OPEN:
            check_live(False, "graph exec", self)

    # -- launch ---------------------------------------------------------------------------------

    async def launch(self, stream: Stream | None = None) -> Completion:
        """Enqueue one replay on ``stream`` (the current device's null stream by default).

        A stream of another device than the executable's is allowed: the graph runs on its
        own device, ordered with that stream (see :mod:`ahipgraph.exec.cross_device`).

        Returns once the launch is enqueued. The returned :class:`Completion` resolves when
        every node has run, raising the launch's :class:`HipError` if one failed. The launch
        starts after earlier work on ``stream`` and after this executable's previous launch;
        later work on ``stream`` starts after the whole graph.

        Raises:
            InvalidValue: the executable was destroyed, or a graph-allocated block from the
                previous launch was never freed (and auto-free-on-launch is off).
            ContextIsDestroyed: the stream was destroyed.
        """
        target = self._launch_target(stream)
        if target is None:
            return Completion(Signal(0), self.device)  # an empty graph launches as a no-op
        signal_set = self._acquire_nowait()
        if signal_set is None:
            signal_set = await self.pool.acquire()
        if target.device is not self.device:
            return enqueue_cross_device(self, target, signal_set)
        return self._enqueue(target, signal_set)

    def _acquire_nowait(self) -> SignalSet | None:
        """A signal set without parking, by the pool's policy; never runs device work.

        ``"wait"`` (the default): None when every set is in use, and :meth:`launch` parks until
        a completion returns one, so a host launching in a tight loop yields to the event loop
        once per pool's worth of launches. ``"grow"``: a new set, counted as a miss (HIP's
        behaviour).
        """
        return self.pool.acquire_nowait()

    def launch_nowait(self, stream: Stream | None = None) -> Completion:
        """:meth:`launch` without ever parking.

        Raises:
            NotReady: the pool waits when empty and no signal set is free.
        """
        target = self._launch_target(stream)
        if target is None:
            return Completion(Signal(0), self.device)
        signal_set = self._acquire_nowait()
        if signal_set is None:
            raise NotReady("no signal set is free")
        if target.device is not self.device:
            return enqueue_cross_device(self, target, signal_set)
        return self._enqueue(target, signal_set)

    def _launch_target(self, stream: Stream | None) -> Stream | None:
        """The checks every launch makes, in HIP's order; None when the graph is empty."""
        if self.state is not ExecState.OPEN:
            self.check_alive()  # raises
        stream = launch_stream(stream, self.device, any_device=True)
        if stream._capture is not None:  # capturing a launch is not supported: HIP's rule
            raise stream._capture.unsupported("a graph launch")
        if not self._graph.nodes:
            return None
        if self._compiled.unfreed_ptrs:
            self._check_allocations()
        # The loop, before anything is taken: no loop, or another loop that owns a busy
        # device, fails here with the executable and its pool untouched.
        self.device.engine.claim()
        if stream.device is not self.device:
            stream.device.engine.claim()
        return stream

    def _check_allocations(self) -> None:
        """Graph memory the previous launch allocated must be free before the next launch.

        Decided from what was launched, never from timing: with the previous launch still in
        flight its blocks cannot have been freed yet, so the launch is refused.
        """
        compiled = self._compiled
        if (
            compiled.unfreed_ptrs
            and self._launches
            and self.flags is not InstantiateFlags.AUTO_FREE_ON_LAUNCH
            and (self.in_flight or any(self._committed(ptr) for ptr in compiled.unfreed_ptrs))
        ):
            raise InvalidValue(
                "the previous launch's graph allocations were never freed; free them or "
                "instantiate with AUTO_FREE_ON_LAUNCH"
            )

    def _committed(self, ptr: Any) -> bool:
        try:
            self.device.memory.resolve(ptr, 0)
        except HipError:
            return False
        return True

    def _home_stream(self) -> Stream:
        """This executable's own stream on its device, for cross-device launches."""
        with self._lock:
            if self._home is None:
                self._home = Stream._create(self.device, non_blocking=True, owned=True)
                if self._life is not None:
                    self._life.home = self._home
            return self._home

    def _enqueue(
        self, stream: Stream, signal_set: SignalSet, report_to: Stream | None = None
    ) -> Completion:
        """Submit one launch: synchronous from here on, so it is atomic for the event loop.

        ``report_to``: the stream a failure is reported to, if not ``stream``.
        """
        engine = self.device.engine
        with engine.lock:  # no other loop can take the device between the check and the submit
            try:
                engine.claim_locked()  # taken by another thread's loop meanwhile, and busy
            except BaseException:
                self.pool.release(signal_set)
                raise
            return self._enqueue_bound(stream, signal_set, report_to)

    def _enqueue_bound(
        self, stream: Stream, signal_set: SignalSet, report_to: Stream | None
    ) -> Completion:
        plan = None
        if observe.observer is not None:  # the race checker decides before anything commits
            try:
                plan = observe.observer.launching(self, stream, report_to)
            except BaseException:
                self.pool.release(signal_set)
                raise
        with self._lock:
            if self.state is not ExecState.OPEN or stream.state is not StreamState.OPEN:
                self.pool.release(signal_set)  # destroyed while we waited for a set
                self.check_alive()
                stream.check_open()
            self._refcount += 1
            version = self._version
            version.in_flight += 1
            self._launches += 1
            compiled = self._compiled
            signals = signal_set.signals
            signals[compiled.prev_index] = self._last_done
            for binding in compiled.bindings:
                event = binding.node.params.event
                if binding.is_record:
                    record = Signal(1)
                    signals[binding.index] = record
                    event._recorded(record)
                else:
                    signals[binding.index] = event.signal or REACHED
            launch = _Launch(self, version, signal_set, report_to or stream)
            self._last_done = launch.done
        slot_ops = version.slot_ops
        head = Program(slot_ops[0], launch.done, signals=signals, on_done=launch.finished)
        stream._submit_locked(head)
        if len(slot_ops) > 1:
            queues = self.device.queues
            base = stream.queue.index
            for k in range(1, len(slot_ops)):
                internal = self._internal_streams[k - 1]
                internal.queue = queues[(base + k) % len(queues)]  # never the launch queue
                internal._submit_locked(
                    Program(slot_ops[k], None, signals=signals, on_done=launch.slot_finished)
                )
        completion = Completion(launch.done, self.device, head)
        if observe.observer is not None:  # the race checker: a launch is one op on the stream
            observe.observer.launched(self, stream, completion, plan, report_to)
        return completion

    def _launch_finished(self, launch: _Launch) -> None:
        """Completion of a launch (on the device's loop): return everything it borrowed."""
        error = launch.done.error
        if error is not None:
            launch.stream.report_error(error)
        self.pool.release(launch.signal_set)
        with self._lock:
            launch.version.in_flight -= 1
            self._completed += 1
            retired = self._retired_slots
            while retired and retired[0][0] <= self._completed:
                self.arena.free(retired.popleft()[1])
            self._refcount -= 1  # the launch's reference
            last = not self._refcount
        if last:
            self._free_from_completion()

    def _free_from_completion(self) -> None:
        """The last launch of a destroyed executable completed: free it, contained.

        User-object destructors run here, inside the device's run loop. One that raises must
        not stop the device, the work queued behind this launch, or the other destructors (all
        of which :meth:`_last_release` runs); its exception goes to the event loop's exception
        handler, as asyncio reports an exception in a callback.
        """
        try:
            self._last_release()
        except Exception as error:
            message = f"a user-object destructor raised while {self!r} was freed"
            context = {"message": message, "exception": error, "graph_exec": self}
            if not self.device.engine.report_exception(context):
                report_unraisable(error, message, self)

    async def upload(self, stream: Stream | None = None) -> None:
        """``hipGraphUpload``: validates; everything was already prepared at instantiate.

        Raises:
            InvalidValue: the executable was destroyed, or ``stream`` is another device's.
            ContextIsDestroyed: the stream was destroyed. TypeError: ``stream`` is not a Stream.
        """
        self._upload(stream)

    def _upload(self, stream: Stream | None) -> None:
        """What an upload checks (also run by instantiate with ``InstantiateFlags.UPLOAD``)."""
        self.check_alive()
        launch_stream(stream, self.device)

    # -- destroy --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """False once ``destroy()`` was called."""
        return self.state is ExecState.OPEN

    def destroy(self) -> None:
        """Retire the handle now; free everything once the last launch in flight completes.

        Safe from any thread and while launches are in flight.

        Raises:
            InvalidValue: the executable was already destroyed.
        """
        if EXECS.unregister(self.hid) is None:
            raise destroyed("graph exec", self, "destroy", "was already destroyed")
        if self._life is not None:
            self._life.detach()
        with self._lock:
            self.state = ExecState.CLOSING
        if self._conditionals is not None:  # a WHILE body that never ends stops here
            self._conditionals.control.stopped = True
        # Launches parked for a signal set would otherwise wait for a pool that is going away.
        self.pool.fail_waiters(InvalidValue(f"{self!r} was destroyed while a launch waited"))
        with self._lock:
            self._refcount -= 1  # the handle's reference
            last = not self._refcount
        if last:
            self._last_release()

    def _last_release(self) -> None:
        """The last reference went: free arena, signal sets, streams and user objects."""
        self.state = ExecState.CLOSED
        self._free_resources(unreserve=True)
        objects, self.user_objects = self.user_objects, []
        first: BaseException | None = None
        for obj in objects:  # user code: every destructor runs, then the first error is raised
            try:
                obj.disown(self)
            except BaseException as error:
                if first is None:
                    first = error
        if first is not None:
            raise first

    def _free_resources(self, *, unreserve: bool) -> None:
        """Give back what instantiate took (also when instantiate fails half way)."""
        self.arena.close()
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
        for stream in self._internal_streams:
            stream.destroy()
        self._internal_streams = []
        if self._conditionals is not None:
            self._conditionals.free(self.device)
        home, self._home = getattr(self, "_home", None), None
        if home is not None:
            home.destroy()
        compiled = getattr(self, "_compiled", None)
        if unreserve and compiled is not None:
            for ptr in compiled.alloc_ptrs:
                RESERVATIONS.forget(ptr)  # an orphan's free node can no longer claim it
                with contextlib.suppress(HipError):  # already given back
                    self.device.memory.unreserve(ptr)

    # -- updates --------------------------------------------------------------------------------

    def _node(self, node: GraphNode, *types: NodeType) -> ExecNode:
        """Find the copy of an original node: exec first, then node handle, then node type."""
        self.check_alive()
        node = live_node(node)
        exec_node = self._sources.get(node.hid)
        if exec_node is None:
            raise InvalidValue(f"{node!r} is not a node of the graph this executable was made from")
        if exec_node.type not in types:
            names = "/".join(t.name for t in types)
            raise InvalidValue(f"{node!r} is a {exec_node.type.name} node, not {names}")
        return exec_node

    def _settle_conditionals(
        self, changes: list[Change]
    ) -> tuple[list[Change], str, ExecNode | None]:
        """An update's changes without unchanged conditional nodes, or why it cannot be made."""
        return settle_update(self._conditionals, changes)

    def _writable_version(self) -> _Version:
        version = self._version
        if version.in_flight:  # launches hold these op lists: copy them (copy-on-write)
            version = _Version([list(ops) for ops in version.slot_ops])
            self._version = version
            self._versions += 1
        return version

    def _apply(self, changes: list[Change]) -> None:
        """Give nodes new parameters without disturbing any launch already enqueued.

        Check, then commit: every argument slot the changes need is allocated first (all or
        none, :meth:`KernelArgArena.allocate_all`), so a full device or an oversized slot fails
        here with the executable, its arena and the device exactly as they were. Nothing after
        that can fail.
        """
        if self._conditionals is not None:  # kernels' handle arguments point at our cells
            changes = [(node, self._conditionals.bind(params)) for node, params in changes]
        with self._lock:
            if self._races is not None:  # check_races: recheck the changed nodes only
                self._races.check_changes(changes)
            fresh = self._allocate_arguments(changes)
            version = self._writable_version()
            compiled = self._compiled
            for node, params in changes:
                node.params = params
                if node.type is NodeType.Kernel:
                    self._store_arguments(node, params, fresh.get(node))
                location = compiled.locations.get(node)
                if location is None:  # event nodes bind at launch instead
                    continue
                ops = version.slot_ops[location[0]]
                if (
                    node.type is NodeType.Kernel
                    and node.enabled
                    and reads_same(ops[location[1]], params, compiled.arg_slots[node])
                ):
                    continue  # new bytes in the same slot: the op already reads them
                op = node_op(self.device, node, compiled, self.arena)
                if op is not None:
                    ops[location[1]] = op
            self.arena.flush()
            if self._races is not None:
                self._races.commit(changes)

    def _allocate_arguments(self, changes: list[Change]) -> dict[ExecNode, ArgSlot]:
        """The new argument slots ``changes`` need (by node), allocated all at once.

        A node's arguments are rewritten in place when no launch is in flight and they fit in
        its slot; otherwise they go to a new slot.
        """
        needs: dict[ExecNode, int] = {}
        slots = self._compiled.arg_slots
        in_flight = self.in_flight
        for node, params in changes:
            if node.type is NodeType.Kernel:
                size = max(params.kernel.layout.size, 1)
                if in_flight or slots[node].size < size:
                    needs[node] = size
        if not needs:
            return {}
        return dict(zip(needs, self.arena.allocate_all(list(needs.values())), strict=True))

    def _store_arguments(
        self, node: ExecNode, params: KernelParams, fresh: ArgSlot | None = None
    ) -> None:
        """Write a node's new arguments: into ``fresh`` (allocated beforehand) or in place."""
        slots = self._compiled.arg_slots
        slot = slots[node]
        if fresh is None:
            self.arena.write(slot, params.arg_bytes)  # nothing in flight reads it: in place
            return
        self.arena.write(fresh, params.arg_bytes)
        slots[node] = fresh
        if self.in_flight:  # free once every launch enqueued so far has completed
            self._retired_slots.append((self._launches, slot))
        else:
            self.arena.free(slot)

    # -- introspection --------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._launches - self._completed

    def statistics(self) -> ExecStatistics:
        return ExecStatistics(
            state=self.state.value,
            nodes=len(self._graph.nodes),
            segments=len(self._plan.segments),
            slots=self._plan.num_slots,
            launches=self._launches,
            in_flight=self.in_flight,
            completed=self._completed,
            versions=self._versions,
            signal_pool=self.pool.statistics(),
            arena=self.arena.statistics(),
        )

    @property
    def plan(self) -> Plan:
        return self._plan

    def plan_dot(self) -> str:
        """Graphviz DOT of the plan: segments, parallel slots and the cross-slot waits.

        See :mod:`ahipgraph.exec.plan_dot`; render with ``dot -Tsvg``.
        """
        from .plan_dot import plan_to_dot

        return plan_to_dot(self._graph, self._plan)

    def __repr__(self) -> str:
        return (
            f"<GraphExec #{self.hid.slot}.{self.hid.generation} state={self.state.value} "
            f"nodes={len(self._graph.nodes)} slots={self._plan.num_slots} "
            f"in_flight={self.in_flight}>"
        )


def _check_instantiable(graph: Graph) -> None:
    """HIP's instantiate checks on the graph itself. Call with the graph's lock held."""
    graph.check_alive()
    if graph.has_mem_nodes and graph.instantiated:
        raise NotSupported("a graph with memory nodes can be instantiated only once")


_MAX_SIGNAL_SETS = 1 << 16  # prepopulated sets; the pool still grows past them when needed
_OPTIONS: dict[str, tuple[type, ...]] = {
    "signal_sets": (int,),
    "signal_set_policy": (str,),
    "wait_for_signal_sets": (bool,),
    "arena_headroom": (int,),
    "strict_flush": (bool,),
    "upload_stream": (Stream, type(None)),
    "check_races": (bool,),
}


def _check_options(options: dict[str, Any]) -> None:
    """Reject a misspelt or mistyped instantiate option instead of silently ignoring it."""
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        known = ", ".join(["device", *_OPTIONS])
        raise TypeError(f"unknown instantiate option(s) {', '.join(unknown)}; known: {known}")
    for name, value in options.items():
        types = _OPTIONS[name]
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            names = " or ".join(t.__name__ for t in types)
            raise TypeError(f"instantiate option {name} must be {names}, got {value!r}")
    if not 1 <= options.get("signal_sets", 1) <= _MAX_SIGNAL_SETS:
        raise ValueError(
            f"signal_sets must be in 1..{_MAX_SIGNAL_SETS}, got {options['signal_sets']}"
        )
    if options.get("arena_headroom", 0) < 0:
        raise ValueError(f"arena_headroom must be >= 0, got {options['arena_headroom']}")


def _signal_set_policy(options: dict[str, Any]) -> str:
    """What a launch does when every signal set is in use.

    ``signal_set_policy="wait"`` (the default) parks the launch until a completion returns a
    set; ``"grow"`` adds a set (HIP's counted miss). ``wait_for_signal_sets=True/False`` is
    the older spelling of the same choice.

    Raises:
        ValueError: another policy, or two spellings that disagree.
    """
    policy = options.get("signal_set_policy")
    legacy = options.get("wait_for_signal_sets")
    if policy is not None and policy not in ("wait", "grow"):
        raise ValueError(f"signal_set_policy must be 'wait' or 'grow', got {policy!r}")
    if legacy is not None:
        spelled = "wait" if legacy else "grow"
        if policy is not None and policy != spelled:
            raise ValueError(f"signal_set_policy={policy!r} contradicts wait_for_signal_sets")
        policy = spelled
    return policy or "wait"
