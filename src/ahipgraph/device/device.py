"""The simulated device: memory, hardware queues, a clock, and the devices table.

A :class:`Device` runs its work on the event loop that submits it. It binds to that loop at the
first submission and may move to another loop only when it is idle (or its loop has closed, in
which case work left behind by the dead loop is discarded); using a busy device from a second
loop is a clear :class:`IllegalState` error.

The devices table (``configure_devices``, ``device_count``, ``get_device``) is process-wide and
thread-safe. Unless configured, one device with default properties exists.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from ..core.clock import SimClock
from ..core.errors import IllegalState, InvalidDevice, InvalidDevicePointer
from ..core.lifecycle import WeakList
from ..core.waitqueue import WaitQueue
from .current import current_ordinal
from .graph_pool import GraphMemAttribute
from .host_function import checked_view
from .hwqueue import HardwareQueue, QueueStatistics
from .memory import DeviceMemory, MemoryStatistics
from .pointer import DevicePtr
from .properties import DeviceProperties
from .signal import Signal
from .sync_copies import DeviceCopyMixin

if TYPE_CHECKING:
    from ..runtime.completion import Completion
    from ..runtime.event import Event
    from ..runtime.params import Endpoint
    from ..runtime.stream import Stream
    from .properties import CopyKind

__all__ = [
    "running_loop",
    "Device",
    "DeviceStatistics",
    "configure_devices",
    "device_count",
    "get_device",
    "check_range",
    "resolve_pointer",
]


class CaptureChecks(Protocol):
    """The stream-capture rules device calls obey (``ahipgraph.runtime.capture`` installs them)."""

    def unsafe_call(self, what: str) -> None: ...
    def device_sync(self) -> None: ...
    def sync_copy(self) -> None: ...


# Installed by the runtime's capture module, a layer above; None until it is imported, and no
# capture can exist before that.
capture_checks: CaptureChecks | None = None


def running_loop() -> asyncio.AbstractEventLoop:
    """The caller's asyncio loop, or an error that says what is wrong.

    Raises:
        RuntimeError: no asyncio loop runs here: plain synchronous code, a thread without a
            loop, or another async library (under anyio's trio backend asyncio's own message,
            "no running event loop", would not say why).
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        if _in_trio():
            raise RuntimeError(
                "ahipgraph runs on asyncio (or uvloop), not trio: start the program with "
                "ahg.run(main), asyncio.run(main()) or anyio.run(main, backend='asyncio')"
            ) from None
        raise RuntimeError(
            "this call needs a running asyncio event loop: call it from a coroutine "
            "(ahg.run(main) starts one)"
        ) from None


def _in_trio() -> bool:
    """True when the caller is a trio task (checked only if trio was imported)."""
    trio: Any = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except Exception:
        return False
    return True


@dataclass(frozen=True, slots=True)
class DeviceStatistics:
    ordinal: int
    in_flight: int
    now_ns: int
    memory: MemoryStatistics
    queues: tuple[QueueStatistics, ...]
    # Open streams the runtime made for this device (null, per-thread), not the user's.
    implicit_streams: int = 0


class Device(DeviceCopyMixin):
    """One simulated GPU. Obtain it with :func:`get_device`; it has no public constructor."""

    def __init__(self, ordinal: int, properties: DeviceProperties, *, _key: object = None) -> None:
        if _key is not _FACTORY_KEY:
            raise TypeError(
                "devices come from ahg.get_device(); configure them with ahg.configure_devices()"
            )
        self.ordinal = ordinal
        self.properties = properties
        self.memory = DeviceMemory(ordinal, properties.memory_bytes)
        self.clock = SimClock()
        self.queues = tuple(HardwareQueue(self, i) for i in range(properties.hardware_queues))
        self.loop: asyncio.AbstractEventLoop | None = None
        self.in_flight = 0
        # Queues with a scheduled run, in scheduling order (a dict as an ordered set).
        self.ready: dict[HardwareQueue, None] = {}
        self._pump: asyncio.Handle | None = None  # the loop callback that runs the ready table
        self._running_ready = False
        self._idle = WaitQueue()
        self._next_queue = 0
        self._lock = threading.Lock()
        self._null_stream: Stream | None = None
        # Streams created on this device that are still alive (runtime layer keeps it current),
        # held weakly: a forgotten stream is freed by its finalizer.
        self.streams: WeakList[Stream] = WeakList()

    @property
    def name(self) -> str:
        return self.properties.name

    # -- event loop -----------------------------------------------------------------------------

    def bind_loop(self) -> asyncio.AbstractEventLoop:
        """The loop running this device's work: the caller's, binding it if the device is free.

        Raises:
            IllegalState: the device has work in flight on another, still open, loop.
            RuntimeError: called outside a running event loop.
        """
        loop = running_loop()
        if loop is self.loop:
            return loop
        current = self.loop
        if current is not None and self.in_flight and not current.is_closed():
            raise IllegalState(f"device {self.ordinal} is busy on another event loop")
        self.loop = loop
        self._pump = None  # a callback on the old loop never runs
        self._idle = WaitQueue()
        if current is not None and self.in_flight:
            self._fail_abandoned_work()
        return loop

    def _fail_abandoned_work(self) -> None:
        """Work left behind by a closed loop fails, but still completes on the new loop.

        Each abandoned program keeps only its synchronisation ops, so every signal it owes is
        still raised, every launch still returns what it borrowed, and everyone waiting for
        that work wakes with the error instead of hanging.
        """
        error = IllegalState(f"device {self.ordinal}: the event loop running this work closed")
        self.ready.clear()
        for queue in self.queues:
            queue.abandon(error)

    def run_ready(self) -> None:
        """Run the device work that is scheduled, now, until none is left.

        Called by the pump on the event loop (hosts never run device work themselves: they
        park). Not reentrant (device work that waits from inside the device simply parks).
        """
        if self._running_ready:
            return
        self._running_ready = True
        try:
            ready = self.ready
            while ready:
                queue = next(iter(ready))
                del ready[queue]
                queue.run()
        except BaseException:  # KeyboardInterrupt/SystemExit from user code: the rest runs later
            loop = self.loop
            if ready and self._pump is None and loop is not None and not loop.is_closed():
                self._pump = loop.call_soon(self._run_pump)
            raise
        finally:
            self._running_ready = False

    def schedule(self, queue: HardwareQueue) -> None:
        """``queue`` has work it can run: run it on the loop's next turn (or when a host waits)."""
        self.ready[queue] = None
        if self._pump is None:
            loop = self.loop
            assert loop is not None
            self._pump = loop.call_soon(self._run_pump)

    def _run_pump(self) -> None:
        self._pump = None
        self.run_ready()

    def became_idle(self) -> None:
        """The last packet in flight finished (queues count ``in_flight`` down themselves)."""
        self._idle.unpark_all()

    def next_queue(self) -> HardwareQueue:
        """Round-robin queue assignment for new streams."""
        with self._lock:
            queue = self.queues[self._next_queue % len(self.queues)]
            self._next_queue += 1
        return queue

    # -- memory ---------------------------------------------------------------------------------

    def malloc(self, nbytes: int) -> DevicePtr:
        """``hipMalloc``: see :meth:`DeviceMemory.malloc`.

        Raises StreamCaptureUnsupported when the calling task's capture mode forbids it.
        """
        if capture_checks is not None:
            capture_checks.unsafe_call("malloc()")
        ptr = self.memory.malloc(nbytes)
        from ..runtime import observe  # the runtime layer's hook point (race checker)

        if observe.observer is not None:
            observe.observer.allocated(ptr, nbytes, None)
        return ptr

    def free(self, ptr: DevicePtr) -> None:
        """``hipFree``. Unlike HIP it does not wait for work in flight: free after synchronising.

        Raises StreamCaptureUnsupported when the calling task's capture mode forbids it.
        """
        if capture_checks is not None:
            capture_checks.unsafe_call("free()")
        from ..runtime import observe

        if observe.observer is not None and isinstance(ptr, DevicePtr) and ptr:
            observe.observer.freeing(ptr)
        self.memory.free(ptr)

    def memory_info(self) -> tuple[int, int]:
        """(free, total) bytes."""
        return self.memory.memory_info()

    def view(
        self, ptr: DevicePtr, dtype: Any, count: int | None = None, *, readonly: bool = False
    ) -> npt.NDArray[Any]:
        """A host-side typed view of device memory (for inspection and tests), bounds-checked.

        The race checker takes the call as a host access of the viewed bytes, at this point
        of the host program: a write, or a read with ``readonly=True`` (the view is then
        read-only). Inside a host function the view is the function's own (see
        :func:`ahipgraph.host_function`).

        Raises:
            TypeError: ``ptr`` is not a DevicePtr, ``dtype`` is None or not a numpy dtype, or
                ``count`` is not an int. InvalidValue / InvalidDevicePointer: a bad range, or
                bytes a running declared host function did not declare.
            RaceError: under ``ahg.race_check(on_race="raise")``, the access races.
        """
        if not isinstance(readonly, bool):
            raise TypeError(f"readonly must be a bool, got {readonly!r}")
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {ptr!r}")
        if dtype is None:  # numpy would quietly make it float64
            raise TypeError("dtype is required")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise TypeError(f"count must be an int or None, got {count!r}")
        dt = np.dtype(dtype)
        self.memory.resolve(ptr, (count or 0) * dt.itemsize)
        view = self.memory.view(ptr.address, dt)
        view = checked_view(self, ptr, view if count is None else view[:count], readonly)
        from ..runtime import observe

        if observe.observer is not None:  # the race checker: a host access, now
            observe.observer.host_accessed(ptr, view.nbytes, view.flags.writeable, "view()")
        return view

    # -- peers (device/peer.py) ------------------------------------------------------------------

    def enable_peer_access(self, peer: Device | int, flags: int = 0) -> None:
        """``hipDeviceEnablePeerAccess``: let work on this device use ``peer``'s memory.

        Raises: InvalidDevice (no such device, or this one), InvalidValue (flags),
        PeerAccessAlreadyEnabled.
        """
        from .peer import enable_peer_access

        enable_peer_access(self, peer, flags)

    def disable_peer_access(self, peer: Device | int) -> None:
        """``hipDeviceDisablePeerAccess``. Raises: InvalidDevice, PeerAccessNotEnabled."""
        from .peer import disable_peer_access

        disable_peer_access(self, peer)

    def can_access_peer(self, peer: Device | int) -> bool:
        """``hipDeviceCanAccessPeer``: True for any other configured device."""
        from .peer import can_access_peer

        return can_access_peer(self, peer)

    # -- streams, events, synchronisation --------------------------------------------------------

    def create_stream(self, *, priority: int = 0, non_blocking: bool = False) -> Stream:
        """``hipStreamCreateWithPriority`` / ``WithFlags``."""
        from ..runtime.stream import Stream  # the runtime layer sits above the device layer

        return Stream._create(self, priority=priority, non_blocking=non_blocking)

    def create_event(self, *, disable_timing: bool = False, blocking_sync: bool = False) -> Event:
        """``hipEventCreateWithFlags``."""
        from ..runtime.event import Event

        return Event._create(self, disable_timing=disable_timing, blocking_sync=blocking_sync)

    def per_thread_stream(self) -> Stream:
        """The calling task's own default stream on this device (``hipStreamPerThread``)."""
        from ..runtime.per_thread import per_thread_stream

        return per_thread_stream(self)

    @property
    def null_stream(self) -> Stream:
        """The legacy default stream: it orders with every other blocking stream."""
        if self._null_stream is None:
            from ..runtime.stream import Stream

            with self._lock:
                if self._null_stream is None:
                    self._null_stream = Stream._create(self, null=True)
        return self._null_stream

    async def wait_signal(self, signal: Signal) -> None:
        """How a host waits for device work: return at once if it is done, else park.

        Parking yields to the event loop, which runs the device's work (and every other task);
        the host never runs device work itself. Afterwards the host's clock has seen the moment
        the signal was reached.

        Raises:
            IllegalState: the device is busy on another event loop.
        """
        if signal.value > 0:
            if self.loop is not asyncio.get_running_loop():
                self.bind_loop()  # park only on the loop that runs the work (or raise)
            await signal.wait()
        self.clock.observe(signal.time)

    async def synchronize(self) -> None:
        """Wait for all work on the device (``hipDeviceSynchronize``).

        Raises:
            HipError: the first unreported failure of any stream of this device (then cleared;
                failures of other streams stay pending for their next synchronize).
            StreamCaptureUnsupported: a capture is in progress (every capture is invalidated).
        """
        if capture_checks is not None:
            capture_checks.device_sync()
        if self.in_flight:
            self.bind_loop()
            while self.in_flight:
                await self._idle.park()
        self.clock.observe(max(queue.busy_until for queue in self.queues))
        from ..runtime import observe

        if observe.observer is not None:
            observe.observer.device_synchronized(self)
        for stream in list(self.streams):  # one failure per call; the others stay reported
            error = stream.take_error()
            if error is not None:
                raise error

    async def memcpy(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> None:
        """Synchronous copy (``hipMemcpy``): on the null stream, returns once it is done.

        Raises:
            StreamCaptureImplicit: a capture is in progress (every capture is invalidated).
            As :meth:`Stream.memcpy`, and the copy's failure.
        """
        await self._sync_op(lambda: self.null_stream.memcpy(dst, src, nbytes, kind))

    async def memset(self, dst: DevicePtr, value: int, nbytes: int) -> None:
        """Synchronous byte fill (``hipMemset``) on the null stream.

        Raises: as :meth:`memcpy`.
        """
        await self._sync_op(lambda: self.null_stream.memset(dst, value, nbytes))

    async def _sync_op(self, enqueue: Any) -> None:
        if capture_checks is not None:
            capture_checks.sync_copy()
        done: Completion = await enqueue()
        await done

    # -- graph memory pool (see graph_pool.py) ---------------------------------------------------

    def graph_mem_attribute(self, attr: GraphMemAttribute | int) -> int:
        """``hipDeviceGetGraphMemAttribute``: used/reserved bytes, current or high-water.

        Raises:
            InvalidDevice: this device was replaced by ``configure_devices``.
            InvalidValue: an unknown attribute.
        """
        return _live(self).memory.graph_pool_attribute(attr)

    def set_graph_mem_attribute(self, attr: GraphMemAttribute | int, value: int) -> None:
        """``hipDeviceSetGraphMemAttribute``: reset ``UsedMemHigh`` or ``ReservedMemHigh`` to 0.

        Raises:
            InvalidDevice: as :meth:`graph_mem_attribute`. InvalidValue: any other attribute or
                value.
        """
        _live(self).memory.set_graph_pool_attribute(attr, value)

    def graph_mem_trim(self) -> int:
        """``hipDeviceGraphMemTrim``: return the graph pool's unused memory to the device.

        Returns the bytes given back. Memory of graph allocations in use stays.

        Raises:
            InvalidDevice: as :meth:`graph_mem_attribute`.
        """
        return _live(self).memory.trim_graph_pool()

    def statistics(self) -> DeviceStatistics:
        return DeviceStatistics(
            self.ordinal,
            self.in_flight,
            self.clock.now,
            self.memory.statistics(),
            tuple(queue.statistics() for queue in self.queues),
            sum(1 for stream in list(self.streams) if stream.implicit),
        )

    def _retire(self) -> None:
        """Called once this device was replaced: unregister the streams the runtime made for it.

        Its null stream and per-thread streams are the device's, not the user's; left registered
        they (and through them this device) would stay alive for good. Streams the user created
        stay registered until the user destroys them.
        """
        for stream in list(self.streams):
            if stream.implicit:
                stream._retire()

    def __repr__(self) -> str:
        return (
            f"<Device {self.ordinal} {self.properties.name!r} in_flight={self.in_flight} "
            f"memory={self.memory.bytes_in_use}/{self.memory.total_bytes}>"
        )


_FACTORY_KEY = object()
MAX_DEVICES = 64  # far more than a node has; bounds a mistyped count
_devices_lock = threading.Lock()
_devices: list[Device] = []


def configure_devices(
    count: int = 1, properties: DeviceProperties | Sequence[DeviceProperties] | None = None
) -> list[Device]:
    """Replace the simulated devices: ``count`` of them, with one or per-device properties.

    Meant for program start-up and test fixtures: existing device objects are dropped.
    Everything is checked before the table changes.

    Raises:
        TypeError: ``count`` is not an int, or ``properties`` are not DeviceProperties.
        ValueError: ``count`` outside 1..MAX_DEVICES, or a property list of another length.
    """
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(f"count must be an int, got {count!r}")
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(f"need at least one device and at most {MAX_DEVICES}, got {count}")
    if isinstance(properties, Sequence):
        props = list(properties)
        if len(props) != count:
            raise ValueError(f"{count} devices but {len(props)} property sets")
    else:
        props = [properties or DeviceProperties()] * count
    for prop in props:
        if not isinstance(prop, DeviceProperties):
            raise TypeError(f"properties must be DeviceProperties, got {prop!r}")
    with _devices_lock:
        dropped = list(_devices)
        _devices[:] = [Device(i, p, _key=_FACTORY_KEY) for i, p in enumerate(props)]
        configured = list(_devices)
    for device in dropped:
        device._retire()
    return configured


def _table() -> list[Device]:
    if not _devices:
        with _devices_lock:
            if not _devices:
                _devices.append(Device(0, DeviceProperties(), _key=_FACTORY_KEY))
    return _devices


def device_count() -> int:
    """``hipGetDeviceCount``."""
    return len(_table())


def get_device(ordinal: int | None = None) -> Device:
    """The device with this ordinal (the calling task's current device by default).

    Raises:
        InvalidDevice: no such device.
    """
    table = _table()
    if ordinal is None:
        ordinal = current_ordinal()
        if ordinal >= len(table):  # the table shrank under the task's choice
            ordinal = 0
    if isinstance(ordinal, bool) or not isinstance(ordinal, int):
        raise TypeError(f"a device ordinal must be an int, got {ordinal!r}")
    if not 0 <= ordinal < len(table):
        raise InvalidDevice(f"device {ordinal} does not exist ({len(table)} configured)")
    return table[ordinal]


def _live(device: Device) -> Device:
    """``device`` if it is still the configured device of its ordinal (else InvalidDevice)."""
    table = _table()
    if not (0 <= device.ordinal < len(table) and table[device.ordinal] is device):
        raise InvalidDevice(f"{device!r} is no longer a configured device")
    return device


def check_range(ptr: DevicePtr, nbytes: int) -> None:
    """Validate a range on any device: committed memory or reserved address space."""
    _memory_of(ptr).check_range(ptr, nbytes)


def _memory_of(ptr: DevicePtr) -> DeviceMemory:
    table = _table()
    if not 0 <= ptr.device < len(table):
        raise InvalidDevicePointer(f"{ptr!r} belongs to no device")
    return table[ptr.device].memory


def resolve_pointer(ptr: DevicePtr, nbytes: int) -> tuple[npt.NDArray[np.uint8], int]:
    """Resolve a pointer of any device to (buffer, offset), bounds-checked."""
    return _memory_of(ptr).resolve(ptr, nbytes)
