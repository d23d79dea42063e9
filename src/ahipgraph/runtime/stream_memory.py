"""Stream-ordered memory (``hipMallocAsync`` / ``hipFreeAsync``), a mixin of ``Stream``.

Eagerly, ``malloc_async`` allocates at once (memory is ready no later than stream order needs
it) and ``free_async`` enqueues a one-op program that frees the memory when the stream reaches
it, so work enqueued before the free still sees the memory. While the stream captures, both
become MemAlloc / MemFree nodes (see :mod:`ahipgraph.runtime.capture`); the pointer of a
captured allocation is a reserved address, usable by later captured work at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import IllegalState, InvalidDevice, InvalidValue, OutOfMemory
from ..device.memory import DeviceMemory, check_size
from ..device.ops import FreeOp
from ..device.pointer import DevicePtr
from ..device.signal import Signal
from . import observe
from .completion import Completion, make_completion
from .device import get_device
from .enqueue import enqueue_pair

if TYPE_CHECKING:
    from .stream import Stream

__all__ = ["FreeOp", "StreamMemoryMixin"]


# The completion of a free of the null pointer: nothing was enqueued, so it is already done.
_FREED_NOTHING = Signal(0)


def _is_null(ptr: object) -> bool:
    """Whether ``ptr`` is the null pointer (``ahg.NULL``, any device's, or None)."""
    return ptr is None or (isinstance(ptr, DevicePtr) and not ptr)


class StreamMemoryMixin:
    """``malloc_async`` and ``free_async`` (and their ``_nowait`` twins) of
    :class:`~ahipgraph.Stream`."""

    __slots__ = ()

    async def malloc_async(self, nbytes: int) -> DevicePtr:
        """Allocate ``nbytes`` in stream order (``hipMallocAsync``); returns the pointer.

        While capturing, adds a MemAlloc node and returns its reserved address (zero bytes
        adds nothing and returns the null pointer).

        It enqueues no packet (the memory is taken at once), so it needs no ring room, and it
        returns without waiting when the memory is free. It waits only when the device is
        short of memory while a ``free_async`` on this stream is still pending: in stream
        order that free comes first, so the memory it gives back is this allocation's to take
        (HIP's pool reuses it at once; here the call waits until the stream reaches the free,
        then allocates). :meth:`malloc_async_nowait` is the same call from synchronous code,
        which raises ``OutOfMemory`` instead of waiting.

        Raises:
            ContextIsDestroyed: the stream was destroyed. InvalidValue: a negative size.
            OutOfMemory: not enough device memory, even once this stream's pending frees ran.
            StreamCaptureInvalidated: see capture.
            IllegalState: another event loop is using the device.
            InvalidDevice: ``configure_devices`` replaced the stream's device.
        """
        try:
            return self.malloc_async_nowait(nbytes)
        except OutOfMemory as error:
            stream = self._stream()
            pending = stream._last_free
            if pending is None or pending._value <= 0 or stream._capture is not None:
                raise
            refused = error
        # A destroy wakes the wait at once (the free may never run: it may be behind a
        # kernel that never ends), and the call is refused as on a destroyed stream.
        stream._parked_elsewhere(pending)
        try:
            await stream._device._wait_signal(pending, stream._gone)
        except IllegalState:  # the wait is not allowed here (device work behind the free)
            raise refused from None
        finally:
            stream._unparked_elsewhere(pending)
        if not stream.alive or stream._capture is not None:
            stream._changed_under_call()  # destroyed, or a capture began, while it waited
        return self.malloc_async_nowait(nbytes)

    def malloc_async_nowait(self, nbytes: int) -> DevicePtr:
        """As :meth:`malloc_async`, from synchronous code (a host function, a callback).

        It never reports ``NotReady``: an allocation adds no packet to the stream's hardware
        queue, so a full ring does not stop it (as ``free_async_nowait`` of the null pointer).

        Raises: as :meth:`malloc_async`.
        """
        stream = self._stream()
        stream._check_open()
        part = stream._capture  # read once: another thread may end the capture meanwhile
        if part is not None:
            return part.malloc(nbytes)
        if type(nbytes) is not int:
            # Its __index__ is user code, which may destroy the stream or begin a capture on
            # it: converted first, then the stream checked again, as an enqueue's submit does.
            nbytes = check_size(nbytes)
            if not stream.alive or stream._capture is not None:
                stream._changed_under_call()
        # Stream-ordered, so as every enqueue: only the loop that owns the device may use it
        # (IllegalState from another open loop while it is busy, before anything is taken),
        # and a device configure_devices replaced takes nothing new (InvalidDevice): its
        # successor has its ordinal and addresses, so the pointer would name the successor's.
        engine = stream._device._engine
        with engine.submitting():
            engine.claim_locked()
        ptr = stream._device._memory.malloc(nbytes)
        if observe.observer is not None:
            observe.observer.allocated(ptr, int(nbytes), stream)  # checked: an int
        return ptr

    def _free_async(self, ptr: DevicePtr) -> Completion:
        """Free ``ptr`` once earlier work on the stream is done (``hipFreeAsync``).

        While capturing, adds a MemFree node (``ptr`` must come from a MemAlloc node).

        A null pointer (``ahg.NULL`` or None) frees nothing and enqueues nothing, as
        ``hipFreeAsync(nullptr)`` and ``free(NULL)``: what ``malloc_async(0)`` returns can be
        given back like any other allocation. Its completion is already done (while capturing,
        no node is added).

        Eagerly, ``ptr`` may be a graph allocation whose launch is still queued: the memory is
        freed when the stream gets here (a launch of its executable must have been taken,
        and the graph must not free it with a free node of its own: else refused when
        called, as ``hipFreeAsync`` refuses an address with no memory mapped yet). If no
        launch committed memory there by then (one queued on another stream), the free
        fails on the stream (``InvalidValue``) and the allocation stays free-able.

        ``ptr`` may be another device's memory, as in ``hipFreeAsync``: it is freed in that
        device's allocator, in this stream's order.

        From this call until the stream reaches the free, no other free of the memory is
        accepted (another ``free_async`` or a ``Device.free``: ``InvalidValue`` when called),
        except a ``free_async`` of the memory a graph relaunch taken behind this free commits
        there again (launch, use, free, in a loop: each launch's memory takes its own free).

        Raises:
            ContextIsDestroyed: the stream was destroyed.
            InvalidValue: ``ptr`` is not the start of a live allocation (of its device, which
                must exist), is a symbol's storage or the runtime's own memory, a stream
                already holds a free of it, a memory-free node of the graph that allocates it
                frees it, or it is a graph allocation no launch of which was taken yet.
            TypeError: ``ptr`` is neither a DevicePtr nor None.
        """
        stream = self._stream()
        stream._check_open()
        part = stream._capture  # read once (see malloc_async)
        if part is not None:
            return part.free(ptr)
        if _is_null(ptr):
            return make_completion(_FREED_NOTHING, stream._device)
        memory = self._check_free(ptr)
        assert memory is not None  # not the null pointer
        memory.claim_free(ptr, by=stream)  # a graph relaunch on this stream is ordered after it
        free = FreeOp(ptr, memory)
        try:
            done = stream._observed(free, free)
        except BaseException:
            memory.release_claim(ptr)  # nothing was enqueued: the memory is the caller's again
            raise
        if memory is stream._device._memory:  # gives memory back to what malloc_async takes
            stream._last_free = stream._tail  # the free's completion (see malloc_async)
        return done

    def _check_free(self, ptr: DevicePtr) -> DeviceMemory | None:
        """``free_async``'s checks of an eager free (also for a call that must wait for room);
        returns the memory ``ptr`` is freed in (None for the null pointer).

        That is the memory of the device ``ptr`` belongs to, which need not be the stream's:
        as ``hipFreeAsync``, a stream frees another device's memory, returned to that device's
        allocator when the stream reaches the free (ordered after the stream's earlier work,
        as any free). Its claim (see ``DeviceMemory.claim_free``) is taken in that memory, so
        every other free of it is refused meanwhile, whichever device's call it is.
        """
        stream = self._stream()
        if _is_null(ptr):
            return None  # frees nothing
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {ptr!r}")
        here = stream._device._memory
        if type(ptr.address) is not int or type(ptr.device) is not int:  # a hand-made
            # pointer's: refused as Device.free does, before any of its objects is compared
            raise InvalidValue(f"{ptr!r} is not a live allocation of device {here._ordinal}")
        if ptr.device == here._ordinal:
            device = stream._device
        else:
            try:
                device = get_device(ptr.device)
            except InvalidDevice:
                raise InvalidValue(f"{ptr!r} names a device that does not exist") from None
        memory = device._memory
        # A graph allocation counts from the moment its alloc node reserved the addresses: the
        # launch that commits memory there may still be ahead of this free on the stream.
        found = memory.allocation_of(ptr.address)
        if found is None or found[0] != ptr.address:
            raise InvalidValue(f"{ptr!r} is not the start of an allocation of {device!r}")
        memory.check_claimable(ptr)  # what claim_free checks: refused before any wait
        return memory

    def _free_async_packetless(self, ptr: DevicePtr) -> bool:
        """A free of the null pointer enqueues nothing, so it needs no room in a full ring."""
        return _is_null(ptr)

    free_async, free_async_nowait = enqueue_pair(
        _free_async, check=_check_free, packetless=_free_async_packetless, owner="Stream"
    )

    def _stream(self) -> Stream:
        return self  # type: ignore[return-value]


# Named for the method the user calls (a wrong call says ``Stream.malloc_async() ...``), as
# enqueue_pair names the enqueues it makes.
StreamMemoryMixin.malloc_async.__qualname__ = "Stream.malloc_async"
StreamMemoryMixin.malloc_async_nowait.__qualname__ = "Stream.malloc_async_nowait"
