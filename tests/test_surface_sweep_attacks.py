"""Attacks on the public surface as a user meets it.

A constructor that raises leaves the half-built ``self`` in its traceback's frames, and
whatever shows those frames calls ``repr`` on it: ``traceback``'s ``capture_locals``, a
debugger, a logging handler. A handle's ``repr`` that raised there hid the error being reported
behind an ``AttributeError`` about a missing attribute.
"""

from __future__ import annotations

import runpy
import traceback
from pathlib import Path
from typing import Any

import pytest

import ahipgraph as ahg


def _locals_of_failure(make: Any) -> str:
    """The report ``traceback`` makes, with every frame's locals, of the error ``make()`` raises."""
    with pytest.raises(BaseException) as caught:
        make()
    report = traceback.TracebackException.from_exception(caught.value, capture_locals=True)
    return "".join(report.format())


@pytest.mark.parametrize(
    "kind",
    [
        "Stream",
        "Device",
        "GraphNode",
        "GraphExec",
        "Completion",
        "ConditionalHandle",
        "DeviceSymbol",
        "Event",
    ],
)
def test_calling_a_factory_only_handle_class_reports_its_locals(kind: str) -> None:
    cls = getattr(ahg, kind)
    text = _locals_of_failure(lambda: cls())
    assert f"<{kind} half-built>" in text


@pytest.mark.parametrize("args", [(None,), (5,), (print, None, 0), (print, None, -1)])
def test_a_user_object_whose_constructor_refuses_reports_its_locals(args: tuple[Any, ...]) -> None:
    text = _locals_of_failure(lambda: ahg.UserObject(*args))
    assert "<UserObject half-built>" in text


def test_a_subclass_may_show_itself_before_its_base_is_built() -> None:
    seen: list[str] = []

    class Named(ahg.UserObject):
        def __init__(self) -> None:
            seen.append(repr(self))
            super().__init__(print)

    class Built(ahg.Graph):
        def __init__(self) -> None:
            seen.append(repr(self))
            super().__init__()

    with Named(), Built() as graph:
        assert repr(graph).startswith("<Graph id=")
    assert seen == ["<Named half-built>", "<Built half-built>"]


def test_a_race_check_that_refuses_its_arguments_reports_its_locals() -> None:
    text = _locals_of_failure(lambda: ahg.RaceCheck(None))  # type: ignore[arg-type]
    assert "<RaceCheck half-built>" in text


_TRACED_REPLAY = Path(__file__).resolve().parents[1] / "examples" / "traced_replay.py"


@pytest.mark.parametrize("argv", [["--help"], ["-h"]])
def test_traced_replay_answers_help_with_its_usage(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It said ``'--help' is not a directory``."""
    monkeypatch.setattr("sys.argv", ["traced_replay.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(_TRACED_REPLAY), run_name="__main__")
    assert exit_info.value.code == 0
    assert "usage: python examples/traced_replay.py [DIR]" in capsys.readouterr().out


def test_traced_replay_refuses_a_second_directory_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """It wrote into the first and silently ignored the second."""
    monkeypatch.setattr("sys.argv", ["traced_replay.py", str(tmp_path), str(tmp_path)])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(_TRACED_REPLAY), run_name="__main__")
    assert "one directory at most" in str(exit_info.value.code)
    assert list(tmp_path.iterdir()) == []
    assert "traced" not in capsys.readouterr().out


def test_a_kernel_and_a_host_function_refusing_their_body_report_their_locals() -> None:
    def bad_kernel() -> None:
        ahg.Kernel(None)  # type: ignore[arg-type]

    assert "<Kernel half-built>" in _locals_of_failure(bad_kernel)
    half = object.__new__(ahg.Threads)
    assert repr(half) == "<Threads half-built>"
    function = object.__new__(ahg.HostFunction)
    assert repr(function) == "<HostFunction half-built>"
