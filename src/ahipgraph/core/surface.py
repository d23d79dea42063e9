"""Present a public class's mixin-supplied methods as the class's own.

``Stream``, ``GraphNode`` and ``Device`` are still assembled from internal mixins (one per
concern: copies, memory operations, capture, setters...). Users never see those mixins, yet
Python names a method by where it was defined, so ``help(Stream)`` and the ``TypeError`` of a
wrong call would say ``StreamCopyMixin.memcpy_3d() takes ...``. (``Graph`` and ``GraphExec``
need none of this: their public methods are their own, thin calls to module functions and to
the executable's launcher and updater.) :func:`own_mixin_methods` gives the class its own copy
of each public mixin method, named ``Stream.memcpy_3d``, with the same code, globals, defaults
and annotations (so behaviour and ``get_type_hints`` are unchanged).
"""

from __future__ import annotations

import types
from typing import TypeVar

__all__ = ["own_mixin_methods"]

C = TypeVar("C", bound=type)


def own_mixin_methods(cls: C) -> C:
    """Class decorator: copy public methods inherited from ``ahipgraph`` mixins onto ``cls``."""
    for base in cls.__mro__[1:]:
        if not base.__module__.startswith("ahipgraph") or base is object:
            continue
        for name, member in vars(base).items():
            if (
                name.startswith("_")
                or name in vars(cls)
                or not isinstance(member, types.FunctionType)
            ):
                continue
            if getattr(cls, name) is not member:  # overridden further up the MRO
                continue
            qualname = f"{cls.__name__}.{name}"
            copy = types.FunctionType(
                member.__code__.replace(co_qualname=qualname),
                member.__globals__,
                member.__name__,
                member.__defaults__,
                member.__closure__,
            )
            copy.__kwdefaults__ = member.__kwdefaults__
            copy.__annotations__ = member.__annotations__
            copy.__doc__ = member.__doc__
            copy.__dict__.update(member.__dict__)
            copy.__module__ = member.__module__
            copy.__qualname__ = qualname
            setattr(cls, name, copy)
    return cls
