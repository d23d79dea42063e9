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

import contextlib
import sys
import types
from typing import Any

__all__ = ["evaluate_class_annotations", "resolve_deferred_annotations"]


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


def evaluate_class_annotations(cls: type) -> None:
    """Replace the string annotations ``cls`` defines with the objects they name.

    ``typing.get_type_hints(cls)`` evaluates a class's annotations in the module that
    ``cls.__module__`` names. The package presents its public classes as ``ahipgraph.X``, and
    that namespace does not hold ``Any``, ``Callable`` or the internal types a record's fields
    use, so hints on a public record (``KernelParams``, ``MemcpyParams``, ...) would raise
    ``NameError``. Evaluated here, in the module that defines the class and before it is
    renamed, the hints need no namespace at all. An annotation that does not evaluate keeps its
    string, so ``get_type_hints`` reports it as it would have.
    """
    own = vars(cls).get("__annotations__")
    if not isinstance(own, dict) or not any(isinstance(v, str) for v in own.values()):
        return
    module = sys.modules.get(cls.__module__)
    if module is None:
        return
    namespace = vars(module)
    local = dict(vars(cls))
    resolved: dict[str, Any] = {}
    for name, value in own.items():
        resolved[name] = value
        if isinstance(value, str):
            # The package's own source text; one that fails stays text, and get_type_hints
            # names the problem as it would have.
            with contextlib.suppress(Exception):
                resolved[name] = eval(value, namespace, local)
    own.clear()
    own.update(resolved)
