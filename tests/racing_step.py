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

__all__ = ["step_at_opcode", "step_inside"]


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


@contextlib.contextmanager
def step_at_opcode(
    owner: object, method: str, index: int, step: Callable[[], object]
) -> Iterator[list[object]]:
    """Run ``step`` once, inside the first call of ``owner.<method>``, before its
    ``index``-th bytecode instruction (counted from 0).

    Finer than :func:`step_inside`: a read-modify-write such as ``self.count += 1`` is one
    line but several instructions, and a thread switch between its read and its write is
    what loses an update (with a free-threaded interpreter, any instruction boundary is one).
    Yields the list that receives what ``step`` returned (empty if the call ran fewer
    instructions).
    """
    results: list[object] = []
    seen = [0]
    armed = [True]

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        if not armed or frame.f_code.co_name != method or frame.f_locals.get("self") is not owner:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False

        def opcodes(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode" and armed:
                if seen[0] == index:
                    armed.clear()
                    results.append(step())
                seen[0] += 1
            return opcodes

        return opcodes

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        yield results
    finally:
        sys.settrace(previous)
