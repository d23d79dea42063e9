"""How stream operations become graph nodes while their stream captures (HIP §2.3).

A :class:`StreamCapture` is one stream's part in a capture session: its current dependency set
(HIP's ``lastCapturedNodes_``), the stream it was forked from and the streams forked from it. A
stream is capturing exactly when ``stream._capture`` is a :class:`StreamCapture`. Its ``add_*``
hooks are what stream operations call instead of running: each adds one node that depends on
the current set, which then becomes that node, and returns a :class:`CapturedWork` in place of
the operation's completion.

The graph layer sits above the runtime, so its classes are looked up on first use.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

from ..core.errors import IllegalState, StreamCaptureInvalidated, StreamCaptureUnsupported
from ..core.ints import as_int
from ..device.pointer import DevicePtr
from ..device.signal import Signal
from .capture_forgotten import ForgottenCapture
from .capture_state import _LINKS, _LOCK, _SESSIONS, CaptureSession, CaptureStatus, _EventLink
from .completion import Completion
from .params import KernelParams, common_kernel_params

if TYPE_CHECKING:
    from ..graph.node import GraphNode
    from .device import Device
    from .event import Event
    from .stream import Stream

__all__ = ["CapturedWork", "StreamCapture"]

# -- graph layer access (the graph layer sits above the runtime: imported on first use) ------------

_graph_api: Any = None
_NODE_TYPES: dict[str, Any] = {}  # an operation kind's NodeType, looked up once
# An enum member read through its class costs ten times a global's read on Python 3.11 (the
# metaclass looks it up): the per-operation checks read this constant.
_ACTIVE = CaptureStatus.ACTIVE
_new_object = object.__new__


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


_kernel_type: Any = None  # NodeType.Kernel, once the graph layer is loaded: read per capture


def _kernel_node_type() -> Any:
    global _kernel_type
    _kernel_type = _graphs().NodeType.Kernel
    return _kernel_type


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


# -- one stream's part -----------------------------------------------------------------------------


class StreamCapture:
    """One stream's part in a session: its dependency set and its fork relations.

    The ``add_*`` methods are the hooks stream operations call while capturing; each takes a
    ``build`` callable that validates the operation (after the status check, HIP's order).
    """

    __slots__ = (
        "__weakref__",  # its ForgottenCapture record refers to it weakly
        "_forgotten",
        "_last_launch",
        "_stream",
        "children",
        "deps",
        "device",
        "parent",
        "session",
    )

    def __init__(
        self,
        session: CaptureSession,
        stream: Stream,
        deps: Iterable[GraphNode] = (),
        parent: StreamCapture | None = None,
    ) -> None:
        self.session = session
        # The stream weakly: the registry of sessions in progress reaches every part, and a
        # strong reference would keep a forgotten capturing stream alive, its capture in
        # progress, for good (see capture_forgotten). The device is what operations need.
        self._stream = weakref.ref(stream)
        self.device: Device = stream._device
        self.deps: list[GraphNode] = list(deps)
        self.parent = parent
        self.children: list[StreamCapture] = []
        # The last common launch's device properties, grid, block, shared memory and validated
        # shape (common_kernel_params' memo): a stream captures the same launch over and over,
        # and this is compared in place of a key made and looked up per launch.
        self._last_launch: tuple[Any, ...] | None = None
        # Ends this part if its stream is collected first; detached when the part ends.
        self._forgotten: ForgottenCapture | None = ForgottenCapture(self, stream)
        session.members.append(self)
        stream._capture = self

    @property
    def stream(self) -> Stream | None:
        """The part's stream; None once it was collected (then the part is as if destroyed)."""
        return self._stream()

    def leave(self) -> None:
        """The part ended: stop capturing its stream, if alive, and detach its record.

        The capture lock is held. Every way a part ends (its origin's end or abort, a destroyed
        or forgotten stream) comes through here.
        """
        record = self._forgotten
        if record is not None:
            record.detach()
            self._forgotten = None
        stream = self._stream()
        if stream is not None and stream._capture is self:
            stream._capture = None

    # -- status ----------------------------------------------------------------------------------

    def check_active(self) -> CaptureSession:
        if self._forgotten is None:
            # The part left its capture (its origin ended, was destroyed or forgotten, on
            # another thread or the releaser) after the caller found its stream capturing:
            # nothing may join a capture that ended, and the work was not done eagerly either.
            raise IllegalState(
                f"the capture on {self.stream!r} ended while this call was being made"
            )
        session = self.session
        if session.status is not _ACTIVE:
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
        lock = _LOCK
        lock.acquire()  # not ``with``: its enter and exit calls cost twice the lock itself
        try:
            session = self.check_active()
            params = build()
            if session.status is not _ACTIVE or self._forgotten is None:
                # The validation ran user code (an argument's __index__) that ended the
                # capture, or destroyed its stream: the capture lock is re-entrant, so it
                # could. Nothing may join a capture that ended (see check_active).
                self.check_active()  # raises
            device = self.device
            if kind in ("Memcpy", "Memset") and params.nbytes == 0:
                return CapturedWork(session, None, device)
            node_type = _NODE_TYPES.get(kind)
            if node_type is None:
                node_type = _NODE_TYPES[kind] = getattr(_graphs().NodeType, kind)
            # What _append does, without its second status check (nothing ran since the first).
            node: GraphNode = session.graph._add_made(node_type, self.deps, params)
            session.captured.add(node)
            self.deps = [node]
            return CapturedWork(session, node, device)
        finally:
            lock.release()

    def add_kernel(
        self,
        kernel: Any,
        grid: Any,
        block: Any,
        args: Any,
        shared_mem: Any,
        priority: int,
        device: Device,
    ) -> CapturedWork:
        """:meth:`add` for a kernel launch, its checks and node made in one call.

        The same steps in the same order (status, then the launch's validation against the
        stream's device, then the node), without a closure made and called per launch: most
        captured operations are kernels. The common launch (a plain kernel, ``int`` grid, block
        and shared memory of a shape already validated on the device, priority 0) is
        :func:`~ahipgraph.runtime.params.common_kernel_params`, which skips its shape lookup when
        the stream's last launch had the same shape, and its node is attached after the
        stream's one dependency once the graph's own checks pass.
        """
        lock = _LOCK
        lock.acquire()  # not ``with``: as in add
        try:
            session = self.session
            if session.status is not _ACTIVE or self._forgotten is None:  # ended meanwhile
                self.check_active()  # raises
            # the usual launch, its shape remembered by this stream's part (see there)
            params = common_kernel_params(
                kernel, grid, block, args, shared_mem, priority, device, self
            )
            if params is None:
                params = KernelParams.make(
                    kernel,
                    grid,
                    block,
                    args,
                    shared_mem=shared_mem,
                    priority=priority,
                    device=device,
                )
            if session.status is not _ACTIVE or self._forgotten is None:  # ended meanwhile
                self.check_active()  # by the arguments' user code: see add
            node_type = _kernel_type
            if node_type is None:
                node_type = _kernel_node_type()
            deps = self.deps
            graph = session.graph
            # Graph._add_made (its checks in its order: the graph, then the dependency, a live
            # node of this graph), inline for almost every captured launch: one made after the
            # one before it on this stream. A stream's dependencies are only ever nodes (its
            # capture's own, or ones checked when they were given), and the graph finds its own
            # live nodes by id. Anything else, errors included, takes _add_made.
            graph_lock = graph.lock
            graph_lock.acquire()
            try:
                dep: Any
                single = len(deps) == 1
                if single and graph._open and graph._by_id.get((dep := deps[0]).id) is dep:
                    node: GraphNode = graph._attach(node_type, params, deps)
                else:
                    node = graph._add_made(node_type, deps, params)  # raises, as it would have
            finally:
                graph_lock.release()
            session.captured.add(node)
            if single:
                deps[0] = node  # the stream's own list: nothing else holds it
            else:
                self.deps = [node]
            # CapturedWork(session, node, device), its slots filled without the call
            work: CapturedWork = _new_object(CapturedWork)
            work._signal = _NEVER
            work._device = device
            work._program = None
            work._session = session
            work.node = node
            return work
        finally:
            lock.release()

    def malloc(self, nbytes: int) -> DevicePtr:
        """``hipMallocAsync`` captured: a MemAlloc node; its reserved address is usable now."""
        with _LOCK:
            session = self.check_active()
            if type(nbytes) is not int:
                nbytes = as_int(nbytes, "nbytes")
                self.check_active()  # its __index__ may have ended the capture: see add
            if nbytes == 0:
                return DevicePtr(self.device.ordinal, 0)
            graph = session.graph
            deps = self.deps
            node = graph.add_mem_alloc_node(nbytes, device=self.device.ordinal, deps=deps)
            session.captured.add(node)
            self.deps = [node]
            ptr: DevicePtr = node.params.ptr
            return ptr

    def free(self, ptr: DevicePtr) -> CapturedWork:
        """``hipFreeAsync`` captured: a MemFree node (none for the null pointer, which frees
        nothing, as ``hipFreeAsync(nullptr)``; a captured ``malloc_async(0)`` gives it)."""
        with _LOCK:
            session = self.check_active()
            if ptr is None or (isinstance(ptr, DevicePtr) and not ptr):
                return CapturedWork(session, None, self.device)
            node = session.graph.add_mem_free_node(ptr, deps=self.deps)
            session.captured.add(node)
            self.deps = [node]
            return CapturedWork(session, node, self.device)

    def record_event(self, event: Event, node_params: Callable[[], Any] | None = None) -> None:
        """``hipEventRecord`` captured: no node; the event remembers the dependency set.

        ``node_params`` (given for ``hipEventRecordExternal``, see ``capture_fork``) makes an
        EventRecord node after that set, which becomes the stream's dependency set. As in
        HIP, a stream that later waits on the event depends on what came before the record,
        not on the record node.
        """
        with _LOCK:
            session = self.check_active()
            before = tuple(self.deps)
            if node_params is not None:  # the only step that can fail, so it goes first
                self._append(_graphs().NodeType.EventRecord, node_params)
            session.recorded.add(event)
            _LINKS[event] = _EventLink(session, self._stream, before)

    def __repr__(self) -> str:
        role = "origin" if self.parent is None else "fork"
        return (
            f"<StreamCapture session={self.session.id} {role} deps={len(self.deps)} "
            f"forks={len(self.children)}>"
        )
