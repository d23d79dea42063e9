"""Deterministic thread races: another thread's step, run inside a call at a chosen line.

A race between two threads often hinges on a window of a few bytecodes between a check and
the step it guards, which real threads hit only by luck. ``step_inside`` closes the window on
purpose: while its block runs, the first call of a given method on a given object runs
``step`` (what the other thread would do at that moment) just before the first of its lines
that ``at`` picks. A trace hook does it, on the calling thread, so the step is never traced.
"""

from __future__ import annotations

import contextlib
import linecache
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["step_inside"]


@contextlib.contextmanager
def step_inside(
    owner: object, method: str, at: Callable[[str], bool], step: Callable[[], object]
) -> Iterator[list[object]]:
    """Run ``step`` once, inside ``owner.<method>``, before the first line where ``at(text)``.

    Yields the list that receives what ``step`` returned (empty while it has not run).
    """
    results: list[object] = []
    armed = [True]

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not armed or frame.f_code.co_name != method or frame.f_locals.get("self") is not owner:
            return None

        def lines(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line" and armed:
                text = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                if at(text):
                    armed.clear()
                    results.append(step())
            return lines

        return lines

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield results
    finally:
        sys.settrace(previous)
