"""Operations: the units of device work that packets are made of.

An op is what a kernel dispatch, copy, fill, host callback, barrier or signal write does on the
device. The same op objects serve eager stream work (a packet of one op) and graph replays (a
packet holding a whole prepared segment program), so eager and graph execution run exactly the
same code.

``op.run(program)`` does the work and advances ``program.time`` by the op's modelled cost. It
returns ``None`` when done; a :class:`Signal` when it must wait for that signal and be run again;
or an awaitable (an ``async`` kernel or host function, or an awaitable a synchronous one
returned: see :func:`body_result`) after which it counts as done. A raised exception is turned
into the op's :class:`HipError` by ``op.fault``.

Ops marked ``is_sync`` (barriers and signal writes) are the ones that still run when work is
abandoned by a closed event loop, so the packets that wait on them never hang.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from ..core.errors import HipError, IllegalAddress, LaunchFailure, kernel_fault
from .host_function import call_host_function
from .kernel import Kernel, Threads
from .pointer import DevicePtr
from .properties import CopyKind
from .signal import Signal

if TYPE_CHECKING:
    from .memory import DeviceMemory
    from .program import Program

__all__ = [
    "CopyOp",
    "DefaultsOp",
    "FillOp",
    "FreeOp",
    "HostOp",
    "KernelOp",
    "Op",
    "SignalIndexOp",
    "StreamMemOpOp",
    "WaitSignalsOp",
    "WaitSignalIndicesOp",
    "host_bytes",
    "qualname_of",
    "user_repr",
]


class Op:
    """Base class of device operations."""

    __slots__ = ("cost_ns",)
    is_sync = False

    def __init__(self, cost_ns: int) -> None:
        self.cost_ns = cost_ns

    def run(self, program: Program) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def fault(self, exc: BaseException) -> HipError:
        if isinstance(exc, HipError):
            return exc
        return IllegalAddress(f"{self!r} failed: {user_repr(exc)}")


def user_repr(value: object) -> str:
    """``repr(value)`` for a message about user code's object (the exception a kernel body or
    host function raised, the function itself): a fault's message, a trace's record.

    That repr is user code too, and may raise anything: those messages are made on the
    device's pump, where an exception escaping would stop every queue, so a repr that raises
    is shown as its class instead.
    """
    try:
        return repr(value)
    except BaseException:  # user code, contained (see the docstring)
        return f"<{type(value).__qualname__} object; its repr() raised>"


def qualname_of(fn: object) -> str | None:
    """A host function's ``__qualname__``, or None where it has none that is a str (a
    callable object's lookup is its class's ``__getattr__``: user code, contained as in
    :func:`user_repr`)."""
    try:
        name = getattr(fn, "__qualname__", None)
    except BaseException:  # a user's __getattr__ or property
        return None
    return name if isinstance(name, str) else None


def _host_name(fn: object) -> str:
    """A host function's name for messages: its ``__qualname__``, else :func:`user_repr`."""
    name = qualname_of(fn)
    return user_repr(fn) if name is None else name


def body_result(result: Any) -> Awaitable[Any] | None:
    """What a synchronous kernel body's return value (not None) means for its dispatch.

    A body declared with ``def`` may still hand back an awaitable: it calls an ``async def``
    helper and returns the coroutine, or it is a wrapper (a decorator, a lambda) around an
    async function, so ``Kernel`` took it for synchronous. Its work is in the awaitable, so it
    is awaited as an async body's coroutine is: the queue stays busy until it ends, and its
    failure is the kernel's ``LaunchFailure``. (Dropped, a coroutine's work was silently lost,
    with a "never awaited" warning when it was collected.) The engine starts it as it starts
    an async body (see ``Engine.start``). A generator (a wrapper around a generator function,
    which ``Kernel`` cannot see through) fails the dispatch: its body never ran, and ignoring
    it would pass the launch for done. Any other value is ignored, as a C kernel's ``void``
    return.

    Raises:
        TypeError: ``result`` is a generator or an async generator.
    """
    if inspect.isawaitable(result):
        return result
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        raise TypeError(
            f"the kernel body returned {type(result).__name__} {result!r} instead of running: "
            f"a kernel body cannot be a generator function, nor a wrapper around one"
        )
    return None


class _KernelOpType(type):
    """KernelOp's metaclass: the ops of a run (:class:`_RunKernelOp`) are kernel ops too."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        return cls is KernelOp and isinstance(instance, _RunKernelOp)

    def __subclasscheck__(cls, subclass: Any) -> bool:
        if type.__subclasscheck__(cls, subclass):
            return True
        return cls is KernelOp and isinstance(subclass, type) and issubclass(subclass, _RunKernelOp)


class KernelOp(Op, metaclass=_KernelOpType):
    """Dispatch a kernel whose arguments are read from ``buffer`` at ``offset`` when it runs.

    Every kernel op has the attributes below; ``KernelOp(...)`` makes one that holds them all
    as slots. The ops :meth:`make_shared` makes for a run of nodes of one kernel and launch
    shape are far smaller (see :class:`_RunKernelOp`), and count as kernel ops all the same.
    """

    __slots__ = ()

    kernel: Kernel
    body: Callable[..., Any]
    threads: Threads
    buffer: Any
    offset: int
    is_async: bool
    decode: Any
    unpack: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> KernelOp:
        # KernelOp itself declares no storage: a direct call makes the all-slots kind.
        return object.__new__(_KernelOpFields if cls is KernelOp else cls)

    def __init__(
        self, kernel: Kernel, threads: Threads, buffer: Any, offset: int, cost_ns: int
    ) -> None:
        super().__init__(cost_ns)
        fields: Any = self  # a _KernelOpFields (see __new__), or a subclass of it
        fields.kernel = kernel
        fields.body = kernel.body
        fields.threads = threads
        fields.buffer = buffer
        fields.offset = offset
        fields.is_async = kernel.is_async
        layout = kernel.layout
        fields.decode = layout.decode_method if layout.has_pointers else None
        fields.unpack = layout.unpack_from

    def run(self, program: Program) -> Any:
        decode = self.decode
        if decode is None:
            values: Any = self.unpack(self.buffer, self.offset)
        else:
            values = decode(self.buffer, self.offset, program.memory)
        result = self.body(self.threads, *values)
        program.time += self.cost_ns
        return result if self.is_async or result is None else body_result(result)

    def fault(self, exc: BaseException) -> HipError:
        return kernel_fault(f"kernel {self.kernel.name!r} failed: {user_repr(exc)}", exc)

    def __repr__(self) -> str:
        return f"<KernelOp {self.kernel.name} {self.threads!r}>"

    @staticmethod
    def make(
        kernel: Kernel,
        threads: Threads,
        buffer: Any,
        offset: int,
        cost_ns: int,
        writes: WriteCounter | None = None,
    ) -> KernelOp:
        """The dispatch op for ``kernel``, specialised for the replay hot path.

        Synchronous bodies (almost all) get a ``run`` with no branches: one for kernels with
        pointer parameters (decoded to typed views), one for kernels with scalars only.

        ``writes`` counts every write to the memory ``buffer`` is part of (an executable's
        kernel-argument arena). Given it, a synchronous kernel with pointer parameters decodes
        its arguments once and keeps them until that count or the device's count of frees
        moves, so a replay pays little more than the body call.
        """
        if kernel.is_async:
            return KernelOp(kernel, threads, buffer, offset, cost_ns)
        if kernel.layout.has_pointers:
            if writes is not None:
                return _CachedPointerKernelOp(kernel, threads, buffer, offset, cost_ns, writes)
            return _PointerKernelOp(kernel, threads, buffer, offset, cost_ns)
        return _ScalarKernelOp(kernel, threads, buffer, offset, cost_ns)

    @staticmethod
    def make_shared(
        kernel: Kernel,
        threads: Threads,
        buffer: Any,
        offsets: Sequence[int],
        cost_ns: int,
        writes: WriteCounter,
        memory: Any,
        classes: dict[tuple[Any, ...], type[Any]],
    ) -> list[KernelOp] | None:
        """The ops :meth:`make` would make for ``kernel`` at each of ``offsets``, sharing a class.

        What every op of the run has in common (kernel, launch shape, buffer, cost, where the
        writes are counted) lives in one class made for it (see :class:`_RunKernelOp`), whose
        ``run`` holds those values as closure cells; each op is just its offset. The class is
        kept in ``classes`` (one compilation's cache), so runs of one shape share it. ``memory``
        is the device memory the arguments are decoded against; a program running on other
        memory decodes every time, as :meth:`make`'s ops would.

        Returns None for an asynchronous body: :meth:`make` makes those one by one.
        """
        if kernel.is_async:
            return None
        key = (kernel, threads, id(buffer), cost_ns, id(writes), id(memory))
        cls = classes.get(key)
        if cls is None:
            cls = classes[key] = _run_class(kernel, threads, buffer, cost_ns, writes, memory)
        made: list[Any] = list(map(cls, offsets))  # no Python call per op
        return made

    @staticmethod
    def make_each(
        kernel: Kernel,
        threads: Threads,
        buffer: Any,
        offsets: Sequence[int],
        cost_ns: int,
        writes: WriteCounter,
    ) -> list[KernelOp]:
        """The ops :meth:`make` makes for ``kernel`` at each of ``offsets``, one object each.

        What instantiate makes for a run too short to share a class (see
        :meth:`make_shared`): for a synchronous kernel with pointer parameters, the first op is
        made by its constructor and the others get the same fields in one loop, without the
        constructor calls (a small graph's instantiate makes little else per node).
        """
        if kernel.is_async or not kernel.layout.has_pointers or not offsets:
            return [KernelOp.make(kernel, threads, buffer, o, cost_ns, writes) for o in offsets]
        first = _CachedPointerKernelOp(kernel, threads, buffer, offsets[0], cost_ns, writes)
        body, decode, unpack = first.body, first.decode, first.unpack
        new, cls = object.__new__, _CachedPointerKernelOp
        made: list[KernelOp] = [first]
        for offset in offsets[1:]:
            op = new(cls)
            op.cost_ns = cost_ns
            op.kernel = kernel
            op.body = body
            op.threads = threads
            op.buffer = buffer
            op.offset = offset
            op.is_async = False
            op.decode = decode
            op.unpack = unpack
            op.source = writes
            op.values = None
            op.memory = None
            op.seen_writes = op.seen_frees = -1
            made.append(op)
        return made


class _KernelOpFields(KernelOp):
    """A kernel op holding all of its attributes (what ``KernelOp(...)`` makes)."""

    __slots__ = ("body", "buffer", "decode", "is_async", "kernel", "offset", "threads", "unpack")


class WriteCounter(Protocol):
    """Anything that counts the writes to a buffer of kernel arguments (in ``_writes``, which
    the dispatch ops read on every kernel: a private attribute, so reading it costs no call)."""

    @property
    def _writes(self) -> int: ...


class _PointerKernelOp(_KernelOpFields):
    """A synchronous kernel with pointer parameters."""

    __slots__ = ()

    def run(self, program: Program) -> Any:
        values = self.decode(self.buffer, self.offset, program.memory)
        result = self.body(self.threads, *values)
        program.time += self.cost_ns
        return None if result is None else body_result(result)


class _CachedPointerKernelOp(_KernelOpFields):
    """A synchronous kernel with pointer parameters whose decoded arguments are kept.

    The decoded values (scalars and typed views of device memory) are exactly what decoding
    the bytes again would give as long as (1) the bytes did not change — every write to them
    goes through the arena, which counts it — and (2) no memory a view shows was freed — the
    device counts every free. Both counts are read before decoding, so a change made while
    decoding is caught by the next dispatch. A launch never sees bytes written after it was
    enqueued: the executable never rewrites a slot an enqueued launch will read (updates in
    flight go to new slots and new ops), so a rewrite here always precedes the launches that
    read it. A failed decode keeps nothing.
    """

    __slots__ = ("memory", "seen_frees", "seen_writes", "source", "values")

    def __init__(
        self,
        kernel: Kernel,
        threads: Threads,
        buffer: Any,
        offset: int,
        cost_ns: int,
        source: WriteCounter,
    ) -> None:
        # KernelOp's fields set here, without the two super().__init__ calls: instantiate
        # makes one of these per kernel node.
        self.cost_ns = cost_ns
        self.kernel = kernel
        self.body = kernel.body
        self.threads = threads
        self.buffer = buffer
        self.offset = offset
        self.is_async = False  # KernelOp.make gives asynchronous bodies a plain KernelOp
        layout = kernel.layout
        self.decode = layout.decode_method  # this class is for kernels with pointers
        self.unpack = layout.unpack_from
        self.source = source
        self.values: tuple[Any, ...] | None = None
        self.memory: Any = None  # the DeviceMemory the values view
        self.seen_writes = self.seen_frees = -1

    def run(self, program: Program) -> Any:
        memory: Any = program.memory
        values = self.values
        if (
            values is None
            or self.seen_writes != self.source._writes
            or memory is not self.memory
            or self.seen_frees != memory._frees
        ):
            writes, frees = self.source._writes, memory._frees
            self.values = None
            # A tuple: once the collector has seen it holds no container, it stops tracking it,
            # so a million kept argument lists add nothing to its full passes.
            values = tuple(self.decode(self.buffer, self.offset, memory))
            self.values, self.memory = values, memory
            self.seen_writes, self.seen_frees = writes, frees
        result = self.body(self.threads, *values)
        program.time += self.cost_ns
        return None if result is None else body_result(result)


class _ScalarKernelOp(_KernelOpFields):
    """A synchronous kernel whose parameters are all scalars."""

    __slots__ = ()

    def run(self, program: Program) -> Any:
        result = self.body(self.threads, *self.unpack(self.buffer, self.offset))
        program.time += self.cost_ns
        return None if result is None else body_result(result)


class _RunKernelOp(int):
    """A kernel op of a run of one kernel, launch shape, buffer and arena: the int is its
    arguments' offset, and everything else is an attribute of its class (:func:`_run_class`).

    An op is thus an int of its run's class and nothing more: 48 bytes with the collector's
    header (an op with fields of its own is 104 bytes plus its offset's int), and no
    reference of its own for a collection pass to follow. Ops compare and hash by identity,
    and are always true, as objects are; ``isinstance(op, KernelOp)`` holds (see KernelOp's
    metaclass). A kernel with pointer parameters keeps its decoded arguments in its class's
    map, keyed by the op, until the arena's count of writes or the device's count of frees
    moves: what :class:`_CachedPointerKernelOp` keeps in its own fields.
    """

    __slots__ = ()

    is_sync = False
    is_async = False
    # Each run's class sets these (see _run_class).
    kernel: Kernel
    threads: Threads
    buffer: Any
    cost_ns: int
    body: Callable[..., Any]
    decode: Any
    unpack: Any

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __bool__(self) -> bool:
        return True

    @property
    def offset(self) -> int:
        """Where the op's arguments are in :attr:`buffer`."""
        return int(self)

    def run(self, program: Program) -> Any:  # pragma: no cover - each run's class has its own
        raise NotImplementedError

    def fault(self, exc: BaseException) -> HipError:
        return kernel_fault(f"kernel {self.kernel.name!r} failed: {user_repr(exc)}", exc)

    def __repr__(self) -> str:
        return f"<KernelOp {self.kernel.name} {self.threads!r}>"

    __str__ = __repr__


def _run_class(
    kernel: Kernel, threads: Threads, buffer: Any, cost_ns: int, source: WriteCounter, home: Any
) -> type[_RunKernelOp]:
    """The class of a run's ops for one kernel, launch shape, buffer and arena (see
    :meth:`KernelOp.make_shared`)."""
    body = kernel.body
    layout = kernel.layout
    unpack = layout.unpack_from
    shared: dict[str, Any] = {
        "__slots__": (),
        "__module__": __name__,
        "kernel": kernel,
        "threads": threads,
        "buffer": buffer,
        "cost_ns": cost_ns,
        "body": staticmethod(body),
        "unpack": staticmethod(unpack),
        "decode": None,
        "source": source,
    }
    if not layout.has_pointers:

        def run_scalar(self: int, program: Program) -> Any:
            result = body(threads, *unpack(buffer, self))
            program.time += cost_ns
            return None if result is None else body_result(result)

        shared["run"] = run_scalar
        return type("_RunKernelOp", (_RunKernelOp,), shared)
    decode = layout.decode_method
    shared["decode"] = staticmethod(decode)
    kept: dict[int, tuple[Any, ...]] = {}  # op -> its decoded arguments
    kept_values = kept.get
    # Decodes for ``home`` only, remembering views by address: reset with ``kept``.
    decode_home, forget_views = layout.memo_decoder()
    # The arena's count of writes and the device's count of frees the kept values were decoded
    # at: read before decoding, so a change made while decoding is caught by the next dispatch.
    seen_writes = seen_frees = -1

    def run_pointer(self: int, program: Program) -> Any:
        nonlocal seen_writes, seen_frees
        memory: Any = program.memory
        if memory is home:
            if seen_writes != source._writes or seen_frees != memory._frees:
                kept.clear()  # bytes written or memory freed: decode each op again
                forget_views()
                seen_writes, seen_frees = source._writes, memory._frees
            values = kept_values(self)  # no KeyError raised per op on a first replay
            if values is None:
                # A tuple: once the collector has seen it holds no container, it stops tracking
                # it. A failed decode keeps nothing.
                values = kept[self] = decode_home(buffer, self, memory)
        else:  # memory the class was not made for: decoded every time, nothing kept
            values = tuple(decode(buffer, self, memory))
        result = body(threads, *values)
        program.time += cost_ns
        return None if result is None else body_result(result)

    def forget() -> None:
        kept.clear()
        forget_views()

    _FORGET.setdefault(source, []).append(forget)
    shared["run"] = run_pointer
    return type("_RunKernelOp", (_RunKernelOp,), shared)


# What each write counter's run classes keep (decoded arguments, views), as their ``forget``
# functions. A class is in a reference cycle with itself, as every class is, so what its
# ``run`` closes over is freed only by the collector unless it is dropped first: the
# executable owning the counter calls :func:`forget_runs` when it is freed.
_FORGET: weakref.WeakKeyDictionary[Any, list[Callable[[], None]]] = weakref.WeakKeyDictionary()


def forget_runs(source: WriteCounter) -> None:
    """Drop the arguments the run classes made against ``source`` keep (it is being freed).

    Safe at any time: a later dispatch decodes again.
    """
    for forget in _FORGET.pop(source, ()):
        forget()


Endpoint = DevicePtr | npt.NDArray[Any]


def host_bytes(array: npt.NDArray[Any], nbytes: int) -> npt.NDArray[np.uint8]:
    """The first ``nbytes`` of a contiguous host array as a ``uint8`` view."""
    return array.reshape(-1).view(np.uint8)[:nbytes]


class CopyOp(Op):
    """Copy ``nbytes`` between host arrays and device pointers."""

    __slots__ = ("dst", "kind", "nbytes", "resolve", "src")

    def __init__(
        self,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int,
        kind: CopyKind,
        resolve: Callable[[DevicePtr, int], tuple[npt.NDArray[np.uint8], int]],
        cost_ns: int,
    ) -> None:
        super().__init__(cost_ns)
        self.dst, self.src, self.nbytes, self.kind = dst, src, nbytes, kind
        self.resolve = resolve

    def _bytes(self, end: Endpoint) -> npt.NDArray[np.uint8]:
        if isinstance(end, DevicePtr):
            buffer, offset = self.resolve(end, self.nbytes)
            return buffer[offset : offset + self.nbytes]
        return host_bytes(end, self.nbytes)

    def run(self, program: Program) -> None:
        if self.nbytes:
            self._bytes(self.dst)[:] = self._bytes(self.src)
        program.time += self.cost_ns

    def __repr__(self) -> str:
        return f"<CopyOp {self.kind.name} {self.nbytes}B>"


_FILL_DTYPES: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32}


class FillOp(Op):
    """Fill ``height`` rows of ``width`` elements of ``element_size`` bytes, ``pitch`` apart."""

    __slots__ = ("dst", "element_size", "height", "pitch", "resolve", "value", "width")

    def __init__(
        self,
        dst: DevicePtr,
        value: int,
        element_size: int,
        width: int,
        height: int,
        pitch: int,
        resolve: Callable[[DevicePtr, int], tuple[npt.NDArray[np.uint8], int]],
        cost_ns: int,
    ) -> None:
        super().__init__(cost_ns)
        self.dst, self.value, self.element_size = dst, value, element_size
        self.width, self.height, self.pitch = width, height, pitch
        self.resolve = resolve

    @property
    def extent(self) -> int:
        """Bytes from the first to the last byte written."""
        if not self.height or not self.width:
            return 0
        return (self.height - 1) * self.pitch + self.width * self.element_size

    def run(self, program: Program) -> None:
        extent = self.extent
        if extent:
            buffer, offset = self.resolve(self.dst, extent)
            dtype = _FILL_DTYPES[self.element_size]
            row_bytes = self.width * self.element_size
            for row in range(self.height):
                start = offset + row * self.pitch
                buffer[start : start + row_bytes].view(dtype)[:] = self.value
        program.time += self.cost_ns

    def __repr__(self) -> str:
        return f"<FillOp {self.width}x{self.height} elem={self.element_size} value={self.value}>"


class HostOp(Op):
    """Call a host function; its queue stays busy until it returns (or its awaitable finishes)."""

    __slots__ = ("args", "fn")

    def __init__(self, fn: Callable[..., Any], args: Sequence[Any], cost_ns: int) -> None:
        super().__init__(cost_ns)
        self.fn = fn
        self.args = tuple(args)

    def run(self, program: Program) -> Any:
        result = call_host_function(self.fn, self.args)  # in its context (views are its own)
        program.time += self.cost_ns
        # Only an awaitable holds the queue; any other return value is ignored, as HIP's
        # host functions return void (handing it on would break the queue).
        return result

    def fault(self, exc: BaseException) -> HipError:
        error = LaunchFailure(f"host function {_host_name(self.fn)} raised {user_repr(exc)}")
        error.__cause__ = exc
        return error

    def __repr__(self) -> str:
        name = qualname_of(self.fn)
        return f"<HostOp {user_repr(self.fn) if name is None else repr(name)}>"


class WaitSignalsOp(Op):
    """A barrier-AND on specific signals (eager event waits, legacy-stream ordering)."""

    __slots__ = ("signals",)
    is_sync = True

    def __init__(self, signals: Sequence[Signal]) -> None:
        super().__init__(0)
        self.signals = tuple(signals)

    def run(self, program: Program) -> Signal | None:
        for signal in self.signals:
            if signal._value > 0:
                return signal
        for signal in self.signals:
            if signal._time > program.time:
                program.time = signal._time
        return None

    def __repr__(self) -> str:
        return f"<WaitSignalsOp n={len(self.signals)}>"


class WaitSignalIndicesOp(Op):
    """A barrier-AND on signals of the packet's launch-bound signal set (graph replays)."""

    __slots__ = ("indices",)
    is_sync = True

    def __init__(self, indices: Sequence[int]) -> None:
        super().__init__(0)
        self.indices = tuple(indices)

    def run(self, program: Program) -> Signal | None:
        signals = program.signals
        latest = program.time
        for index in self.indices:
            signal = signals[index]
            if signal._value > 0:
                return signal
            if signal._time > latest:
                latest = signal._time
        program.time = latest
        return None

    def __repr__(self) -> str:
        return f"<WaitSignalIndicesOp {self.indices}>"


class SignalIndexOp(Op):
    """Decrement one signal of the packet's signal set: "this segment is done"."""

    __slots__ = ("index",)
    is_sync = True

    def __init__(self, index: int) -> None:
        super().__init__(0)
        self.index = index

    def run(self, program: Program) -> None:
        program.signals[self.index].decrement(program.time, program.error)

    def written_signal(self, program: Program) -> Signal:
        """The signal this op reaches (see ``device/work_waits.py``)."""
        return program.signals[self.index]

    def __repr__(self) -> str:
        return f"<SignalIndexOp {self.index}>"


# -- memory and word operations ------------------------------------------------------------------


class FreeOp(Op):
    """Free an allocation when the stream reaches this point (eager ``free_async``).

    ``memory`` is the allocation's device's, fixed when the free was admitted: it need not be
    the stream's (``hipFreeAsync`` of another device's memory), and a device replaced since
    must not have its successor's memory freed at the same address.
    """

    __slots__ = ("memory", "ptr")
    is_sync = True  # an abandoned program still frees: nothing leaks

    def __init__(self, ptr: DevicePtr, memory: DeviceMemory) -> None:
        super().__init__(0)
        self.ptr = ptr
        self.memory = memory

    def run(self, program: Program) -> None:
        self.memory.free(self.ptr, claimed=True)  # the free that claim_free admitted

    def __repr__(self) -> str:
        return f"<FreeOp {self.ptr!r}>"


class StreamMemOpOp(Op):
    """The device op of an eager stream memory operation (``runtime.stream_memops``).

    ``memop`` is the operation (a wait or a write on a word): called with the program running
    it (whose time a write stamps on its word, and a wait follows), it returns ``None`` when
    done, or an awaitable that ends when a wait is satisfied.
    """

    __slots__ = ("memop",)

    def __init__(self, memop: Callable[[Program], Any], cost_ns: int) -> None:
        super().__init__(cost_ns)
        self.memop = memop

    def run(self, program: Program) -> Any:
        program.time += self.cost_ns
        return self.memop(program)

    def __repr__(self) -> str:
        return f"<StreamMemOpOp {self.memop!r}>"


_UINT32 = np.dtype(np.uint32)


class DefaultsOp(Op):
    """Write each ``assign_default`` conditional handle's default into its cell (start of a
    launch; see ``exec.conditional``)."""

    __slots__ = ("cells",)

    def __init__(self, cells: list[tuple[int, int]]) -> None:
        super().__init__(0)
        self.cells = cells

    def run(self, program: Program) -> None:
        memory = program.memory
        assert memory is not None
        for address, value in self.cells:
            memory.view(address, _UINT32)[0] = value
