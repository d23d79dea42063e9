"""What kind of callable user code is, where the runtime calls it without iterating.

The runtime calls host functions and user-object destructors and, for a host function, awaits
what it returns. A generator function (sync or ``async``) called that way only makes a
generator: its body never runs, and the call passes for done having done nothing. The APIs
that take such a callable refuse one when it is given.
"""

from __future__ import annotations

import inspect

__all__ = ["makes_generator"]


def makes_generator(fn: object) -> bool:
    """Whether calling ``fn`` only makes a generator (a generator or async generator function,
    a ``functools.partial`` of one, or a callable object whose ``__call__`` is one)."""
    for candidate in (fn, getattr(type(fn), "__call__", None)):  # noqa: B004 - its method
        if inspect.isgeneratorfunction(candidate) or inspect.isasyncgenfunction(candidate):
            return True
    return False
