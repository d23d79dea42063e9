"""``Graph.render``: its arguments are checked before Graphviz.

``render(None)`` answered ``NotSupported`` (no Graphviz) where ``debug_dot_print(None)`` says
``InvalidValue``: the project's check order puts missing arguments first, and the answer must
not depend on what is installed. With Graphviz installed, a None or int path reached
``os.fspath`` (a bare TypeError from inside), and a non-str format an ``AttributeError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ahipgraph as ahg


@pytest.fixture
def graph() -> Any:
    graph = ahg.Graph()
    graph.add_empty_node()
    yield graph
    graph.destroy()


def test_render_to_a_null_path_is_invalid_value_as_debug_dot_print(graph: ahg.Graph) -> None:
    with pytest.raises(ahg.InvalidValue, match="path is null"):
        graph.debug_dot_print(None)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="path is null"):
        graph.render(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [3, b"g.svg", 1.5])
def test_render_to_a_path_that_is_no_path_is_a_type_error(graph: ahg.Graph, path: Any) -> None:
    with pytest.raises(TypeError, match="path must be"):
        graph.render(path)


@pytest.mark.parametrize("fmt", [None, 3, b"svg"])
def test_render_in_a_format_that_is_no_str_is_a_type_error(
    graph: ahg.Graph, tmp_path: Path, fmt: Any
) -> None:
    with pytest.raises(TypeError, match="format must be a str"):
        graph.render(tmp_path / "g.out", fmt)
    assert not (tmp_path / "g.out").exists()


def test_render_of_a_destroyed_graph_is_invalid_value_whatever_is_installed(
    tmp_path: Path,
) -> None:
    graph = ahg.Graph()
    graph.destroy()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.render(tmp_path / "g.svg")
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.render(None)  # type: ignore[arg-type]
