"""One lifecycle for every handle: state, liveness, ``with``, and freeing forgotten handles.

Every handle kind (streams and events, graphs and their nodes, executables, user objects) has
the same parts, all from this module:

* a state enum (``HandleState`` unless the kind needs more states, as executables do);
* one liveness check, :func:`check_live` / :func:`destroyed`, which raises the HIP code that
  the API in question uses, looked up in :data:`DESTROYED_CODES` (HIP's codes differ per API
  on purpose; see the table), as a subclass of ``ahg.Destroyed`` so users can catch one thing;
* ``with`` support (:class:`DestroyOnExit`) that calls ``destroy()``;
* a :class:`HandleRecord`: what the handle's finalizer needs, kept in an object of its own so
  the finalizer never keeps the handle alive. A handle dropped without ``destroy()`` is freed
  when it is collected, with a ``ResourceWarning`` naming it, as an unclosed file is;
  ``destroy()`` detaches the finalizer, so nothing is freed twice and nothing warns;
* one factory-only constructor guard, :class:`FactoryOnly`.

Finalizers run wherever the collector runs: on any thread, possibly while that thread holds one
of the runtime's locks, and possibly at interpreter exit. So a finalizer itself only warns and
hands the record to the *releaser*, a daemon thread that frees what the handle held (device
memory, signal sets, user-object references, whose destructors are user code) taking locks
normally, as HIP runs user-object destructors on its callback thread. A finalizer never calls
the event loop. :func:`collect_forgotten` collects garbage and waits until the releaser has
freed everything found, which is what tests and leak checks call. Work a forgotten handle
enqueued is never lost: a program in a queue holds its stream, and a launch in flight holds its
executable, so neither is collected before its work completes.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import gc
import numbers
import os
import queue
import sys
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator
from types import MappingProxyType, SimpleNamespace, TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Final,
    Generic,
    Literal,
    NoReturn,
    Self,
    SupportsIndex,
    TypeVar,
)
from typing import cast as _cast

from .errors import Destroyed, ErrorCode, HipError, destroyed_error
from .ints import is_bool

__all__ = [
    "DESTROYED_CODES",
    "DestroyOnExit",
    "FactoryOnly",
    "ForgottenHandleWarning",
    "HandleKind",
    "HandleRecord",
    "HandleState",
    "NoCopy",
    "WeakList",
    "check_live",
    "collect_forgotten",
    "destroyed",
    "owner_key",
    "owner_of",
    "refuse_copy",
    "releaser_statistics",
    "report_unraisable",
    "safe_repr",
]

T = TypeVar("T")


class HandleState(enum.Enum):
    """The state of a handle whose only transition is ``destroy()`` (or being forgotten)."""

    OPEN = "open"
    DESTROYED = "destroyed"


# -- the liveness table ---------------------------------------------------------------------------

HandleKind = Literal["graph", "graph node", "graph exec", "stream", "event"]
Use = Literal["use", "destroy", "graph node"]

DESTROYED_CODES: Final = MappingProxyType(
    {
        # hipGraphAdd*Node, hipGraphClone, hipGraphInstantiate, child-graph SetParams, ...:
        # isGraphValid fails -> InvalidValue.
        ("graph", "use"): ErrorCode.InvalidValue,
        # hipGraphDestroy on a graph already destroyed: HIP's one IllegalState for a handle.
        ("graph", "destroy"): ErrorCode.IllegalState,
        # Every node API (Get/SetParams, dependencies, hipGraphDestroyNode, SetEnabled):
        # isNodeValid fails -> InvalidValue, also when the node's graph was destroyed.
        ("graph node", "use"): ErrorCode.InvalidValue,
        ("graph node", "destroy"): ErrorCode.InvalidValue,
        # hipGraphLaunch, hipGraphUpload, hipGraphNodeSetEnabled, setters, update:
        # isGraphExecValid fails -> InvalidValue; a second hipGraphExecDestroy likewise.
        ("graph exec", "use"): ErrorCode.InvalidValue,
        ("graph exec", "destroy"): ErrorCode.InvalidValue,
        # Every stream API on a destroyed stream -> ContextIsDestroyed (hip-test expects it);
        # hipStreamDestroy of a stream already destroyed -> InvalidHandle.
        ("stream", "use"): ErrorCode.ContextIsDestroyed,
        ("stream", "destroy"): ErrorCode.InvalidHandle,
        # hipEventRecord/Query/Synchronize/ElapsedTime/Destroy -> InvalidHandle ...
        ("event", "use"): ErrorCode.InvalidHandle,
        ("event", "destroy"): ErrorCode.InvalidHandle,
        # ... but an event given to a graph event node's add or setter is a bad *parameter*:
        # the graph APIs answer InvalidValue.
        ("event", "graph node"): ErrorCode.InvalidValue,
    }
)
"""HIP's error code for a destroyed handle, by (handle kind, what the call does with it).

``"use"`` is any call on or with the handle, ``"destroy"`` a second destroy, and
``"graph node"`` the handle given as a graph node's parameter. User objects are absent on
purpose: HIP treats a call on a dead user object as a silent success.
"""


def destroyed(
    kind: HandleKind, handle: object, use: Use = "use", detail: str = "was destroyed"
) -> HipError:
    """The error for ``handle`` (a ``kind``) used after destroy: :data:`DESTROYED_CODES`."""
    return destroyed_error(DESTROYED_CODES[kind, use], f"{handle!r} {detail}")


def check_live(alive: bool, kind: HandleKind, handle: object, use: Use = "use") -> None:
    """The liveness check every handle kind makes: raise :func:`destroyed` unless ``alive``."""
    if not alive:
        _raise(kind, handle, use)


def _raise(kind: HandleKind, handle: object, use: Use) -> NoReturn:
    raise destroyed(kind, handle, use)


# -- the factory-only guard -----------------------------------------------------------------------


class FactoryOnly:
    """The hint a handle class gives when it is called directly: which factory makes it.

    A factory-only class's ``__init__`` takes anything and calls :meth:`refuse`, so
    ``Stream()``, ``Stream(device)`` and ``Stream(priority=1)`` all get the same ``TypeError``
    naming the factory, not Python's "missing argument" for the first and the hint only for
    the others. The factory itself builds the instance with ``object.__new__`` and a private
    initialiser, so it pays for no check at all.
    """

    __slots__ = ("_message",)

    def __init__(self, message: str) -> None:
        self._message = message

    def refuse(self) -> NoReturn:
        """Raise the TypeError naming the factory."""
        raise TypeError(self._message)

    def __repr__(self) -> str:
        return f"<factory only: {self._message}>"


def safe_repr(method: Callable[[T], str]) -> Callable[[T], str]:
    """A handle's ``__repr__`` that also answers for a half-built instance.

    A constructor that raises (``Stream()``, ``UserObject(None)``, a subclass's ``__init__``
    before ``super().__init__()``) leaves ``self`` in the traceback's frames, and whatever
    shows them (``traceback``'s ``capture_locals``, a debugger, a logging handler) calls
    ``repr``: an ``AttributeError`` there would hide the error being reported.
    """

    @functools.wraps(method)
    def wrapper(self: T) -> str:
        try:
            return method(self)
        except AttributeError:
            return f"<{type(self).__name__} half-built>"

    return wrapper


# -- with ---------------------------------------------------------------------------------------


def refuse_copy(handle: object, hint: str = "") -> NoReturn:
    """Raise the TypeError a handle answers ``copy``, ``deepcopy`` and ``pickle`` with.

    A handle names one runtime object. Python's default copy of a slotted object would make a
    second handle sharing the first one's registry slot and resources but not its state, so
    destroying either left the other claiming to be alive (and a user object's copy ran the
    destructor the original still counted on). Refusing is what locks and files do.
    """
    kind = type(handle).__name__
    raise TypeError(
        f"{kind} is a handle to one runtime object and cannot be copied or pickled{hint}"
    )


class NoCopy:
    """Mixin: ``copy.copy``, ``copy.deepcopy`` and ``pickle`` refuse the handle (see
    :func:`refuse_copy`); ``_copy_hint`` says what to use instead, if anything."""

    __slots__ = ()

    _copy_hint: ClassVar[str] = ""

    def __copy__(self) -> NoReturn:
        refuse_copy(self, self._copy_hint)

    def __deepcopy__(self, memo: object) -> NoReturn:
        refuse_copy(self, self._copy_hint)

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        refuse_copy(self, self._copy_hint)


class DestroyOnExit:
    """Mixin: ``__enter__`` returns the handle, ``__exit__`` destroys it if it is still alive.

    A destroy that fails while the block is already raising does not replace the block's
    exception (it is added to it as a note); one that finds the handle destroyed meanwhile, by
    another thread, is no error. Handles are never copied: the methods are :class:`NoCopy`'s,
    taken over rather than inherited, so a handle's MRO stays (handle, DestroyOnExit, object).
    """

    __slots__ = ()

    _copy_hint: ClassVar[str] = ""
    __copy__ = NoCopy.__copy__
    __deepcopy__ = NoCopy.__deepcopy__
    __reduce_ex__ = NoCopy.__reduce_ex__

    if TYPE_CHECKING:  # provided by the handle this mixes into

        @property
        def alive(self) -> bool: ...

        def destroy(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self.alive:
            return
        try:
            self.destroy()
        except Destroyed:
            if self.alive:
                raise
            # Destroyed by another thread between the check and the call: nothing left to do.
        except Exception as error:
            if exc is None:
                raise
            # The block's own exception is what the user must see; the failed destroy (a
            # memory node, which HIP never destroys, or a user object's destructor that
            # raised) rides along as a note. A BaseException (Ctrl-C in a destructor) wins.
            try:
                text = repr(error)
            except Exception:  # a user's exception whose repr raises: its type still says
                text = type(error).__name__
            exc.add_note(f"and destroy() on leaving the with block failed: {text}")


# -- finalizers -----------------------------------------------------------------------------------


class ForgottenHandleWarning(ResourceWarning):
    """A handle was dropped without ``destroy()``; its finalizer freed it.

    A ``ResourceWarning``, as for an unclosed file, so ``-W error::ResourceWarning`` and
    ``python -X dev`` show it; a class of its own so a test suite can filter just these.
    """


class HandleRecord:
    """What a handle's finalizer needs, held apart from the handle.

    The record refers to its handle only weakly, so the finalizer (which holds the record)
    never keeps the handle alive. A subclass that has something to free sets ``releases`` and
    implements :meth:`release`, which runs on the releaser thread.

    Attributes:
        label: how the warning names the handle, e.g. ``stream #3.0 on device 0``.
        quiet: free without warning (handles the runtime owns, such as a child graph's copy).
        freed: True once the finalizer ran. The collector runs it before the ``__del__`` of
            an object collected in the same cycle, which still reaches the handle and may
            call its ``destroy()``: that finds the handle freed already, and is a no-op rather
            than a "destroyed twice" error (each handle's ``destroy()`` checks this).
    """

    __slots__ = ("__weakref__", "_finalizer", "_handle", "freed", "label", "quiet")

    releases: ClassVar[bool] = False
    #: The call that ends the handle, as the warning names it.
    ending: ClassVar[str] = "destroy()"
    #: What the warning tells the user to do instead: a handle kind without ``destroy()`` (a
    #: user object, which is released) says what ends it.
    advice: ClassVar[str] = "destroy it, or use it in a `with` block"

    def __init__(self, handle: object, label: str, *, quiet: bool = False) -> None:
        self._handle = weakref.ref(handle)
        self.label = label
        self.quiet = quiet
        self.freed = False
        if self.releases:
            _RELEASER.start()  # here, in ordinary code: never from inside a finalizer
        finalizer = weakref.finalize(handle, self._forgotten)
        finalizer.atexit = False  # at exit nothing needs freeing, and warnings would be noise
        self._finalizer = finalizer

    @property
    def handle(self) -> Any:
        """The handle, or None once it was collected."""
        return self._handle()

    @property
    def attached(self) -> bool:
        """True until the handle is destroyed or collected."""
        return self._finalizer.alive

    def detach(self) -> None:
        """The handle was destroyed explicitly: its finalizer must do nothing."""
        self._finalizer.detach()

    def release(self) -> None:
        """Free what the forgotten handle held (on the releaser thread)."""

    def _forgotten(self) -> None:
        self.freed = True
        if sys.is_finalizing():  # interpreter exit: modules may be half torn down
            return
        if self.releases:
            _RELEASER.put(self)
        if not self.quiet:
            warnings.warn(
                f"unclosed {self.label}: dropped without {self.ending}; freed by its "
                f"finalizer ({self.advice})",
                ForgottenHandleWarning,
                stacklevel=3,  # past weakref.finalize: the code that dropped or collected it
            )

    def __repr__(self) -> str:
        state = "attached" if self.attached else "detached"
        return f"<{type(self).__name__} {self.label} {state}>"


class _Releaser:
    """The daemon thread that frees forgotten handles, fed by finalizers.

    ``queue.SimpleQueue.put`` is reentrant, so a finalizer may call it from anywhere, even from
    a collection triggered inside another ``put``.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[HandleRecord | threading.Event] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.released = 0
        self.failed = 0
        # Records put and not yet freed, so a flush with nothing to wait for returns at once
        # (``timeout=0`` is a poll). Re-entrant: a collection inside ``put`` may put again.
        self._pending = 0
        self._pending_lock = threading.RLock()

    def start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="ahipgraph-releaser", daemon=True)
                thread.start()
                self._thread = thread

    def put(self, record: HandleRecord) -> None:
        with self._pending_lock:
            self._pending += 1
        self._queue.put(record)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                item.release()
            except BaseException as error:  # user destructors: contained, like __del__
                self.failed += 1
                with contextlib.suppress(BaseException):  # the releaser itself must go on
                    report_unraisable(error, f"Exception ignored while freeing {item.label}", item)
            else:
                self.released += 1
            del item
            with self._pending_lock:
                self._pending -= 1

    def flush(self, timeout: float | None) -> bool:
        """Wait until everything queued so far was freed; False on timeout.

        Also what those releases queued in turn: a release may drop the last reference to
        another handle (a destructor's data, say), whose record is put behind the marker this
        waits for, so the wait goes on until nothing is pending.
        """
        thread = self._thread
        if thread is None or threading.current_thread() is thread:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._pending_lock:
                if not self._pending:  # everything put so far is freed: nothing to wait for
                    return True
            done = threading.Event()
            self._queue.put(done)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not done.wait(left):
                return False

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        self._pending_lock = threading.RLock()
        self._thread = None  # the child has no releaser thread until a record needs one


_RELEASER = _Releaser()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_RELEASER._after_fork)


def collect_forgotten(timeout: float | None = 10.0) -> None:
    """Collect garbage and wait until every forgotten handle found is freed.

    Args:
        timeout: seconds to wait, or None (or ``math.inf``, or anything past what a thread
            can wait) to wait as long as it takes.

    Raises:
        TimeoutError: a release (a user-object destructor, say) did not finish in ``timeout``.
        TypeError: ``timeout`` is not None or a real number (a bool is not a duration).
        ValueError: ``timeout`` is negative or NaN.
    """
    timeout = _wait_seconds(timeout)
    gc.collect()
    if not _RELEASER.flush(timeout):
        raise TimeoutError("forgotten handles are still being freed")


def _wait_seconds(timeout: object) -> float | None:
    """``timeout`` checked before anything waits, whether or not something is pending: the
    answer to a bad argument must not depend on what the collector happened to find."""
    if timeout is None:
        return None
    if is_bool(timeout) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds or None, got {timeout!r}")
    if timeout != timeout or timeout < 0:  # NaN is unequal to itself
        raise ValueError(f"timeout must be a non-negative number of seconds, got {timeout!r}")
    try:
        seconds = float(timeout)
    except OverflowError:  # an int past every float: longer than any wait
        return None
    if seconds >= threading.TIMEOUT_MAX:  # inf, or longer than a thread can wait: no limit
        return None
    return seconds


def releaser_statistics() -> dict[str, int]:
    """Forgotten handles freed by the releaser, and releases that raised."""
    return {"released": _RELEASER.released, "failed": _RELEASER.failed}


def owner_key(owner: object) -> object:
    """The key under which ``owner`` holds references (user objects, reservations).

    A handle with a :class:`HandleRecord` owns through its record, so what it owns never refers
    to the handle itself and cannot keep a forgotten handle alive.
    """
    record = getattr(owner, "_life", None)
    return record if isinstance(record, HandleRecord) else owner


def owner_of(key: object) -> object | None:
    """The owner behind an :func:`owner_key` (None if that handle was collected)."""
    return key.handle if isinstance(key, HandleRecord) else key


# -- an ordered weak collection -------------------------------------------------------------------


class WeakList(Generic[T]):
    """Objects in insertion order, held weakly: a collected one simply disappears.

    Used where an owner walks the handles it serves (a device's streams) without keeping
    them alive.
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: weakref.WeakKeyDictionary[T, None] = weakref.WeakKeyDictionary()

    def append(self, item: T) -> None:
        self._items[item] = None

    def remove(self, item: T) -> None:
        """Remove ``item``. Raises ValueError if it is not here (as ``list.remove``)."""
        try:
            del self._items[item]
        except KeyError:
            raise ValueError(f"{item!r} is not in the list") from None

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items.keys()))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __repr__(self) -> str:
        return f"<WeakList of {len(self)}>"


def report_unraisable(error: BaseException, message: str, obj: object = None) -> None:
    """Hand ``error`` to ``sys.unraisablehook``, as Python does for an error in ``__del__``.

    For errors in user code run where nobody can receive them, such as a destructor run by a
    completion after its event loop closed, or by the releaser for a forgotten handle.
    """
    hook = sys.unraisablehook
    if hook is sys.__unraisablehook__:
        # Python's own hook takes only the arguments Python makes (it raises TypeError for any
        # other object): write what it would write instead.
        _write_unraisable(error, message, obj)
        return
    args = SimpleNamespace(
        exc_type=type(error),
        exc_value=error,
        exc_traceback=error.__traceback__,
        err_msg=message,
        object=obj,
    )
    try:
        hook(_cast(Any, args))
    except Exception:  # a hook that fails must not take the reporting thread with it
        _write_unraisable(error, message, obj)


def _write_unraisable(error: BaseException, message: str, obj: object) -> None:
    """What ``sys.__unraisablehook__`` writes: the message, the object, the traceback."""
    stream = sys.stderr
    if stream is None:  # no console (pythonw): nowhere to report, as for Python's own hook
        return
    try:
        head = f"{message}: {obj!r}\n" if obj is not None else f"{message}:\n"
        stream.write(head + "".join(traceback.format_exception(error)))
        stream.flush()
    except Exception:  # a closed or broken stderr: the error stays contained
        pass
