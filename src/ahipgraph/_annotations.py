"""Make ``typing.get_type_hints`` work on every public callable.

Modules import the names their annotations use only under ``TYPE_CHECKING`` when a runtime
import would run upward or in a cycle (a graph's ``instantiate`` returns a ``GraphExec``, which
imports the graph module). Annotations are strings (``from __future__ import annotations``), so
nothing needs the names at run time, except ``get_type_hints`` and the tools built on it
(documentation generators, runtime type checkers, dependency injection).

Once the whole package is imported, every module-level class and type alias the package's
modules hold is known. :func:`resolve_deferred_annotations` gives each package module the ones it
lacks, so its string annotations evaluate. A name defined by two modules as different objects is
ambiguous and left out.
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["resolve_deferred_annotations"]


def _is_annotation_target(value: Any) -> bool:
    return isinstance(value, type | types.GenericAlias | types.UnionType) or (
        type(value).__module__ == "typing"
    )


def resolve_deferred_annotations(package: str) -> None:
    modules = [m for name, m in list(sys.modules.items()) if name.startswith(package + ".") and m]
    known: dict[str, Any] = {}
    ambiguous: set[str] = set()
    for module in modules:
        for name, value in vars(module).items():
            if name.startswith("__") or not _is_annotation_target(value):
                continue
            seen = known.setdefault(name, value)
            if seen is not value and seen != value:
                ambiguous.add(name)
    for name in ambiguous:
        del known[name]
    for module in modules:
        namespace = vars(module)
        for name, value in known.items():
            namespace.setdefault(name, value)
