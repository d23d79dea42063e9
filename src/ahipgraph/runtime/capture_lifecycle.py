"""Beginning, ending and querying a capture, and what destroying a capturing stream does.

``begin`` registers a session with its origin part; ``end`` runs HIP's checks in HIP's order,
then the unjoined check. Where ahipgraph is stricter than HIP: a failed ``end`` (invalidated or
unjoined) always ends the sequence and frees its graph (HIP leaves an unjoined stream marked
active, and leaks the graph of a destroyed capturing stream).

Invariant: a session's graph, when the session made it, is destroyed on every path that does
not hand it to the caller (invalidation, unjoined forks, a destroyed origin, an aborted
``async with``). A user's graph (``begin_capture_to_graph``) is never destroyed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..core.errors import (
    IllegalState,
    InvalidValue,
    StreamCaptureImplicit,
    StreamCaptureInvalidated,
    StreamCaptureUnjoined,
    StreamCaptureUnmatched,
    StreamCaptureUnsupported,
    StreamCaptureWrongThread,
)
from ..core.ints import int_or_none
from ..core.lifecycle import report_unraisable
from ..device import table as _device_table
from .capture_fork import missing
from .capture_nodes import StreamCapture, _graphs
from .capture_state import (
    _LOCK,
    _SESSIONS,
    NULL_GUARD,
    CaptureDependencies,
    CaptureInfo,
    CaptureMode,
    CaptureSession,
    CaptureStatus,
    _caller,
    _check_mode,
    _refresh_null_guard,
)

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from .stream import Stream

__all__ = [
    "abort",
    "begin",
    "end",
    "info",
    "part_ended",
    "status",
    "stream_destroyed",
    "update_dependencies",
]


def begin(
    stream: Stream,
    mode: CaptureMode | int,
    graph: Graph | None = None,
    deps: Sequence[GraphNode] | GraphNode = (),
    *,
    to_graph: bool = False,
) -> CaptureSession:
    """``hipStreamBeginCapture`` / ``hipStreamBeginCaptureToGraph`` (``to_graph``).

    Returns the session begun: read from the stream after the call, it may be gone already
    (the stream destroyed by another thread meanwhile ended it).
    """
    if to_graph and graph is None:  # a missing argument comes first, as in HIP
        raise InvalidValue("capture graph is null")
    stream._check_open()
    if stream._is_null:
        raise StreamCaptureUnsupported("the null stream cannot capture")
    checked_mode = _check_mode(mode)
    api = _graphs()
    dep_list: Sequence[GraphNode] = ()
    if to_graph:
        graph = api.live_graph(graph, "capture graph")
        with graph.lock:
            dep_list = graph._check_deps(deps)
    with _LOCK:
        stream._check_open()  # again: destroyed on another thread meanwhile (stream_destroyed)
        # A device configure_devices replaced takes no new work, a capture included: refused
        # here, before anything changes (the null stream's guard would refuse it after).
        _device_table.live(stream._device)
        if isinstance(stream._capture, StreamCapture):
            raise IllegalState(f"{stream!r} is already capturing")
        if graph is not None:
            # Again, under the lock a graph's destruction takes (capture_state.target_destroyed):
            # destroyed on another thread meanwhile, it must not get a capture that stays ACTIVE.
            api.live_graph(graph, "capture graph")
            # And its dependencies: one destroyed on another thread since they were checked
            # found no capture to invalidate (capture_state.node_destroyed), so a capture begun
            # after it on that node would stay ACTIVE with a destroyed node in its set.
            for node in dep_list:
                graph._check_member(node, "capture dependency")
        target: Graph = api.Graph() if graph is None else graph
        if graph is None:
            # The capture's own graph, which nobody was given: if the capture is collected
            # with its forgotten streams, the graph goes quietly (the streams' warnings name
            # it). ``end`` hands it over, and from then on it warns as any graph.
            target._life.quiet = True
        session = CaptureSession(target, graph is None, checked_mode, stream._device)
        session.origin = StreamCapture(session, stream, dep_list)
        _SESSIONS[session] = None
        _refresh_null_guard(stream._device)
    return session


def end(stream: Stream) -> Graph:
    """``hipStreamEndCapture``: checks in HIP's order, then the unjoined check."""
    if stream._is_null:
        raise IllegalState("the null stream is not capturing")
    stream._check_open()
    with _LOCK:
        part = stream._capture
        if not isinstance(part, StreamCapture):
            raise IllegalState(f"{stream!r} is not capturing")
        session = part.session
        if part is not session.origin:
            raise StreamCaptureUnmatched(f"{stream!r} was forked into a capture; end its origin")
        if session.mode is not CaptureMode.RELAXED and session.owner is not _caller():
            raise StreamCaptureWrongThread(
                f"a {session.mode.name} capture must be ended by the task or thread that began it"
            )
        graph = session.graph
        error: Exception | None = None
        if session.status is CaptureStatus.INVALIDATED or graph.destroyed:
            error = StreamCaptureInvalidated(f"the capture on {stream!r} was invalidated")
        else:
            problem = _unjoined(session, part.deps)
            if problem is not None:
                error = StreamCaptureUnjoined(problem)
        session.finish()  # forgets the captured nodes: the checks above were their last readers
        if error is None:
            if session.owns_graph:
                graph._life.quiet = False  # the caller's graph now: forgotten, it warns
            return graph
    _discard(session)
    del graph, session, part  # the traceback keeps this frame: let it keep nothing else
    try:
        raise error
    finally:
        del error  # nor the error itself, which would make a cycle through its traceback


def _unjoined(session: CaptureSession, joined: list[GraphNode]) -> str | None:
    """HIP's unjoined check, without adding the temporary node: its leaves are computed."""
    graph = session.graph
    with graph.lock:
        joined_set = set(joined)
        leaves = [n for n in graph._nodes if not n._dependents and n not in joined_set]
    if not leaves:  # the temporary node is the only leaf
        return None
    leaves = [n for n in leaves if n in session.captured]  # drop manual nodes
    if any(n in session.removed for n in leaves):
        return None
    if leaves:
        # Named: a leaf is a fork's work never joined back, or, after an edge or node the
        # user removed from the graph, work of the origin itself; the count alone told neither.
        named = ", ".join(repr(n) for n in leaves[:3]) + (", ..." if len(leaves) > 3 else "")
        return (
            f"{len(leaves)} forked branch(es) were never joined back into the origin stream: "
            f"captured node(s) {named} precede nothing the origin's next node depends on"
        )
    return None


def abort(stream: Stream, session: CaptureSession) -> None:
    """End ``session`` without a graph (an ``async with`` block failed); idempotent."""
    with _LOCK:
        live = session in _SESSIONS
        if live:
            session.finish()
    if live:
        _discard(session)


def _discard(session: CaptureSession) -> None:
    """Free the graph the capture made, for a call that ended the capture, not the graph.

    The graph's user-object destructors may run here, and user code may raise anything. Its
    error is not the outcome of the call (``end_capture``'s HIP error, an ``async with``
    block's own exception, a ``destroy()`` that completed), so it is reported as unraisable,
    as the releaser reports one for a forgotten capture, and the call's outcome stands.
    KeyboardInterrupt and SystemExit propagate, as from any user code.
    """
    try:
        session.discard_graph()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        message = (
            f"Exception ignored in a user-object destructor while capture #{session.id} "
            "freed its graph"
        )
        report_unraisable(error, message)  # the message names the capture: keep no graph


def status(stream: Stream) -> CaptureStatus:
    """``hipStreamIsCapturing``."""
    return info(stream).status


def info(stream: Stream) -> CaptureInfo:
    """``hipStreamGetCaptureInfo_v2``."""
    part = stream._capture
    if part is NULL_GUARD:
        raise StreamCaptureImplicit("a blocking stream of this device is capturing")
    stream._check_open()
    if not isinstance(part, StreamCapture):
        return CaptureInfo(CaptureStatus.NONE)
    with _LOCK:
        part = stream._capture  # again: its capture may have ended meanwhile (the releaser)
        if not isinstance(part, StreamCapture):
            return CaptureInfo(CaptureStatus.NONE)
        session = part.session
        if session.status is not CaptureStatus.ACTIVE:
            return CaptureInfo(session.status)
        return CaptureInfo(CaptureStatus.ACTIVE, session.id, session.graph, tuple(part.deps))


def update_dependencies(stream: Stream, nodes: Sequence[GraphNode], flags: int) -> None:
    """``hipStreamUpdateCaptureDependencies``: Add or Set, with HIP's checks."""
    stream._check_open()
    with _LOCK:
        part = stream._capture
        if not isinstance(part, StreamCapture):
            raise IllegalState(f"{stream!r} is not capturing")
        if part.session.status is not CaptureStatus.ACTIVE:
            # HIP's code for any status but ACTIVE; the message says which, as is_capturing does
            raise IllegalState(f"the capture on {stream!r} was invalidated: it takes no updates")
        if nodes is None:
            raise InvalidValue("dependencies are null")
        if not isinstance(nodes, Iterable):  # a number, a lone node: not a bare "not iterable"
            raise TypeError(f"dependencies must be an iterable of GraphNodes, got {nodes!r}")
        new = list(nodes)
        flag = int_or_none(flags)
        if stream._capture is not part or part.session.status is not CaptureStatus.ACTIVE:
            # The iterable or the flags' __index__ (user code; the lock is re-entrant) ended
            # the capture or destroyed the stream: nothing is left to update.
            stream._check_open()
            if stream._capture is part:
                raise IllegalState(
                    f"the capture on {stream!r} was invalidated while this call was being made"
                )
            raise IllegalState(f"the capture on {stream!r} ended while this call was being made")
        graph = part.session.graph
        if len(new) > len(graph._nodes):
            raise InvalidValue(f"{len(new)} dependencies, but the graph has {len(graph._nodes)}")
        if flag not in (CaptureDependencies.ADD, CaptureDependencies.SET):
            raise InvalidValue(f"{flags!r} is not ADD or SET")
        for node in new:
            graph._check_member(node, "capture dependency")
        if flag == CaptureDependencies.ADD:
            part.deps.extend(missing(part.deps, new))
        else:
            part.session.removed.update(part.deps)
            part.deps = missing([], new)


def stream_destroyed(stream: Stream) -> None:
    """A capturing stream was destroyed: its part (and its forks) end; an origin ends all.

    The stream is already marked destroyed, and its part is read under the capture lock: a
    ``begin_capture`` or a fork on another thread either saw the stream destroyed, or made its
    part before this read, which then ends it. A graph the capture made is freed contained
    (see :func:`_discard`): the stream's destroy completes whatever its destructors do.
    """
    with _LOCK:
        part = stream._capture
        session = _end_part(part) if isinstance(part, StreamCapture) else None
    if session is not None:
        _discard(session)


def part_ended(part: StreamCapture) -> None:
    """``part``'s stream was destroyed or collected: HIP's semantics for destroying it.

    An origin ends its whole sequence and frees the graph the capture made; a fork leaves its
    session with the forks made from it (it never joined, so ``end_capture`` of the origin no
    longer sees it: only unjoined *nodes* it left behind are reported). Idempotent: a part
    that already ended is left alone, so a release that comes after ``end_capture`` does
    nothing. A destructor's error propagates to the caller (the releaser reports it).
    """
    with _LOCK:
        session = _end_part(part)
    if session is not None:
        session.discard_graph()


def _end_part(part: StreamCapture) -> CaptureSession | None:
    """End ``part`` (lock held); return its session when its graph is to be discarded."""
    session = part.session
    if session not in _SESSIONS or part not in session.members:
        return None
    if part is session.origin:
        session.finish()
        return session
    if part.parent is not None and part in part.parent.children:
        part.parent.children.remove(part)
    _detach(part)
    _refresh_null_guard(part.device)
    return None


def _detach(part: StreamCapture) -> None:
    for child in part.children:
        _detach(child)
    part.children.clear()
    if part in part.session.members:
        part.session.members.remove(part)
    part.leave()
