"""The project's shape a newcomer relies on: dependencies, the Makefile's targets, CI, README.

`make demo` and `make test` must be the only two commands needed on a fresh machine: each
target creates `.venv` from plain `python3` when it is missing and installs the project. The
Makefile is checked with `make -n` (print, do not run) against a `.venv` path that does not exist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", item, maxsplit=1)[0].lower() for item in requirements}


def test_runtime_dependencies_and_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    assert {"numpy", "anyio"} <= _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "uvloop" in _requirement_names(extras["uvloop"])
    dev = _requirement_names(extras["dev"])
    assert {"pytest", "pytest-asyncio", "hypothesis", "ruff", "mypy", "uvloop"} <= dev


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize(
    ("target", "runs"),
    [
        ("demo", "examples/graph_replay.py"),
        ("test", "-m pytest"),
        ("lint", "mypy --strict"),
        ("bench", "bench/eager.py"),
    ],
)
def test_each_make_target_builds_the_venv_from_python3_first(
    target: str, runs: str, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"  # missing: make must create it
    # Run as a make of its own: under `make test` the parent's MAKEFLAGS and MAKELEVEL would
    # make it print "Entering directory" lines and pass the parent's options down.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    plan = subprocess.run(
        ["make", "-n", "--no-print-directory", f"VENV={venv}", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout.splitlines()
    assert plan[0] == f"python3 -m venv {venv}"
    install = next(i for i, line in enumerate(plan) if "pip install" in line and "-e" in line)
    work = next(i for i, line in enumerate(plan) if runs in line)
    assert install < work  # installed before it is used
    assert not venv.exists()  # -n printed the plan and ran nothing


def test_bench_target_runs_both_the_eager_and_the_launch_bench() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "bench/eager.py --json bench/results/eager.json" in makefile
    assert "bench/launch.py --json bench/results/launch.json" in makefile


def test_ci_runs_make_test() -> None:
    script = ROOT / ".ci" / "run"
    assert re.search(r"^make test$", script.read_text(), re.MULTILINE)


def test_readme_names_the_two_commands_and_where_the_design_lives() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme
    assert "make test" in readme
    assert "docs/design.md" in readme
    assert "```python" in readme  # the short example (test_examples runs it)


def test_no_file_holds_a_merge_conflict_marker() -> None:
    """A conflict left in a docstring or a Markdown page is valid Python and valid Markdown:
    neither the linters nor the tests would notice it."""
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)
    suffixes = {".py", ".md", ".toml", ".cfg", ".txt", ".json", ".yml", ".yaml"}
    found = []
    for folder in ("src", "tests", "docs", "examples", "bench"):
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or path.suffix not in suffixes:
                continue
            if marker.search(path.read_text(encoding="utf-8", errors="replace")):
                found.append(str(path.relative_to(ROOT)))
    for path in (ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"):
        if marker.search(path.read_text(encoding="utf-8")):
            found.append(path.name)
    assert found == []
