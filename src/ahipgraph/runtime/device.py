"""The public :class:`Device`: a facade over the device layer's engine and memory, next to the
streams and events it hands out.

A :class:`Device` runs its work on the event loop that submits it. It binds to that loop at the
first submission and may move to another loop only when it is idle (or its loop has closed, in
which case work left behind by the dead loop fails with :class:`IllegalState`); using a busy
device from a second loop is a clear :class:`IllegalState` error. The loop engine lives in
:mod:`ahipgraph.device.engine`, the devices table in :mod:`ahipgraph.device.table`; this module
adds what needs the runtime: streams, events, the legacy null stream and its ordering set,
capture rules, the race checker's hook point and the per-stream error policy of
:meth:`Device.synchronize`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy.typing as npt

from ..core.errors import HipError, InvalidDevice, InvalidValue
from ..core.ints import as_int
from ..core.lifecycle import FactoryOnly, NoCopy, WeakList, safe_repr
from ..core.surface import own_mixin_methods
from ..device import table as _table
from ..device.base import DeviceBase
from ..device.engine import abandoned_by, refuse_trio
from ..device.graph_pool import GraphMemAttribute, GraphPoolStatistics
from ..device.hwqueue import QueueStatistics
from ..device.memory import DeviceMemory, MemoryInfo, MemoryStatistics, check_size
from ..device.pointer import DevicePtr
from ..device.properties import DeviceProperties
from ..device.signal import Signal
from . import observe
from .per_thread import settle_finished
from .sync_copies import DeviceCopyMixin

if TYPE_CHECKING:
    from ..device.properties import CopyKind
    from .completion import Completion
    from .event import Event
    from .params import Endpoint, MemcpyParams, MemsetParams
    from .stream import Stream

__all__ = [
    "Device",
    "DeviceStatistics",
    "configure_devices",
    "device_count",
    "get_device",
]


class CaptureChecks(Protocol):
    """The stream-capture rules device calls obey (``ahipgraph.runtime.capture`` installs them)."""

    def unsafe_call(self, what: str) -> None: ...
    def device_sync(self) -> None: ...
    def sync_copy(self) -> None: ...


# Installed by the capture module when it is imported; no capture can exist before that.
capture_checks: CaptureChecks | None = None


_NO_GRAPH_POOL = GraphPoolStatistics(0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class DeviceStatistics:
    ordinal: int
    in_flight: int
    now_ns: int
    memory: MemoryStatistics
    queues: tuple[QueueStatistics, ...]
    # Open streams the runtime made for this device (null, per-thread), not the user's.
    implicit_streams: int = 0
    # Packets the device's last event loop cut short as it shut down (it cancelled their async
    # bodies): a test that ends with work running leaves its trace here even after its loop
    # is gone and ``in_flight`` is back to zero. Zero again once another loop takes over.
    abandoned: int = 0
    # The graph memory pool (what graph_mem_attribute reads, and the cached bytes a trim frees).
    graph_pool: GraphPoolStatistics = _NO_GRAPH_POOL
    # Streams of this device (destroyed and forgotten ones that still owe a failure included)
    # whose pending failure is that of work an earlier owner loop abandoned (the current
    # loop's is counted in ``abandoned``): a program that took the device over on a new loop
    # and never synchronized what the old one left behind. Zero again once a synchronize
    # reports it.
    abandoned_earlier: int = 0


@own_mixin_methods
class Device(DeviceBase, DeviceCopyMixin, NoCopy):
    """One simulated GPU. Obtain it with :func:`get_device`; it has no public constructor."""

    # Slots (see ``DeviceBase``): a new attribute is refused. ``__weakref__``: the argument
    # arenas' tallies are kept per device in a weak-keyed table.
    __slots__ = (
        "__weakref__",
        "_forgotten_failures",
        "_lock",
        "_null_stream",
        "_orphans",
        "_streams",
        "_streams_lock",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: the devices table makes the devices (see
        :func:`_make_device`)."""
        _FACTORY.refuse()

    def _init(self, ordinal: int, properties: DeviceProperties) -> None:
        DeviceBase.__init__(self, ordinal, properties)
        self._lock = threading.Lock()
        self._null_stream: Stream | None = None
        # The streams of this device still alive, for the legacy null-stream ordering and
        # synchronize, held weakly (a forgotten stream is freed by its finalizer). Streams are
        # made and destroyed from any thread: the set is changed and read only under its lock,
        # and readers get a snapshot, so a removal never skips another stream. Re-entrant: the
        # collector may run inside it (the set allocates), and a ``__del__`` it calls may
        # destroy a stream of this device on this very thread.
        self._streams: WeakList[Stream] = WeakList()
        self._streams_lock = threading.RLock()
        # Streams destroyed with work in flight or a failure not yet reported: their failures
        # are still this device's to report at its next synchronize (see _remove_stream).
        self._orphans: list[Stream] = []
        # Failures of streams dropped without destroy() (and collected) that no synchronize
        # reported: this device's to report at its next synchronize (see
        # _forgotten_stream_failed). A deque: appended by finalizers, taken without a lock.
        self._forgotten_failures: deque[HipError] = deque()

    # -- the engine (device/engine.py) -----------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this device's work runs on (None before the first submission)."""
        return self._engine.loop

    @property
    def in_flight(self) -> int:
        """Packets submitted and not yet finished."""
        return self._engine.in_flight

    # -- the streams set (legacy null-stream ordering) ------------------------------------------

    @property
    def streams(self) -> tuple[Stream, ...]:
        """The live streams of this device, a snapshot (the null stream once it exists)."""
        with self._streams_lock:
            return tuple(self._streams)

    def _legacy_streams(self) -> tuple[Stream, ...]:
        """The streams whose work the legacy null stream may have to order after, a snapshot.

        The live streams and the destroyed ones still busy (the orphans): a destroyed stream's
        work still runs, and null-stream work enqueued after it must still wait for it (HIP's
        ``hipStreamDestroy`` lets the stream's work finish first). A task's per-thread stream
        is destroyed when the task ends, so this is also what orders a finished task's work
        before later null-stream work.
        """
        with self._streams_lock:
            return (*self._streams, *self._orphans)

    def _add_stream(self, stream: Stream) -> None:
        with self._streams_lock:
            self._streams.append(stream)

    def _remove_stream(self, stream: Stream) -> None:
        """Forget a destroyed stream, keeping it as an orphan while it may still owe a failure.

        A destroyed stream's work still runs, and it may fail: ``synchronize`` must report
        that failure (as it would have had the stream stayed open) rather than lose it with
        the stream. Orphans that finished without one are dropped here and by ``synchronize``,
        so the list holds only streams that are still busy or have a failure to report.
        """
        with self._streams_lock:
            with contextlib.suppress(ValueError):
                self._streams.remove(stream)
            self._prune_orphans()
            if _owes_failure(stream):
                self._orphans.append(stream)  # read again: see _prune_orphans

    def _forgotten_stream_failed(self, error: HipError) -> None:
        """Keep the unreported failure of a stream of this device that was collected (it was
        dropped without ``destroy()``) for the next :meth:`synchronize` to report.

        Called by the stream's finalizer, on whatever thread the collector ran, perhaps
        inside this device's own locked sections: no lock, one atomic append.
        """
        self._forgotten_failures.append(error)

    def _take_orphan_error(self) -> HipError | None:
        """The first unreported failure of a destroyed stream (then cleared), then of a
        forgotten one (see :meth:`_forgotten_stream_failed`), or None."""
        if not self._orphans and not self._forgotten_failures:  # the common case: no lock
            return None
        error = None
        if self._orphans:
            with self._streams_lock:
                for stream in tuple(self._orphans):
                    error = stream._take_error()
                    if error is not None:
                        break
                self._prune_orphans()  # drops that stream too, unless it still has work in flight
        if error is None:
            with contextlib.suppress(IndexError):  # another thread's synchronize took the last
                error = self._forgotten_failures.popleft()
        return error

    def _prune_orphans(self) -> None:
        """Drop the orphans that owe no failure any more. Hold the streams' lock.

        The list is replaced, never changed in place, except by appending to the list just
        read. Filtering it allocates, so the collector may run meanwhile, and a ``__del__`` it
        calls may destroy another stream on this thread (the lock is re-entrant), which
        replaces the list with one holding that stream: the filter is then made again from
        the new list, rather than its result overwriting that stream's failure.
        """
        while True:
            orphans = self._orphans
            kept = [s for s in orphans if _owes_failure(s)]
            if self._orphans is orphans:
                self._orphans = kept
                return

    # -- memory ---------------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> DevicePtr:
        """``hipMalloc``: see :meth:`DeviceMemory.malloc`.

        Raises StreamCaptureUnsupported when the calling task's capture mode forbids it, and
        InvalidDevice when this device was replaced by ``configure_devices``.
        """
        _table.live(self)  # a device replaced by configure_devices makes nothing new
        if capture_checks is not None:
            capture_checks.unsafe_call("malloc()")
        if type(nbytes) is not int:
            # Its __index__ is user code, which may replace the devices (configure_devices) or
            # begin a capture: converted first, then both checked again, so nothing is
            # allocated in the memory of a device that is gone, or while a capture forbids it.
            nbytes = check_size(nbytes)
            _table.live(self)
            if capture_checks is not None:
                capture_checks.unsafe_call("malloc()")
        ptr = self._memory.malloc(nbytes)
        if observe.observer is not None:
            observe.observer.allocated(ptr, int(nbytes), None)  # checked: an int
        return ptr

    def free(self, ptr: DevicePtr) -> None:
        """``hipFree``: free ``ptr`` in the allocator of the device it belongs to.

        As ``hipFree``, which frees any device's pointer on its own device, ``ptr`` need not
        be this device's: another device's memory is freed there, with exactly the refusals
        of that device's own ``free`` (and its peers drop their views of it). Null (or None)
        is a no-op. Unlike HIP it does not wait for work in flight: free after synchronising
        (a free while work using the memory is queued makes that work fail, and the race
        checker reports it).

        Raises:
            StreamCaptureUnsupported: the calling task's capture mode forbids it.
            InvalidValue: ``ptr`` names no configured device (as ``hipFree`` of an unknown
                pointer), is not the start of a live allocation of its device, is a device
                symbol's storage or the runtime's own memory, a stream holds a ``free_async``
                of it, or a graph frees it (see ``DeviceMemory.free``). Nothing is freed.
            TypeError: ``ptr`` is neither a DevicePtr nor None.
        """
        if capture_checks is not None:
            capture_checks.unsafe_call("free()")
        memory = _memory_freeing(ptr, self)
        if observe.observer is not None and isinstance(ptr, DevicePtr) and ptr:
            # Every check first: a refused free (a symbol's storage, memory a stream will
            # free, a double free) is no free for the race checker.
            memory.check_free(ptr)
            observe.observer.freeing(ptr)
        memory.free(ptr)

    def memory_info(self) -> MemoryInfo:
        """Free and total bytes of this device (``hipMemGetInfo``), as ``(free, total)``.

        A named tuple: unpack it (``free, total = device.memory_info()``) or read
        ``.free`` / ``.total``.
        """
        return self._memory.memory_info()

    def view(
        self,
        ptr: DevicePtr,
        dtype: npt.DTypeLike,
        count: int | None = None,
        *,
        readonly: bool = False,
    ) -> npt.NDArray[Any]:
        """A host-side typed view of device memory (for inspection and tests), bounds-checked.

        The race checker takes the call as a host access of the viewed bytes, at this point
        of the host program: a write, or a read with ``readonly=True`` (the view is then
        read-only). Inside a host function the view is the function's own (see
        :func:`ahipgraph.host_function`).

        Raises:
            TypeError: ``ptr`` is not a DevicePtr, ``dtype`` is None, neither a numpy dtype
                nor a scalar kernel parameter type (``ahg.float32``), one of no size or one
                holding Python objects, or ``count`` is not an int.
            InvalidValue / InvalidDevicePointer: a negative count, a bad range, or
                bytes a running declared host function did not declare.
            RaceError: under ``ahg.race_check(on_race="raise")``, the access races.
        """
        view = super().view(ptr, dtype, count, readonly=readonly)
        if observe.observer is not None:  # the race checker: a host access, now
            observe.observer.host_accessed(ptr, view.nbytes, view.flags.writeable, "view()")
        return view

    # -- peers (device/peer.py) ------------------------------------------------------------------

    def enable_peer_access(self, peer: Device | int, flags: int = 0) -> None:
        """``hipDeviceEnablePeerAccess``: let work on this device use ``peer``'s memory.

        Raises: InvalidDevice (no such device, or this one), InvalidValue (flags),
        PeerAccessAlreadyEnabled.
        """
        from ..device.peer import enable_peer_access

        enable_peer_access(self, peer, flags)

    def disable_peer_access(self, peer: Device | int) -> None:
        """``hipDeviceDisablePeerAccess``. Raises: InvalidDevice, PeerAccessNotEnabled."""
        from ..device.peer import disable_peer_access

        disable_peer_access(self, peer)

    def can_access_peer(self, peer: Device | int) -> bool:
        """``hipDeviceCanAccessPeer``: True for any other configured device."""
        from ..device.peer import can_access_peer

        return can_access_peer(self, peer)

    # -- streams, events, synchronisation --------------------------------------------------------

    def create_stream(self, *, priority: int = 0, non_blocking: bool = False) -> Stream:
        """``hipStreamCreateWithPriority`` / ``WithFlags``.

        Raises InvalidDevice when this device was replaced by ``configure_devices``.
        """
        from .stream import Stream  # stream.py imports this module

        _table.live(self)
        if type(priority) is not int:
            # Its __index__ is user code, which may replace the devices: converted first, then
            # the device checked again, so no stream is made on a device that is gone.
            priority = as_int(priority, "priority")
            _table.live(self)
        return Stream._create(self, priority=priority, non_blocking=non_blocking)

    def create_event(self, *, disable_timing: bool = False, blocking_sync: bool = False) -> Event:
        """``hipEventCreateWithFlags``.

        Raises InvalidDevice when this device was replaced by ``configure_devices``.
        """
        from .event import Event

        _table.live(self)
        return Event._create(self, disable_timing=disable_timing, blocking_sync=blocking_sync)

    def per_thread_stream(self) -> Stream:
        """The calling task's own default stream on this device (``hipStreamPerThread``).

        Raises InvalidDevice when this device was replaced by ``configure_devices``: the
        stream is made on first use, and a replaced device makes nothing new (its implicit
        streams were retired with it).
        """
        from .per_thread import per_thread_stream

        _table.live(self)
        return per_thread_stream(self)

    @property
    def null_stream(self) -> Stream:
        """The legacy default stream: it orders with every other blocking stream.

        Raises InvalidDevice when it would be made on a device ``configure_devices`` replaced:
        the implicit streams of a replaced device are retired with it, and one made later would
        stay registered (and keep the device alive) for good.
        """
        if self._null_stream is None:
            from .stream import Stream

            with self._lock:
                if self._null_stream is None:
                    _table.live(self)
                    self._null_stream = Stream._create(self, null=True)
        return self._null_stream

    async def _wait_signal(self, signal: Signal, gone: Callable[[], bool] | None = None) -> None:
        """How a host waits for device work: return at once if it is done, else park (see
        :meth:`Engine._wait_signal <ahipgraph.device.engine.Engine._wait_signal>` for ``gone``).

        Raises:
            IllegalState: the device is busy on another event loop.
        """
        await self._engine._wait_signal(signal, gone)

    async def synchronize(self) -> None:
        """Wait for all work on the device (``hipDeviceSynchronize``).

        Raises:
            HipError: the first unreported failure of any stream of this device, those of
                destroyed streams and of streams dropped without ``destroy()`` included (then
                cleared; the other failures stay pending for the next synchronize).
            StreamCaptureUnsupported: a capture is in progress (every capture is invalidated).
            RuntimeError: called from a trio task (ahipgraph runs on asyncio or uvloop).
        """
        refuse_trio()
        if capture_checks is not None:
            capture_checks.device_sync()
        await self._engine.wait_idle()
        self._clock.observe(max(queue._busy_until for queue in self._queues))
        if observe.observer is not None:
            observe.observer.device_synchronized(self)
        # One failure per call; the others stay pending. Destroyed and forgotten streams'
        # failures first: their work was enqueued before the streams were destroyed or dropped.
        error = self._take_orphan_error()
        if error is not None:
            raise error.with_traceback(None)
        for stream in self.streams:
            error = stream._take_error()
            if error is not None:  # perhaps raised before, by an await of its completion
                raise error.with_traceback(None)

    async def memcpy(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> None:
        """Synchronous copy (``hipMemcpy``): on the null stream, returns once it is done.

        As in HIP, a copy whose device memory is all on one other device (to or from the host,
        or within that device) runs on that device's null stream, after this one's last work:
        it is ordered after that device's blocking streams, as its own ``memcpy`` is.

        Raises:
            StreamCaptureImplicit: a capture is in progress (every capture is invalidated).
            As :meth:`Stream.memcpy`, and the copy's failure.
        """
        from .params import copies_nothing  # params imports this module

        await self._sync_op(
            lambda stream: stream.memcpy(dst, src, nbytes, kind),
            lambda stream: stream._memcpy_params(dst, src, nbytes, kind),
            on_owner=True,
            empty=lambda params: copies_nothing(params, kind),
        )

    async def memset(self, dst: DevicePtr, value: int, nbytes: int) -> None:
        """Synchronous byte fill (``hipMemset``) on the null stream.

        Raises: as :meth:`memcpy`.
        """
        await self._sync_op(
            # As bytes (``nbytes=``), and None refused here: a bad size is named as this call
            # names it (not as a stream's fill count, nor as a missing one).
            lambda stream: stream.memset(dst, value, nbytes=as_int(nbytes, "nbytes")),
            lambda stream: stream._memset_params(dst, value, nbytes=as_int(nbytes, "nbytes")),
        )

    async def _sync_op(
        self,
        enqueue: Callable[[Stream], Awaitable[Completion]],
        check: Callable[[Stream], MemcpyParams | MemsetParams],
        *,
        on_owner: bool = False,
        empty: Callable[[Any], bool] | None = None,
    ) -> None:
        """Run a synchronous copy or fill: ``enqueue`` on a null stream, then wait for it.

        ``check`` runs the stream operation's argument checks and returns its parameters,
        nothing enqueued. A copy or fill of 0 bytes returns once they pass: HIP's
        ``hipMemcpy``/``hipMemset`` family return ``hipSuccess`` for a size of 0 before they
        touch the null stream, so such a call neither enqueues anything nor waits for the
        legacy null stream's order (a slow kernel on a blocking stream). It is still a call
        on this device, so a device busy on another event loop refuses it, as it would the
        enqueue. ``empty`` says which parameters copy nothing, when more than a size of 0
        does (``hipMemcpy``'s copy onto itself: see :func:`copies_nothing`).

        ``on_owner`` (``hipMemcpy``'s rule, ``ihipMemcpyCommand``): a copy whose device memory
        is all on one other device runs on that device's null stream, after this null
        stream's last work, so it is ordered after the owner's blocking streams as the
        owner's own ``memcpy`` is. On this device's null stream a copy from memory another
        device's kernel was still writing read what was there before.
        """
        # A device replaced by configure_devices takes no new work: refused first, as malloc
        # is, rather than invalidate the captures in progress before its null stream refuses.
        _table.live(self)
        if capture_checks is not None:
            capture_checks.sync_copy()
        stream = self.null_stream
        params = check(stream)
        if not params.nbytes if empty is None else empty(params):
            # What an enqueue checks after the arguments, as for any size: the device's loop
            # (IllegalState from another loop), and a capture that the arguments' own code
            # (an ``__index__``) began meanwhile (StreamCaptureImplicit on the null stream).
            stream._nothing_enqueued()
            return
        owner = _sole_other_owner(params, self) if on_owner else None
        if owner is not None:
            # This null stream's order is still the call's: a capture that a blocking stream
            # of this device began since the call's first check (the arguments' own code, or
            # another task while it waited here) refuses it, as it refuses a copy of this
            # device's own memory or of 0 bytes, rather than copy beside the capture.
            stream._check_unchanged()
            tail = stream._tail
            if tail is not None and tail._value > 0:
                await self._wait_signal(tail)
                stream._check_unchanged()
            stream = owner.null_stream
        done = await enqueue(stream)
        await done

    # -- graph memory pool (see graph_pool.py) ---------------------------------------------------

    def graph_mem_attribute(self, attr: GraphMemAttribute | int) -> int:
        """``hipDeviceGetGraphMemAttribute``: used/reserved bytes, current or high-water.

        Raises:
            InvalidDevice: this device was replaced by ``configure_devices``.
            InvalidValue: an unknown attribute.
        """
        return _table.live(self).memory.graph_pool_attribute(attr)

    def set_graph_mem_attribute(self, attr: GraphMemAttribute | int, value: int) -> None:
        """``hipDeviceSetGraphMemAttribute``: reset ``UsedMemHigh`` or ``ReservedMemHigh`` to 0.

        Raises:
            InvalidDevice: as :meth:`graph_mem_attribute`. InvalidValue: any other attribute or
                value.
        """
        _table.live(self).memory.set_graph_pool_attribute(attr, value)

    def graph_mem_trim(self) -> int:
        """``hipDeviceGraphMemTrim``: return the graph pool's unused memory to the device.

        Returns the bytes given back. Memory of graph allocations in use stays.

        Raises:
            InvalidDevice: as :meth:`graph_mem_attribute`.
        """
        return _table.live(self).memory.trim_graph_pool()

    def statistics(self) -> DeviceStatistics:
        """The device's work in flight, simulated time, memory, hardware queues, runtime-made
        streams, work an event loop abandoned, and its graph memory pool."""
        settle_finished()  # a finished task's per-task stream is not counted (see per_thread)
        return DeviceStatistics(
            self._ordinal,
            self._engine.in_flight,
            self._clock.now,
            self._memory.statistics(),
            tuple(queue.statistics() for queue in self._queues),
            sum(1 for stream in self.streams if stream.implicit),
            self._engine.abandoned,
            self._memory.graph_pool_statistics(),
            self._abandoned_earlier(),
        )

    def _abandoned_earlier(self) -> int:
        """See ``DeviceStatistics.abandoned_earlier``: the open streams' failures, and those
        destroyed and forgotten streams left to the next synchronize."""
        owner = self._engine.owner_number
        pending = [stream._error for stream in self._legacy_streams()]  # open and destroyed
        pending.extend(self._forgotten_snapshot())
        return sum(
            1 for error in pending if error is not None and abandoned_by(error) not in (None, owner)
        )

    def _forgotten_snapshot(self) -> tuple[HipError, ...]:
        """The failures forgotten streams handed over, not yet reported.

        Finalizers append to the deque without a lock (they must never wait), and a collection
        started by copying it may run one: the copy then stops with "deque mutated during
        iteration", and is simply made again (each retry follows an append, which ends).
        """
        while True:
            try:
                return tuple(self._forgotten_failures)
            except RuntimeError:
                continue

    def _retire(self) -> None:
        """Called once this device was replaced: unregister the streams the runtime made for it.

        Its null stream and per-thread streams are the device's, not the user's; left registered
        they (and through them this device) would stay alive for good. Streams the user created
        stay registered until the user destroys them; the engine refuses new work on any of
        them (see ``DeviceBase._retire``), calls already parked on them included: they are
        woken (``Stream._wake_parked``) and refused at once.
        """
        super()._retire()
        for stream in self.streams:
            if stream.implicit:
                stream._retire()
            else:  # calls parked on it would get what they wait for only to be refused
                stream._wake_parked()

    @safe_repr
    def __repr__(self) -> str:
        # A device configure_devices replaced refuses every new call (InvalidDevice) and
        # is not ``get_device(n)`` any more: its repr says so, or a test failure showing it
        # looked like the live device of that ordinal.
        replaced = " replaced" if self._engine._retired else ""
        return (
            f"<Device {self._ordinal} {self._properties.name!r} in_flight={self._engine.in_flight} "
            f"memory={self._memory.bytes_in_use}/{self._memory.total_bytes}{replaced}>"
        )


def _memory_freeing(ptr: object, here: Device) -> DeviceMemory:
    """The allocator :meth:`Device.free` of ``ptr`` on ``here`` frees it in: that of the
    configured device its ordinal names, or ``here``'s for its own pointers (a device
    ``configure_devices`` replaced still gives back its own memory), for anything that is
    not a pointer of another device (None, the null pointer, a hand-made pointer whose
    fields are not ints: ``here``'s free refuses or ignores those as before, and no field
    of a hand-made pointer is compared, which would run its own ``__eq__``).

    Raises:
        InvalidValue: ``ptr`` names no configured device; nothing is freed.
    """
    if not isinstance(ptr, DevicePtr) or not ptr:
        return here._memory
    device, address = ptr.device, ptr.address
    if type(device) is not int or type(address) is not int or device == here._ordinal:
        return here._memory
    try:
        return _table.get_device(device).memory
    except InvalidDevice:
        raise InvalidValue(f"{ptr!r} names a device that does not exist") from None


def _sole_other_owner(params: MemcpyParams | MemsetParams, here: Device) -> Device | None:
    """The device holding all of a copy's device memory when that is one device other than
    ``here`` (a copy between two devices, or with host memory only, stays where it is)."""
    ends = (params.dst, getattr(params, "src", None))  # a fill has no source
    owners = {end.device for end in ends if isinstance(end, DevicePtr)}
    if len(owners) != 1:
        return None
    (ordinal,) = owners
    if ordinal == here.ordinal:
        return None
    owner = _table.configured(ordinal, "device")
    assert isinstance(owner, Device)
    return owner


def _owes_failure(stream: Stream) -> bool:
    """Whether ``stream`` has a failure to report, or work in flight that may still fail."""
    tail = stream.tail
    return stream._error is not None or (tail is not None and tail._value > 0)


_FACTORY = FactoryOnly(
    "devices come from ahg.get_device(); configure them with ahg.configure_devices()"
)


def _make_device(ordinal: int, properties: DeviceProperties) -> Device:
    """The devices table's factory: the one way to make a :class:`Device`."""
    device: Device = object.__new__(Device)
    device._init(ordinal, properties)
    return device


_table.install_factory(_make_device)

# The devices table (device/table.py) holds these devices; the names below are its functions,
# typed with the public class.
if TYPE_CHECKING:

    def configure_devices(
        count: int = 1, properties: DeviceProperties | Sequence[DeviceProperties] | None = None
    ) -> list[Device]: ...

    def device_count() -> int: ...

    def get_device(ordinal: int | None = None) -> Device: ...

else:
    configure_devices = _table.configure_devices
    device_count = _table.device_count
    get_device = _table.get_device
    # The same for readers of run-time hints (get_type_hints, documentation tools): the table
    # is annotated with the base it can name, but what it makes and returns is this class.
    configure_devices.__annotations__["return"] = list[Device]
    get_device.__annotations__["return"] = Device
