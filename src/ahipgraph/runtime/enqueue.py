"""A stream enqueue and its ``_nowait`` twin, made from one synchronous body.

Every stream enqueue (``launch_kernel``, ``memcpy``, ``record_event``...) is a coroutine because
it can wait: its stream's hardware queue is a ring of fixed capacity, and an enqueue that finds
the ring full parks until the device retires a packet. When there is room it returns without
yielding, like ``asyncio.Queue.put``. The ``_nowait`` twin raises ``NotReady`` instead of waiting,
like ``asyncio.Queue.put_nowait``.

The decision and the work stay in one synchronous body per operation; :func:`enqueue_pair` adds
the one await at the edge. Both methods carry the body's signature, annotations and docstring,
and are named for the public operation (a wrong call says ``Stream.memcpy() ...``).

Check, then park: HIP checks a call's arguments when it is made, so a call that must wait for
room first runs its operation's *check* (the body's argument checks, nothing submitted) and is
refused at once, with the body's own error, when they fail: a refused call never waits, never
holds a place among the waiters, and changes no statistics. The ``_nowait`` twin runs the same
check before it reports ``NotReady``. Once there is room the body runs its checks again, since
what they read may have changed meanwhile (the stream or an event destroyed, memory freed).
The check converts the call's arguments, which runs user code (an ``__index__``) that may
destroy the stream or begin a capture on it; the call then needs no room, so it asks for its
ring again after the check and, finding none, runs the body at once (which reports the
destroyed stream, or captures) rather than parking, for good if no packet ever retires, on a
ring it will not use. A stream destroyed (or whose device is replaced) while calls wait for
room in its ring wakes them at once (``Stream._wake_parked``): they take no room and run the
body, which reports it as for a call made afterwards, rather than wait, for good if no
packet ever retires, for room they would not use.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from ..device.hwqueue import HardwareQueue

__all__ = ["RingUser", "enqueue_pair", "kernel_enqueue_pair"]

P = ParamSpec("P")
R = TypeVar("R")


class RingUser(Protocol):
    def _ring(self) -> HardwareQueue | None:
        """The queue this enqueue needs room in; None when it adds no packet (capture), or
        when the body is to report the call's error (a destroyed stream)."""
        ...

    def _gone(self) -> bool:
        """True once the stream takes no new work (destroyed, or its device replaced): a wait
        for room in its ring ends then."""
        ...


S = TypeVar("S")  # a Stream, or one of the mixins that Stream is assembled from


def enqueue_pair(
    body: Callable[Concatenate[S, P], R],
    *,
    check: Callable[Concatenate[S, P], object] | None = None,
    at_call: Callable[Concatenate[S, P], Callable[[], R]] | None = None,
    packetless: Callable[Concatenate[S, P], bool] | None = None,
    ring: Callable[Concatenate[S, P], HardwareQueue | None] | None = None,
    owner: str | None = None,
) -> tuple[Callable[Concatenate[S, P], Coroutine[Any, Any, R]], Callable[Concatenate[S, P], R]]:
    """Make ``(op, op_nowait)`` from ``_op``, the synchronous body of a stream enqueue.

    ``op`` waits for room in the ring, then runs the body; ``op_nowait`` raises ``NotReady``
    when there is no room. ``body`` must check its arguments and the stream before it submits
    anything, so a failed call changes nothing.

    ``check`` runs the body's argument checks for an open stream that is not capturing (the
    only kind that waits for room), raising what the body would raise and submitting nothing;
    it is called before a call parks and before ``op_nowait`` reports ``NotReady`` (see the
    module notes).

    ``at_call``, for an operation whose meaning depends on state that may change while the
    call waits for room (``wait_event``: the event's record at the time of the call, as in
    HIP), replaces ``check``: it checks the call's arguments when it parks and returns what to
    run once there is room.

    ``packetless``, for an operation that adds a packet only in some calls (``wait_event``:
    none for an event that is unrecorded or whose record is complete, as HIP enqueues no
    marker then), says whether this call adds none: such a call needs no room, so it never
    waits and its ``_nowait`` twin never reports ``NotReady``; it runs the body at once. It is
    asked only when the ring is full; for a bad argument it answers False, so the call is
    refused by the check as any other.

    ``ring``, for an operation that adds a packet in some calls on a capturing stream
    (``wait_event`` on an event recorded outside any capture: a real wait, as in HIP),
    replaces the stream's ``_ring()``, which has no ring while it captures: it names the
    queue this call needs room in, or None.

    All of them are called with the body's parameters and named for the operation, as the
    body is. ``owner`` is the class the user calls it on, when the body is a mixin's: a
    wrong call of ``stream.memcpy_2d()`` names ``Stream.memcpy_2d()``, not the mixin.
    """
    if (check is None) == (at_call is None):
        raise TypeError("an enqueue needs exactly one of check and at_call")
    defined_in, _, private = body.__qualname__.rpartition(".")
    owner = defined_in if owner is None else owner
    name = private.lstrip("_")
    body.__qualname__ = f"{owner}.{name}"  # a wrong call names the public operation
    before_parking = _operation(cast(Callable[..., object], check or at_call), owner, name)
    needs_no_room: Callable[..., bool] = (
        _never if packetless is None else _operation(packetless, owner, name)
    )
    ring_of: Callable[..., HardwareQueue | None] = (
        _own_ring if ring is None else _operation(ring, owner, name)
    )

    async def waiting(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        queue = ring_of(self, *args, **kwargs)
        if queue is None or queue.has_room() or needs_no_room(self, *args, **kwargs):
            return body(self, *args, **kwargs)
        # Checked before parking; what runs once there is room is taken now (``at_call``) or
        # made then (the body, which checks again).
        later = before_parking(self, *args, **kwargs)
        if ring_of(self, *args, **kwargs) is not queue:  # see the module notes
            return body(self, *args, **kwargs) if at_call is None else later()
        if not await queue.wait_for_room(cast(RingUser, self)._gone):
            # Destroyed (or its device replaced) while it waited: no room was taken, and the
            # body reports it.
            return body(self, *args, **kwargs) if at_call is None else later()
        try:
            return body(self, *args, **kwargs) if at_call is None else later()
        finally:
            queue.settle_room()

    def nowait(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        queue = ring_of(self, *args, **kwargs)
        if queue is not None and not queue.has_room() and not needs_no_room(self, *args, **kwargs):
            before_parking(self, *args, **kwargs)  # a bad call is refused as such first
            if ring_of(self, *args, **kwargs) is queue:  # else see the module notes
                queue.check_room()
        return body(self, *args, **kwargs)

    nowait_doc = (
        f"As :meth:`{name}`, but raise ``NotReady`` instead of waiting when the stream's "
        "hardware queue is full."
    )
    return (
        _named(waiting, body, owner, name, body.__doc__),
        _named(nowait, body, owner, f"{name}_nowait", nowait_doc),
    )


def kernel_enqueue_pair(
    body: Callable[Concatenate[S, P], R],
    open_state: object,
    check: Callable[Concatenate[S, P], object],
) -> tuple[Callable[Concatenate[S, P], Coroutine[Any, Any, R]], Callable[Concatenate[S, P], R]]:
    """:func:`enqueue_pair` for ``Stream._launch_kernel``, with its parameters spelt out.

    The most frequent enqueue, eager and captured: ``launch_kernel`` takes the body's own
    parameters (no ``*args``/``**kwargs`` packed and unpacked per launch; a call that does not
    fit them raises the same TypeError, when called rather than when awaited), and on a
    capturing stream goes straight to the capture's ``add_kernel``, which is all the body does
    there, after the same open-stream check (``open_state`` is ``StreamState.OPEN``: anything
    else takes the general path, which raises the body's error). ``check`` is as for
    :func:`enqueue_pair`. ``launch_kernel_nowait`` is :func:`enqueue_pair`'s.
    """
    owner, _, private = body.__qualname__.rpartition(".")
    name = private.lstrip("_")
    body.__qualname__ = f"{owner}.{name}"
    call: Callable[..., R] = body  # its parameters are spelt out below
    checked: Callable[..., object] = check

    async def waiting(
        self: Any, kernel: Any, grid: Any, block: Any, args: Any = (), *, shared_mem: Any = 0
    ) -> R:
        capture = self._capture
        if capture is not None and self._state is open_state:  # captured: no ring, no packet
            result: R = capture.add_kernel(
                kernel, grid, block, args, shared_mem, self._priority, self._device
            )
            return result
        queue = self._ring()
        if queue is None or queue.has_room():
            return call(self, kernel, grid, block, args, shared_mem=shared_mem)
        checked(self, kernel, grid, block, args, shared_mem=shared_mem)  # before parking
        if self._ring() is not queue:  # see the module notes
            return call(self, kernel, grid, block, args, shared_mem=shared_mem)
        if not await queue.wait_for_room(self._gone):  # gone: the body reports it
            return call(self, kernel, grid, block, args, shared_mem=shared_mem)
        try:
            return call(self, kernel, grid, block, args, shared_mem=shared_mem)
        finally:
            queue.settle_room()

    _, nowait = enqueue_pair(body, check=check)  # the general twin: it waits for nothing
    return _named(waiting, body, owner, name, body.__doc__), nowait


def _own_ring(self: object, *args: object, **kwargs: object) -> HardwareQueue | None:
    """The ``ring`` of an operation that adds no packet while its stream captures."""
    return cast(RingUser, self)._ring()


def _never(*args: object, **kwargs: object) -> bool:
    """The ``packetless`` of an operation that always adds a packet."""
    return False


def _named(
    method: Callable[..., Any], body: Callable[..., Any], owner: str, name: str, doc: str | None
) -> Any:
    """``method`` presented as ``owner.name``, with ``body``'s signature and annotations."""
    functools.update_wrapper(method, body)
    _rename(method, f"{owner}.{name}")
    method.__doc__ = doc
    return method


def _operation(function: Callable[..., object], owner: str, name: str) -> Callable[..., Any]:
    """A copy of ``function`` named ``owner.name`` (a wrong call names the public operation);
    the function itself keeps its name, since the body may call it too."""
    assert isinstance(function, types.FunctionType)
    copy = types.FunctionType(
        function.__code__,
        function.__globals__,
        function.__name__,
        function.__defaults__,
        function.__closure__,
    )
    copy.__kwdefaults__ = function.__kwdefaults__
    _rename(copy, f"{owner}.{name}")
    return copy


def _rename(function: Callable[..., Any], qualname: str) -> None:
    """Name ``function`` ``qualname``, its code too (a wrong call's TypeError uses that)."""
    assert isinstance(function, types.FunctionType)
    name = qualname.rpartition(".")[2]
    function.__code__ = function.__code__.replace(co_name=name, co_qualname=qualname)
    function.__name__ = name
    function.__qualname__ = qualname
