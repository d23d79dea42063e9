"""Streams: in-order queues of device work, mapped onto hardware queues.

Each stream is assigned a hardware queue when it is created (round-robin, as HIP does) and keeps
the completion signal of its last packet (its *tail*). Every operation is validated first, then
becomes a one-op program on that queue; ``await stream.launch_kernel(...)`` returns once the work
is enqueued and gives a :class:`Completion` to await its end.

Legacy default stream: the device's null stream waits for all earlier work of every blocking
stream, and blocking streams wait for earlier null-stream work. Non-blocking streams do neither.

Failures: an op that fails (an exception in a kernel body, a fault in a copy) completes with its
:class:`HipError`. The error is raised by awaiting that op's completion and by the stream's next
``synchronize()`` (or the device's), after which it is cleared: the failure is sticky for the
stream until observed, and other streams and devices keep working. (HIP makes a fault sticky for
the whole context; a per-stream rule keeps unrelated work usable, which is what tests need.) A
stream destroyed, or dropped without ``destroy()``, before its failure was reported leaves it to
the device's next ``synchronize()``, which reports it once.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..core.errors import (
    HipError,
    IllegalState,
    InvalidDeviceFunction,
    InvalidHandle,
    InvalidValue,
)
from ..core.ints import as_int
from ..core.lifecycle import (
    DestroyOnExit,
    FactoryOnly,
    HandleRecord,
    check_live,
    destroyed,
    safe_repr,
)
from ..core.registry import HandleId, HandleRegistry
from ..core.surface import own_mixin_methods
from ..device.engine import current_loop, refuse_trio
from ..device.kernel import DimLike, Kernel
from ..device.ops import Op, WaitSignalsOp
from ..device.pointer import DevicePtr
from ..device.program import Program
from ..device.properties import CopyKind
from ..device.signal import Signal
from . import capture, observe
from .completion import Completion, make_completion
from .device import get_device
from .enqueue import enqueue_pair, kernel_enqueue_pair
from .event import Event, check_record_flags, live_event
from .launch_attributes import clamp_priority
from .params import (
    Endpoint,
    HostParams,
    KernelParams,
    MemcpyParams,
    MemsetParams,
    common_kernel_params,
    copies_nothing,
    fill_count,
)
from .per_thread import STREAM_PER_THREAD, per_thread_stream
from .stream_capture import StreamCaptureMixin
from .stream_copies import StreamCopyMixin, empty_size
from .stream_memops import StreamMemOpsMixin
from .stream_memory import StreamMemoryMixin

if TYPE_CHECKING:
    from ..device.hwqueue import HardwareQueue
    from .device import Device

__all__ = ["STREAMS", "Stream", "StreamState", "StreamStatistics", "launch_stream"]

STREAMS: HandleRegistry[Stream] = HandleRegistry("stream")
_FACTORY = FactoryOnly("streams are created with Device.create_stream()")
_new_object = object.__new__


class StreamState(enum.Enum):
    """A stream's ``state``: open until ``destroy()`` (or until it is forgotten)."""

    OPEN = "open"
    DESTROYED = "destroyed"


_OPEN = StreamState.OPEN  # read per operation: a class's enum member costs ten globals on 3.11


class _PendingFailure:
    """A stream's unreported failure, handed to its device if the stream is freed undestroyed.

    HIP reports an asynchronous failure at the next synchronizing call, whatever became of the
    stream whose work failed. When a stream dropped without ``destroy()`` is freed, its
    failure goes to its device, whose next ``synchronize()`` reports it once (a destroyed
    stream's failure is reported the same way, see ``Device._remove_stream``). A stream is
    freed only once its work is done (each packet's completion callback refers to it), so no
    failure comes after that.

    Only the stream refers to this, and the hand-over is its ``__del__``, run as the stream is
    freed, by reference counting or by the collector. The failure is very often reachable from
    the stream itself: awaiting the failed work raised this very error, and its traceback holds
    the frames that held the stream. Kept anywhere the stream does not own (a finalizer's
    record, which lives until the stream dies), it would keep the stream alive through that
    traceback for good, and the hand-over would never come. As part of the stream's own cycle
    the collector frees them together, and the failure handed over leaves its traceback
    behind (the device reports it without one), so it does not bring the stream back.

    The device is held as the stream holds it, which keeps it no longer than the stream. (Not
    weakly: the collector clears every weak reference held by the objects it frees, this one's
    too, before their ``__del__`` runs.) The hand-over may run on any thread, inside any locked
    section (see ``Device._forgotten_stream_failed``).
    """

    __slots__ = ("armed", "device", "error")

    def __init__(self, device: Device) -> None:
        self.device = device
        self.error: HipError | None = None
        self.armed = True  # until the stream is destroyed: its device keeps it then

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # (``_finalizing`` is bound here: at exit, ``sys`` may be one of the globals cleared.)
        error, self.error = self.error, None
        if error is None or not self.armed or _finalizing():  # at exit nothing reports it
            return
        self.device._forgotten_stream_failed(error.with_traceback(None))


class WakesGone(Protocol):
    """Where a call on a stream may be parked apart from its ring (a signal-set pool, a
    signal): :meth:`Stream._wake_parked` wakes such waits, parked with ``Stream._gone`` as
    their ``gone`` check (see :class:`~ahipgraph.core.waitqueue.WaitQueue`)."""

    def wake_gone(self) -> object: ...


@dataclass(frozen=True, slots=True)
class StreamStatistics:
    device: int
    queue: int
    submitted: int
    pending: bool
    error: bool


@own_mixin_methods
class Stream(
    StreamCaptureMixin, StreamMemoryMixin, StreamCopyMixin, StreamMemOpsMixin, DestroyOnExit
):
    """An in-order stream of device work. Create with ``device.create_stream()``.

    Capture (``begin_capture`` ...) and stream-ordered memory (``malloc_async``, ``free_async``)
    come from the mixins; while the stream captures, ``_capture`` holds its part of the capture
    and every operation becomes a node there instead of running.
    """

    # Slots: a stream takes no attribute it does not declare (a typo such as
    # ``stream.prority = 1``, or ``stream.synchronize = None`` shadowing a method, is refused
    # with AttributeError). ``__weakref__``: its registry, its finalizer, its device's stream
    # list and a capture's part hold it weakly.
    __slots__ = (
        "__weakref__",
        "_capture",
        "_device",
        "_failure",
        "_hid",
        "_implicit",
        "_is_null",
        "_last_free",
        "_life",
        "_non_blocking",
        "_parked",
        "_priority",
        "_queue",
        "_retired_cb",
        "_state",
        "_submitted",
        "_tail",
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: streams come from ``device.create_stream()``."""
        _FACTORY.refuse()

    def _init(
        self,
        device: Device,
        *,
        priority: int = 0,
        non_blocking: bool = False,
        null: bool = False,
        owned: bool = False,
    ) -> None:
        priority = as_int(priority, "priority")
        if not isinstance(non_blocking, bool):
            raise TypeError(f"non_blocking must be a bool, got {non_blocking!r}")
        self._device = device
        self._priority = clamp_priority(priority)  # HIP clamps into [greatest, least]
        self._non_blocking = bool(non_blocking)
        self._is_null = null
        # Made by the runtime, not the user (the null stream, a per-thread stream): the device
        # owns it, a leak report does not count it, and replacing the device retires it.
        self._implicit = null
        self._queue: HardwareQueue = device.queues[0] if null else device.engine.next_queue()
        self._state = StreamState.OPEN
        self._tail: Signal | None = None
        # The completion of the latest eager free_async: memory the stream gives back there
        # is what a malloc_async short of memory waits for (see StreamMemoryMixin).
        self._last_free: Signal | None = None
        self._submitted = 0
        self._retired_cb: Callable[[Program], None] = self._retired
        self._capture: capture.StreamCapture | capture._NullGuard | None = None
        # Where calls on this stream are parked apart from its ring, one entry per parked
        # call (see _parked_elsewhere): _wake_parked wakes them.
        self._parked: list[WakesGone] = []
        self._hid = STREAMS.register(self)
        # A forgotten stream is freed with a warning; one the runtime owns (the null stream, a
        # per-task stream) quietly. Its registry slot and device entry go with it (both weak);
        # its unreported failure goes to the device (_PendingFailure).
        self._failure = _PendingFailure(device)
        self._life = HandleRecord(
            self,
            f"stream #{self.hid.slot}.{self.hid.generation} on device {device.ordinal}",
            quiet=null or owned,
        )
        try:
            device._add_stream(self)
        except BaseException:  # (out of memory) never handed out: not a forgotten stream
            self._life.detach()
            self._failure.armed = False
            raise

    @classmethod
    def _create(
        cls,
        device: Device,
        *,
        priority: int = 0,
        non_blocking: bool = False,
        null: bool = False,
        owned: bool = False,
    ) -> Stream:
        """The one way to make a stream. ``owned``: the runtime owns it (no warning if dropped)."""
        stream: Stream = _new_object(cls)
        stream._init(device, priority=priority, non_blocking=non_blocking, null=null, owned=owned)
        return stream

    # -- checks -----------------------------------------------------------------------------------

    def _check_open(self) -> None:
        """Raise ContextIsDestroyed (HIP's answer for a dead stream) if it was destroyed."""
        if self._state is not _OPEN:
            check_live(False, "stream", self)

    def _check_takes_work(self) -> None:
        """The handle check of eager work, after :meth:`_check_open`: a stream kept from a
        device ``configure_devices`` replaced takes no new work (``InvalidDevice``, as its
        submission would say). Checked before the call's arguments: its pointers resolve by
        ordinal, so they would be looked up in the successor's memory, and the call refused or
        not for what the successor happens to hold."""
        engine = self._queue._engine
        if engine._retired:
            engine._refuse_retired()

    @property
    def _error(self) -> HipError | None:
        """The stream's unreported failure, handed to its device if the stream is freed
        undestroyed (see :class:`_PendingFailure`)."""
        return self._failure.error

    @_error.setter
    def _error(self, error: HipError | None) -> None:
        self._failure.error = error

    def _take_error(self) -> HipError | None:
        """Return and clear the stream's unreported failure."""
        error, self._error = self._error, None
        return error

    # -- submission --------------------------------------------------------------------------------

    def _implicit_waits(self) -> list[Signal]:
        """Work this stream must order after under legacy default-stream rules, and has not
        yet passed (see :meth:`_ahead`)."""
        if self._non_blocking:
            return []
        if self._is_null:
            return [
                s._tail
                for s in self._device._legacy_streams()
                if s is not self
                and not s._non_blocking
                and s._tail is not None
                and self._ahead(s._tail)
            ]
        null = self._device._null_stream
        if null is not None and null._tail is not None and self._ahead(null._tail):
            return [null._tail]
        return []

    def _ahead(self, signal: Signal) -> bool:
        """Whether work enqueued here now must wait for ``signal``: it is not reached, or was
        reached at a simulated time this stream's next work could start before.

        The device runs work as soon as the event loop turns, so a signal is often reached
        (in Python) before the host has seen it, at a simulated time still ahead of the host's
        clock and of everything this stream's queue has run: work enqueued here without a
        wait would be stamped before it, as if it ran before the work it is ordered after
        (an event waited for, legacy-stream order), and ``elapsed_time`` from the record to
        that work came out negative. Once the host's clock (a synchronize, a query) or the
        queue has passed it, later work here starts after it anyway and needs no wait.
        """
        if signal._value > 0:
            return True
        time = signal._time
        return time > self._queue._engine._clock.now and time > self._queue._busy_until

    def _ring(self) -> HardwareQueue | None:
        """The hardware queue an enqueue needs room in; None while capturing (no packets), and
        for a destroyed stream or a replaced device: the operation's body then reports it, in
        HIP's order among the call's other errors (``record_event`` checks its flags and
        event first)."""
        if self._state is not _OPEN or self._capture is not None or self._queue._engine._retired:
            return None
        return self._queue

    def _gone(self) -> bool:
        """True once the stream takes no new work: destroyed, or its device replaced by
        ``configure_devices``. What ends a call's wait for room in its ring, for a signal set
        or for a pending free (see :meth:`_wake_parked`). Safe from any thread."""
        return self._state is not _OPEN or self._queue._engine._retired

    def _parked_elsewhere(self, waits: WakesGone) -> None:
        """A call on this stream parks in ``waits`` (with :meth:`_gone` as its ``gone``
        check) until :meth:`_unparked_elsewhere`: :meth:`_wake_parked` wakes it there too."""
        self._parked.append(waits)

    def _unparked_elsewhere(self, waits: WakesGone) -> None:
        """The call :meth:`_parked_elsewhere` announced no longer waits in ``waits``."""
        self._parked.remove(waits)

    def _wake_parked(self) -> None:
        """The stream takes no new work (:meth:`_gone`): wake the calls on it parked for room
        in its ring (behind a kernel that may never end), for a signal set (a graph launch) or
        for a pending free (``malloc_async``). They take nothing and fail as a call made now
        would (``ContextIsDestroyed``, ``InvalidDevice``), rather than wait, perhaps for
        good, for what they would not use. Safe from any thread; a few checks when nothing
        is parked."""
        self._queue.wake_gone()
        if self._parked:
            for waits in list(self._parked):
                waits.wake_gone()

    def _submit(self, program: Program, part: object = None) -> None:
        """Enqueue a program on this stream; its completion signal becomes the stream's tail.

        The stream is checked again here, though every enqueue checked it first: the
        enqueue's argument checks run user code (an argument's ``__index__``, a grid's
        ``__len__``), which may have destroyed the stream since, or begun a capture that takes
        it in (see :meth:`_changed_under_call`). ``part`` is the stream's part in a capture
        the enqueue found and still does eager work for (``wait_event`` on an event recorded
        outside the capture); anything else enqueues only on a stream that does not capture.
        One test per enqueue.

        Raises: as :meth:`_changed_under_call`; as :meth:`Engine.bind_loop
        <ahipgraph.device.engine.Engine.bind_loop>` (no running loop, or the device is busy on
        another loop). All before anything changes.
        """
        engine = self._queue._engine
        with engine.submitting():  # the owner check and every packet of this enqueue: one step
            if self._state is not _OPEN or self._capture is not part:
                self._changed_under_call()
            engine.claim_locked()
            self._submit_locked(program)

    def _check_unchanged(self) -> None:
        """Refuse an eager call whose stream changed since the call looked at it (see
        :meth:`_changed_under_call`); nothing if it is open and captures nothing."""
        if self._state is not _OPEN or self._capture is not None:
            self._changed_under_call()

    def _changed_under_call(self) -> None:
        """Refuse an eager enqueue whose stream changed since the call looked at it.

        The call's argument checks ran user code that destroyed the stream, or began a
        capture: on this stream (the work was to run, not become a node; in HIP the capture
        would have begun before the call, whose arguments are evaluated first) or, for the
        null stream, on a blocking stream of its device (HIP's implicit rule).

        Raises:
            ContextIsDestroyed: the stream was destroyed.
            StreamCaptureImplicit: the null stream, while a blocking stream captures.
            IllegalState: a capture began on the stream.
        """
        self._check_open()
        if self._is_null:
            raise capture.NULL_GUARD.unsupported("an eager enqueue")
        raise IllegalState(f"a capture began on {self!r} while this call was being made")

    def _submit_locked(self, program: Program) -> None:
        """:meth:`_submit` for a caller that holds the engine's lock and claimed it."""
        if not self._non_blocking:  # legacy default-stream ordering
            waits = self._implicit_waits()
            if waits:  # the packet's barrier, not a packet of its own: one slot per enqueue
                program.barrier = tuple(waits)
        if program.on_done is None:
            program.on_done = self._retired_cb
        self._queue.submit_locked(program)
        self._submitted += 1
        if program.completion is not None:
            self._tail = program.completion

    def _submit_op(self, op: Op) -> Completion:
        signal = Signal(1)
        program = Program((op,), signal)
        self._submit(program)
        return make_completion(signal, self._device, program)

    def _nothing_enqueued(self) -> Completion:
        """The completion of an eager copy or fill of 0 bytes (or a copy onto itself, see
        :func:`copies_nothing`), once its checks passed.

        HIP's ``hipMemcpyAsync``/``hipMemsetAsync`` family return ``hipSuccess`` for a size of
        0 without enqueuing a command: such a call costs no launch latency, takes no room in
        the ring and, on the null stream, waits for no blocking stream (an event recorded
        after it is not delayed). The stream is checked again, as :meth:`_submit` does (the
        checks ran user code), and the device's loop, as for any enqueue: a device busy on
        another event loop refuses the call. Its ``start_ns`` is None, as nothing ran.
        """
        self._check_unchanged()
        engine = self._queue._engine
        engine.bind_loop()
        done = Signal(0)
        done._time = engine._clock.now  # done when called: its end_ns is the host's now
        return make_completion(done, self._device)

    def _observed(self, work: Any, op: Op) -> Completion:
        """Submit eager work; a runtime observer (the race checker) checks it first and may
        refuse it, in which case nothing was enqueued."""
        if observe.observer is not None:
            return observe.observer.enqueue(self, work, lambda: self._submit_op(op))
        return self._submit_op(op)

    def _retired(self, program: Program) -> None:
        if program.error is not None and self._error is None:
            self._error = program.error

    def _report_error(self, error: HipError) -> None:
        """Make ``error`` this stream's pending failure (graph launches report through this)."""
        if self._error is None:
            self._error = error

    # -- operations --------------------------------------------------------------------------------

    def _launch_kernel(
        self,
        kernel: Kernel,
        grid: DimLike,
        block: DimLike,
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
    ) -> Completion:
        """Enqueue a kernel (``hipLaunchKernel``): grid in blocks, block in threads.

        Raises:
            ContextIsDestroyed: the stream was destroyed.
            InvalidDeviceFunction: ``kernel`` is None (HIP's answer for a null function; a
                capturing stream adds a kernel node, which refuses it as ``InvalidValue``).
            InvalidConfiguration: bad grid/block. InvalidValue: too much shared memory.
            TypeError/ValueError: bad arguments.
        """
        self._check_open()
        part = self._capture  # read once: another thread may end the capture meanwhile
        if part is not None:
            return part.add_kernel(
                kernel, grid, block, args, shared_mem, self._priority, self._device
            )
        self._check_takes_work()
        params = common_kernel_params(
            kernel, grid, block, args, shared_mem, 0, self._device
        ) or self._kernel_params(kernel, grid, block, args, shared_mem=shared_mem)
        return self._observed(params, params.op(self._device))

    def _kernel_params(
        self,
        kernel: Kernel,
        grid: DimLike,
        block: DimLike,
        args: Sequence[Any] = (),
        *,
        shared_mem: int = 0,
    ) -> KernelParams:
        """An eager launch's checks and parameters when ``common_kernel_params`` has none,
        and ``launch_kernel``'s checks for a call that must wait for room: ``make``, which
        raises what ``common_kernel_params`` would (see there), after HIP's null-function
        check (``hipLaunchKernel`` answers ``InvalidDeviceFunction``; ``make`` serves graph
        nodes and executables too, whose null kernel is ``InvalidValue``)."""
        if kernel is None:
            raise InvalidDeviceFunction("kernel is null")
        return KernelParams.make(
            kernel, grid, block, args, shared_mem=shared_mem, device=self._device
        )

    launch_kernel, launch_kernel_nowait = kernel_enqueue_pair(_launch_kernel, _OPEN, _kernel_params)

    def _memcpy(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> Completion:
        """Enqueue a copy (``hipMemcpyAsync``); see :meth:`MemcpyParams.make` for the rules."""
        self._check_open()
        part = self._capture  # read once (see _launch_kernel)
        if part is not None:
            # Built by module functions: a capture builds a node under its lock, where no
            # stream method runs (another thread may end the capture between them).
            return part.add(
                "Memcpy", lambda: MemcpyParams.make(dst, src, nbytes, kind, empty_unchecked=True)
            )
        self._check_takes_work()
        copy = self._memcpy_params(dst, src, nbytes, kind)
        if copies_nothing(copy, kind):
            return self._nothing_enqueued()
        return self._observed(copy, copy.op(self._device))

    def _memcpy_params(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> MemcpyParams:
        """``memcpy``'s checks and parameters, for an eager copy."""
        return MemcpyParams.make(dst, src, nbytes, kind, empty_unchecked=True)

    def _memcpy_packetless(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
    ) -> bool:
        """Whether ``memcpy`` adds no packet, by its size alone (see :func:`empty_size`): 0,
        or none given and an empty host array, whose size the copy takes then (a numpy
        array's own, not a subclass's, which may compute it)."""
        if nbytes is None:
            return any(type(end) is np.ndarray and end.nbytes == 0 for end in (dst, src))
        return empty_size(nbytes)

    memcpy, memcpy_nowait = enqueue_pair(
        _memcpy, check=_memcpy_params, packetless=_memcpy_packetless
    )

    def _memset(
        self,
        dst: DevicePtr,
        value: int,
        count: int | None = None,
        *,
        element_size: int = 1,
        nbytes: int | None = None,
    ) -> Completion:
        """Enqueue a fill of ``count`` elements of ``element_size`` bytes with ``value``.

        ``hipMemsetD8/D16/D32Async``: the count is in elements, as for a graph memset node's
        ``width``, so one count means the same thing on a stream and in a graph. ``nbytes=``
        gives the size in bytes instead (``hipMemsetAsync``'s ``sizeBytes``, and the name
        ``Device.memset`` takes); with bytes, the two are the same number.

        Raises:
            InvalidValue: element size other than 1/2/4, a negative count, a bad region, or
                ``nbytes`` that is not a whole number of elements.
            TypeError: neither ``count`` nor ``nbytes`` given, or both.
        """
        self._check_open()  # first, as for every other enqueue, whichever size form is used
        # Read once (see _launch_kernel), and before ``nbytes`` is converted: its __index__ is
        # user code that may end the capture (the part then refuses the call) or begin one
        # (``_submit`` then refuses the eager fill), as for every other argument.
        part = self._capture
        count = fill_count(count, nbytes, element_size)
        if part is not None:
            return part.add(
                "Memset",
                lambda: MemsetParams.make(
                    dst, value, count, element_size=element_size, empty_unchecked=True
                ),
            )
        self._check_takes_work()
        params = self._memset_params(dst, value, count, element_size=element_size)
        if not params.nbytes:
            return self._nothing_enqueued()
        return self._observed(params, params.op(self._device))

    def _memset_params(
        self,
        dst: DevicePtr,
        value: int,
        count: int | None = None,
        *,
        element_size: int = 1,
        nbytes: int | None = None,
    ) -> MemsetParams:
        """``memset``'s checks and parameters, for an eager fill."""
        count = fill_count(count, nbytes, element_size)
        return MemsetParams.make(dst, value, count, element_size=element_size, empty_unchecked=True)

    def _memset_packetless(
        self,
        dst: DevicePtr,
        value: int,
        count: int | None = None,
        *,
        element_size: int = 1,
        nbytes: int | None = None,
    ) -> bool:
        """Whether ``memset`` adds no packet, by its size alone (see :func:`empty_size`)."""
        return empty_size(count) or empty_size(nbytes)

    memset, memset_nowait = enqueue_pair(
        _memset, check=_memset_params, packetless=_memset_packetless
    )

    def _launch_host_func(self, fn: Callable[..., Any], *args: Any) -> Completion:
        """Enqueue a host callback (``hipLaunchHostFunc``); the stream waits until it returns."""
        self._check_open()
        part = self._capture  # read once (see _launch_kernel)
        if part is not None:
            return part.add("Host", lambda: HostParams.make(fn, args))
        self._check_takes_work()
        host = HostParams.make(fn, args)
        return self._observed(host, host.op(self._device))

    def _host_params(self, fn: Callable[..., Any], *args: Any) -> HostParams:
        """``launch_host_func``'s checks for a call that must wait for room."""
        return HostParams.make(fn, args)

    launch_host_func, launch_host_func_nowait = enqueue_pair(_launch_host_func, check=_host_params)

    def _record_event(self, event: Event, flags: int = 0) -> None:
        """Record ``event`` here (``hipEventRecordWithFlags``): it completes when earlier work
        has.

        ``flags=1`` (``hipEventRecordExternal``) matters only on a capturing stream, where the
        record also becomes an EventRecord node (so a launch of the graph records the event);
        elsewhere both flags record alike.

        Raises:
            InvalidValue: ``flags`` other than 0 or 1.
            InvalidHandle / ContextIsDestroyed: a null or destroyed event / a destroyed stream
                (HIP's order: flags, then the event, then the stream).
            InvalidHandle: an eager record of an event made on another device (HIP's
                ``hipErrorInvalidResourceHandle``, the same code). Capture errors: see ``capture``.
        """
        # Read once (see _launch_kernel), and before the flags are converted: their __index__
        # may end the capture (the part then refuses the record) or begin one (``_submit``
        # then refuses the eager record), as an enqueue's arguments may.
        part = self._capture
        flag = self._check_record_call(event, flags)
        if part is not None:
            external = flag == capture.EVENT_RECORD_EXTERNAL
            part.record_event(event, capture.record_node_params(event) if external else None)
            return
        self._check_eager_record(event)
        signal = Signal(1)
        self._submit(Program((), signal))  # may be refused (no loop, busy): nothing changed yet
        capture.record_eager(event)
        event._recorded(signal, self.device)
        if observe.observer is not None:
            observe.observer.event_recorded(self, event)

    def _check_record_call(self, event: Event, flags: int) -> int:
        """What every ``record_event`` checks, captured or not, in HIP's order
        (``hipEventRecord_common``: the flags, the event, then the stream); returns the
        flags as an int."""
        flag = check_record_flags(flags)
        live_event(event)
        self._check_open()
        return flag

    def _check_eager_record(self, event: Event) -> None:
        self._check_takes_work()  # a kept stream of a replaced device: not a foreign event
        if event._device is not self._device:
            # HIP checks this for an eager record only (a capture takes any event): the
            # event's timestamps and completion belong to its own device's clock and engine.
            raise InvalidHandle(
                f"{event!r} belongs to device {event.device.ordinal}, not to {self!r}'s device"
            )

    def _check_record_event(self, event: Event, flags: int = 0) -> None:
        """``record_event``'s checks for a call that must wait for room."""
        self._check_record_call(event, flags)
        self._check_eager_record(event)

    record_event, record_event_nowait = enqueue_pair(_record_event, check=_check_record_event)

    def _wait_event(self, event: Event, flags: int = 0) -> None:
        """Make later work wait for ``event``'s latest record (``hipStreamWaitEvent``).

        An event never recorded is already complete, so the wait is a no-op, as in HIP; such a
        wait, and one on a record complete before this stream's next work could start (see
        :meth:`_ahead`), adds no packet, so it never waits for room. An
        event recorded during a capture forks this stream into that capture (or joins it);
        ``flags=1`` (``hipEventWaitExternal``) on a capturing stream adds an EventWait node.

        Raises:
            InvalidValue: ``flags`` other than 0 or 1.
            InvalidHandle / ContextIsDestroyed: a null or destroyed event / a destroyed stream
                (HIP's order: flags, then the event, then the stream). Capture errors: see
                ``capture``.
            RuntimeError: called from a trio task (ahipgraph runs on asyncio or uvloop), even
                for a wait that adds no packet.
        """
        self._wait_for_record(event, flags, _record_of(event))

    def _wait_event_later(self, event: Event, flags: int = 0) -> Callable[[], None]:
        """A ``wait_event`` that must wait for room: it waits for the record current now.

        HIP's ``hipStreamWaitEvent`` takes the event's latest record when it is called; a
        record made while this call waits for ring space (by another task) is not the one
        it waits for. The call is checked now, as the body checks it.
        """
        self._check_wait_call(event, flags)
        record = _record_of(event)
        return lambda: self._wait_for_record(event, flags, record)

    def _check_wait_call(self, event: Event, flags: int) -> int:
        """What every ``wait_event`` checks first, in HIP's order (``hipStreamWaitEvent``:
        the flags, the event, then the stream); returns the flags as an int."""
        flag = capture.check_wait_flags(flags)
        live_event(event)
        self._check_open()
        return flag

    def _wait_for_record(self, event: Event, flags: int, record: Signal | None) -> None:
        """``wait_event``'s work: make later work wait for ``record``, ``event``'s record
        when the call was made."""
        part = self._capture  # before the flags' __index__, which may begin a capture here
        flag = self._check_wait_call(event, flags)
        now = self._capture
        if now is not part and isinstance(now, capture.StreamCapture):
            # A capture began on this stream under the call (its flags' conversion): the wait
            # was asked of a stream that did not capture (see _changed_under_call).
            self._changed_under_call()
        if capture.wait_event(self, event, flag):
            return
        if record is not None and self._ahead(record):
            # The barrier is stream work: it becomes the tail, so synchronize() and query()
            # cover it. The device may refuse it (no running loop, busy on another loop).
            # (On a capturing stream too: an event recorded outside its capture.) A record
            # the device already reached, at a simulated time still ahead of this stream,
            # takes one too: the barrier passes at once and starts later work after it.
            self._submit(Program((WaitSignalsOp((record,)),), Signal(1)), self._capture)
        elif current_loop() is None:  # nothing submitted, so no loop was asked for: a trio
            refuse_trio()  # task must still hear that ahipgraph runs on asyncio, here
        if observe.observer is not None:  # ordering the API promises, done or not
            observe.observer.event_waited(self, event)

    def _wait_event_packetless(self, event: Event, flags: int = 0) -> bool:
        """Whether ``wait_event`` adds no packet now: the event is unrecorded or its record is
        complete, and not ahead of this stream (:meth:`_ahead`; HIP's ``hipStreamWaitEvent``
        enqueues nothing for a complete event), or its latest record
        was made in a capture still running (the wait forks this stream into it, or is
        refused, whatever an older eager record of the event left pending). Such a call
        needs no room in a full ring. Not for a bad argument: the check before parking
        refuses it."""
        given: object = event  # callers are untyped Python: check what really came in
        if not isinstance(given, Event):
            return False
        record = event._signal
        return record is None or not self._ahead(record) or capture.recorded_in_capture(event)

    def _wait_event_ring(self, event: Event, flags: int = 0) -> HardwareQueue | None:
        """The queue ``wait_event`` needs room in: the stream's (see :meth:`_ring`), and on a
        capturing stream too when the wait is a real one, on an event recorded outside any
        capture (its barrier packet goes to the stream's queue, as HIP's marker does)."""
        queue = self._ring()
        if queue is not None or self._state is not _OPEN or self._queue._engine._retired:
            return queue
        given: object = event  # callers are untyped Python: check what really came in
        if isinstance(given, Event) and capture.waits_eagerly(self, event, flags):
            return self._queue
        return None

    wait_event, wait_event_nowait = enqueue_pair(
        _wait_event,
        at_call=_wait_event_later,
        packetless=_wait_event_packetless,
        ring=_wait_event_ring,
    )

    async def synchronize(self) -> None:
        """Wait for all work on the stream (``hipStreamSynchronize``).

        Raises:
            ContextIsDestroyed: the stream was destroyed.
            IllegalState: the device is busy on another event loop.
            HipError: the stream's unreported failure, which is then cleared.
            StreamCaptureUnsupported: the stream captures, or the calling task's capture mode
                forbids it while captures are in progress (those captures are invalidated).
            RuntimeError: called from a trio task (ahipgraph runs on asyncio or uvloop).
        """
        refuse_trio()
        self._check_open()
        capture.check_stream_sync(self, "synchronize()")
        for signal in self._sync_targets():
            await self._device._wait_signal(signal)
        if observe.observer is not None:
            observe.observer.stream_synchronized(self)
        error = self._take_error()
        if error is not None:  # perhaps raised before, by an await of the work's completion
            raise error.with_traceback(None)

    def _sync_targets(self) -> list[Signal]:
        targets = [] if self._tail is None else [self._tail]
        if self._is_null:
            targets.extend(self._implicit_waits())
        return targets

    def query(self) -> bool:
        """True when all work on the stream is complete (``hipStreamQuery``), False if not.

        Raises: as :meth:`synchronize` for capture.
        """
        self._check_open()
        capture.check_stream_sync(self, "query()")
        targets = self._sync_targets()
        done = all(signal._value <= 0 for signal in targets)
        if done and targets:  # the host saw the work complete, as synchronize() does
            self._device._clock.observe(max(signal._time for signal in targets))
        if done and observe.observer is not None:
            observe.observer.stream_synchronized(self)
        return done

    @property
    def hid(self) -> HandleId:
        """The registry handle (read-only: its destroy retires exactly this one, never
        another handle's)."""
        return self._hid

    # What the stream was made with and where it stands: read-only, as in HIP, which has
    # getters for them and no setters. The runtime acts on each of them (where work runs, what
    # it orders after, what synchronize waits for, whether destroy may end it), so a value
    # assigned from outside would make it act on something the stream is not.

    @property
    def device(self) -> Device:
        """The device the stream's work runs on (``hipStreamGetDevice``)."""
        return self._device

    @property
    def priority(self) -> int:
        """The priority it was created with, clamped into the device's range
        (``hipStreamGetPriority``)."""
        return self._priority

    @property
    def non_blocking(self) -> bool:
        """Created with ``hipStreamNonBlocking`` (``hipStreamGetFlags``): it does not order
        with the legacy null stream."""
        return self._non_blocking

    @property
    def is_null(self) -> bool:
        """True for the device's legacy null stream, which cannot be destroyed."""
        return self._is_null

    @property
    def implicit(self) -> bool:
        """Made by the runtime (the null stream, a per-thread stream), not by the user: the
        device owns it and retires it when ``configure_devices`` replaces the device."""
        return self._implicit

    @property
    def queue(self) -> HardwareQueue:
        """The hardware queue its work is submitted to."""
        return self._queue

    @property
    def state(self) -> StreamState:
        """OPEN until ``destroy()``."""
        return self._state

    @property
    def submitted(self) -> int:
        """Packets enqueued on it so far."""
        return self._submitted

    @property
    def tail(self) -> Signal | None:
        """The completion signal of its latest packet (None before the first): what
        ``synchronize()`` waits for."""
        return self._tail

    @property
    def alive(self) -> bool:
        """False once ``destroy()`` was called."""
        return self._state is StreamState.OPEN

    def destroy(self) -> None:
        """Destroy the stream (``hipStreamDestroy``). Work already enqueued still completes.

        A failure of the stream's work is not raised here, whether it is already known or
        comes later: ``hipStreamDestroy`` reports none (it returns success or a bad handle),
        and HIP reports an asynchronous failure at the next synchronizing call. The device's
        next :meth:`Device.synchronize` reports it, once, as it does for a stream dropped
        without ``destroy()``.

        Raises:
            InvalidHandle: the null stream, or a stream already destroyed.
        """
        if self._is_null:
            raise InvalidHandle("the null stream cannot be destroyed")
        if STREAMS.unregister(self.hid) is None:
            if self._life.freed:  # collected: destroyed from a cycle-mate's __del__
                return
            raise destroyed("stream", self, "destroy", "was already destroyed")
        self._life.detach()
        self._failure.armed = False  # its device keeps it while it owes a failure instead
        self._close()

    def _close(self) -> None:
        """Mark the stream destroyed, then end its part in a capture (``destroy``, ``_retire``).

        In that order: the capture's teardown may run user-object destructors (of the graph
        the capture made), and the stream is destroyed whatever they do; and a capture begun
        or forked into on another thread meanwhile either sees the stream destroyed or is
        ended here (``capture.stream_destroyed`` reads the part under the capture lock).
        """
        self._state = StreamState.DESTROYED
        self._wake_parked()
        self._device._remove_stream(self)
        capture.stream_destroyed(self)

    def _retire(self) -> None:
        """Unregister a stream the runtime made (null, per-thread) when its device is dropped.

        ``destroy()`` refuses the null stream because a user must not end it; a device that is
        replaced by ``configure_devices`` must, or the stream registry keeps it (and its device)
        alive forever. Work already enqueued still completes. A per-thread stream may be
        capturing: its capture ends as a destroyed stream's does, or it would stay in progress
        for good (nothing can end it once the stream is gone) and refuse every GLOBAL ``malloc``.
        """
        if STREAMS.unregister(self.hid) is None:
            return
        self._close()

    def statistics(self) -> StreamStatistics:
        """The stream's device and hardware queue, the operations submitted to it, whether
        some are still pending, and whether a failure waits to be reported."""
        return StreamStatistics(
            self._device.ordinal,
            self._queue.index,
            self._submitted,
            self._tail is not None and self._tail._value > 0,
            self._error is not None,
        )

    @safe_repr
    def __repr__(self) -> str:
        name = "null" if self._is_null else f"#{self.hid.slot}.{self.hid.generation}"
        # A capturing stream adds nodes instead of running work: say so, or a repr in a test
        # failure shows an open stream whose work never ran.
        session = getattr(self._capture, "session", None)
        capturing = "" if session is None else f" capture={session.status.name.lower()}"
        # Open, but of a device configure_devices replaced: it takes no new work.
        replaced = " replaced" if self._queue._engine._retired else ""
        return (
            f"<Stream {name} device={self._device.ordinal} queue={self._queue.index} "
            f"state={self._state.value} submitted={self._submitted}{capturing}{replaced}>"
        )


def _record_of(event: object) -> Signal | None:
    """The completion of ``event``'s latest record (None: unrecorded, or not an event; the
    wait's checks report the latter)."""
    return event._signal if isinstance(event, Event) else None


def launch_stream(stream: object, device: Device, *, any_device: bool = False) -> Stream:
    """The stream a call that takes an optional stream works on (launch, upload, ...).

    None means the null stream and ``STREAM_PER_THREAD`` the calling task's own stream, both
    of ``device``; with ``any_device`` (a graph launch, which may cross devices) any device's
    stream is accepted, and None / ``STREAM_PER_THREAD`` mean those of the current device, as
    HIP resolves them.

    Raises:
        TypeError: ``stream`` is neither None nor a Stream.
        ContextIsDestroyed: the stream was destroyed.
        InvalidValue: the stream belongs to another device.
        InvalidDevice: the stream's device was replaced by ``configure_devices``.
    """
    if stream is None or stream is STREAM_PER_THREAD:
        # HIP resolves the null stream and hipStreamPerThread on the calling thread's current
        # device; only a call that may cross devices can use a device other than ``device``.
        home = get_device() if any_device else device
        return home.null_stream if stream is None else per_thread_stream(home)
    if not isinstance(stream, Stream):
        raise TypeError(f"stream must be a Stream or None, got {stream!r}")
    if stream._state is not _OPEN:
        stream._check_open()  # raises
    home = stream._device
    if home is not device and not any_device:
        if home.engine._retired:  # a stream kept from devices configure_devices replaced
            home.engine._refuse_retired()  # raises InvalidDevice
        raise InvalidValue(
            f"{stream!r} belongs to device {home.ordinal}, not device {device.ordinal}"
        )
    return stream
