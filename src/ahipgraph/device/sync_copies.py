"""The synchronous pitched, symbol and peer copies of a device (``hipMemcpy2D``,
``hipMemcpy3D``, ``hipMemcpyToSymbol``, ``hipMemcpyFromSymbol``, ``hipMemcpyPeer``).

Each runs on the device's null stream and returns once the copy is done, as ``device.memcpy``
does; during any capture it is ``StreamCaptureImplicit`` and invalidates the captures, as HIP's
``CHECK_STREAM_CAPTURING`` calls are. The checks are the stream versions' (one place each).
"""

from __future__ import annotations

from typing import Any


class DeviceCopyMixin:
    """Mixin of :class:`~ahipgraph.Device`; ``_sync_op`` and ``null_stream`` come from it."""

    __slots__ = ()

    null_stream: Any

    async def _sync_op(self, enqueue: Any) -> None:
        raise NotImplementedError

    async def memcpy_2d(self, *args: Any, **kwargs: Any) -> None:
        """``hipMemcpy2D``: :meth:`Stream.memcpy_2d` on the null stream, waited for."""
        await self._sync_op(lambda: self.null_stream.memcpy_2d(*args, **kwargs))

    async def memcpy_3d(self, *args: Any, **kwargs: Any) -> None:
        """``hipMemcpy3D``: :meth:`Stream.memcpy_3d` on the null stream, waited for."""
        await self._sync_op(lambda: self.null_stream.memcpy_3d(*args, **kwargs))

    async def memcpy_to_symbol(self, *args: Any, **kwargs: Any) -> None:
        """``hipMemcpyToSymbol``: :meth:`Stream.memcpy_to_symbol` on the null stream."""
        await self._sync_op(lambda: self.null_stream.memcpy_to_symbol(*args, **kwargs))

    async def memcpy_from_symbol(self, *args: Any, **kwargs: Any) -> None:
        """``hipMemcpyFromSymbol``: :meth:`Stream.memcpy_from_symbol` on the null stream."""
        await self._sync_op(lambda: self.null_stream.memcpy_from_symbol(*args, **kwargs))

    async def memcpy_peer(self, *args: Any, **kwargs: Any) -> None:
        """``hipMemcpyPeer``: :meth:`Stream.memcpy_peer` on the null stream, waited for."""
        await self._sync_op(lambda: self.null_stream.memcpy_peer(*args, **kwargs))
