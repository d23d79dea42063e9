"""Stream capture state: modes, statuses, the sessions in progress and the events they recorded.

The bottom of the capture modules (HIP §2); everything here is bookkeeping, none of it makes a
node or decides what an operation means during capture:

  * a :class:`CaptureSession` is one capture sequence, begun by ``begin_capture`` on its
    *origin* stream: a graph, an id, a mode, the task or thread that began it (its *owner*) and
    a status (ACTIVE or INVALIDATED). HIP keeps the status per stream; here the whole sequence
    shares it, so invalidating any member invalidates what its origin's ``end_capture`` returns
    (CUDA's behaviour, and what HIP's tests observe through the origin);
  * ``_SESSIONS`` is the registry of sessions in progress (held weakly), ``_LINKS`` the events
    recorded in them (:class:`_EventLink`), both guarded by the one module lock ``_LOCK`` that
    every capture decision runs under;
  * "thread" in HIP is the asyncio task here (or the OS thread outside a loop): the calling
    task's mode lives in a :class:`~contextvars.ContextVar` that ``exchange_capture_mode``
    swaps, and a session remembers the task (or thread) that began it;
  * the null stream of a device carries :data:`NULL_GUARD` exactly while a blocking stream of
    that device captures, so its operations fail with ``StreamCaptureImplicit``.

Invariants (asserted by the tests through :func:`statistics`): ``_SESSIONS`` holds exactly the
sessions in progress; every member stream of a session has ``stream._capture`` pointing at its
part, and nothing else does. Nothing here holds a stream strongly (parts and event links refer
to theirs weakly, and ``_SESSIONS`` holds sessions weakly), so a forgotten capturing stream is
collected; its part, if something else keeps its session, stays listed until the releaser ends
it, as ``destroy()`` would have (:mod:`.capture_forgotten`).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import threading
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.errors import InvalidDevice, InvalidValue, StreamCaptureImplicit
from ..core.ints import int_or_none
from .per_thread import settle_finished

if TYPE_CHECKING:
    from ..device.pointer import DevicePtr
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from .capture_nodes import CapturedWork, StreamCapture
    from .device import Device
    from .event import Event
    from .stream import Stream

__all__ = [
    "EVENT_RECORD_DEFAULT",
    "EVENT_RECORD_EXTERNAL",
    "EVENT_WAIT_DEFAULT",
    "EVENT_WAIT_EXTERNAL",
    "LOCK",
    "NULL_GUARD",
    "CaptureDependencies",
    "CaptureInfo",
    "CaptureMode",
    "CaptureSession",
    "CaptureStatistics",
    "CaptureStatus",
    "exchange_capture_mode",
    "link_of",
    "node_destroyed",
    "statistics",
    "target_destroyed",
]

EVENT_RECORD_DEFAULT = 0
EVENT_RECORD_EXTERNAL = 1  # hipEventRecordExternal: a captured record becomes an EventRecord node
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


class CaptureInfo(NamedTuple):
    """``hipStreamGetCaptureInfo_v2``: id, graph and dependencies are set only while ACTIVE.

    A named tuple: HIP answers these four through out-parameters, so
    ``status, capture_id, graph, deps = stream.capture_info()`` unpacks them in that order,
    and each is also read by name.
    """

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
# Every sequence in progress, in begin order, held weakly: a session lives as long as one of
# its member streams (``stream._capture`` is its part) or a user's reference (a returned
# CapturedWork, an event recorded in it) does. Captured work may refer to its own stream (a host
# function's arguments): a strong registry would then keep the stream, and so the capture, alive
# for good; held weakly, stream, session and graph are one garbage cycle (capture_forgotten).
_SESSIONS: weakref.WeakKeyDictionary[CaptureSession, None] = weakref.WeakKeyDictionary()
_IDS = itertools.count(1)
# The capture lock for the graph layer, which takes it before a graph's own lock (the order
# every capture decision takes them in) to destroy a graph a capture may add to.
LOCK = _LOCK


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
    checked = int_or_none(mode)
    if checked is None:
        raise InvalidValue(f"{mode!r} is not a capture mode")
    try:
        return CaptureMode(checked)
    except ValueError:
        raise InvalidValue(f"{mode!r} is not a capture mode") from None


class _ThreadToken:
    """Stands for one OS thread in a session's ``owner``, compared by identity.

    Not the thread's ident: CPython gives a new thread the ident of one that ended, so a
    capture begun on a thread that has since exited would count as begun by whichever thread
    came next (which could then end it, and whose THREAD_LOCAL ``malloc`` would trip it). A
    token lives in its thread's locals and in the sessions it began, so it is never reused.
    """

    __slots__ = ("ident",)

    def __init__(self) -> None:
        self.ident = threading.get_ident()

    def __repr__(self) -> str:
        return f"<thread {self.ident}>"


_THREAD = threading.local()


def _caller() -> object:
    """HIP's "thread": the running asyncio task, else the OS thread (its token)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    if task is not None:
        return task
    token: _ThreadToken | None = getattr(_THREAD, "token", None)
    if token is None:
        token = _THREAD.token = _ThreadToken()
    return token


# -- sessions --------------------------------------------------------------------------------------


class CaptureSession:
    """One capture sequence: a graph, an id, a mode, an owner, a device and its member streams."""

    __slots__ = (
        "__weakref__",  # the registry holds sessions weakly
        "captured",
        "device",
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

    def __init__(self, graph: Graph, owns_graph: bool, mode: CaptureMode, device: Device) -> None:
        self.id = next(_IDS)
        self.graph = graph
        # The origin's device: every stream taking part is one of its streams (capture_fork).
        self.device = device
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
            part.leave()  # its stream, if still alive, stops capturing
            devices[id(part.device)] = part.device
            part.parent, part.children, part.deps = None, [], []  # forks and origin: no cycle
        self.members.clear()
        for event in self.recorded:
            link = _LINKS.get(event)
            if link is not None and link.session is self:
                # Keeps the (weak) stream for the isolation rule; the session and nodes go, so
                # an event outliving the capture does not keep its graph alive.
                link.ended = True
                link.session = None
                link.deps = ()
        self.recorded.clear()
        # The parts refer to the session and the session to its origin part; the captured sets
        # hold every node. Dropping them here leaves no cycle, so an ended capture's objects
        # (and a discarded graph's nodes) are freed at once, not at the collector's next pass.
        self.origin = None
        self.captured = set()
        self.removed = set()
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


def target_destroyed(graph: Graph) -> None:
    """``graph`` is being destroyed: every capture adding to it is invalidated (lock held).

    HIP does not guard against destroying a graph a stream captures into (its captured calls
    then write to freed memory). Here the capture reads INVALIDATED from that moment, on every
    stream taking part: its later operations fail with ``StreamCaptureInvalidated``, the calls
    an invalidated capture refuses are refused, and its ``end_capture`` raises that error.
    The graph layer calls this with :data:`LOCK` held, taken before the graph's own lock, so a
    captured operation (which holds :data:`LOCK` from its status check to its node) either
    added its node before the graph went or finds the capture invalidated.
    """
    for session in _SESSIONS:
        if session.graph is graph:
            session.invalidate()


def node_destroyed(graph: Graph, node: GraphNode) -> None:
    """``node`` of ``graph`` is being destroyed: a capture that made or needs it is invalidated.

    The lock is held (the graph layer takes it before the graph's own lock). A capture needs a
    node when it is in a member stream's dependency set (a ``begin_capture_to_graph``
    dependency, the stream's last captured node, an ``update_capture_dependencies`` node) or
    in the set an event recorded during the capture carries to its waiters. HIP keeps raw
    pointers there, so its next captured call uses freed memory; and a node the capture
    added, once gone, silently drops the stream's work and the order between its neighbours.
    Dropping the node from the sets instead would make the next node a root, unordered after
    the work before it: a wrong graph without an error. So the capture reads INVALIDATED, as
    after any illegal call: later operations and ``end_capture`` fail with
    ``StreamCaptureInvalidated``, rather than every later operation failing with
    ``InvalidValue`` and ``end_capture`` reporting an unjoined fork that never was. A node
    added by hand to a capture's target, and needed by none, goes without effect (HIP lets a
    user edit that graph during the capture).
    """
    for session in _SESSIONS:
        if session.graph is not graph or session.status is not CaptureStatus.ACTIVE:
            continue
        if node in session.captured or any(node in part.deps for part in session.members):
            session.invalidate()
            continue
        for event in session.recorded:
            link = _LINKS.get(event)
            if link is not None and link.session is session and node in link.deps:
                session.invalidate()
                break


# -- the null stream's guard -----------------------------------------------------------------------


class _NullGuard:
    """Sits on a device's null stream while a blocking stream captures (HIP's implicit rule)."""

    __slots__ = ()

    def _refuse(self) -> StreamCaptureImplicit:
        return StreamCaptureImplicit(
            "the null stream cannot be used while a blocking stream of its device captures"
        )

    def add(self, kind: str, build: Callable[[], Any]) -> CapturedWork:
        raise self._refuse()

    def add_kernel(self, *launch: Any) -> CapturedWork:
        raise self._refuse()  # before the launch is validated, as add

    def malloc(self, nbytes: int) -> DevicePtr:
        raise self._refuse()

    def free(self, ptr: DevicePtr) -> CapturedWork:
        raise self._refuse()

    def record_event(self, event: Event, node_params: Callable[[], Any] | None = None) -> None:
        raise self._refuse()

    def unsupported(self, what: str) -> StreamCaptureImplicit:
        return self._refuse()


NULL_GUARD = _NullGuard()


def _refresh_null_guard(device: Device) -> None:
    """Put the guard on ``device``'s null stream exactly while a blocking stream captures.

    A stream other than the null stream holds either None or its part in a capture, and the
    null stream either None or the guard: a part is anything else.
    """
    null = device._null_stream
    blocking = any(
        s._capture is not None and s._capture is not NULL_GUARD and not s._non_blocking
        for s in device.streams
    )
    if blocking and null is None:
        try:
            null = device.null_stream
        except InvalidDevice:  # replaced by configure_devices: it makes no null stream, and
            return  # nobody can reach one to guard (called after a join has changed state)
    if null is not None:
        null._capture = NULL_GUARD if blocking else None


# -- events recorded during a capture --------------------------------------------------------------


@dataclass(slots=True)
class _EventLink:
    """An event recorded during a capture: the recording stream's dependency set at the time.

    The stream is held weakly: an event outlives its capture (users keep events), and a strong
    reference would keep a forgotten recording stream, and so its capture, alive as long as the
    event lives. A collected stream captures nothing, so the isolation rule no longer needs it.
    """

    session: CaptureSession | None  # None once the capture ended (then only the stream counts)
    stream_ref: weakref.ref[Stream]
    deps: tuple[GraphNode, ...]
    ended: bool = False

    @property
    def stream(self) -> Stream | None:
        """The recording stream, or None once it was collected."""
        return self.stream_ref()


_LINKS: weakref.WeakKeyDictionary[Event, _EventLink] = weakref.WeakKeyDictionary()


def link_of(event: Event) -> _EventLink | None:
    """The link of ``event``'s latest record made in a capture, if any; ended or not.

    A record in a capture still running decides what a wait or a query does (a fork, a join,
    ``CapturedEvent``). Before it does, finished tasks' per-task streams are destroyed (see
    :mod:`.per_thread`): a capture a finished task left on one ends with it, so a wait right
    after ``await task`` is not a fork into a capture about to be discarded, which would
    silently drop the work the waiting stream then does. Costs nothing unless the link is live.
    """
    link = _LINKS.get(event)
    if link is not None and not link.ended:
        settle_finished()  # may end the link's capture: ``ended`` is set on this very link
    return link


def statistics() -> CaptureStatistics:
    """Captures in progress, streams taking part, and events linked to captures (leak checks).

    ``ahg.capture_statistics()``: all zero once every capture has ended. A capture left in
    progress is worth finding: a GLOBAL one refuses every ``malloc`` of every task and thread.
    Finished tasks' per-task streams are destroyed first (their captures end with them), as
    every statistics read does (see :mod:`.per_thread`).
    """
    settle_finished()
    with _LOCK:
        return CaptureStatistics(
            len(_SESSIONS),
            sum(len(s.members) for s in _SESSIONS),
            sum(1 for link in _LINKS.values() if not link.ended),
        )
