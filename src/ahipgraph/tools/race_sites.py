"""The user's source line of a checked op, captured cheaply and turned into text only when shown.

The dynamic race checker marks every op, event record, wait and host synchronisation with the
line of user code that made it, but only a report ever shows one. Making ``file:line`` text
for each (decoding the frame's line table, formatting a string) was a good part of what the
check cost per op. Here a *site* is a plain tuple: the innermost frame's code object outside
ahipgraph and the standard library, and that frame's instruction offset at the call. Both are
read in O(1) as the call is made; :func:`site_text` decodes the line later, giving the same
``file:line`` as :func:`ahipgraph.exec.race_reports.user_site` would have given at the call (the
offset, not the frame, is kept: the frame moves on, and keeping it would keep its locals
alive).

The "why" of a join ("event #2 recorded on stream #3 at x.py:10, waited at x.py:12") is
kept the same way, as a tuple of its parts (strings, numbers, sites, other such tuples), and
joined by :func:`text` when a report shows it. Plain tuples, not objects: building one is a
single interpreter step, which is what the checker's per-op budget allows.

Invariant: a site or a reason never changes; ``text()`` of one always gives the same string.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import Any, TypeAlias

from ..exec.race_reports import SHOWN_FILES, shown_file

__all__ = ["Site", "Why", "capture", "site_text", "text"]

Site: TypeAlias = tuple[CodeType, int]  # a user frame's code, and its offset at the call
Why: TypeAlias = str | tuple[Any, ...]  # a reason: text, or the parts of one (see text())


def capture(depth: int = 1) -> Site | None:
    """The innermost caller outside ahipgraph and the standard library, as a site (``depth``
    frames above this function's caller are skipped first), or None."""
    frame: Any = sys._getframe(depth + 1)
    known = SHOWN_FILES
    while frame is not None:
        code = frame.f_code
        shown = known.get(code.co_filename)
        if shown is None:
            shown = shown_file(code.co_filename)
        if shown:
            return (code, frame.f_lasti)
        frame = frame.f_back
    return None


def site_text(site: Site | None) -> str | None:
    """``file:line`` of a site (what ``user_site`` said at the call), or None."""
    if site is None:
        return None
    code, lasti = site
    filename = code.co_filename
    return f"{SHOWN_FILES.get(filename) or shown_file(filename)}:{_line(code, lasti)}"


def text(why: object) -> str:
    """A reason as text: a tuple's parts joined, sites as ``file:line``, the rest by str()."""
    if type(why) is str:
        return why
    if type(why) is tuple:
        if len(why) == 2 and type(why[0]) is CodeType:
            return site_text(why) or ""
        return "".join(map(text, why))
    return str(why)


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
