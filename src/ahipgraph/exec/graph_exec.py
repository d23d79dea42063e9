"""``GraphExec``: a graph instantiated once and replayed with ``await exec.launch(stream)``.

An executable is assembled from parts, each in its own module:

* :func:`.instantiate.instantiate` does all the expensive work once (copy the graph, plan
  segments and strands, pack kernel arguments into the arena, build one op list per strand, create
  the signal-set pool and the internal streams) and returns an ``Instantiated`` record, which
  is all the constructor takes;
* the :class:`~.launcher.Launcher` owns the signal-set pool and its acquire policy, the
  internal streams, the enqueue and the completion of launches — a launch only borrows a signal
  set, fills a few per-launch bindings and submits one prepared program per strand, so its host
  cost does not depend on the number of nodes;
* the :class:`~.updater.Updater` owns the versions of the op lists, copy-on-write and the
  retirement of superseded argument slots; the setters and ``update()`` are module functions
  over it (:mod:`.setters`, :mod:`.copy_setters`), the rules in :mod:`.update`.

``GraphExec`` itself keeps the handle: its state, its reference count, its lock, and thin
public methods that delegate to those parts.

Lifetime: the executable is reference counted — one reference for the handle, one per launch in
flight. ``destroy()`` retires the handle at once (later calls → ``InvalidValue``) and drops the
handle's reference; arena chunks, signal sets, internal streams and user-object references are
freed when the last reference goes, which may be in the completion of the last launch.
An executable dropped without ``destroy()`` is freed by its :class:`_ExecRecord` once it is
collected, which a launch in flight prevents (the launch holds it), with a warning. The record
holds what the launcher and the updater would free, never the executable, its launcher or its
updater (each of which refers to the executable).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

from ..core import gcpause
from ..core.errors import InvalidValue
from ..core.lifecycle import (
    DestroyOnExit,
    FactoryOnly,
    HandleRecord,
    check_live,
    destroyed,
    report_unraisable,
    safe_repr,
)
from ..core.registry import HandleId, HandleRegistry
from ..device.engine import refuse_trio
from ..device.kernel import DimLike, Kernel
from ..device.ops import forget_runs
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind
from ..device.signal import Signal
from ..graph.graph import BULK_BUILD_NODES
from ..graph.memnodes import RESERVATIONS
from ..graph.node_type import NodeType
from ..lifetime.user_object import disown_all
from ..runtime.completion import Completion, make_completion
from ..runtime.event import Event
from ..runtime.launch_attributes import (
    AccessPolicyWindow,
    AttributeValue,
    KernelNodeAttribute,
)
from ..runtime.params import Endpoint, KernelParams
from ..runtime.per_thread import PerThreadStream
from ..runtime.pitched import PitchedCopyParams, PitchedPtr
from ..runtime.stream import Stream, launch_stream
from . import copy_setters, setters
from .arena import ArenaStatistics
from .compile import Compiled
from .cross_device import enqueue_cross_device
from .exec_state import ExecState
from .flags import UpdateResult
from .instantiate import (
    MAX_PARALLEL_STREAMS,
    Instantiated,
    check_flag_work,
    check_request,
    instantiate,
)
from .launcher import Launch, Launcher
from .planner import Plan
from .races import ExecRaces
from .signal_pool import SignalPoolStatistics, SignalSetPool
from .snapshot import ExecNode
from .updater import Updater, Version

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..device.symbols import SymbolLike
    from ..graph.generic import GraphNodeParams
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from ..lifetime.user_object import UserObject
    from ..runtime.device import Device
    from .arena import KernelArgArena
    from .flags import InstantiateFlags

__all__ = ["EXECS", "ExecState", "ExecStatistics", "GraphExec", "MAX_PARALLEL_STREAMS"]

EXECS: HandleRegistry[GraphExec] = HandleRegistry("graph exec")
_FACTORY = FactoryOnly("executables are created with graph.instantiate()")
_new_object = object.__new__
_Launch = Launch  # the name the trace recorder knows launches by

Triple = tuple[int, int, int]


def give_back_allocations(alloc_memory: dict[DevicePtr, DeviceMemory]) -> None:
    """An executable is freed: each alloc node's range goes back to the memory it was
    committed in (an orphan's free node can no longer claim it)."""
    for ptr, memory in alloc_memory.items():
        RESERVATIONS.give_back(memory, ptr)


@dataclass(frozen=True, slots=True)
class ExecStatistics:
    state: str
    nodes: int
    segments: int
    strands: int
    launches: int
    in_flight: int
    completed: int
    versions: int
    signal_pool: SignalPoolStatistics
    arena: ArenaStatistics


class _ExecRecord(HandleRecord):
    """What a forgotten executable gives back: what ``_free_resources`` frees, and its
    user-object references (owned through this record, so they never refer to the executable).

    It reads the launcher's signal-set pool, internal and home streams and the compiled plan's
    alloc ranges, and the updater's arena and conditional cells, when it is made: the launcher
    and the updater refer to the executable, so the record must not hold them. The home stream
    is made later, on the first cross-device launch: the launcher hands it to the record then.
    Launches in flight hold the executable itself (``Launch.exec``), so it is collected, and
    this runs, only after the last of them completed.
    """

    __slots__ = (
        "alloc_memory",
        "arena",
        "conditionals",
        "device",
        "home",
        "internal_streams",
        "pool",
        "user_objects",
    )

    releases = True

    def __init__(self, graph_exec: GraphExec, launcher: Launcher, updater: Updater) -> None:
        hid = graph_exec.hid
        super().__init__(graph_exec, f"graph exec #{hid.slot}.{hid.generation}")
        self.pool = launcher.pool
        self.internal_streams = launcher.internal_streams
        self.home = launcher.home
        self.alloc_memory = launcher.compiled.alloc_memory
        self.arena = updater.arena
        self.conditionals = updater.conditionals
        self.device = graph_exec.device
        self.user_objects = graph_exec._user_objects

    def release(self) -> None:
        self.arena.close()
        self.pool.close()
        for stream in self.internal_streams:
            stream.destroy()
        if self.home is not None:
            self.home.destroy()
        if self.conditionals is not None:
            self.conditionals.free(self.device)
        give_back_allocations(self.alloc_memory)
        disown_all(self.user_objects, self)  # every destructor runs, then the first error


class GraphExec(DestroyOnExit):
    """An executable graph. Made by ``graph.instantiate()``; it has no public constructor."""

    __slots__ = (
        "__weakref__",
        "_arena",
        "_conditionals",
        "_device",
        "_flags",
        "_graph",
        "_hid",
        "_launcher",
        "_life",
        "_lock",
        "_plan",
        "_refcount",
        "_state",
        "_updater",
        "_user_objects",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: executables come from ``graph.instantiate()``."""
        _FACTORY.refuse()

    def _init(self, built: Instantiated) -> None:
        # References: one for the handle, one per launch in flight. Private: users destroy.
        self._refcount = 1
        self._flags = built.flags
        self._device = built.device
        # One lock for the reference count and the launch/update book-keeping, so a launch
        # checks the state, takes its reference and binds its version in one critical section.
        self._lock = threading.RLock()
        self._graph = built.graph
        self._plan: Plan = built.plan
        self._conditionals = built.conditionals
        self._arena = built.arena
        self._launcher = Launcher(
            self,
            self._lock,
            device=built.device,
            flags=built.flags,
            graph=built.graph,
            compiled=built.compiled,
            pool=built.pool,
            internal_streams=built.internal_streams,
        )
        self._updater = Updater(
            self,
            self._lock,
            self._launcher,
            device=built.device,
            graph=built.graph,
            sources=built.sources,
            compiled=built.compiled,
            arena=built.arena,
            conditionals=built.conditionals,
            races=built.races,
        )
        self._launcher.updater = self._updater
        self._state = ExecState.OPEN
        self._user_objects = built.user_objects
        self._hid = EXECS.register(self)
        # From here a forgotten executable is freed by its record (which owns the user-object
        # references), once no launch in flight holds it any more.
        self._life = _ExecRecord(self, self._launcher, self._updater)
        self._launcher.record = self._life
        for obj in self._user_objects:  # ours, then instantiate's (never zero in between)
            obj._adopt(self, 1)
            obj._disown(built.holder)

    @classmethod
    def _instantiate(
        cls, graph: Graph, flags: int = 0, *, device: Device | None = None, **options: Any
    ) -> GraphExec:
        """``graph.instantiate``: check every argument, then build; with UPLOAD, upload.

        Raises:
            TypeError / ValueError: an unknown option, or an option of the wrong type.
            NotSupported: ``DEVICE_LAUNCH`` (the simulator has no device-side launch).
        """
        request = check_request(flags, device, options)
        check_flag_work(graph, request)
        # A bulk build that makes no garbage: see core.gcpause. A small graph's build makes too
        # few objects for the collector's passes to matter; pausing would cost it more than
        # they do. (The count is read without the lock: it only chooses a speed.)
        graph_exec: GraphExec = _new_object(cls)
        if len(graph._nodes) < BULK_BUILD_NODES:
            graph_exec._init(instantiate(graph, request))
        else:
            with gcpause.paused():
                graph_exec._init(instantiate(graph, request))
        if request.upload:
            try:  # checked before the build too; another thread may destroy the stream since
                graph_exec._upload(request.upload_stream)
            except BaseException:
                graph_exec.destroy()  # nobody else holds it: a failed call leaves nothing
                raise
        return graph_exec

    # The executable's identity and state are read-only (as ``hid``): another device would
    # free its conditional cells on that device, an emptied user-object list would never
    # give back its references (their destructors never run).

    @property
    def device(self) -> Device:
        """The device the executable runs on (read-only)."""
        return self._device

    @property
    def flags(self) -> InstantiateFlags:
        """The flags it was instantiated with (read-only)."""
        return self._flags

    @property
    def state(self) -> ExecState:
        """OPEN, CLOSING (destroyed, launches in flight) or CLOSED (read-only)."""
        return self._state

    @property
    def arena(self) -> KernelArgArena:
        """The kernel-argument arena of its nodes (read-only)."""
        return self._arena

    @property
    def user_objects(self) -> tuple[UserObject, ...]:
        """The user objects it holds a reference to, one each (a snapshot)."""
        return tuple(self._user_objects)

    @property
    def hid(self) -> HandleId:
        """The executable's registry handle (read-only: its destroy retires exactly this one)."""
        return self._hid

    # -- handle checks --------------------------------------------------------------------------

    def _check_alive(self) -> None:
        """Raises InvalidValue once the executable was destroyed (HIP: not in graphExecSet_)."""
        if self._state is not ExecState.OPEN:
            check_live(False, "graph exec", self)

    # -- launch (the launcher) ------------------------------------------------------------------

    async def launch(self, stream: Stream | PerThreadStream | None = None) -> Completion:
        """Enqueue one replay on ``stream`` (the current device's null stream by default).

        A stream of another device than the executable's is allowed: the graph runs on its
        own device, ordered with that stream (see :mod:`ahipgraph.exec.cross_device`).

        Returns once the launch is enqueued. The returned :class:`Completion` resolves when
        every node has run, raising the launch's :class:`HipError` if one failed. The launch
        starts after earlier work on ``stream`` and after this executable's previous launch;
        later work on ``stream`` starts after the whole graph. When every signal set is in use
        it parks until a completion returns one (``signal_set_policy="wait"``, the default).

        Raises:
            InvalidValue: the executable was destroyed, a graph-allocated block from the
                previous launch was never freed (and auto-free-on-launch is off), or an
                event-record/event-wait node names an event destroyed since (HIP would use
                the freed event; set a live one with ``set_event_*_node_event``).
            ContextIsDestroyed: the stream was destroyed (also while the launch waited for a
                signal set: that wakes it at once).
            IllegalState: the caller is device work (an async kernel or host node body) that
                must park for a set while every set is held by a launch completing only after
                it (its own launch, and the later ones): it would wait for itself.
            RuntimeError: called from a trio task (ahipgraph runs on asyncio or uvloop), an
                empty graph's launch, which needs no loop, included.
        """
        launcher = self._launcher
        target = launcher.target(stream)
        if target is None:  # an empty graph launches as a no-op, with no loop to ask for:
            refuse_trio()  # a trio task hears that ahipgraph runs on asyncio here, not later
            return make_completion(Signal(0), self._device)
        signal_set = launcher.acquire_nowait()
        if signal_set is None:
            launcher.check_events()  # a refused launch is refused before it parks
            signal_set = await launcher.acquire(target)
        if target._device is not self._device:
            return enqueue_cross_device(launcher, target, signal_set)
        return launcher.enqueue(target, signal_set)

    def launch_nowait(self, stream: Stream | PerThreadStream | None = None) -> Completion:
        """:meth:`launch` without ever parking.

        Raises:
            NotReady: the pool waits when empty and no signal set is free.
        """
        return self._launcher.submit_nowait(stream)

    @property
    def pool(self) -> SignalSetPool:
        """The signal-set pool launches borrow from (the launcher's)."""
        return self._launcher.pool

    def _free_from_completion(self) -> None:
        """The last launch of a destroyed executable completed: free it, contained.

        User-object destructors run here, inside the device's run loop. One that raises must
        not stop the device, the work queued behind this launch, or the other destructors (all
        of which :meth:`_last_release` runs); its exception goes to the event loop's exception
        handler, as asyncio reports an exception in a callback.
        """
        try:
            self._last_release()
        except (KeyboardInterrupt, SystemExit):
            raise  # propagates, as from any user code; the queue runs the rest later
        except BaseException as error:  # CancelledError and GeneratorExit too
            message = f"a user-object destructor raised while {self!r} was freed"
            context = {"message": message, "exception": error, "graph_exec": self}
            if not self._device._engine.report_exception(context):
                report_unraisable(error, message, self)

    async def upload(self, stream: Stream | PerThreadStream | None = None) -> None:
        """``hipGraphUpload``: validates; everything was already prepared at instantiate.

        Raises:
            InvalidValue: the executable was destroyed, or ``stream`` is another device's.
            ContextIsDestroyed: the stream was destroyed. TypeError: ``stream`` is not a Stream.
            RuntimeError: called from a trio task (ahipgraph runs on asyncio or uvloop), said
                here although an upload needs no loop, as every launch would say it.
        """
        refuse_trio()
        self._upload(stream)

    def upload_nowait(self, stream: Stream | PerThreadStream | None = None) -> None:
        """:meth:`upload` from synchronous code: an upload never waits, so never ``NotReady``."""
        self._upload(stream)

    def _upload(self, stream: Stream | PerThreadStream | None) -> None:
        """What an upload checks (also run by instantiate with ``InstantiateFlags.UPLOAD``)."""
        self._check_alive()
        engine = self._device._engine
        if engine._retired:  # an executable of a replaced device: InvalidDevice, as its launch
            engine._refuse_retired()  # raises
        launch_stream(stream, self._device)

    # -- destroy --------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        """False once ``destroy()`` was called."""
        return self._state is ExecState.OPEN

    def destroy(self) -> None:
        """Retire the handle now; free everything once the last launch in flight completes.

        Safe from any thread and while launches are in flight.

        Raises:
            InvalidValue: the executable was already destroyed.
        """
        if EXECS.unregister(self.hid) is None:
            if self._life.freed:  # collected: destroyed from a cycle-mate's __del__
                return
            raise destroyed("graph exec", self, "destroy", "was already destroyed")
        self._life.detach()
        with self._lock:
            self._state = ExecState.CLOSING
        if self._conditionals is not None:  # a WHILE body that never ends stops here
            self._conditionals.control.stopped = True
        # Launches parked for a signal set would otherwise wait for a pool that is going away
        # (the error, with its repr, is made only when one does).
        if self._launcher.pool.waiting:
            self._launcher.fail_waiters(
                InvalidValue(f"{self!r} was destroyed while a launch waited")
            )
        with self._lock:
            self._refcount -= 1  # the handle's reference
            last = not self._refcount
        if last:
            self._last_release()

    def _last_release(self) -> None:
        """The last reference went: free arena, signal sets, streams and user objects.

        The launcher and the updater keep only weak proxies of the executable and of each
        other from here: its checks still answer calls on the handle, and the handle, once
        dropped, is freed by reference counting with everything it holds rather than left to
        the collector.
        """
        self._state = ExecState.CLOSED
        self._launcher.owner = self._updater.owner = weakref.proxy(self)
        self._updater.launcher = weakref.proxy(self._launcher)
        self._free_resources(unreserve=True)
        objects, self._user_objects = self._user_objects, []
        disown_all(objects, self)  # every destructor runs, then the first error

    def _free_resources(self, *, unreserve: bool) -> None:
        """Give back what instantiate took: arena, signal sets, streams, cells, reservations."""
        self._arena.close()
        forget_runs(self._arena)
        self._launcher.close()
        if self._conditionals is not None:
            self._conditionals.free(self._device)
        if unreserve:
            give_back_allocations(self._launcher.compiled.alloc_memory)

    # -- updates (the updater) ------------------------------------------------------------------

    def _node(self, node: GraphNode, *types: NodeType) -> ExecNode:
        """Find the copy of an original node: exec first, then node handle, then node type."""
        return self._updater.node(node, *types)

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

        Launches already enqueued keep the arguments they were enqueued with. A ``CondHandle``
        argument must be a handle the executable has a value for (one its graph's nodes used
        when it was made): any other is ``InvalidValue``, changing nothing.
        """
        setters.set_kernel_node_params(self._updater, node, kernel, grid, block, args, shared_mem)

    # Each attribute's value has its own type, as ``node.get_attribute``'s.
    @overload
    def kernel_node_attribute(
        self, node: GraphNode, attr: Literal[KernelNodeAttribute.Priority]
    ) -> int: ...
    @overload
    def kernel_node_attribute(
        self, node: GraphNode, attr: Literal[KernelNodeAttribute.Cooperative]
    ) -> bool: ...
    @overload
    def kernel_node_attribute(
        self, node: GraphNode, attr: Literal[KernelNodeAttribute.AccessPolicyWindow]
    ) -> AccessPolicyWindow: ...
    @overload
    def kernel_node_attribute(
        self, node: GraphNode, attr: KernelNodeAttribute | int
    ) -> AttributeValue: ...
    def kernel_node_attribute(
        self, node: GraphNode, attr: KernelNodeAttribute | int
    ) -> AttributeValue:
        """The executable's value of a kernel node's attribute (see ``node.get_attribute``)."""
        return setters.kernel_node_attribute(self._updater, node, attr)

    # Each attribute takes a value of its own type (see ``node.set_attribute``).
    @overload
    def set_kernel_node_attribute(
        self, node: GraphNode, attr: Literal[KernelNodeAttribute.Priority], value: int
    ) -> None: ...
    @overload
    def set_kernel_node_attribute(
        self, node: GraphNode, attr: Literal[KernelNodeAttribute.Cooperative], value: bool | int
    ) -> None: ...
    @overload
    def set_kernel_node_attribute(
        self,
        node: GraphNode,
        attr: Literal[KernelNodeAttribute.AccessPolicyWindow],
        value: AccessPolicyWindow,
    ) -> None: ...
    @overload
    def set_kernel_node_attribute(
        self, node: GraphNode, attr: KernelNodeAttribute | int, value: AttributeValue
    ) -> None: ...
    def set_kernel_node_attribute(
        self, node: GraphNode, attr: KernelNodeAttribute | int, value: AttributeValue
    ) -> None:
        """Change a kernel node's priority or access-policy window in this executable only.

        The executable's plan was made at instantiate, so a new priority does not move the
        node to another parallel stream; it is what the executable reports and passes on.

        Raises:
            InvalidValue: as ``node.set_attribute``; or a different cooperative value (fixed
                at instantiate).
            TypeError: a value of the wrong type, as ``node.set_attribute``.
        """
        setters.set_kernel_node_attribute(self._updater, node, attr, value)

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
        setters.set_kernel_record(self._updater, node, record)

    def _set_memcpy_record(self, node: GraphNode, record: PitchedCopyParams) -> None:
        """A whole pitched-copy record (generic setter): it stays a pitched copy."""
        copy_setters.set_memcpy_record(self._updater, node, record)

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
        setters.set_memcpy_node_params(self._updater, node, dst, src, nbytes, kind)

    def set_memset_node_params(
        self,
        node: GraphNode,
        dst: DevicePtr,
        value: int,
        width: int | None = None,
        *,
        nbytes: int | None = None,
        element_size: int = 1,
        height: int = 1,
        pitch: int | None = None,
    ) -> None:
        """``hipGraphExecMemsetNodeSetParams``; the size is ``width`` or ``nbytes=``, as
        ``graph.add_memset_node`` takes it."""
        setters.set_memset_node_params(
            self._updater, node, dst, value, width, nbytes, element_size, height, pitch
        )

    def set_host_node_params(
        self, node: GraphNode, fn: Callable[..., Any], args: Sequence[Any] = ()
    ) -> None:
        """``hipGraphExecHostNodeSetParams``."""
        setters.set_host_node_params(self._updater, node, fn, args)

    def set_event_record_node_event(self, node: GraphNode, event: Event) -> None:
        """``hipGraphExecEventRecordNodeSetEvent``: takes effect from the next launch."""
        setters.set_event_node_event(self._updater, node, event, NodeType.EventRecord)

    def set_event_wait_node_event(self, node: GraphNode, event: Event) -> None:
        """``hipGraphExecEventWaitNodeSetEvent``: takes effect from the next launch."""
        setters.set_event_node_event(self._updater, node, event, NodeType.WaitEvent)

    def set_child_graph_node_params(self, node: GraphNode, child: Graph) -> None:
        """``hipGraphExecChildGraphNodeSetParams``: same topology, new node parameters.

        Raises:
            InvalidValue: bad handles, or a node change that node's own setter refuses (a
                memcpy's direction, a 2D memset's shape). Unknown: ``child`` is the
                executable's own graph, or its topology, node types or a conditional node's
                bodies differ from the embedded child's (HIP's codes; the whole shape is
                compared before any node's parameters). InvalidConfiguration: a kernel the
                executable's device cannot run. InvalidDevicePointer: a kernel node of
                ``child`` holds a pointer of a device ``configure_devices`` replaced since
                the node was added (as update).
        """
        setters.set_child_graph_node_params(self._updater, node, child)

    def set_node_enabled(self, node: GraphNode, enabled: bool) -> None:
        """``hipGraphNodeSetEnabled``: a disabled kernel/memcpy/memset node does nothing but
        keeps its place in the ordering. Other node types → InvalidValue."""
        setters.set_node_enabled(self._updater, node, enabled)

    def node_enabled(self, node: GraphNode) -> bool:
        """``hipGraphNodeGetEnabled``."""
        return setters.node_enabled(self._updater, node)

    def update(self, graph: Graph) -> UpdateResult:
        """``hipGraphExecUpdate``: take the parameters of a graph with the same topology.

        All-or-nothing: every node is checked before any is changed.

        Returns:
            An :class:`UpdateResult` of kind Success.

        Raises:
            InvalidValue: the executable or ``graph`` was destroyed, or ``graph`` has a cycle.
            GraphExecUpdateFailure: with ``.result`` naming the kind (TopologyChanged,
                NodeTypeChanged, ParametersChanged, UnsupportedFunctionChange,
                AttributesChanged for a cooperative change, NotSupported for a memory node's
                change or a launch shape the executable's device cannot run) and the node of
                ``graph`` it concerns (the child-graph node, for one inside a child graph): the
                first, in the graph's order, that fails, as HIP's error node;
                a changed conditional node's bodies are ParametersChanged (an executable
                keeps the bodies it was made with), as is a kernel passing a conditional
                handle the executable has no value for (one made after it, or another
                graph's), or a kernel whose arguments do not fit in one of the executable's
                argument chunks (the graph's argument bytes plus ``arena_headroom``).
            InvalidDevicePointer: a kernel node of ``graph`` holds a pointer of a device
                ``configure_devices`` replaced since the node was added (as instantiate).
            RaceError: made with ``check_races=True``, and a changed node would race with
                a node it is not ordered with (a conditional node counting what its bodies
                touch); nothing is changed.
        """
        return setters.update(self._updater, graph)

    def set_memcpy_3d_node_params(
        self,
        node: GraphNode,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: Triple,
        *,
        dst_pos: Triple = (0, 0, 0),
        src_pos: Triple = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParams``: a pitched copy in the node's direction."""
        copy_setters.set_memcpy_3d_node_params(
            self._updater, node, dst, src, extent, dst_pos, src_pos, kind
        )

    def set_memcpy_node_to_symbol(
        self,
        node: GraphNode,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParamsToSymbol``."""
        copy_setters.set_memcpy_node_to_symbol(
            self._updater, node, symbol, src, nbytes, offset, kind
        )

    def set_memcpy_node_from_symbol(
        self,
        node: GraphNode,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipGraphExecMemcpyNodeSetParamsFromSymbol``."""
        copy_setters.set_memcpy_node_from_symbol(
            self._updater, node, dst, symbol, nbytes, offset, kind
        )

    # -- the parts' state, for the verifier, the trace and the race checker -------------------

    @property
    def _compiled(self) -> Compiled:
        return self._launcher.compiled

    @property
    def _version(self) -> Version:
        return self._updater.version

    @property
    def _last_done(self) -> Signal:
        return self._launcher.last_done

    @property
    def _races(self) -> ExecRaces | None:
        return self._updater.races

    @_races.setter
    def _races(self, races: ExecRaces | None) -> None:
        self._updater.races = races

    # -- introspection --------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self._launcher.in_flight

    def statistics(self) -> ExecStatistics:
        """What the executable holds and did: its state, nodes, segments and parallel strands,
        launches taken, in flight and completed, parameter versions, and its signal-set pool
        and argument arena (both as their own statistics)."""
        return ExecStatistics(
            state=self._state.value,
            nodes=len(self._graph),
            segments=len(self._plan.segments),
            strands=self._plan.num_strands,
            launches=self._launcher.launches,
            in_flight=self.in_flight,
            completed=self._launcher.completed,
            versions=self._updater.versions,
            signal_pool=self._launcher.pool.statistics(),
            arena=self._arena.statistics(),
        )

    @property
    def plan(self) -> Plan:
        return self._plan

    def plan_dot(self) -> str:
        """Graphviz DOT of the plan: segments, parallel strands and the cross-strand waits.

        See :mod:`ahipgraph.exec.plan_dot`; render with ``dot -Tsvg``.
        """
        from .plan_dot import plan_to_dot

        return plan_to_dot(self._graph, self._plan)

    @safe_repr
    def __repr__(self) -> str:
        replaced = " replaced" if self._device._engine._retired else ""  # as a stream's says
        return (
            f"<GraphExec #{self.hid.slot}.{self.hid.generation} state={self._state.value} "
            f"nodes={len(self._graph)} strands={self._plan.num_strands} "
            f"in_flight={self.in_flight}{replaced}>"
        )
