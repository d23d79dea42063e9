"""Kernels: typed Python functions whose bodies run over the whole grid with numpy.

``@ahg.kernel`` turns ``def body(t, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None`` into a
:class:`Kernel`. The first parameter receives a :class:`Threads` describing the launch (grid,
block, and the linear ids of every thread as one numpy array); the others are declared with
argument types and are decoded from kernel-argument bytes at dispatch. A body may be ``async``:
its queue then stays busy until the coroutine finishes, which is how tests hold a kernel open.
A plain ``def`` body that returns an awaitable (its async helper's coroutine; a wrapper around
an async function) is awaited the same way; any other value it returns is ignored, as a C
kernel's ``void`` return (see :func:`.ops.body_result`).
The parameter annotations are static types too (see :mod:`.kernel_args`), so a body written this
way type-checks under ``mypy --strict``; string annotations are evaluated when the kernel is made.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, overload

import numpy as np
import numpy.typing as npt

from ..core.callables import makes_generator
from ..core.errors import InvalidConfiguration, InvalidValue
from ..core.ints import as_int, int_or_none
from ..core.lifecycle import safe_repr
from .kernel_args import (
    ArgLayout,
    ArgType,
    CheckedArgLayout,
    PointerType,
    ScalarType,
    arg_type_of,
    names_an_argument,
)
from .thread_ids import MAX_THREADS_PER_LAUNCH, THREAD_IDS

__all__ = ["Dim3", "Kernel", "Threads", "kernel", "launch_dims"]


class Dim3(NamedTuple):
    x: int
    y: int = 1
    z: int = 1

    @property
    def volume(self) -> int:
        return self.x * self.y * self.z


DimLike = int | Sequence[int]
_BYTES = (bytes, bytearray, memoryview)


def _dim3(value: DimLike, what: str) -> Dim3:
    number = int_or_none(value)
    if number is not None:
        return Dim3(number)
    # bytes hold ints too, but a grid of b"x" is a mistake, not 120 blocks
    if isinstance(value, Sequence) and not isinstance(value, _BYTES) and 1 <= len(value) <= 3:
        parts = [int_or_none(part) for part in value]
        if None not in parts:
            return Dim3(*parts)  # type: ignore[arg-type]
    raise TypeError(f"{what} must be an int or a tuple of up to 3 ints, got {value!r}")


def _exact_ints(dim: Dim3) -> bool:
    """Whether ``dim`` holds plain ``int`` s, as every Dim3 the runtime makes does."""
    return type(dim.x) is int and type(dim.y) is int and type(dim.z) is int


def launch_dims(
    grid: DimLike,
    block: DimLike,
    *,
    max_threads_per_block: int,
    max_grid: tuple[int, int, int],
    shared_mem: int = 0,
    max_shared_mem: int = 65536,
    max_threads: int = MAX_THREADS_PER_LAUNCH,
) -> tuple[Dim3, Dim3]:
    """Validate a launch configuration (grid in blocks, block in threads) as HIP does.

    HIP's order (``hipLaunchKernel``, and ``ihipLaunchKernel_validate`` behind it, which kernel
    nodes use too): a grid past its limits, a zero dimension, then the shared memory, then the
    block's thread count. So a launch with both a block and a shared-memory size too large is
    ``InvalidValue``, as in HIP.

    Args:
        max_threads: the most threads (grid x block) one launch may have. The simulator
            materialises every thread id (:attr:`Threads.ids`), so it cannot run the full range
            HIP's grid limits allow; it refuses such a launch when it is made, after every
            check of HIP's own.

    Raises:
        TypeError: a grid, block or shared-memory size that is not an int (or, for grid and
            block, a tuple of up to 3 ints).
        InvalidConfiguration: a zero or negative dimension, one past the device's limits, or
            more than ``max_threads`` threads in all.
        InvalidValue: more dynamic shared memory than a block may have (or a negative size).
    """
    grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
    shared_mem = as_int(shared_mem, "shared_mem")
    if min(grid3) <= 0 or min(block3) <= 0:
        raise InvalidConfiguration(f"grid {tuple(grid3)} and block {tuple(block3)} must be > 0")
    if any(g > m for g, m in zip(grid3, max_grid, strict=True)):
        raise InvalidConfiguration(f"grid {tuple(grid3)} exceeds the device limit {max_grid}")
    if not 0 <= shared_mem <= max_shared_mem:
        raise InvalidValue(f"shared memory {shared_mem} outside [0, {max_shared_mem}]")
    if block3.volume > max_threads_per_block:
        raise InvalidConfiguration(
            f"block {tuple(block3)} has {block3.volume} threads, limit {max_threads_per_block}"
        )
    if grid3.volume * block3.volume > max_threads:
        raise InvalidConfiguration(
            f"grid {tuple(grid3)} x block {tuple(block3)} is {grid3.volume * block3.volume} "
            f"threads; the simulator materialises at most {max_threads} per launch"
        )
    return grid3, block3


class Threads:
    """What a kernel body knows about its launch.

    Immutable: one Threads is shared by every launch of its shape, of any kernel, on any
    device (``runtime/params.py`` makes it once per shape), so a body that assigned
    ``t.count`` would change what every later launch of that shape runs over.
    """

    __slots__ = ("block", "count", "grid", "shared_mem")

    block: Dim3
    count: int
    grid: Dim3
    shared_mem: int

    def __init__(self, grid: DimLike, block: DimLike, shared_mem: int = 0) -> None:
        """A launch of ``grid`` blocks of ``block`` threads, as a unit test of a body makes one.

        Raises:
            TypeError: ``grid`` or ``block`` is not an int or a tuple of up to 3 ints (a
                ``Dim3`` made by hand included), or ``shared_mem`` is not an int.
            InvalidConfiguration: a dimension below 1.
            InvalidValue: a negative ``shared_mem``.
        """
        # The runtime passes Dim3s of ints; a user building one to call a body directly (a
        # unit test of a kernel) may pass ints or tuples, as a launch takes them, or a Dim3
        # made by hand, which is a tuple of anything: checked as a launch checks it, or
        # ``Dim3(1.5)`` made a count of 1.5 and ids of ``arange(1.5)``, two threads.
        if type(grid) is not Dim3 or not _exact_ints(grid):
            grid = _dim3(grid, "grid")
        if type(block) is not Dim3 or not _exact_ints(block):
            block = _dim3(block, "block")
        shared_mem = as_int(shared_mem, "shared_mem")
        if min(grid) <= 0 or min(block) <= 0:
            raise InvalidConfiguration(f"grid {tuple(grid)} and block {tuple(block)} must be > 0")
        if shared_mem < 0:  # as a launch refuses it
            raise InvalidValue(f"shared memory {shared_mem} is negative")
        init = object.__setattr__  # made once per launch shape, never per launch
        init(self, "grid", grid)
        init(self, "block", block)
        init(self, "count", grid.volume * block.volume)
        init(self, "shared_mem", shared_mem)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Threads is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Threads is read-only: cannot delete {name!r}")

    # Immutable, so a copy is the object itself and a pickle is its launch shape: Python's
    # default copy set each slot again, which the read-only ``__setattr__`` refused, so
    # ``copy.copy(t)``, ``copy.deepcopy`` of a kernel node's params and ``pickle`` raised
    # "Threads is read-only: cannot set 'block'".

    def __copy__(self) -> Threads:
        return self

    def __deepcopy__(self, memo: object) -> Threads:
        return self

    def __reduce__(self) -> tuple[type[Threads], tuple[Dim3, Dim3, int]]:
        return (Threads, (self.grid, self.block, self.shared_mem))

    @property
    def ids(self) -> npt.NDArray[np.int64]:
        """Linear global ids of every thread (read-only, shared between launches).

        The arrays come from a small bounded cache (:mod:`.thread_ids`), so a body that needs
        them often should keep them in a local.

        Raises:
            InvalidConfiguration: more threads than the simulator materialises (a launch of
                that size is refused earlier, when it is made).
        """
        return THREAD_IDS.ids(self.count)

    @safe_repr
    def __repr__(self) -> str:
        return f"Threads(grid={tuple(self.grid)}, block={tuple(self.block)})"


class Kernel:
    """A declared kernel: its body, parameters and argument layout.

    Attributes:
        name: the kernel's name (used in DOT output and error messages).
        layout: the :class:`ArgLayout` of its parameters.
        duration_ns: a fixed modelled duration, overriding the cost model's estimate.
        is_async: the body is a coroutine function (a plain body may still return an
            awaitable, which dispatch awaits).
    """

    # ``__weakref__``: a kernel stands where its function was (``@ahg.kernel``), and a
    # function can be weakly referred to, as by a cache keyed by kernel that should not
    # keep a kernel alive (a ``WeakKeyDictionary``).
    __slots__ = ("__weakref__", "body", "duration_ns", "is_async", "layout", "name")

    body: Callable[..., Any]
    name: str
    layout: ArgLayout
    duration_ns: int | None
    is_async: bool  # set with the body (see __setattr__)

    def __init__(
        self,
        body: Callable[..., Any],
        *,
        name: str | None = None,
        duration_ns: int | None = None,
        extents: Mapping[str, int | str] | None = None,
    ) -> None:
        if not callable(body):
            raise TypeError(f"a kernel body must be callable, got {body!r}")
        if makes_generator(body):
            # Calling one only makes a generator: the body would never run, and every launch
            # would "succeed" having done nothing. (A callable object whose ``__call__`` is a
            # generator function is one too, as for host functions and destructors.)
            raise TypeError(
                f"a kernel body must be a function or an async function, not a generator "
                f"function: {body!r}"
            )
        if name is not None and not isinstance(name, str):
            raise TypeError(f"a kernel name must be a str, got {name!r}")
        # A partial or a callable object has no __name__ of its own: name it by its type.
        label: str = name or getattr(body, "__name__", None) or type(body).__name__
        try:
            inspect.signature(body)
        except ValueError as error:  # a builtin or extension callable that declares none
            raise TypeError(f"kernel {label!r}: {body!r} has no signature to read") from error
        try:
            signature = inspect.signature(body, eval_str=True)
        except TypeError:
            raise  # ``ahg.Ptr[int]``: its own TypeError already says what is wrong
        except Exception as error:
            # A string annotation (``from __future__ import annotations``) with a typo in it:
            # say which kernel, rather than a bare NameError from inside ``inspect``.
            raise TypeError(
                f"kernel {label!r}: its parameter annotations cannot be evaluated: {error!r}"
            ) from error
        params = list(signature.parameters.values())
        if not params:
            raise TypeError(f"kernel {label!r} needs a first parameter for its Threads")
        first = params[0]
        if first.kind in (first.KEYWORD_ONLY, first.VAR_KEYWORD):
            raise TypeError(
                f"kernel {label!r}: its first parameter receives the launch's Threads and "
                f"must be positional, got {first}"
            )
        if names_an_argument(first.annotation):
            # ``def k(x: ahg.Ptr[ahg.float32])``: the Threads parameter was left out, and x
            # would silently receive the Threads while every launch had one argument too many.
            raise TypeError(
                f"kernel {label!r}: its first parameter receives the launch's Threads, but "
                f"{first.name!r} is annotated as a kernel argument; add a first parameter "
                f"such as t: ahg.Threads"
            )
        names: list[str] = []
        types: list[ArgType] = []
        for param in params[1:]:
            if param.kind not in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
                # A kernel's argument list is fixed (one slot of the argument buffer each):
                # ``*args``, ``**kwargs`` and keyword-only parameters have no place in it.
                kind = param.kind
                shown = (
                    "*" if kind is kind.VAR_POSITIONAL else "**" if kind is kind.VAR_KEYWORD else ""
                )
                raise TypeError(
                    f"kernel {label!r}: parameter {shown + param.name!r} is "
                    f"{param.kind.description}; kernel parameters must be positional "
                    f"(no *args, keyword-only parameters or **kwargs)"
                )
            arg_type = arg_type_of(param.annotation)
            if arg_type is None:
                raise TypeError(
                    f"kernel {label!r}: parameter {param.name!r} needs an argument "
                    f"type annotation such as ahg.int32 or ahg.Ptr[ahg.float32]"
                )
            names.append(param.name)
            types.append(arg_type)
        duration_ns = _checked_duration(duration_ns)
        self.body = body
        self.name = label
        declared = _check_extents(label, names, types, extents)
        if declared or any(isinstance(t, PointerType) and t.access == "const" for t in types):
            self.layout = CheckedArgLayout(names, types, declared)
        else:
            self.layout = ArgLayout(names, types)
        self.duration_ns = duration_ns

    def __setattr__(self, name: str, value: Any) -> None:
        """A kernel is a definition its user may change (a later node or launch reads it
        afresh), but only to values it could have been declared with: a duration that is not
        a non-negative int would move the device's clock backwards or make it a float, a name
        that is not a str would break every message naming the kernel. ``is_async`` follows
        the body, and is set with it."""
        if name == "duration_ns":
            value = _checked_duration(value)
        elif name == "name":
            if not isinstance(value, str) or not value:
                raise TypeError(f"a kernel name must be a non-empty str, got {value!r}")
        elif name == "layout":
            if not isinstance(value, ArgLayout):
                raise TypeError(f"a kernel layout must be an ArgLayout, got {value!r}")
        elif name == "body":
            if not callable(value) or makes_generator(value):
                raise TypeError(
                    f"a kernel body must be a function or an async function, got {value!r}"
                )
            object.__setattr__(self, "is_async", _is_async(value))
        elif name == "is_async" and hasattr(self, "body") and value is not _is_async(self.body):
            raise AttributeError("is_async follows the kernel's body: assign the body instead")
        object.__setattr__(self, name, value)

    def __deepcopy__(self, memo: object) -> Kernel:
        """A new kernel with the same body and layout, as ``copy.copy`` makes: the body is a
        function (which ``deepcopy`` never copies) and the layout is never changed once made
        (its compiled struct cannot be deep-copied, and ``deepcopy`` of a kernel, or of a
        kernel node's params, raised "cannot pickle '_struct.Struct' object")."""
        return copy.copy(self)

    def __delattr__(self, name: str) -> None:
        """Every field is part of the definition (a kernel without a body or a duration
        cannot be launched): deleting one would bypass the checks of :meth:`__setattr__`."""
        raise AttributeError(f"a kernel's {name} cannot be deleted: assign a new value instead")

    def pack(self, args: Sequence[Any] | None) -> bytes:
        """Validate ``args`` and return the kernel-argument bytes.

        Raises:
            TypeError: wrong argument count or types. ValueError: an integer out of range.
        """
        return self.layout.pack(args, self.name)

    @safe_repr
    def __repr__(self) -> str:
        params = ", ".join(
            f"{n}: {t!r}" for n, t in zip(self.layout.names, self.layout.types, strict=True)
        )
        return f"<Kernel {self.name}({params})>"


def _checked_duration(duration_ns: object) -> int | None:
    """A kernel's fixed duration: None (the cost model's estimate) or a non-negative int."""
    if duration_ns is None:
        return None
    duration = as_int(duration_ns, "duration_ns")
    if duration < 0:
        raise ValueError(f"duration_ns must be non-negative, got {duration_ns!r}")
    return duration


def _is_async(body: Callable[..., Any]) -> bool:
    """A coroutine function, or a callable object with ``async def __call__`` (``inspect``
    looks through partials, not through ``__call__``)."""
    return inspect.iscoroutinefunction(body) or inspect.iscoroutinefunction(type(body).__call__)


def _check_extents(
    kernel_name: str,
    names: Sequence[str],
    types: Sequence[ArgType],
    extents: Mapping[str, int | str] | None,
) -> dict[int, int | tuple[str, int]]:
    """``extents=`` of ``@ahg.kernel`` by parameter position; TypeError/ValueError if wrong."""
    if extents is None:
        return {}
    if not isinstance(extents, Mapping):
        raise TypeError(f"extents must be a mapping of parameter name to length, got {extents!r}")
    position = {n: i for i, n in enumerate(names)}
    declared: dict[int, int | tuple[str, int]] = {}
    for param, length in extents.items():
        index = position.get(param) if isinstance(param, str) else None
        if index is None or not isinstance(types[index], PointerType):
            raise ValueError(f"kernel {kernel_name!r}: extents names {param!r}, not a pointer")
        if isinstance(length, bool):
            raise TypeError(f"kernel {kernel_name!r}: extent of {param!r} is a bool")
        number = int_or_none(length)
        if number is not None:
            if number < 0:
                raise ValueError(f"kernel {kernel_name!r}: extent of {param!r} is negative")
            declared[index] = number
            continue
        source = position.get(length) if isinstance(length, str) else None
        if source is None:
            raise TypeError(
                f"kernel {kernel_name!r}: extent of {param!r} must be an int or the name of an "
                f"integer parameter, got {length!r}"
            )
        source_type = types[source]
        if not isinstance(source_type, ScalarType) or source_type.is_float:
            raise TypeError(f"kernel {kernel_name!r}: extent {length!r} is not an integer")
        declared[index] = ("param", source)
    return declared


@overload
def kernel(body: Callable[..., Any], /) -> Kernel: ...
@overload
def kernel(
    *,
    name: str | None = None,
    duration_ns: int | None = None,
    extents: Mapping[str, int | str] | None = None,
) -> Callable[[Callable[..., Any]], Kernel]: ...
def kernel(
    body: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    duration_ns: int | None = None,
    extents: Mapping[str, int | str] | None = None,
) -> Kernel | Callable[[Callable[..., Any]], Kernel]:
    """Declare a kernel: ``@ahg.kernel`` or ``@ahg.kernel(name=..., duration_ns=...)``.

    Args:
        body: ``def body(t: Threads, *typed_params)``; may be ``async``.
        name: the name to show instead of the function's.
        duration_ns: a fixed simulated duration for every dispatch of this kernel.
        extents: how many elements each named pointer parameter touches: an int, or the name
            of an integer parameter holding the count. Dispatch hands the body a view of
            exactly that length, and the race checker uses it instead of "to the end of the
            allocation".
    """
    if body is not None:
        return Kernel(body, name=name, duration_ns=duration_ns, extents=extents)

    def decorate(fn: Callable[..., Any]) -> Kernel:
        return Kernel(fn, name=name, duration_ns=duration_ns, extents=extents)

    return decorate
