"""HIP error codes and the exception hierarchy keyed by them.

Every failure a HIP call would report as a ``hipError_t`` is raised here as a :class:`HipError`
subclass, one class per code, so users catch exactly what they expect
(``except ahg.StreamCaptureInvalidated``) and can still reach the numeric code through ``.code``.
Python-level misuse (a wrong type, a malformed argument) stays ``TypeError``/``ValueError``.

The enum members carry HIP's names without the ``hipError`` prefix and HIP's numbers;
``ErrorCode.InvalidValue.hip_name`` gives the full C name.
"""

from __future__ import annotations

import copy
import enum
import io
import pickle
import threading
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from .ints import int_or_none

__all__ = [
    "Destroyed",
    "destroyed_error",
    "ErrorCode",
    "HipError",
    "InvalidValue",
    "OutOfMemory",
    "NotInitialized",
    "InvalidConfiguration",
    "InvalidPitchValue",
    "InvalidSymbol",
    "InvalidDevicePointer",
    "InvalidMemcpyDirection",
    "InvalidDeviceFunction",
    "InvalidDevice",
    "OperatingSystem",
    "InvalidHandle",
    "IllegalState",
    "NotFound",
    "NotReady",
    "IllegalAddress",
    "PeerAccessAlreadyEnabled",
    "PeerAccessNotEnabled",
    "ContextIsDestroyed",
    "LaunchFailure",
    "NotSupported",
    "StreamCaptureUnsupported",
    "StreamCaptureInvalidated",
    "StreamCaptureMerge",
    "StreamCaptureUnmatched",
    "StreamCaptureUnjoined",
    "StreamCaptureIsolation",
    "StreamCaptureImplicit",
    "CapturedEvent",
    "StreamCaptureWrongThread",
    "GraphExecUpdateFailure",
    "Unknown",
    "error_class",
]


class ErrorCode(enum.IntEnum):
    """``hipError_t`` values, named as HIP names them (minus the ``hipError`` prefix)."""

    Success = 0
    InvalidValue = 1
    OutOfMemory = 2
    NotInitialized = 3
    InvalidConfiguration = 9
    InvalidPitchValue = 12
    InvalidSymbol = 13
    InvalidDevicePointer = 17
    InvalidMemcpyDirection = 21
    InvalidDeviceFunction = 98
    InvalidDevice = 101
    OperatingSystem = 304
    InvalidHandle = 400
    IllegalState = 401
    NotFound = 500
    NotReady = 600
    IllegalAddress = 700
    PeerAccessAlreadyEnabled = 704
    PeerAccessNotEnabled = 705
    ContextIsDestroyed = 709
    LaunchFailure = 719
    NotSupported = 801
    StreamCaptureUnsupported = 900
    StreamCaptureInvalidated = 901
    StreamCaptureMerge = 902
    StreamCaptureUnmatched = 903
    StreamCaptureUnjoined = 904
    StreamCaptureIsolation = 905
    StreamCaptureImplicit = 906
    CapturedEvent = 907
    StreamCaptureWrongThread = 908
    GraphExecUpdateFailure = 910
    Unknown = 999

    @property
    def hip_name(self) -> str:
        """The C enumerator, e.g. ``hipErrorInvalidValue`` (``hipSuccess`` for 0)."""
        return "hipSuccess" if self is ErrorCode.Success else f"hipError{self.name}"


class HipError(Exception):
    """Base class of every error a HIP call reports.

    ``copy.copy``, ``copy.deepcopy`` and ``pickle`` keep the class, the ``code``, the message
    and every attribute set on the error (notes and a user's subclass's slots included; not the
    traceback, ``__cause__`` or ``__context__``, which no Python exception's copy keeps).
    Attributes that refer back to the error (or to another error referring to it) are kept
    as the references they are. A user's subclass whose
    ``__init__`` takes other arguments is rebuilt from the arguments it was made with (which
    a pickle of it must then be able to pickle).
    Pickling drops an attribute that cannot be pickled (a graph node, as in the ``result`` of
    an update failure, is a handle to an object of this process); ``copy.deepcopy`` shares one
    that cannot be copied instead.

    Attributes:
        code: the :class:`ErrorCode` of this failure (a class attribute of each subclass).
        message: the message, without the ``hipError...`` prefix ``str()`` shows.
    """

    code: ClassVar[ErrorCode] = ErrorCode.Unknown
    # The arguments a subclass with its own __init__ was made with (see __new__); unset for
    # every class whose __init__ is ours, which rebuilds from ``message``. Not a slot: a slot
    # would give HipError a layout of its own, and a user's ``class E(ahg.HipError, OSError)``
    # would then be refused ("instance lay-out conflict").
    _made_with: tuple[tuple[Any, ...], dict[str, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> HipError:
        # HipError(ErrorCode.X[, message]) builds the code's own class, as OSError(errno, ...)
        # builds FileNotFoundError: ``except ahg.NotReady`` then catches it. Every argument is
        # passed on, as Exception.__new__ takes them: a user's subclass may take its own
        # (keywords too), and one whose __init__ skips ours still has them as ``args``.
        code = args[0] if args else None
        if isinstance(code, ErrorCode):
            cls = error_class(code) if cls is HipError else cls
            if code is not cls.code:
                raise ValueError(f"{cls.__name__} has code {cls.code.name}, not {code.name}")
        error = super().__new__(cls, *args, **kwargs)
        if cls.__init__ is not _HIP_INIT:  # a copy or a pickle calls it with these again
            error._made_with = (args, kwargs)
        return error

    def __init__(self, message: str | ErrorCode = "", *rest: str) -> None:
        if isinstance(message, ErrorCode):  # the code picked the class (see __new__)
            if len(rest) > 1:
                raise TypeError(f"{type(self).__name__}(code, message) takes one message")
            message = rest[0] if rest else ""
        elif rest:
            raise TypeError(f"{type(self).__name__}() takes one message, or a code and a message")
        if not isinstance(message, str):
            raise TypeError(f"a HipError's message is a str, not {type(message).__name__}")
        self.message = message
        super().__init__(f"{self.code.hip_name}: {message}" if message else self.code.hip_name)

    def _remade(self) -> tuple[Callable[..., HipError], tuple[Any, ...]]:
        """How to make this error again, before its attributes are restored: from the bare
        message (the default would pass the prefixed text back to __init__ and prefix it
        twice), or from the arguments a subclass with its own __init__ was made with."""
        made_with = vars(self).get("_made_with")
        if made_with is None:
            return type(self), (self.message,)
        args, kwargs = made_with
        if kwargs:
            return _remake, (type(self), args, kwargs)
        return type(self), args

    def __reduce__(self) -> tuple[Any, ...]:
        # What pickle calls: an attribute that does not pickle is dropped (see the class notes).
        reducing = _reducing()
        reducing.add(id(self))
        try:
            state = {name: value for name, value in _attributes(self) if _pickles(value, reducing)}
        finally:
            reducing.discard(id(self))
        return (*self._remade(), state)

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        # What pickle calls with the attributes __reduce__ kept (see _restore).
        if state:
            _restore(self, state.items())

    def __copy__(self) -> HipError:
        maker, args = self._remade()
        copied = maker(*args)
        _restore(copied, _attributes(self))
        return copied

    def __deepcopy__(self, memo: dict[int, Any]) -> HipError:
        maker, args = self._remade()
        copied = maker(*_deep_or_shared(args, memo))
        memo[id(self)] = copied
        _restore(copied, [(name, _deep_or_shared(v, memo)) for name, v in _attributes(self)])
        return copied

    @staticmethod
    def from_code(code: ErrorCode | int, message: str = "") -> HipError:
        """Build the exception of the subclass registered for ``code``.

        Raises:
            TypeError: ``code`` is not an integer (see :func:`error_class`).
            ValueError: ``code`` is ``Success``.
        """
        return error_class(code)(message)


_HIP_INIT = HipError.__init__


def _attributes(error: HipError) -> list[tuple[str, Any]]:
    """The attributes a copy or a pickle of ``error`` restores (not how it was made): those
    in its ``__dict__``, and those in the slots of a user's subclass that declares some."""
    found = [(name, value) for name, value in vars(error).items() if name != "_made_with"]
    for name in _slot_names(type(error)):
        try:
            found.append((name, getattr(error, name)))
        except AttributeError:  # a slot never set
            continue
    return found


def _restore(error: HipError, attributes: Iterable[tuple[str, Any]]) -> None:
    """Put a copy's attributes back as they were held: in its ``__dict__``, or in its slots
    (through the slot itself). Not through ``setattr``: a user's ``__setattr__`` that
    refuses changes once the error is made (a frozen error) is for the program, and would
    refuse the copy its own attributes."""
    fields = vars(error)
    slots = _slot_names(type(error))
    for name, value in attributes:
        if name in slots:
            object.__setattr__(error, name, value)
        else:
            fields[name] = value


def _slot_names(cls: type) -> list[str]:
    """The slots the classes of ``cls``'s MRO declare (a private name as Python mangles it)."""
    names = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):
                name = f"_{klass.__name__.lstrip('_')}{name}"
            names.append(name)
    return names


_probing = threading.local()  # the errors this thread is pickling (see _pickles)


def _reducing() -> set[int]:
    """The ids of the errors whose ``__reduce__`` runs in this thread, innermost last."""
    reducing: set[int] | None = getattr(_probing, "ids", None)
    if reducing is None:
        reducing = _probing.ids = set()
    return reducing


class _Probe(pickle.Pickler):
    """A pickler that only asks whether a value pickles: an error it meets whose own pickling
    is under way (the value refers back to it) stands for itself, as the real pickle's memo
    makes it do. Without that, each attribute referring back to its error would probe the
    whole error again: endless for one such attribute, exponential for several."""

    def __init__(self, reducing: set[int]) -> None:
        super().__init__(io.BytesIO())
        self._reducing = reducing

    def persistent_id(self, obj: Any) -> int | None:
        return id(obj) if id(obj) in self._reducing else None


def _pickles(value: Any, reducing: set[int]) -> bool:
    """Whether ``value`` pickles (an attribute that does not is dropped from a pickle)."""
    try:
        _Probe(reducing).dump(value)
    except Exception:  # whatever its own pickling raises, it is dropped
        return False
    return True


def _deep_or_shared(value: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(value)``, or ``value`` itself if it refuses (a handle: see NoCopy)."""
    try:
        return copy.deepcopy(value, memo)
    except Exception:  # whatever its own copying raises, it is shared
        return value


def _remake(cls: type[HipError], args: tuple[Any, ...], kwargs: dict[str, Any]) -> HipError:
    """Make a user's error class again from its keyword arguments (pickle passes none)."""
    return cls(*args, **kwargs)


_BY_CODE: dict[ErrorCode, type[HipError]] = {}


def _register(cls: type[HipError]) -> type[HipError]:
    _BY_CODE[cls.code] = cls
    return cls


def error_class(code: ErrorCode | int) -> type[HipError]:
    """The exception class for ``code``; unknown codes map to :class:`Unknown`.

    ``code`` follows the integer rule (``core/ints.py``): an ``ErrorCode`` or any integer,
    numpy's included. Anything else is a mistake, not an unknown code: ``ErrorCode(True)``
    and ``ErrorCode(719.0)`` would find ``InvalidValue`` and ``LaunchFailure``, and None or a
    string would quietly make an ``Unknown`` error.

    Raises:
        TypeError: ``code`` is not an integer (a bool, a float, a string, None...).
        ValueError: ``code`` is ``Success``, which is not an error.
    """
    number = int_or_none(code)
    if number is None:
        raise TypeError(f"an error code must be an int or an ahg.ErrorCode, got {code!r}")
    try:
        code = ErrorCode(number)
    except ValueError:
        return Unknown
    if code is ErrorCode.Success:
        raise ValueError("hipSuccess is not an error and has no exception class")
    return _BY_CODE[code]


@_register
class InvalidValue(HipError):
    """``hipErrorInvalidValue``: an argument is null, out of range or not what the call takes, or a
    graph, node or executable handle was destroyed."""

    code = ErrorCode.InvalidValue


@_register
class OutOfMemory(HipError):
    """``hipErrorOutOfMemory``: not enough device memory, or address space, for an allocation."""

    code = ErrorCode.OutOfMemory


@_register
class NotInitialized(HipError):
    """``hipErrorNotInitialized``: kept for HIP's table of codes; ahipgraph never raises it."""

    code = ErrorCode.NotInitialized


@_register
class InvalidConfiguration(HipError):
    """``hipErrorInvalidConfiguration``: a launch's grid or block has a zero dimension or is
    beyond the device's limits."""

    code = ErrorCode.InvalidConfiguration


@_register
class InvalidPitchValue(HipError):
    """``hipErrorInvalidPitchValue``: a pitched copy's pitch is below its row width."""

    code = ErrorCode.InvalidPitchValue


@_register
class InvalidSymbol(HipError):
    """``hipErrorInvalidSymbol``: a symbol copy names no declared device symbol."""

    code = ErrorCode.InvalidSymbol


@_register
class InvalidDevicePointer(HipError):
    """``hipErrorInvalidDevicePointer``: a device address lies in no live allocation, or in a
    peer's memory the device has no access to."""

    code = ErrorCode.InvalidDevicePointer


@_register
class InvalidMemcpyDirection(HipError):
    """``hipErrorInvalidMemcpyDirection``: a copy's ``kind`` does not match its endpoints."""

    code = ErrorCode.InvalidMemcpyDirection


@_register
class InvalidDeviceFunction(HipError):
    """``hipErrorInvalidDeviceFunction``: a stream launch was given no kernel."""

    code = ErrorCode.InvalidDeviceFunction


@_register
class InvalidDevice(HipError):
    """``hipErrorInvalidDevice``: no device has that ordinal, or the device was replaced by
    ``configure_devices`` and takes no new work."""

    code = ErrorCode.InvalidDevice


@_register
class OperatingSystem(HipError):
    """``hipErrorOperatingSystem``: a DOT file could not be written, or Graphviz failed."""

    code = ErrorCode.OperatingSystem


@_register
class InvalidHandle(HipError):
    """``hipErrorInvalidHandle`` (also HIP's ``hipErrorInvalidResourceHandle``): a null or
    destroyed event, an unrecorded one where a record is needed, an event of another device,
    or the null stream (or a stream already destroyed) given to ``destroy()``."""

    code = ErrorCode.InvalidHandle


@_register
class IllegalState(HipError):
    """``hipErrorIllegalState``: the call does not fit the object's state (a stream not capturing,
    a graph destroyed twice, a device busy on another event loop)."""

    code = ErrorCode.IllegalState


@_register
class NotFound(HipError):
    """``hipErrorNotFound``: kept for HIP's table of codes; ahipgraph never raises it."""

    code = ErrorCode.NotFound


@_register
class NotReady(HipError):
    """``hipErrorNotReady``: a ``*_nowait`` call would have to wait, or work is not finished yet."""

    code = ErrorCode.NotReady


@_register
class IllegalAddress(HipError):
    """``hipErrorIllegalAddress``: a copy, fill or other device operation faulted while it ran."""

    code = ErrorCode.IllegalAddress


@_register
class PeerAccessAlreadyEnabled(HipError):
    """``hipErrorPeerAccessAlreadyEnabled``: the device already accesses that peer."""

    code = ErrorCode.PeerAccessAlreadyEnabled


@_register
class PeerAccessNotEnabled(HipError):
    """``hipErrorPeerAccessNotEnabled``: the device does not access that peer."""

    code = ErrorCode.PeerAccessNotEnabled


@_register
class ContextIsDestroyed(HipError):
    """``hipErrorContextIsDestroyed``: the stream was destroyed."""

    code = ErrorCode.ContextIsDestroyed


@_register
class LaunchFailure(HipError):
    """``hipErrorLaunchFailure``: device work failed: a kernel body or host function raised
    (its ``__cause__`` says what), or the work was abandoned."""

    code = ErrorCode.LaunchFailure


class PointerLaunchFailure(LaunchFailure, InvalidDevicePointer):
    """A kernel fault caused by a bad device pointer, such as a peer's memory without peer access.

    Every kernel fault is a ``LaunchFailure`` (its code) whose ``__cause__`` says why; this one is
    also an ``InvalidDevicePointer``, the error HIP's peer-access rule names, so either
    ``except`` clause catches it.
    """

    code = ErrorCode.LaunchFailure


def kernel_fault(message: str, cause: BaseException) -> LaunchFailure:
    """The ``LaunchFailure`` for a kernel body that raised ``cause``, chained to it."""
    kind = PointerLaunchFailure if isinstance(cause, InvalidDevicePointer) else LaunchFailure
    error = kind(message)
    error.__cause__ = cause
    return error


@_register
class NotSupported(HipError):
    """``hipErrorNotSupported``: the simulated runtime, or HIP's rules, do not support the call
    (cloning a graph with memory nodes, a device-side launch)."""

    code = ErrorCode.NotSupported


@_register
class StreamCaptureUnsupported(HipError):
    """``hipErrorStreamCaptureUnsupported``: the call is not allowed while a capture is in progress;
    the capture it concerns is invalidated."""

    code = ErrorCode.StreamCaptureUnsupported


@_register
class StreamCaptureInvalidated(HipError):
    """``hipErrorStreamCaptureInvalidated``: the capture was invalidated by an earlier illegal
    call; it can only be ended."""

    code = ErrorCode.StreamCaptureInvalidated


@_register
class StreamCaptureMerge(HipError):
    """``hipErrorStreamCaptureMerge``: an event wait would merge two captures into one."""

    code = ErrorCode.StreamCaptureMerge


@_register
class StreamCaptureUnmatched(HipError):
    """``hipErrorStreamCaptureUnmatched``: a forked stream's capture was ended; end its origin."""

    code = ErrorCode.StreamCaptureUnmatched


@_register
class StreamCaptureUnjoined(HipError):
    """``hipErrorStreamCaptureUnjoined``: a forked stream did work never joined back into the
    origin stream before the end of the capture."""

    code = ErrorCode.StreamCaptureUnjoined


@_register
class StreamCaptureIsolation(HipError):
    """``hipErrorStreamCaptureIsolation``: a wait on an event of a capture in progress that was not
    recorded in it."""

    code = ErrorCode.StreamCaptureIsolation


@_register
class StreamCaptureImplicit(HipError):
    """``hipErrorStreamCaptureImplicit``: the null stream was used while a blocking stream of its
    device captures."""

    code = ErrorCode.StreamCaptureImplicit


@_register
class CapturedEvent(HipError):
    """``hipErrorCapturedEvent``: an event recorded in a capture in progress was queried or waited
    for on the host."""

    code = ErrorCode.CapturedEvent


@_register
class StreamCaptureWrongThread(HipError):
    """``hipErrorStreamCaptureWrongThread``: a GLOBAL or THREAD_LOCAL capture was ended by another
    task or thread than the one that began it."""

    code = ErrorCode.StreamCaptureWrongThread


@_register
class GraphExecUpdateFailure(HipError):
    """``hipErrorGraphExecUpdateFailure``: ``exec.update(graph)`` found the graphs differ in a
    way it cannot apply.

    Attributes:
        result: the ``UpdateResult`` saying what differs and which node of the new graph
            (set by ``exec.update``). A pickle of the error drops it, as the node is a handle
            to an object of this process; ``copy.copy`` and ``copy.deepcopy`` keep it.
    """

    code = ErrorCode.GraphExecUpdateFailure
    # Declared for type checkers only (``except ... as e: e.result.kind``): a class-level
    # value would make a pickled copy, which drops it, look as if it had one. Typed Any: its
    # type, ``exec.flags.UpdateResult``, lives in a layer above this one.
    result: Any


@_register
class Unknown(HipError):
    """``hipErrorUnknown``: HIP's answer where it has no better one (a child graph node given
    its own parent graph, or a child graph that does not match the node's)."""

    code = ErrorCode.Unknown


class Destroyed(HipError):
    """Marks every "used after destroy" error, whatever HIP code the API reports.

    HIP answers a destroyed handle with a code that depends on the API (``InvalidValue`` for a
    graph or an executable, ``ContextIsDestroyed`` for a stream, ``InvalidHandle`` for an
    event). Each such error is raised as a class deriving from both that code's class and this
    one, so ``except ahg.InvalidValue`` keeps working and ``except ahg.Destroyed`` catches them
    all.
    """


_DESTROYED: dict[ErrorCode, type[HipError]] = {}


def _rebuild_destroyed(code: ErrorCode, message: str) -> HipError:
    return destroyed_error(code, message)


def destroyed_error(code: ErrorCode, message: str) -> HipError:
    """The error for a use of a destroyed handle: ``code``'s class, also a :class:`Destroyed`."""
    cls = _DESTROYED.get(code)
    if cls is None:
        base = error_class(code)

        def remade(self: HipError) -> tuple[Callable[..., HipError], tuple[Any, ...]]:
            if type(self) is not _DESTROYED.get(self.code):  # a user's subclass of it
                return HipError._remade(self)
            return _rebuild_destroyed, (self.code, self.message)  # the class is made here

        made = type(
            base.__name__,
            (base, Destroyed),
            {
                "__module__": base.__module__,
                "__qualname__": base.__qualname__,
                "__doc__": f"{base.__name__}, raised for a destroyed handle.",
                "_remade": remade,
            },
        )
        cls = _DESTROYED.setdefault(code, made)
    return cls(message)
