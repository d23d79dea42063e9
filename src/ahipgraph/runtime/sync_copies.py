"""The synchronous pitched, symbol and peer copies of a device (``hipMemcpy2D``,
``hipMemcpy3D``, ``hipMemcpyToSymbol``, ``hipMemcpyFromSymbol``, ``hipMemcpyPeer``).

Each runs on the device's null stream and returns once the copy is done, as ``device.memcpy``
does; during any capture it is ``StreamCaptureImplicit`` and invalidates the captures, as HIP's
``CHECK_STREAM_CAPTURING`` calls are. The checks are the stream versions' (one place each).
A copy of 0 bytes (an empty region) returns once they pass, enqueuing nothing and waiting for
nothing, as HIP's calls return ``hipSuccess`` for a size of 0 (see ``Device._sync_op``).

Each method spells out the parameters of the ``Stream`` method it runs (names, kinds, defaults
and types), so ``help()``, ``inspect.signature`` and a type checker see the real call, and a
call that does not fit them is a ``TypeError`` when it is made: before the device is looked at
or any capture is invalidated, and with nothing enqueued. The mixin lives in the runtime layer
because its annotations name runtime types (``Endpoint``, ``PitchedPtr``, the null ``Stream``),
which the device layer may not name even for a type checker (``docs/design.md``, "Layers").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..device.pointer import DevicePtr
    from ..device.properties import CopyKind
    from ..device.symbols import SymbolLike
    from .completion import Completion
    from .device import Device
    from .params import Endpoint, MemcpyParams
    from .pitched import PitchedPtr
    from .stream import Stream

__all__ = ["DeviceCopyMixin"]


class DeviceCopyMixin:
    """Mixin of :class:`~ahipgraph.Device`; ``_sync_op`` comes from it."""

    __slots__ = ()

    async def _sync_op(
        self,
        enqueue: Callable[[Stream], Awaitable[Completion]],
        check: Callable[[Stream], MemcpyParams],
        *,
        on_owner: bool = False,
    ) -> None:
        raise NotImplementedError

    async def memcpy_2d(
        self,
        dst: Endpoint,
        dst_pitch: int,
        src: Endpoint,
        src_pitch: int,
        width: int,
        height: int,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipMemcpy2D``: :meth:`Stream.memcpy_2d` on the null stream, waited for (the null
        stream of the device holding its device memory when that is one other device, as for
        :meth:`~ahipgraph.Device.memcpy`).

        Raises:
            StreamCaptureImplicit: a capture is in progress (every capture is invalidated).
            As :meth:`Stream.memcpy_2d`, and the copy's failure.
        """
        await self._sync_op(
            lambda stream: stream.memcpy_2d(dst, dst_pitch, src, src_pitch, width, height, kind),
            lambda stream: stream._memcpy_2d_params(
                dst, dst_pitch, src, src_pitch, width, height, kind
            ),
            on_owner=True,  # HIP orders it after the memory's device's null stream too
        )

    async def memcpy_3d(
        self,
        dst: PitchedPtr,
        src: PitchedPtr,
        extent: tuple[int, int, int],
        *,
        dst_pos: tuple[int, int, int] = (0, 0, 0),
        src_pos: tuple[int, int, int] = (0, 0, 0),
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipMemcpy3D``: :meth:`Stream.memcpy_3d` on the null stream, waited for.

        Raises: as :meth:`memcpy_2d`, with :meth:`Stream.memcpy_3d`'s checks.
        """
        await self._sync_op(
            lambda stream: stream.memcpy_3d(
                dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind
            ),
            lambda stream: stream._memcpy_3d_params(
                dst, src, extent, dst_pos=dst_pos, src_pos=src_pos, kind=kind
            ),
            on_owner=True,
        )

    async def memcpy_to_symbol(
        self,
        symbol: SymbolLike,
        src: Endpoint,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipMemcpyToSymbol``: :meth:`Stream.memcpy_to_symbol` on the null stream, waited for.

        Raises: as :meth:`memcpy_2d`, with :meth:`Stream.memcpy_to_symbol`'s checks.
        """
        await self._sync_op(
            lambda stream: stream.memcpy_to_symbol(symbol, src, nbytes, offset, kind),
            lambda stream: stream._to_symbol_params(symbol, src, nbytes, offset, kind),
        )

    async def memcpy_from_symbol(
        self,
        dst: Endpoint,
        symbol: SymbolLike,
        nbytes: int | None = None,
        offset: int = 0,
        kind: CopyKind | int | None = None,
    ) -> None:
        """``hipMemcpyFromSymbol``: :meth:`Stream.memcpy_from_symbol` on the null stream,
        waited for.

        Raises: as :meth:`memcpy_2d`, with :meth:`Stream.memcpy_from_symbol`'s checks.
        """
        await self._sync_op(
            lambda stream: stream.memcpy_from_symbol(dst, symbol, nbytes, offset, kind),
            lambda stream: stream._from_symbol_params(dst, symbol, nbytes, offset, kind),
        )

    async def memcpy_peer(
        self,
        dst: DevicePtr,
        dst_device: Device | int,
        src: DevicePtr,
        src_device: Device | int,
        nbytes: int,
    ) -> None:
        """``hipMemcpyPeer``: :meth:`Stream.memcpy_peer` on the null stream, waited for (the
        null stream of the pointers' device when both are on one other device, as for
        :meth:`~ahipgraph.Device.memcpy`).

        Raises: as :meth:`memcpy_2d`, with :meth:`Stream.memcpy_peer`'s checks.
        """
        await self._sync_op(
            lambda stream: stream.memcpy_peer(dst, dst_device, src, src_device, nbytes),
            lambda stream: stream._peer_params(dst, dst_device, src, src_device, nbytes),
            on_owner=True,  # hipMemcpyPeer is hipMemcpy of the two pointers
        )
