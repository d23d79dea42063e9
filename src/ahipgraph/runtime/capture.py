"""Stream capture: the state machine that turns stream work into graph nodes (HIP §2).

Design (decide synchronously, await at the edges): every decision here is a plain function that
runs atomically under one module lock and never awaits. Streams, events and the device call in
through one short hook per operation; the stream layer never holds capture logic itself.

Model:
  * A :class:`CaptureSession` is one capture sequence, begun by ``begin_capture`` on its *origin*
    stream: a graph, an id, a mode, the task or thread that began it (its *owner*) and a status
    (ACTIVE or INVALIDATED). HIP keeps the status per stream; here the whole sequence shares
    it, so invalidating any member invalidates what its origin's ``end_capture`` returns
    (CUDA's behaviour, and what HIP's tests observe through the origin).
  * A :class:`StreamCapture` is one stream's part in a session: its current dependency set
    (HIP's ``lastCapturedNodes_``), the stream it was forked from and the streams forked from
    it. A stream is capturing exactly when ``stream._capture`` is a :class:`StreamCapture`.
  * Events recorded during a capture create no node: they remember the recording stream's
    dependency set (:class:`_EventLink`). A wait on such an event forks the waiting stream
    into the same session, or joins it back.
  * "Thread" in HIP is the asyncio task here (or the OS thread outside a loop): the calling
    task's mode lives in a :class:`~contextvars.ContextVar` that ``exchange_capture_mode``
    swaps, and a session remembers the task (or thread) that began it.

Invariants (asserted by the tests through ``statistics()``):
  * ``_SESSIONS`` holds exactly the sessions in progress; every member stream of a session has
    ``stream._capture`` pointing at its part, and nothing else does.
  * A session's graph, when the session made it, is destroyed on every path that does not
    hand it to the caller (invalidation, unjoined forks, a destroyed origin, an aborted
    ``async with``). A user's graph (``begin_capture_to_graph``) is never destroyed here.
  * The null stream of a device carries a :class:`_NullGuard` exactly while a blocking stream
    of that device captures, so its operations fail with ``StreamCaptureImplicit``.

Where ahipgraph is stricter than HIP: a failed ``end_capture`` (invalidated or unjoined) always
ends the sequence and frees its graph (HIP leaves an unjoined stream marked active, and leaks the
graph of a destroyed capturing stream); a wait that would merge two sequences is
``StreamCaptureMerge`` instead of silently mixing two graphs.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import threading
import weakref
from collections.abc import Callable, Generator, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.errors import (
    CapturedEvent,
    IllegalState,
    InvalidValue,
    StreamCaptureImplicit,
    StreamCaptureInvalidated,
    StreamCaptureIsolation,
    StreamCaptureMerge,
    StreamCaptureUnjoined,
    StreamCaptureUnmatched,
    StreamCaptureUnsupported,
    StreamCaptureWrongThread,
)
from ..device.pointer import DevicePtr
from ..device.signal import Signal
from . import device as _device_module
from .completion import Completion

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from .device import Device
    from .event import Event
    from .stream import Stream

__all__ = [
    "EVENT_WAIT_DEFAULT",
    "EVENT_WAIT_EXTERNAL",
    "CaptureDependencies",
    "CaptureInfo",
    "CaptureMode",
    "CaptureSession",
    "CaptureStatistics",
    "CaptureStatus",
    "CapturedWork",
    "StreamCapture",
    "exchange_capture_mode",
    "statistics",
]

EVENT_WAIT_DEFAULT = 0
EVENT_WAIT_EXTERNAL = 1  # hipEventWaitExternal: the wait becomes an EventWait node


class CaptureMode(enum.IntEnum):
    """``hipStreamCaptureMode``: which unsafe calls elsewhere a capture refuses."""

    GLOBAL = 0
    THREAD_LOCAL = 1
    RELAXED = 2


class CaptureStatus(enum.IntEnum):
    """``hipStreamCaptureStatus``."""

    NONE = 0
    ACTIVE = 1
    INVALIDATED = 2


class CaptureDependencies(enum.IntEnum):
    """``hipStreamUpdateCaptureDependencies`` flags."""

    ADD = 0
    SET = 1


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """``hipStreamGetCaptureInfo_v2``: id, graph and dependencies are set only while ACTIVE."""

    status: CaptureStatus
    id: int | None = None
    graph: Graph | None = None
    dependencies: tuple[GraphNode, ...] = ()


@dataclass(frozen=True, slots=True)
class CaptureStatistics:
    sessions: int  # captures in progress
    capturing_streams: int  # streams taking part in them
    event_links: int  # events recorded in them


_MODE: ContextVar[CaptureMode] = ContextVar("ahipgraph_capture_mode", default=CaptureMode.GLOBAL)
_LOCK = threading.RLock()
_SESSIONS: dict[CaptureSession, None] = {}  # every sequence in progress, in begin order
_IDS = itertools.count(1)


def exchange_capture_mode(mode: CaptureMode | int) -> CaptureMode:
    """Set the calling task's (or thread's) capture mode; return the previous one.

    ``hipThreadExchangeStreamCaptureMode``. The mode decides whether this task's unsafe calls
    (``malloc``, synchronising a stream that is not capturing, ...) are refused while captures
    are in progress. Each asyncio task has its own (copied from its creator when it starts);
    each OS thread starts at GLOBAL.

    Raises:
        InvalidValue: ``mode`` is not a capture mode.
    """
    new = _check_mode(mode)
    previous = _MODE.get()
    _MODE.set(new)
    return previous


def _check_mode(mode: object) -> CaptureMode:
    if isinstance(mode, bool) or not isinstance(mode, int):
        raise InvalidValue(f"{mode!r} is not a capture mode")
    try:
        return CaptureMode(mode)
    except ValueError:
        raise InvalidValue(f"{mode!r} is not a capture mode") from None


def _caller() -> object:
    """HIP's "thread": the running asyncio task, else the OS thread."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task if task is not None else threading.get_ident()


# -- graph layer access (the graph layer sits above the runtime: imported on first use) ------------

_graph_api: Any = None
_NODE_TYPES: dict[str, Any] = {}  # an operation kind's NodeType, looked up once


def _graphs() -> Any:
    global _graph_api
    if _graph_api is None:
        from ..graph import graph as graph_module
        from ..graph import node_type

        class _Api:
            Graph = graph_module.Graph
            live_graph = staticmethod(graph_module.live_graph)
            NodeType = node_type.NodeType

        _graph_api = _Api
    return _graph_api


# -- what a captured operation returns -------------------------------------------------------------

_NEVER = Signal(1)  # captured work has no completion of its own: it runs only in launches


class CapturedWork(Completion):
    """What a stream operation returns while its stream captures.

    The work was recorded, not run: ``node`` is the graph node it became (None when it added
    none, as a zero-sized copy). Waiting for it (``await``, ``wait()``, ``done()``) is the same
    mistake as synchronising the capturing stream: ``StreamCaptureUnsupported``, and the
    capture is invalidated if it is still in progress.
    """

    __slots__ = ("_session", "node")

    def __init__(self, session: CaptureSession, node: GraphNode | None, device: Device) -> None:
        # Completion's three slots set here rather than through super().__init__: one of these
        # is made per captured operation.
        self._signal = _NEVER
        self._device = device
        self._program = None
        self._session = session
        self.node = node

    def _mistake(self) -> StreamCaptureUnsupported:
        with _LOCK:
            session = self._session
            if session in _SESSIONS:
                session.invalidate()
        return StreamCaptureUnsupported(
            "captured work runs only when its graph is launched; waiting for it synchronises "
            "a capturing stream"
        )

    def done(self) -> bool:
        raise self._mistake()

    def exception(self) -> None:
        return None

    @property
    def start_ns(self) -> None:
        return None

    @property
    def end_ns(self) -> None:
        return None

    def __await__(self) -> Generator[Any, None, None]:
        raise self._mistake()  # raised by ``await`` itself: nothing is ever waited for

    def __repr__(self) -> str:
        return f"<CapturedWork node={self.node!r}>"


# -- sessions and stream parts ---------------------------------------------------------------------


class CaptureSession:
    """One capture sequence: a graph, an id, a mode, an owner and its member streams."""

    __slots__ = (
        "captured",
        "graph",
        "id",
        "members",
        "mode",
        "origin",
        "owner",
        "owns_graph",
        "recorded",
        "removed",
        "status",
    )

    def __init__(self, graph: Graph, owns_graph: bool, mode: CaptureMode) -> None:
        self.id = next(_IDS)
        self.graph = graph
        self.owns_graph = owns_graph
        self.mode = mode
        self.owner = _caller()
        self.status = CaptureStatus.ACTIVE
        self.members: list[StreamCapture] = []
        self.origin: StreamCapture | None = None
        self.captured: set[GraphNode] = set()  # nodes this capture added (the rest are manual)
        self.removed: set[GraphNode] = set()  # HIP's removedDependencies_
        self.recorded: set[Event] = set()  # events recorded during this capture

    def invalidate(self) -> None:
        """Mark the sequence invalidated; its ``end_capture`` will fail and free the graph."""
        self.status = CaptureStatus.INVALIDATED

    def finish(self) -> None:
        """Take the session out of progress: every member stops capturing (lock held)."""
        _SESSIONS.pop(self, None)
        devices = {}
        for part in self.members:
            if part.stream._capture is part:
                part.stream._capture = None
            devices[id(part.stream.device)] = part.stream.device
        self.members.clear()
        for event in self.recorded:
            link = _LINKS.get(event)
            if link is not None:
                link.ended = True  # keeps the stream for the isolation rule
        self.recorded.clear()
        for device in devices.values():
            _refresh_null_guard(device)

    def discard_graph(self) -> None:
        """Free the graph if this session made it (the caller never received it)."""
        if self.owns_graph and not self.graph.destroyed:
            self.graph.destroy()

    def __repr__(self) -> str:
        return (
            f"<CaptureSession id={self.id} {self.status.name} mode={self.mode.name} "
            f"streams={len(self.members)} graph={self.graph.id}>"
        )


class StreamCapture:
    """One stream's part in a session: its dependency set and its fork relations.

    The ``add_*`` methods are the hooks stream operations call while capturing; each takes a
    ``build`` callable that validates the operation (after the status check, HIP's order).
    """

    __slots__ = ("children", "deps", "parent", "session", "stream")

    def __init__(
        self,
        session: CaptureSession,
        stream: Stream,
        deps: Iterable[GraphNode] = (),
        parent: StreamCapture | None = None,
    ) -> None:
        self.session = session
        self.stream = stream
        self.deps: list[GraphNode] = list(deps)
        self.parent = parent
        self.children: list[StreamCapture] = []
        session.members.append(self)
        stream._capture = self

    # -- status ----------------------------------------------------------------------------------

    def check_active(self) -> CaptureSession:
        session = self.session
        if session.status is not CaptureStatus.ACTIVE:
            raise StreamCaptureInvalidated(f"the capture on {self.stream!r} was invalidated")
        return session

    def unsupported(self, what: str) -> StreamCaptureUnsupported:
        """``what`` is not allowed on a capturing stream: invalidate, return the error."""
        with _LOCK:
            if self.session in _SESSIONS:
                self.session.invalidate()
        return StreamCaptureUnsupported(f"{what} on a capturing stream {self.stream!r}")

    # -- operations become nodes -------------------------------------------------------------------

    def _append(self, node_type: Any, build: Callable[[], Any]) -> GraphNode:
        """Add a node after the current dependencies; it becomes the dependency set."""
        session = self.check_active()
        node: GraphNode = session.graph._add_node(node_type, self.deps, build)
        session.captured.add(node)
        self.deps = [node]
        return node

    def add(self, kind: str, build: Callable[[], Any]) -> CapturedWork:
        """Capture a kernel, memcpy, memset or host call (``kind`` names the node type).

        Zero-sized copies and fills add nothing and succeed, as in HIP.
        """
        with _LOCK:
            session = self.check_active()
            params = build()  # validation runs no user code: the session is still active
            device = self.stream.device
            if kind in ("Memcpy", "Memset") and params.nbytes == 0:
                return CapturedWork(session, None, device)
            node_type = _NODE_TYPES.get(kind)
            if node_type is None:
                node_type = _NODE_TYPES[kind] = getattr(_graphs().NodeType, kind)
            # What _append does, without its second status check (nothing ran since the first).
            node: GraphNode = session.graph._add_node(node_type, self.deps, lambda: params)
            session.captured.add(node)
            self.deps = [node]
            return CapturedWork(session, node, device)

    def malloc(self, nbytes: int) -> DevicePtr:
        """``hipMallocAsync`` captured: a MemAlloc node; its reserved address is usable now."""
        with _LOCK:
            session = self.check_active()
            if isinstance(nbytes, bool) or not isinstance(nbytes, int):
                raise TypeError(f"nbytes must be an int, got {nbytes!r}")
            if nbytes == 0:
                return DevicePtr(self.stream.device.ordinal, 0)
            graph = session.graph
            deps = self.deps
            node = graph.add_mem_alloc_node(nbytes, device=self.stream.device.ordinal, deps=deps)
            session.captured.add(node)
            self.deps = [node]
            ptr: DevicePtr = node.params.ptr
            return ptr

    def free(self, ptr: DevicePtr) -> CapturedWork:
        """``hipFreeAsync`` captured: a MemFree node."""
        with _LOCK:
            session = self.check_active()
            node = session.graph.add_mem_free_node(ptr, deps=self.deps)
            session.captured.add(node)
            self.deps = [node]
            return CapturedWork(session, node, self.stream.device)

    def record_event(self, event: Event) -> None:
        """``hipEventRecord`` captured: no node; the event remembers the dependency set."""
        with _LOCK:
            session = self.check_active()
            session.recorded.add(event)
            _LINKS[event] = _EventLink(session, self.stream, tuple(self.deps))

    def __repr__(self) -> str:
        role = "origin" if self.parent is None else "fork"
        return (
            f"<StreamCapture session={self.session.id} {role} deps={len(self.deps)} "
            f"forks={len(self.children)}>"
        )


class _NullGuard:
    """Sits on a device's null stream while a blocking stream captures (HIP's implicit rule)."""

    __slots__ = ()

    def _refuse(self) -> StreamCaptureImplicit:
        return StreamCaptureImplicit(
            "the null stream cannot be used while a blocking stream of its device captures"
        )

    def add(self, kind: str, build: Callable[[], Any]) -> CapturedWork:
        raise self._refuse()

    def malloc(self, nbytes: int) -> DevicePtr:
        raise self._refuse()

    def free(self, ptr: DevicePtr) -> CapturedWork:
        raise self._refuse()

    def record_event(self, event: Event) -> None:
        raise self._refuse()

    def unsupported(self, what: str) -> StreamCaptureImplicit:
        return self._refuse()


NULL_GUARD = _NullGuard()


def _refresh_null_guard(device: Device) -> None:
    """Put the guard on ``device``'s null stream exactly while a blocking stream captures."""
    null = device._null_stream
    blocking = any(
        isinstance(s._capture, StreamCapture) and not s.non_blocking for s in device.streams
    )
    if blocking and null is None:
        null = device.null_stream
    if null is not None:
        null._capture = NULL_GUARD if blocking else None


@dataclass(slots=True)
class _EventLink:
    """An event recorded during a capture: the recording stream's dependency set at the time."""

    session: CaptureSession
    stream: Stream
    deps: tuple[GraphNode, ...]
    ended: bool = False


_LINKS: weakref.WeakKeyDictionary[Event, _EventLink] = weakref.WeakKeyDictionary()


# -- begin, end, queries ---------------------------------------------------------------------------


def begin(
    stream: Stream,
    mode: CaptureMode | int,
    graph: Graph | None = None,
    deps: Sequence[GraphNode] | GraphNode = (),
    *,
    to_graph: bool = False,
) -> None:
    """``hipStreamBeginCapture`` / ``hipStreamBeginCaptureToGraph`` (``to_graph``)."""
    stream.check_open()
    if stream.is_null:
        raise StreamCaptureUnsupported("the null stream cannot capture")
    checked_mode = _check_mode(mode)
    api = _graphs()
    dep_list: list[GraphNode] = []
    if to_graph:
        graph = api.live_graph(graph, "capture graph")
        with graph.lock:
            dep_list = graph._check_deps(deps)
    with _LOCK:
        if isinstance(stream._capture, StreamCapture):
            raise IllegalState(f"{stream!r} is already capturing")
        target: Graph = api.Graph() if graph is None else graph
        session = CaptureSession(target, graph is None, checked_mode)
        session.origin = StreamCapture(session, stream, dep_list)
        _SESSIONS[session] = None
        _refresh_null_guard(stream.device)


def end(stream: Stream) -> Graph:
    """``hipStreamEndCapture``: checks in HIP's order, then the unjoined check."""
    if stream.is_null:
        raise IllegalState("the null stream is not capturing")
    stream.check_open()
    with _LOCK:
        part = stream._capture
        if not isinstance(part, StreamCapture):
            raise IllegalState(f"{stream!r} is not capturing")
        session = part.session
        if part is not session.origin:
            raise StreamCaptureUnmatched(f"{stream!r} was forked into a capture; end its origin")
        if session.mode is not CaptureMode.RELAXED and session.owner != _caller():
            raise StreamCaptureWrongThread(
                f"a {session.mode.name} capture must be ended by the task or thread that began it"
            )
        session.finish()
        graph = session.graph
        if session.status is CaptureStatus.INVALIDATED or graph.destroyed:
            error: Exception = StreamCaptureInvalidated(
                f"the capture on {stream!r} was invalidated"
            )
        else:
            problem = _unjoined(session, part.deps)
            if problem is None:
                return graph
            error = StreamCaptureUnjoined(problem)
    session.discard_graph()
    raise error


def _unjoined(session: CaptureSession, joined: list[GraphNode]) -> str | None:
    """HIP's unjoined check, without adding the temporary node: its leaves are computed."""
    graph = session.graph
    with graph.lock:
        joined_set = set(joined)
        leaves = [n for n in graph._nodes if not n._succ and n not in joined_set]
    if not leaves:  # the temporary node is the only leaf
        return None
    leaves = [n for n in leaves if n in session.captured]  # drop manual nodes
    if any(n in session.removed for n in leaves):
        return None
    if leaves:
        return f"{len(leaves)} forked branch(es) were never joined back into the origin stream"
    return None


def abort(stream: Stream, session: CaptureSession) -> None:
    """End ``session`` without a graph (an ``async with`` block failed); idempotent."""
    with _LOCK:
        live = session in _SESSIONS
        if live:
            session.finish()
    if live:
        session.discard_graph()


def status(stream: Stream) -> CaptureStatus:
    """``hipStreamIsCapturing``."""
    return info(stream).status


def info(stream: Stream) -> CaptureInfo:
    """``hipStreamGetCaptureInfo_v2``."""
    part = stream._capture
    if part is NULL_GUARD:
        raise StreamCaptureImplicit("a blocking stream of this device is capturing")
    stream.check_open()
    if not isinstance(part, StreamCapture):
        return CaptureInfo(CaptureStatus.NONE)
    with _LOCK:
        session = part.session
        if session.status is not CaptureStatus.ACTIVE:
            return CaptureInfo(session.status)
        return CaptureInfo(CaptureStatus.ACTIVE, session.id, session.graph, tuple(part.deps))


def update_dependencies(stream: Stream, nodes: Sequence[GraphNode], flags: int) -> None:
    """``hipStreamUpdateCaptureDependencies``: Add or Set, with HIP's checks."""
    stream.check_open()
    with _LOCK:
        part = stream._capture
        if not isinstance(part, StreamCapture) or part.session.status is not CaptureStatus.ACTIVE:
            raise IllegalState(f"{stream!r} is not capturing")
        if nodes is None:
            raise InvalidValue("dependencies are null")
        new = list(nodes)
        graph = part.session.graph
        if len(new) > len(graph._nodes):
            raise InvalidValue(f"{len(new)} dependencies, but the graph has {len(graph._nodes)}")
        if isinstance(flags, bool) or flags not in (
            CaptureDependencies.ADD,
            CaptureDependencies.SET,
        ):
            raise InvalidValue(f"{flags!r} is not ADD or SET")
        for node in new:
            graph._check_member(node, "capture dependency")
        if flags == CaptureDependencies.ADD:
            part.deps.extend(_missing(part.deps, new))
        else:
            part.session.removed.update(part.deps)
            part.deps = _missing([], new)


def _missing(have: list[GraphNode], new: Iterable[GraphNode]) -> list[GraphNode]:
    """``new`` without nodes already in ``have`` or repeated (order kept)."""
    seen = set(have)
    out = []
    for node in new:
        if node not in seen:
            seen.add(node)
            out.append(node)
    return out


# -- cross-stream: waits on events -----------------------------------------------------------------


def wait_event(stream: Stream, event: Event, flags: int) -> bool:
    """``hipStreamWaitEvent`` when capture is involved; False means "do the eager wait".

    Raises:
        InvalidValue: bad flags. StreamCaptureIsolation, StreamCaptureMerge,
        StreamCaptureInvalidated, StreamCaptureImplicit: see the module notes.
    """
    if isinstance(flags, bool) or flags not in (EVENT_WAIT_DEFAULT, EVENT_WAIT_EXTERNAL):
        raise InvalidValue(f"{flags!r} is not a stream wait flag")
    part = stream._capture
    link = _LINKS.get(event)
    if part is None and (link is None or link.ended):
        return False
    if part is NULL_GUARD:
        raise NULL_GUARD._refuse()
    with _LOCK:
        if isinstance(part, StreamCapture):
            part.check_active()
            if flags == EVENT_WAIT_EXTERNAL:
                part._append(_graphs().NodeType.WaitEvent, lambda: _event_params(event))
                return True
        if link is None or link.ended:
            source = link.stream._capture if link is not None else None
            if isinstance(source, StreamCapture):
                raise StreamCaptureIsolation(
                    f"{event!r} was not recorded in the capture now running on {link.stream!r}"  # type: ignore[union-attr]
                )
            return False  # recorded outside any capture: a real wait, as in HIP
        source_session = link.session
        if isinstance(part, StreamCapture):
            if part.session is not source_session:
                raise StreamCaptureMerge(
                    f"{stream!r} and {event!r} belong to two different captures"
                )
            part.deps.extend(_missing(part.deps, link.deps))
            return True
        source_part = link.stream._capture
        parent = source_part if isinstance(source_part, StreamCapture) else source_session.origin
        fork = StreamCapture(source_session, stream, link.deps, parent)
        if parent is not None:
            parent.children.append(fork)
        _refresh_null_guard(stream.device)
        return True


def _event_params(event: Event) -> Any:
    from ..graph.params import event_params

    return event_params(event)


def record_eager(event: Event) -> None:
    """An eager record replaces a captured one: the event no longer links to a capture."""
    if event in _LINKS:
        with _LOCK:
            _LINKS.pop(event, None)


# -- the illegal-operations table ------------------------------------------------------------------


def _unsafe_targets() -> list[CaptureSession]:
    """The sessions an unsafe call by the calling task trips, under the task's mode."""
    mode = _MODE.get()
    if mode is CaptureMode.RELAXED:
        return []
    me = _caller()
    return [
        s
        for s in _SESSIONS
        if (s.owner == me and s.mode is not CaptureMode.RELAXED)
        or (mode is CaptureMode.GLOBAL and s.mode is CaptureMode.GLOBAL)
    ]


def check_unsafe_call(what: str) -> None:
    """``hipMalloc``/``hipFree``-like calls under the calling task's mode (HIP §2.7)."""
    if not _SESSIONS:
        return
    with _LOCK:
        targets = _unsafe_targets()
        for session in targets:
            session.invalidate()
    if targets:
        raise StreamCaptureUnsupported(f"{what} is not allowed while a capture is in progress")


def check_stream_sync(stream: Stream, what: str) -> None:
    """``hipStreamSynchronize`` / ``hipStreamQuery`` rules."""
    part = stream._capture
    if isinstance(part, StreamCapture):
        raise part.unsupported(what)
    check_unsafe_call(what)


def check_device_sync() -> None:
    """``hipDeviceSynchronize``: any capture anywhere is invalidated."""
    _invalidate_all(StreamCaptureUnsupported, "synchronising the device")


def check_sync_copy() -> None:
    """Synchronous copies and fills: any capture anywhere is invalidated (``Implicit``)."""
    _invalidate_all(StreamCaptureImplicit, "a synchronous copy or fill")


def _invalidate_all(error: type[Exception], what: str) -> None:
    if not _SESSIONS:
        return
    with _LOCK:
        live = list(_SESSIONS)
        for session in live:
            session.invalidate()
    if live:
        raise error(f"{what} is not allowed while a capture is in progress")


def check_event_sync(event: Event) -> None:
    """``hipEventSynchronize`` / ``hipEventQuery`` on an event recorded in a running capture."""
    link = _LINKS.get(event)
    if link is None or link.ended:
        return
    with _LOCK:
        link.session.invalidate()
    raise CapturedEvent(f"{event!r} was recorded in a capture that is in progress")


# -- destroy ---------------------------------------------------------------------------------------


def stream_destroyed(stream: Stream) -> None:
    """A capturing stream was destroyed: its part (and its forks) end; an origin ends all."""
    with _LOCK:
        part = stream._capture
        if not isinstance(part, StreamCapture):
            return
        session = part.session
        if part is session.origin:
            session.finish()
            discard = True
        else:
            if part.parent is not None and part in part.parent.children:
                part.parent.children.remove(part)
            _detach(part)
            discard = False
            _refresh_null_guard(stream.device)
    if discard:
        session.discard_graph()


def _detach(part: StreamCapture) -> None:
    for child in part.children:
        _detach(child)
    part.children.clear()
    if part in part.session.members:
        part.session.members.remove(part)
    if part.stream._capture is part:
        part.stream._capture = None


def event_destroyed(event: Event) -> None:
    """A destroyed event leaves its capture's records (HIP erases it from ``captureEvents_``)."""
    if event in _LINKS:
        with _LOCK:
            link = _LINKS.pop(event, None)
            if link is not None:
                link.session.recorded.discard(event)


def statistics() -> CaptureStatistics:
    """Captures in progress, streams taking part, and events linked to captures (leak checks)."""
    with _LOCK:
        return CaptureStatistics(
            len(_SESSIONS),
            sum(len(s.members) for s in _SESSIONS),
            sum(1 for link in _LINKS.values() if not link.ended),
        )


class _DeviceChecks:
    """The capture checks the device layer calls (it cannot import this layer)."""

    def unsafe_call(self, what: str) -> None:
        check_unsafe_call(what)

    def device_sync(self) -> None:
        check_device_sync()

    def sync_copy(self) -> None:
        check_sync_copy()


_device_module.capture_checks = _DeviceChecks()
