"""The one rule for integer arguments.

Users compute sizes, counts and ordinals with numpy as often as with plain Python
(``device.malloc(np.prod(shape) * 4)``), so every API that takes an integer accepts any object
that *is* an integer by Python's own test, ``__index__``, and refuses everything else. Booleans
are refused although ``bool`` subclasses ``int``: ``malloc(True)`` is a bug, never a size.
``numpy.bool_`` is refused for the same reason; ``core`` does not import numpy, so it is
recognised by its type's name (numpy 2 already refuses it in ``__index__``; the name check keeps
numpy 1 honest too). Floats, strings and None have no ``__index__``.

Invariant: what the rule returns is always an exact ``int``, so no numpy scalar (or enum member)
is stored downstream, where it could overflow silently or change the type of arithmetic.

A type may have ``__index__`` without being a number: a device pointer converts to its address
for numpy's sake, but ``malloc(ptr)`` or ``set_device(ptr)`` is a bug, as it always was. Such a
type declares itself with :func:`not_an_int` (``core`` cannot name it: it lives a layer up).

Sites with their own error (``InvalidValue`` for an unknown enum value, a message naming an enum)
use :func:`int_or_none` and raise it; the rest use :func:`as_int`.
"""

from __future__ import annotations

import operator
from typing import TypeVar

__all__ = ["as_int", "as_optional_int", "flag_or_none", "int_or_none", "is_bool", "not_an_int"]

_BOOL_TYPE_NAMES = frozenset({"bool", "bool_"})
_NOT_INTS: list[type] = []  # types with __index__ that are not integers (see not_an_int)

_T = TypeVar("_T", bound=type)


def not_an_int(cls: _T) -> _T:
    """Class decorator: instances of ``cls`` are refused as integers despite ``__index__``."""
    _NOT_INTS.append(cls)
    return cls


def is_bool(value: object) -> bool:
    """Whether ``value`` is a bool, Python's or numpy's (known by its type's name: see the
    module notes). Never an integer, a duration or a rate, although ``bool`` is an ``int``."""
    return type(value).__name__ in _BOOL_TYPE_NAMES


def int_or_none(value: object) -> int | None:
    """``value`` as an exact ``int`` when it is an integer other than a bool, else None.

    The rule itself, for callers that raise an error of their own; see the module notes.
    """
    if type(value) is int:
        return value
    if is_bool(value) or isinstance(value, tuple(_NOT_INTS)):
        return None
    try:
        return int(operator.index(value))  # type: ignore[arg-type]
    except TypeError:
        return None


def flag_or_none(value: object) -> int | None:
    """A switch argument (HIP's unsigned flag: a bool, or any int, non-zero meaning on) as an
    exact ``int``, or None for anything else.

    The one place bools are welcome: a flag *is* a truth value, and a numpy comparison gives
    ``numpy.bool_`` (``exec.set_node_enabled(node, mask[i])``). Numpy integers follow the
    rule as everywhere else.
    """
    if is_bool(value):
        return int(bool(value))
    return int_or_none(value)


def as_int(value: object, name: str, *, expected: str = "an int") -> int:
    """Return ``value`` as an exact ``int``, or raise the argument's ``TypeError``.

    Args:
        value: the user's argument; any integer with ``__index__`` (``int``, numpy ints, int
            enums) except a bool.
        name: how the message names the argument, e.g. ``"nbytes"``.
        expected: what the message says the argument must be, when more than an int is
            allowed (``"an int or InstantiateFlags"``).

    Raises:
        TypeError: ``"{name} must be {expected}, got {value!r}"`` for a bool (Python or numpy),
            a float, a string, None or anything else without ``__index__``.
    """
    checked = int_or_none(value)
    if checked is None:
        raise TypeError(f"{name} must be {expected}, got {value!r}")
    return checked


def as_optional_int(value: object, name: str, *, expected: str = "an int") -> int | None:
    """Like :func:`as_int`, for an argument whose documented default is None (kept as None)."""
    if value is None:
        return None
    return as_int(value, name, expected=expected)
