"""``async with stream.capture() as c: ...``: a capture scoped to a block.

Entering begins a capture on the stream; a clean exit ends it and keeps the graph; an exception
or a cancellation inside the block ends it with plain, uninterruptible cleanup, destroys the
graph it made and lets the exception propagate, so nothing stays registered. So does an exit
whose ``end_capture`` fails, whatever the reason (an invalidated or unjoined capture, or an exit
in another task than the entry: ``StreamCaptureWrongThread``).

A scope is entered once, as ``asyncio.timeout()``'s and trio's cancel scopes are: entering it
again (inside its own block, or after it) raises RuntimeError and changes nothing. Re-entered,
it began a new capture and replaced the ``graph`` the first block had captured, or, inside its
own block, raised IllegalState as a second ``begin_capture`` does, an error that blamed the
stream for a misuse of the scope object. ``stream.capture()`` makes a fresh scope each time.
An entry that failed (the stream captures already, a bad mode) did not begin anything: the
scope can be entered later.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from ..core.errors import IllegalState
from ..core.lifecycle import NoCopy
from ..device.engine import refuse_trio
from . import capture_lifecycle as capture
from .capture_nodes import StreamCapture
from .capture_state import CaptureMode, CaptureSession

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from .stream import Stream

__all__ = ["CaptureScope"]


class CaptureScope(NoCopy):
    """An ``async with`` capture: begins on entry, ends on a clean exit, aborts otherwise.

    Attributes:
        stream: the capturing (origin) stream.
        graph: the captured graph, once the block has exited cleanly; None before.
    """

    __slots__ = ("_exited", "_graph", "_mode", "_session", "_stream")

    def __init__(self, stream: Stream, mode: CaptureMode | int) -> None:
        self._stream = stream
        self._mode = mode
        self._session: CaptureSession | None = None  # set once the entry began the capture
        self._graph: Graph | None = None
        self._exited = False

    # Read-only: the exit ends the capture on ``stream`` and sets ``graph``. A stream assigned
    # inside the block made the exit find no capture of its own there: it aborted the capture,
    # lost its graph and raised IllegalState ("ended inside its block"); an assigned graph was
    # overwritten at the exit.

    @property
    def stream(self) -> Stream:
        """The capturing (origin) stream."""
        return self._stream

    @property
    def graph(self) -> Graph | None:
        """The captured graph, once the block has exited cleanly; None before."""
        return self._graph

    async def __aenter__(self) -> CaptureScope:
        # A capture needs no loop until its graph is launched: a trio task hears that
        # ahipgraph runs on asyncio here, at once, rather than after capturing a whole graph.
        refuse_trio()
        if self._session is not None:
            when = "and exited already" if self._exited else "already, its block is running"
            raise RuntimeError(
                f"{self!r} was entered {when}: a capture scope is entered once "
                "(stream.capture() makes a new one)"
            )
        # The session as begun, not as read from the stream afterwards: a destroy of the
        # stream on another thread may have ended it already (the exit then says so).
        self._session = capture.begin(self._stream, self._mode)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session = self._session
        if session is None or self._exited:
            raise RuntimeError(f"{self!r} is not active: it was never entered, or exited already")
        self._exited = True
        if exc is not None:
            capture.abort(self._stream, session)  # plain, uninterruptible cleanup
            return
        part = self._stream._capture
        if not isinstance(part, StreamCapture) or part.session is not session:
            capture.abort(self._stream, session)
            self._stream._check_open()  # a stream destroyed in the block: ContextIsDestroyed
            raise IllegalState(f"the capture on {self._stream!r} was ended inside its block")
        try:
            self._graph = capture.end(self._stream)
        except BaseException:
            # An end refused before it could finish the capture (WrongThread: the block was
            # left in another task than the one that entered it, as an async generator's may
            # be) would leave it in progress, and a GLOBAL one refuses every malloc, with no
            # block left to end it. Invalidated and Unjoined ends finished it already.
            capture.abort(self._stream, session)
            raise

    def __repr__(self) -> str:
        return f"<CaptureScope {self._stream!r} graph={self._graph!r}>"
