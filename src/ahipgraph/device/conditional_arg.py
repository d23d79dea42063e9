"""The kernel parameter type that carries a conditional handle (``hipGraphConditionalHandle``).

A conditional node's handle is set from device code: a kernel declares a parameter
``h: ahg.CondHandle`` and calls ``ahg.set_conditional(h, value)``. When the kernel node is added,
the handle packs as an opaque 64-bit token (like HIP's handle, a value with no meaning on its
own). An executable owns one small cell of device memory per handle and rewrites the token in
its copy of the kernel arguments to that cell's address; at dispatch the parameter decodes,
like any pointer, to a ``uint32`` view of the cell. So the value lives on the device, each
executable has its own, and a conditional node reads it with no host involvement.

Tokens lie below every device's address range (device 0 starts at 2**40), so a kernel given a
handle outside an executable (eagerly on a stream) fails with ``InvalidDevicePointer`` instead of
writing somewhere.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any, NoReturn, SupportsIndex

import numpy as np
import numpy.typing as npt

from ..core.ints import flag_or_none
from .kernel_args import ArgLayout, PointerType, ScalarType, uint32

__all__ = ["CondHandle", "HandleArgType", "HandleToken", "bind_handles", "set_conditional"]

_TOKENS = itertools.count(1)  # next() on a C iterator is atomic under the GIL
_UINT32: ScalarType = uint32.__metadata__[0]  # type: ignore[attr-defined]
_CELL = np.dtype(np.uint32)
_UINT32_MAX = (1 << 32) - 1


class HandleToken:
    """Base of conditional handles: an opaque token a kernel argument can carry.

    Immutable, as HIP's handle value is: nodes and executables key cells and arguments by the
    token (and a subclass's fields, a default), so one changed after a node took the handle
    would point kernels at another handle's cell, or fail instantiate with numpy's
    ``OverflowError``. A copy is the handle itself; a pickle is refused (the token means
    nothing in another process).
    """

    __slots__ = ("token",)
    token: int

    def __init__(self) -> None:
        object.__setattr__(self, "token", next(_TOKENS))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __copy__(self) -> HandleToken:
        return self

    def __deepcopy__(self, memo: object) -> HandleToken:
        return self

    def __reduce_ex__(self, protocol: SupportsIndex) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is a token of this process and cannot be pickled")


class HandleArgType(PointerType):
    """A ``CondHandle`` parameter: packs a handle's token, decodes to a view of its cell."""

    __slots__ = ()
    takes_handle = True

    def __init__(self) -> None:
        super().__init__(_UINT32)
        self.name = "CondHandle"

    def check(self, value: Any, param: str) -> Any:
        if not isinstance(value, HandleToken):
            raise TypeError(
                f"parameter {param!r} (CondHandle) needs a handle from "
                f"graph.conditional_handle(), got {value!r}"
            )
        return value.token


CondHandle = Annotated[npt.NDArray[np.uint32], HandleArgType()]
"""The static and runtime type of a conditional-handle kernel parameter."""


def set_conditional(handle: npt.NDArray[np.uint32], value: int) -> None:
    """``hipGraphSetConditional``: set the handle's value from a kernel body.

    Args:
        handle: the kernel's ``CondHandle`` parameter.
        value: the new value (an unsigned 32-bit int; IF and WHILE test it for non-zero,
            SWITCH uses it as the body index), or a bool (``x.max() > tol``: 1 or 0).

    Raises:
        TypeError: ``handle`` is not a kernel's CondHandle parameter (the handle object itself,
            outside a kernel), or ``value`` is neither an int nor a bool (a float is not
            truncated, nor a string parsed, as numpy's item assignment would).
        ValueError: ``value`` is outside the unsigned 32-bit range (numpy would wrap a numpy
            integer silently).
    """
    # The common call (a decoded CondHandle view, a plain int in range) costs two type tests.
    if (type(handle) is not np.ndarray or handle.dtype is not _CELL or not handle.size) and (
        not isinstance(handle, np.ndarray) or handle.dtype != _CELL or not handle.size
    ):
        raise TypeError(
            "set_conditional takes a kernel's CondHandle parameter (pass the handle to the "
            f"kernel as its argument), got {handle!r}"
        )
    if type(value) is not int or not 0 <= value <= _UINT32_MAX:
        number = flag_or_none(value)
        if number is None:
            raise TypeError(f"a conditional value must be an int or a bool, got {value!r}")
        if not 0 <= number <= _UINT32_MAX:
            raise ValueError(f"a conditional value is an unsigned 32-bit int, got {number}")
        value = number
    handle[0] = value


def handle_fields(layout: ArgLayout) -> tuple[int, ...]:
    """The positions of ``layout``'s CondHandle parameters."""
    return tuple(i for i, t in enumerate(layout.types) if isinstance(t, HandleArgType))


def bind_handles(
    layout: ArgLayout, args: Any, kernel_name: str, cells: dict[int, int]
) -> bytes | None:
    """Kernel-argument bytes with each handle token replaced by its cell's address.

    Returns None when the kernel has no handle parameter. A token without a cell (a handle the
    executable does not know) is left as it is: the dispatch then fails cleanly.
    """
    fields = handle_fields(layout)
    if not fields:
        return None
    values = list(layout.check(args, kernel_name))
    for index in fields:
        values[index] = cells.get(values[index], values[index])
    return layout._struct.pack(*values)
