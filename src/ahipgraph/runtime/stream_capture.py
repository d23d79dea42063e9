"""The capture half of the :class:`~ahipgraph.Stream` API (a mixin).

Each method is a thin, documented entry point into :mod:`ahipgraph.runtime.capture`, where the
decisions live; keeping them here leaves ``stream.py`` with one hook per operation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import capture
from .capture import CaptureDependencies, CaptureInfo, CaptureMode, CaptureStatus
from .capture_scope import CaptureScope

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from .stream import Stream

__all__ = ["CaptureScope", "StreamCaptureMixin"]


class StreamCaptureMixin:
    """Stream capture methods of :class:`~ahipgraph.Stream`."""

    __slots__ = ()

    def begin_capture(self, mode: CaptureMode | int = CaptureMode.GLOBAL) -> None:
        """Start capturing (``hipStreamBeginCapture``): later work becomes graph nodes.

        Raises:
            ContextIsDestroyed: the stream was destroyed.
            StreamCaptureUnsupported: the null stream.
            InvalidValue: ``mode`` is not a :class:`CaptureMode`.
            IllegalState: the stream already captures (forked streams included).
        """
        capture.begin(self._as_stream(), mode)

    def begin_capture_to_graph(
        self,
        graph: Graph,
        deps: Sequence[GraphNode] | GraphNode = (),
        mode: CaptureMode | int = CaptureMode.GLOBAL,
    ) -> None:
        """Capture into an existing graph (``hipStreamBeginCaptureToGraph``).

        The graph's existing nodes count as manual nodes; the first captured node depends on
        ``deps``. ``end_capture`` returns ``graph`` itself, and never destroys it.

        Raises:
            as :meth:`begin_capture`, plus InvalidValue: ``graph`` null or destroyed, or a
            dependency that is not a live node of ``graph`` (or listed twice).
        """
        capture.begin(self._as_stream(), mode, graph, deps, to_graph=True)

    def end_capture(self) -> Graph:
        """Stop capturing and return the graph (``hipStreamEndCapture``).

        Forked streams end with their origin. On failure the sequence still ends and a graph
        made by the capture is destroyed.

        Raises (HIP's order):
            IllegalState: the null stream, or a stream that is not capturing.
            ContextIsDestroyed: the stream was destroyed.
            StreamCaptureUnmatched: a forked stream (end its origin instead).
            StreamCaptureWrongThread: a GLOBAL or THREAD_LOCAL capture ended by another task or
                thread than the one that began it.
            StreamCaptureInvalidated: the capture was invalidated by an illegal operation.
            StreamCaptureUnjoined: a forked stream did work that was never joined back.
        """
        return capture.end(self._as_stream())

    def is_capturing(self) -> CaptureStatus:
        """``hipStreamIsCapturing``: NONE, ACTIVE or INVALIDATED.

        Raises:
            StreamCaptureImplicit: asked of the null stream while a blocking stream captures.
            ContextIsDestroyed: the stream was destroyed.
        """
        return capture.status(self._as_stream())

    def capture_info(self) -> CaptureInfo:
        """``hipStreamGetCaptureInfo_v2``: status, and id, graph, dependencies while ACTIVE.

        Raises: as :meth:`is_capturing`.
        """
        return capture.info(self._as_stream())

    def update_capture_dependencies(
        self,
        nodes: Sequence[GraphNode],
        flags: CaptureDependencies | int = CaptureDependencies.ADD,
    ) -> None:
        """Add to or replace the dependency set of the next captured node.

        ``hipStreamUpdateCaptureDependencies``. With SET, the replaced nodes no longer count
        as unjoined branches at ``end_capture``.

        Raises:
            ContextIsDestroyed: the stream was destroyed. IllegalState: not capturing, or
                the capture was invalidated (before or during the call; the message says which).
            InvalidValue: ``nodes`` None, more nodes than the graph has, bad flags, or a node
                that is not a live node of the capture graph.
            TypeError: ``nodes`` is not an iterable (a lone node, a number), or holds
                something other than a GraphNode.
        """
        capture.update_dependencies(self._as_stream(), nodes, flags)

    def capture(self, mode: CaptureMode | int = CaptureMode.GLOBAL) -> CaptureScope:
        """``async with stream.capture() as c: ...`` then ``c.graph``.

        If the block raises (or is cancelled), the capture ends, its graph is destroyed and the
        exception propagates. If the end at a clean exit fails (as :meth:`end_capture` can,
        WrongThread included: the block was left in another task than the one that entered
        it), the capture ends all the same and the end's error propagates. Entering the block
        from a trio task raises RuntimeError before the capture begins (ahipgraph runs on
        asyncio or uvloop). The scope is entered once, as ``asyncio.timeout()`` is: entering
        it again, inside its block or after it, raises RuntimeError and changes nothing.
        """
        return CaptureScope(self._as_stream(), mode)

    def _as_stream(self) -> Stream:
        return self  # type: ignore[return-value]
