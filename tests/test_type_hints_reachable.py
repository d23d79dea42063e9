"""Run-time hints resolve on every class a user can reach from the public surface, not only
on the exported ones: ``exec.plan`` returns a ``Plan``, whose ``array[int]`` columns made
``typing.get_type_hints`` raise on Python 3.11 (``array`` is subscriptable only from 3.12)."""

from __future__ import annotations

import inspect
import typing
from array import array
from collections.abc import Iterator
from typing import Any

import ahipgraph as ahg
from ahipgraph.exec.planner import Plan


def _classes_in(hint: Any) -> Iterator[type]:
    """The ahipgraph classes a resolved hint names, at any depth (``list[X] | None``...)."""
    if isinstance(hint, type) and hint.__module__.startswith("ahipgraph"):
        yield hint
    for arg in typing.get_args(hint):
        yield from _classes_in(arg)


def _hinted_members(cls: type) -> Iterator[Any]:
    for attr, member in vars(cls).items():
        if attr.startswith("_") and attr != "__init__":
            continue
        function = member.fget if isinstance(member, property) else member
        if isinstance(function, staticmethod | classmethod):
            function = function.__func__
        if inspect.isfunction(function):
            yield function


def _reachable_classes() -> tuple[set[type], list[str]]:
    """Every class reached from the exported names through the hints of fields, methods and
    properties, and the hints that failed to resolve on the way."""
    todo = [obj for name in ahg.__all__ if inspect.isclass(obj := getattr(ahg, name))]
    seen: set[type] = set()
    failures: list[str] = []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        for owner in (cls, *_hinted_members(cls)):
            try:
                hints = typing.get_type_hints(owner)
            except Exception as error:
                failures.append(f"{getattr(owner, '__qualname__', owner)}: {error!r}")
                continue
            for hint in hints.values():
                todo.extend(_classes_in(hint))
    return seen, failures


def test_get_type_hints_works_on_every_class_reachable_from_the_surface() -> None:
    classes, failures = _reachable_classes()
    assert failures == []
    assert Plan in classes  # reached through GraphExec.plan


def test_a_plans_strands_hint_is_a_list_of_arrays() -> None:
    hints = typing.get_type_hints(Plan)
    assert hints["strands"] == list[array]
    assert typing.get_type_hints(ahg.GraphExec.plan.fget)["return"] is Plan
