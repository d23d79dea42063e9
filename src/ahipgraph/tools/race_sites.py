"""The user's source line of a checked op, captured cheaply and turned into text only when shown.

The dynamic race checker marks every op, event record, wait and host synchronisation with the
line of user code that made it, but only a report ever shows one. Making ``file:line`` text
for each (decoding the frame's line table, formatting a string) was a good part of what the
check cost per op. Here an op keeps a :class:`Site`: the innermost frame's code object outside
ahipgraph and the standard library, and that frame's instruction offset at the call. Both are
read in O(1) as the call is made; :meth:`Site.__str__` decodes the line from them later,
giving the same ``file:line`` as :func:`ahipgraph.exec.races.user_site` would have given at
the call (the offset, not the frame, is kept: the frame moves on, and keeping it would keep its
locals alive).

:class:`Text` does the same for the "why" of a join ("event #2 recorded on stream #3 at
x.py:10, waited at x.py:12"): its parts are kept and joined the first time it is shown.

Invariant: a ``Site`` and a ``Text`` are immutable in what they show; ``str()`` of one always
gives the same text.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import Any

from ..exec.races import _SHOWN, _shown

__all__ = ["Site", "Text", "capture"]


class Site(tuple[CodeType, int]):
    """A user frame's code and instruction offset at a call; ``str()``: ``file:line``."""

    __slots__ = ()

    def __str__(self) -> str:
        code, lasti = self[0], self[1]
        return f"{_SHOWN.get(code.co_filename) or _shown(code.co_filename)}:{_line(code, lasti)}"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"<Site {self}>"


def _line(code: CodeType, lasti: int) -> int:
    """The line of the instruction at byte offset ``lasti`` (what ``frame.f_lineno`` gives)."""
    if lasti < 0:
        return code.co_firstlineno
    line: int | None = None
    for start, end, number in code.co_lines():
        if start <= lasti < end:
            line = number
            break
    return code.co_firstlineno if line is None else line


_new_site = tuple.__new__  # a Site from its two fields, skipping the generic constructor


def capture(depth: int = 1) -> Site | None:
    """The innermost caller outside ahipgraph and the standard library, as a :class:`Site`
    (``depth`` frames above this function's caller are skipped first), or None."""
    frame: Any = sys._getframe(depth + 1)
    known = _SHOWN
    while frame is not None:
        code = frame.f_code
        shown = known.get(code.co_filename)
        if shown is None:
            shown = _shown(code.co_filename)
        if shown:
            return _new_site(Site, (code, frame.f_lasti))
        frame = frame.f_back
    return None


class Text:
    """Text made from ``parts`` (strings, sites, numbers, other texts) when first shown."""

    __slots__ = ("_parts", "_text")

    def __init__(self, *parts: object) -> None:
        self._parts: tuple[object, ...] | None = parts
        self._text = ""

    def __str__(self) -> str:
        parts = self._parts
        if parts is not None:
            self._text = "".join(map(str, parts))
            self._parts = None  # what the parts referred to can go
        return self._text

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def __repr__(self) -> str:
        return f"<Text {str(self)!r}>"
