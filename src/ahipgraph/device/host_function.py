"""Host functions that declare the device memory they touch, and the host-function context.

A host function (``stream.launch_host_func``, a graph host node) is opaque: nothing shows
what device memory it reads or writes through ``device.view``. ``ahg.host_function(fn,
reads=..., writes=...)`` says it. Each entry is a :class:`DevicePtr` (from the pointer to the
end of its allocation) or a ``(DevicePtr, nbytes)`` pair. The declaration is the function's
footprint for the race checker, at its place in stream order, and for
``graph.check_races()``, at its node.

It is checked, not trusted: while a declared function runs, ``device.view()`` of bytes
outside its declaration raises InvalidValue, and a view of bytes it declared only as read is
read-only.

:func:`running_host_function` names the host function whose call is in progress in this
context (declared or not, sync or ``async``): the race checker takes the views made there as
the function's own, not as accesses of the host program.

Invariants: the context variable is set only around a host function's call (and inside the
task that runs an awaitable it returned), and always reset; its cell is emptied when the call
(or that task) ends, so a task the function spawned that runs on is host code again.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextvars import Context, ContextVar, copy_context
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.callables import makes_generator
from ..core.errors import InvalidValue
from ..core.ints import as_int
from ..core.lifecycle import FactoryOnly, safe_repr
from .pointer import DevicePtr

if TYPE_CHECKING:
    import numpy.typing as npt

    from .base import DeviceBase

__all__ = ["HostFunction", "check_host_callable", "host_function", "running_host_function"]

_FACTORY = FactoryOnly("host functions are declared with ahg.host_function()")

# The host function whose call is in progress, in a cell emptied when the call ends (for an
# async one, when its task does): a task the function spawned inherits the cell, so its own
# views count as the function's only while the function runs (see _call_here).
_NONE_RUNNING: list[Any] = [None]
_RUNNING: ContextVar[list[Any]] = ContextVar(
    "ahipgraph_running_host_function", default=_NONE_RUNNING
)

Region = tuple[DevicePtr, int | None]  # nbytes None: to the end of the allocation


def _regions(entries: Sequence[Any], what: str) -> tuple[Region, ...]:
    if isinstance(entries, str | bytes) or not isinstance(entries, Sequence):
        raise TypeError(f"{what} must be a sequence of DevicePtr or (DevicePtr, nbytes)")
    out: list[Region] = []
    for entry in entries:
        ptr, nbytes = (entry, None) if isinstance(entry, DevicePtr) else (None, None)
        size: int | None = None
        if ptr is None:
            if not isinstance(entry, tuple) or len(entry) != 2:
                raise TypeError(f"{what}: expected DevicePtr or (DevicePtr, nbytes), got {entry!r}")
            ptr, nbytes = entry
            if not isinstance(ptr, DevicePtr):
                raise TypeError(f"{what}: expected a DevicePtr, got {ptr!r}")
            size = as_int(nbytes, f"{what}: nbytes")
            if size < 0:
                raise ValueError(f"{what}: nbytes must not be negative, got {size}")
        if not ptr:
            raise ValueError(f"{what}: a null pointer touches nothing")
        out.append((ptr, size))
    return tuple(out)


class HostFunction:
    """A host function with the device memory it reads and writes (see the module note).

    Calling it calls ``fn``; made by :func:`host_function`.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: :func:`host_function` checks the regions."""
        _FACTORY.refuse()

    def _init(
        self, fn: Callable[..., Any], reads: tuple[Region, ...], writes: tuple[Region, ...]
    ) -> None:
        functools.update_wrapper(self, fn)  # keeps its name for errors and traces
        # After the wrapper: update_wrapper copies fn.__dict__, which must not replace these.
        self._fn = fn
        self._reads = reads
        self._writes = writes

    # What the declaration says: read-only, as ``host_function`` checks it (and adds to it
    # when called again with a declared function, the one way to declare more). Assigned from
    # outside, ``writes`` let the function write bytes it had declared only as read, past the
    # view check that enforces the declaration; ``reads`` set to a string, never checked,
    # made its ``repr`` count the string's characters as regions.

    @property
    def fn(self) -> Callable[..., Any]:
        """The function called, with the arguments given at launch."""
        return self._fn

    @property
    def reads(self) -> tuple[Region, ...]:
        """The device memory it declares it reads: ``(DevicePtr, nbytes or None)`` each."""
        return self._reads

    @property
    def writes(self) -> tuple[Region, ...]:
        """The device memory it declares it writes: ``(DevicePtr, nbytes or None)`` each."""
        return self._writes

    def __call__(self, *args: Any) -> Any:
        return self._fn(*args)

    def covers(self, device: DeviceBase, ptr: DevicePtr, nbytes: int) -> bool | None:
        """True if the declared writes cover the bytes, False if the reads and writes do
        together (a view of them is read-only), else None.

        Regions cover together what they span: a declaration in pieces (two halves of a
        buffer, a read next to a write) covers a view of the whole, as it covers each piece.
        """
        start, end = ptr.address, ptr.address + nbytes
        writes = self._spans(device, ptr.device, self._writes)
        if _covered(writes, start, end):
            return True
        if _covered(writes + self._spans(device, ptr.device, self._reads), start, end):
            return False
        return None

    @staticmethod
    def _spans(
        device: DeviceBase, ordinal: object, regions: tuple[Region, ...]
    ) -> list[tuple[int, int]]:
        """The ``(start, stop)`` address ranges of ``regions`` on device ``ordinal``."""
        spans = []
        for base, length in regions:
            if base.device != ordinal:
                continue
            if length is None:
                found = device._memory.allocation_of(base.address)
                stop = base.address + 1 if found is None else found[0] + found[1]
            else:
                stop = base.address + length
            spans.append((base.address, stop))
        return spans

    @safe_repr
    def __repr__(self) -> str:
        name = getattr(self._fn, "__qualname__", repr(self._fn))
        return f"<HostFunction {name} reads={len(self._reads)} writes={len(self._writes)}>"


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether the union of ``spans`` holds every byte of ``[start, end)`` (for no bytes:
    whether a span holds the address ``start``, its end included)."""
    reach = start
    for low, high in sorted(spans):
        if low > reach:  # a gap: no later span starts before it
            return False
        if high >= reach:
            reach = high
            if reach >= end:
                return True
    return False


def host_function(
    fn: Callable[..., Any],
    *,
    reads: Sequence[DevicePtr | tuple[DevicePtr, int]] = (),
    writes: Sequence[DevicePtr | tuple[DevicePtr, int]] = (),
) -> HostFunction:
    """Declare the device memory host function ``fn`` reads and writes.

    Args:
        fn: the function (``async`` allowed), called with the arguments given at launch.
        reads, writes: DevicePtr (to the end of its allocation) or ``(DevicePtr, nbytes)``.

    Returns:
        A callable to pass to ``launch_host_func`` or ``add_host_node``.

    Raises:
        TypeError: ``fn`` is not callable or is a generator function, or an entry is not a
            pointer or pair.
        ValueError: a negative size, or a null pointer.

    Declaring a :class:`HostFunction` again adds to what it already declares.
    """
    if not callable(fn):
        raise TypeError(f"host function must be callable, got {fn!r}")
    check_host_callable(fn)
    read_regions, write_regions = _regions(reads, "reads"), _regions(writes, "writes")
    if isinstance(fn, HostFunction):  # more declarations for a declared function: all count
        read_regions, write_regions = fn._reads + read_regions, fn._writes + write_regions
        fn = fn._fn
    declared: HostFunction = object.__new__(HostFunction)
    declared._init(fn, read_regions, write_regions)
    return declared


def check_host_callable(fn: Callable[..., Any]) -> None:
    """Refuse a generator function (sync or async) as a host function.

    Calling one only makes a generator, so its body would never run, and the host function
    would pass for done having done nothing. A plain function or an ``async def`` one (whose
    coroutine the queue awaits) is what a host function is.

    Raises:
        TypeError: ``fn`` (or a callable object's ``__call__``) is a generator function.
    """
    if makes_generator(fn._fn if isinstance(fn, HostFunction) else fn):
        raise TypeError(
            f"host function must be a plain or async function, not a generator function "
            f"(its body would never run): {fn!r}"
        )


def running_host_function() -> Any:
    """The host function whose call is in progress in this context, or None."""
    return _RUNNING.get()[0]


class InContext:
    """An awaitable host function's result and the context its task must start in.

    The engine starts the awaitable itself as the task, inside ``context`` (where the host
    function is the running one), rather than a wrapper coroutine awaiting it: a wrapper
    cancelled before its first step (its loop shutting down) would leave the user's
    coroutine made but never awaited, and Python warns about that when it is collected.
    """

    __slots__ = ("awaitable", "context", "running")

    def __init__(self, awaitable: Awaitable[Any], context: Context, running: list[Any]) -> None:
        self.awaitable = awaitable
        self.context = context
        self.running = running  # the context's running-host-function cell

    def ended(self) -> None:
        """The task awaiting the result ended: the host function's call is over."""
        self.running[0] = None


def call_host_function(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Call a host function in a context of its own; an awaitable result is returned with that
    context (:class:`InContext`), which the task that awaits it runs in.

    A host function runs when its queue reaches it, on behalf of no task: the device's pump
    that reaches it runs in the context of whichever task woke the device. Called there, the
    function would see that task's context variables (its capture mode, its current device),
    a different task's from one run to the next. So each call gets a fresh context, every
    variable at its default (the GLOBAL capture mode, device 0), as a HIP host function runs
    on a runtime thread of its own that never set anything.
    """
    return Context().run(_call_here, fn, args)


def _call_here(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    running: list[Any] = [fn]
    awaited: InContext | None = None
    token = _RUNNING.set(running)
    try:
        result = fn(*args)
        if inspect.isawaitable(result):
            # A copy taken while ``fn`` runs; the task awaiting the result ends the call.
            awaited = InContext(result, copy_context(), running)
    finally:
        _RUNNING.reset(token)
        if awaited is None:
            running[0] = None  # over: a task it spawned is host code from here on
    return awaited


def checked_view(
    device: DeviceBase, ptr: DevicePtr, view: npt.NDArray[Any], readonly: bool
) -> npt.NDArray[Any]:
    """``view`` as the running host function may have it: InvalidValue outside its
    declaration, read-only where it declared only reads (or when ``readonly``)."""
    running = _RUNNING.get()[0]
    if isinstance(running, HostFunction):
        covered = running.covers(device, ptr, view.nbytes)
        if covered is None:
            name = getattr(running._fn, "__qualname__", running._fn)
            raise InvalidValue(
                f"host function {name} viewed {view.nbytes} B at {ptr!r}, "
                "outside the reads and writes it declared"
            )
        readonly = readonly or not covered
    if readonly:
        # Over a read-only buffer of the same bytes: a view whose writeable flag were only
        # cleared could be made writeable again (numpy allows it over writeable memory), and
        # the race checker takes this view as a read.
        source: Any = view
        view = np.frombuffer(memoryview(source).toreadonly(), dtype=view.dtype).reshape(view.shape)
    return view
