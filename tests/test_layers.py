"""Layers import downward (docs/design.md, "Layers").

At import time every module imports only from its own layer and the layers below it. A few
calls reach one layer up, inside a function, where a facade has to hand out an object of the
layer above (``Device.create_stream`` returns a runtime ``Stream``). Those are listed here one
by one, so a new upward reach fails this test until it is either removed or written down.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import ahipgraph

ORDER = ["core", "device", "runtime", "lifetime", "graph", "exec", "tools", "testing"]
ROOT = pathlib.Path(ahipgraph.__file__).parent

# (module, module it reaches up to) for imports inside functions; nothing at import time.
ALLOWED_CALL_TIME_REACHES = {
    ("graph/graph.py", "exec.graph_exec"),
    ("graph/graph.py", "exec.races"),
    ("runtime/capture_fork.py", "graph.params"),
    ("runtime/capture_nodes.py", "graph.graph"),
    ("runtime/capture_nodes.py", "graph.node_type"),
}


def _layer_of(target: str) -> str | None:
    head = target.split(".")[0]
    return head if head in ORDER else None


def _imports(tree: ast.Module) -> list[tuple[ast.ImportFrom, bool]]:
    """Relative imports outside ``if TYPE_CHECKING:``, each with whether it runs at import."""
    found: list[tuple[ast.ImportFrom, bool]] = []

    def visit(body: list[ast.stmt], at_import: bool) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse, at_import)
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                found.append((node, at_import))
            inner = not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and at_import
            for field in ("body", "orelse", "finalbody"):
                sub = getattr(node, field, None)
                if isinstance(sub, list):
                    visit(sub, inner)
            for handler in getattr(node, "handlers", []):
                visit(handler.body, inner)

    visit(tree.body, True)
    return found


def _upward_imports() -> tuple[list[str], set[tuple[str, str]]]:
    at_import: list[str] = []
    at_call: set[tuple[str, str]] = set()
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if len(relative.parts) < 2 or relative.parts[0] not in ORDER:
            continue
        layer = relative.parts[0]
        for node, runs_at_import in _imports(ast.parse(path.read_text())):
            names = [node.module] if node.module else [alias.name for alias in node.names]
            for name in names:
                if node.module is None:  # from .. import x
                    name = name.split(".")[0]
                target_layer = _layer_of(name)
                if target_layer is None or ORDER.index(target_layer) <= ORDER.index(layer):
                    continue
                if node.module is None:
                    full = name
                else:
                    full = node.module
                    if full == target_layer:  # from ..runtime import observe
                        full += "." + node.names[0].name
                where = relative.as_posix()
                if runs_at_import:
                    at_import.append(f"{where}:{node.lineno} imports {full}")
                else:
                    at_call.add((where, full))
    return at_import, at_call


def test_no_module_imports_a_higher_layer_when_it_is_imported() -> None:
    at_import, _ = _upward_imports()
    assert at_import == []


def test_every_call_time_reach_upward_is_one_of_the_documented_few() -> None:
    _, at_call = _upward_imports()
    assert at_call - ALLOWED_CALL_TIME_REACHES == set()
    assert ALLOWED_CALL_TIME_REACHES - at_call == set()  # keep the list honest as reaches go


def _every_relative_import(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, absolute layer-relative module) of every relative import, TYPE_CHECKING too."""
    found: list[tuple[int, str]] = []
    package = path.relative_to(ROOT).parts[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - node.level + 1])
            names = [node.module] if node.module else [alias.name for alias in node.names]
            found.extend((node.lineno, ".".join([*base, name])) for name in names)
    return found


def test_the_device_layer_knows_nothing_above_it_not_even_for_type_checking() -> None:
    """The device layer (the engine, queues, memory, the devices table) names no runtime, graph
    or exec type anywhere: the public Device sits above it, in the runtime layer."""
    upward = []
    for lower in ("core", "device"):
        for path in sorted((ROOT / lower).rglob("*.py")):
            for line, module in _every_relative_import(path):
                layer = _layer_of(module)
                if layer is not None and ORDER.index(layer) > ORDER.index(lower):
                    upward.append(f"{path.relative_to(ROOT).as_posix()}:{line} imports {module}")
    assert upward == []


_LOOP_CALLS = {
    "call_soon",
    "call_soon_threadsafe",
    "call_later",
    "call_exception_handler",
    "create_future",
    "create_task",
    "ensure_future",
    "get_event_loop",
    "get_running_loop",
    "_get_running_loop",
    "run_coroutine_threadsafe",
}


def test_only_the_engine_touches_the_event_loop_in_the_device_layer() -> None:
    """``device/engine.py`` is the one seam between the device and asyncio: every loop call
    (call_soon, futures, tasks, the running loop) of the device layer goes through it."""
    calls = []
    for path in sorted((ROOT / "device").rglob("*.py")):
        if path.name == "engine.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in _LOOP_CALLS:
                name = node.attr
            elif isinstance(node, ast.alias) and node.name in _LOOP_CALLS:
                name = node.name
            if name is not None:
                calls.append(f"device/{path.name}:{node.lineno} {name}")
    assert calls == []


def test_the_design_page_states_this_order() -> None:
    page = ROOT.parent.parent / "docs" / "design.md"
    if not page.exists():  # an installed package without its source tree
        pytest.skip("docs/design.md is not here")
    assert " < ".join([*ORDER[:-2], "tools/testing"]) in page.read_text()


def test_the_design_page_maps_every_module_and_only_those() -> None:
    """The page's "Module map" names each module of the package once: a new module without a
    line there, or a line for a module that is gone, fails here."""
    page = ROOT.parent.parent / "docs" / "design.md"
    if not page.exists():  # an installed package without its source tree
        pytest.skip("docs/design.md is not here")
    text = page.read_text()
    section = text[text.index("## Module map") :]
    section = section[: section.index("\n## ", 1)]
    listed = [
        line[3 : line.index("`", 3)] for line in section.splitlines() if line.startswith("- `")
    ]
    modules = sorted(
        path.relative_to(ROOT).as_posix()
        for path in ROOT.rglob("*.py")
        if path.name != "__init__.py" or path.parent == ROOT
    )
    assert sorted(listed) == modules
    assert len(set(listed)) == len(listed)


# The capture modules of the runtime layer, bottom first: each imports only those before it.
CAPTURE_ORDER = [
    "capture_state",
    "capture_nodes",
    "capture_fork",
    "capture_rules",
    "capture_lifecycle",
    "capture_scope",
    "capture",
    "stream_capture",
]


def _runtime_imports(node: ast.AST) -> list[str]:
    """Modules of this layer ``node`` imports, leaving out ``if TYPE_CHECKING:`` blocks."""
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return []
    if isinstance(node, ast.ImportFrom) and node.level == 1:
        return [node.module] if node.module else [alias.name for alias in node.names]
    return [name for child in ast.iter_child_nodes(node) for name in _runtime_imports(child)]


def test_capture_modules_import_each_other_strictly_downward() -> None:
    """Annotations may name a module above (``if TYPE_CHECKING:``); nothing else may."""
    upward = []
    for rank, name in enumerate(CAPTURE_ORDER):
        tree = ast.parse((ROOT / "runtime" / f"{name}.py").read_text())
        for target in _runtime_imports(tree):
            if target in CAPTURE_ORDER and CAPTURE_ORDER.index(target) >= rank:
                upward.append(f"{name} imports {target}")
    assert upward == []
