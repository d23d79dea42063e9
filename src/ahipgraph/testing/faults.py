"""Fault injection: scoped context managers that make the simulated device misbehave.

Each fault is a device :class:`~ahipgraph.device.hooks.Observer` installed for the ``with``
block and removed at its end, so a fault can never outlive its block (a block entered and
never left is disarmed, and reported, at the end of the ``fresh_devices`` block or the plugin
fixture's test it was armed in):

* :func:`fail_kernels` — the next ``count`` kernel dispatches (optionally only kernels with a
  given name) fail; the work completes with :class:`~ahipgraph.LaunchFailure`, as when a body
  raises;
* :func:`fail_allocations` — the next ``count`` device allocations (``malloc``, an executable's
  argument arena, a graph memory-alloc node) raise :class:`~ahipgraph.OutOfMemory` before
  anything is charged;
* :func:`hang_kernels` — the next matching kernels hold their queue until the test calls
  :meth:`KernelHang.cancel` (or the block ends); they then complete with ``LaunchFailure``,
  and the fault hangs no more kernels;
* :func:`exhaust_signal_sets` — every free signal set of an executable is taken for the block
  and given back at its end: a pool that waits (the default ``signal_set_policy="wait"``)
  makes launches park (``launch_nowait`` raises :class:`~ahipgraph.NotReady`), a pool that
  grows (``"grow"``) counts misses.

Faults count what they did (``hits``), so a test can assert the fault fired. They are
process-wide, like the devices table: faults on a named kernel keep concurrent tests apart.
Devices on several threads consult one fault at once: a fault takes each of its ``count``
under a lock, so exactly ``count`` of them fire, whichever threads ask.
Each also decorates a test, ``async def`` ones included (the fault is on while the whole
coroutine runs; see :mod:`ahipgraph.core.scoped`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core.errors import InvalidDevice, OutOfMemory
from ..core.ints import as_optional_int
from ..core.lifecycle import NoCopy
from ..core.scoped import checked_scoped
from ..device import hooks, table
from ..device.ops import KernelOp
from ..exec.compile import StrictKernelOp
from ..exec.graph_exec import GraphExec
from .helpers import _AnyLoopEvent

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..device.ops import Op
    from ..device.program import Program
    from ..exec.signal_pool import SignalSet

__all__ = [
    "AllocationFault",
    "InjectedFault",
    "KernelFault",
    "KernelHang",
    "SignalSetsHeld",
    "exhaust_signal_sets",
    "fail_allocations",
    "fail_kernels",
    "hang_kernels",
]


def _check_name(name: object) -> None:
    """Refuse a name filter that is not a str: it never matched."""
    if name is not None and not isinstance(name, str):
        raise TypeError(f"name must be str or None, got {name!r}")


def _optional_count(what: str, value: object) -> int | None:
    """Refuse a filter that would silently match nothing or break inside the device: a negative
    count used to inject no fault, a str count failed the kernel with a TypeError of its own.

    Returns the value as a plain int (numpy ints are accepted), or None.
    """
    number = as_optional_int(value, what, expected="int or None")
    if number is not None and number < 0:
        raise ValueError(f"{what} must be at least 0, got {number}")
    return number


class InjectedFault(Exception):
    """The exception a faulted kernel "raises"; it reaches the user as the LaunchFailure cause."""


def _kernel_name(op: Op) -> str | None:
    if isinstance(op, StrictKernelOp):
        op = op.inner
    return op.kernel.name if isinstance(op, KernelOp) else None


class _CountedFault(hooks.Observer, NoCopy):
    """What every injected fault counts: how many more matching operations it fails, and how
    many it has failed. Operations of devices on several threads (loops) ask at once, so the
    check of what is left and its decrement are one step under a lock, or two of them could
    take the last one. Read-only: ``remaining`` set to a str failed the next matching
    operation with a TypeError from inside the hook."""

    def __init__(self, count: int | None) -> None:
        self._remaining = count
        self._hits = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int | None:
        """How many more matching operations fail (None: every one in the block)."""
        return self._remaining

    @property
    def hits(self) -> int:
        """How many operations it failed."""
        return self._hits

    def _take_locked(self) -> bool:
        """Take one of what is left (the lock held); False once none is."""
        if self._remaining is not None:
            if self._remaining <= 0:
                return False
            self._remaining -= 1
        self._hits += 1
        return True

    def _take(self) -> bool:
        """Take one of what is left; False once none is."""
        with self._lock:
            return self._take_locked()


class KernelFault(_CountedFault):
    """Fails matching kernel dispatches; see :func:`fail_kernels`."""

    def __init__(self, count: int | None, name: str | None) -> None:
        count = _optional_count("count", count)
        _check_name(name)
        if name == "":
            # A kernel's name is never empty (an empty name= falls back to the function's).
            raise ValueError("name must not be empty: no kernel is named ''")
        super().__init__(count)
        self._name = name

    # What the fault matches changes never: ``name`` set to None faulted every kernel of the
    # block instead of the one named.

    @property
    def name(self) -> str | None:
        """Only kernels with this name fail (None: every kernel)."""
        return self._name

    def _wanted(self, op: Op) -> str | None:
        """The name of ``op``'s kernel if the filter matches it (nothing taken yet)."""
        kernel = _kernel_name(op)
        if kernel is None or (self._name is not None and kernel != self._name):
            return None
        return kernel

    def _matches(self, op: Op) -> str | None:
        kernel = self._wanted(op)
        if kernel is None:
            return None
        return kernel if self._take() else None

    def op_starting(self, program: Program, op: Op) -> Any:
        kernel = self._matches(op)
        if kernel is not None:
            raise InjectedFault(f"injected failure of kernel {kernel!r}")
        return None

    def __repr__(self) -> str:
        left = "every" if self._remaining is None else self._remaining
        return f"<{type(self).__name__} name={self._name!r} left={left} hits={self._hits}>"


class KernelHang(KernelFault):
    """Holds matching kernel dispatches until :meth:`cancel`; see :func:`hang_kernels`.

    ``started`` is set when the first kernel hangs; ``hanging`` counts those still held.
    """

    def __init__(self, count: int | None, name: str | None) -> None:
        super().__init__(count, name)
        self._started = _AnyLoopEvent()
        self._hanging: list[asyncio.Future[None]] = []

    @property
    def started(self) -> asyncio.Event:
        """Set once a matching kernel hangs (holds its queue)."""
        return self._started

    def op_starting(self, program: Program, op: Op) -> Any:
        if self._wanted(op) is None:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            # Taken and listed in one step: a cancel() on another thread either finds this
            # hang in the list, or ended the fault first and this kernel runs normally.
            if not self._take_locked():
                return None
            self._hanging.append(future)
        self._started.set()
        return future

    @property
    def hanging(self) -> int:
        """How many hung kernels are still holding their queue."""
        return sum(1 for f in self._hanging if not f.done())

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]} hanging={self.hanging}>"

    def cancel(self) -> int:
        """End the hang: fail every hung kernel (``LaunchFailure``) so its queue moves on,
        and hang no kernel after it; return how many hung kernels were failed.

        As at the block's end, a matching kernel that starts after ``cancel()`` runs normally,
        one already enqueued but not started yet included: cancelling before the kernel
        starts means it does not hang (``cancel()`` then returns 0). To see a hung kernel
        fail, ``await fault.started.wait()`` before cancelling.

        Safe from any thread: a hung kernel's future belongs to the loop running its device,
        and is failed on that loop's thread (a future resolved from another thread would not
        wake a loop asleep in its selector).
        """
        with self._lock:
            self._remaining = 0
            hanging, self._hanging = self._hanging, []
        cancelled = 0
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for future in hanging:
            loop = future.get_loop()
            if future.done() or loop.is_closed():
                continue
            if loop is running:
                _fail_hang(future)
            else:
                try:
                    loop.call_soon_threadsafe(_fail_hang, future)
                except RuntimeError:  # the loop closed meanwhile: nobody waits any more
                    continue
            cancelled += 1
        return cancelled


def _fail_hang(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_exception(InjectedFault("hung kernel cancelled"))


class AllocationFault(_CountedFault):
    """Refuses matching device allocations; see :func:`fail_allocations`."""

    def __init__(self, count: int | None, device: int | None, nbytes: int | None) -> None:
        count = _optional_count("count", count)
        device = _optional_count("device", device)
        nbytes = _optional_count("nbytes", nbytes)
        if device is not None and device >= table.device_count():
            # A fault for a device that does not exist would never fire: say so at the call.
            raise InvalidDevice(
                f"device {device} does not exist ({table.device_count()} configured)"
            )
        # Each device's allocator lock covers its own allocations only: what is left is taken
        # under the fault's own lock (see _CountedFault).
        super().__init__(count)
        self._device = device
        self._nbytes = nbytes

    # Read-only, as a KernelFault's are: ``device`` set to "0" (a str) never matched an
    # ordinal, so the allocations the test meant to fail succeeded.

    @property
    def device(self) -> int | None:
        """Only allocations on the device with this ordinal fail (None: any device)."""
        return self._device

    @property
    def nbytes(self) -> int | None:
        """Only allocations of exactly this many bytes fail (None: any size)."""
        return self._nbytes

    def allocating(self, memory: DeviceMemory, nbytes: int) -> None:
        # Called with the allocator's lock held: read nothing from ``memory`` but plain fields.
        if self._device is not None and memory._ordinal != self._device:
            return
        if self._nbytes is not None and nbytes != self._nbytes:
            return
        if not self._take():
            return
        raise OutOfMemory(
            f"device {memory._ordinal}: injected fault refused an allocation of {nbytes} bytes"
        )

    def __repr__(self) -> str:
        left = "every" if self._remaining is None else self._remaining
        return (
            f"<AllocationFault device={self._device} nbytes={self._nbytes} left={left} "
            f"hits={self._hits}>"
        )


@contextlib.contextmanager
def _installed(observer: hooks.Observer) -> Iterator[None]:
    hooks.install(observer)
    try:
        yield
    finally:
        hooks.uninstall(observer)


def _kernel_filter(count: int | None = 1, *, name: str | None = None) -> None:
    KernelFault(count, name)  # its checks, at the call


@checked_scoped(_kernel_filter)
def fail_kernels(count: int | None = 1, *, name: str | None = None) -> Iterator[KernelFault]:
    """Make the next ``count`` kernel dispatches fail (``None``: every one in the block).

    Args:
        count: how many dispatches fail.
        name: only kernels with this name (``Kernel.name``) fail.

    Yields:
        The :class:`KernelFault`; ``hits`` counts the dispatches it failed.

    Raises:
        TypeError / ValueError: ``count`` is not a non-negative int (bools refused) or None,
            ``name`` is not a str or None (the same checks for every fault maker here).
    """
    fault = KernelFault(count, name)
    with _installed(fault):
        yield fault


@checked_scoped(_kernel_filter)
def hang_kernels(count: int | None = 1, *, name: str | None = None) -> Iterator[KernelHang]:
    """Make the next ``count`` matching kernels hold their queue until ``cancel()``.

    A hung kernel completes with ``LaunchFailure`` once cancelled; the block's end cancels
    whatever still hangs, so nothing is left behind. ``cancel()`` ends the fault as the
    block's end does: no kernel hangs after it, one enqueued before it but not yet started
    included (see :meth:`KernelHang.cancel`).
    """
    fault = KernelHang(count, name)
    try:
        with _installed(fault):
            yield fault
    finally:
        fault.cancel()


def _allocation_filter(
    count: int | None = 1, *, device: int | None = None, nbytes: int | None = None
) -> None:
    AllocationFault(count, device, nbytes)  # its checks, at the call


@checked_scoped(_allocation_filter)
def fail_allocations(
    count: int | None = 1, *, device: int | None = None, nbytes: int | None = None
) -> Iterator[AllocationFault]:
    """Make the next ``count`` device allocations raise ``OutOfMemory``.

    Args:
        device: only allocations on the device with this ordinal.
        nbytes: only allocations of exactly this many bytes.

    Raises:
        TypeError / ValueError: as for :func:`fail_kernels`, for each argument.
        InvalidDevice: ``device`` is not a configured device's ordinal.
    """
    fault = AllocationFault(count, device, nbytes)
    with _installed(fault):
        yield fault


class SignalSetsHeld(NoCopy):
    """The signal sets :func:`exhaust_signal_sets` took from an executable's pool."""

    def __init__(self, graph_exec: GraphExec) -> None:
        # Made by hand around anything else, its take() and give_back() raised a bare
        # AttributeError ("'Device' object has no attribute 'pool'").
        _exhaustible(graph_exec)
        self._graph_exec = graph_exec
        self._sets: list[SignalSet] = []

    # Read-only: ``graph_exec`` set to another executable made ``give_back`` put the sets in
    # that one's pool, and the held list replaced or cleared lost them: the executable's
    # launches then waited for sets that never came back.

    @property
    def graph_exec(self) -> GraphExec:
        """The executable whose pool the sets were taken from."""
        return self._graph_exec

    @property
    def sets(self) -> list[SignalSet]:
        """The sets held (a copy: ``give_back`` returns the ones taken)."""
        return list(self._sets)

    def take(self) -> None:
        pool = self._graph_exec.pool
        while (signal_set := pool.acquire_nowait(grow=False)) is not None:
            self._sets.append(signal_set)

    def give_back(self) -> None:
        """Return every set (waking launches that parked for one)."""
        pool = self._graph_exec.pool
        sets, self._sets = self._sets, []
        for signal_set in sets:
            pool.release(signal_set)

    @property
    def held(self) -> int:
        return len(self._sets)

    def __repr__(self) -> str:
        return f"<SignalSetsHeld held={self.held} of {self._graph_exec!r}>"


def _exhaustible(graph_exec: GraphExec) -> None:
    if not isinstance(graph_exec, GraphExec):
        raise TypeError(f"expected a GraphExec, got {graph_exec!r}")


@checked_scoped(_exhaustible)
def exhaust_signal_sets(graph_exec: GraphExec) -> Iterator[SignalSetsHeld]:
    """Hold every free signal set of ``graph_exec`` for the block.

    With the default ``signal_set_policy="wait"`` a launch then parks until the block ends
    (so the block must end in another task, or the launch waits for ever) and
    ``launch_nowait`` raises ``NotReady``; with ``"grow"`` a launch grows the pool (a miss).
    Sets in use when the block begins are not taken: each comes back to the pool, and is
    free for a launch, as soon as the launch that holds it completes.

    Raises:
        InvalidValue: the executable's pool is closed (it was destroyed and freed).
    """
    if not isinstance(graph_exec, GraphExec):
        raise TypeError(f"expected a GraphExec, got {graph_exec!r}")
    held = SignalSetsHeld(graph_exec)
    held.take()
    try:
        yield held
    finally:
        held.give_back()
