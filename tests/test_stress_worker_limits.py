"""The stress harness refuses worker counts it could never start, and says so at once.

``stress(tasks=10**20)`` (or ``ahipgraph stress --tasks`` with a digit too many) started
workers until the run was killed: no operation ran, nothing was printed. Counts above
``MAX_TASKS`` / ``MAX_THREADS`` are refused before anything runs, as the other limits are.
"""

from __future__ import annotations

import pytest

from ahipgraph import testing
from ahipgraph.cli import main
from ahipgraph.testing.stress import MAX_TASKS, MAX_THREADS


@pytest.mark.parametrize(
    ("tasks", "threads"),
    [(10**20, 0), (MAX_TASKS + 1, 0), (1, MAX_THREADS + 1), (0, 10**9)],
)
def test_stress_refuses_more_workers_than_it_can_start(tasks: int, threads: int) -> None:
    with pytest.raises(ValueError, match=f"at most {MAX_TASKS} tasks and {MAX_THREADS} threads"):
        testing.stress(tasks=tasks, threads=threads, ops=1)


@pytest.mark.parametrize(
    ("flag", "value", "maximum"),
    [("--tasks", "100000000000000000000", MAX_TASKS), ("--threads", "257", MAX_THREADS)],
)
def test_the_command_refuses_them_as_a_usage_error(
    capsys: pytest.CaptureFixture[str], flag: str, value: str, maximum: int
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["stress", flag, value, "--ops", "1"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {value} is above the maximum of {maximum}" in err
    assert "Traceback" not in err


def test_the_help_names_the_maximum(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["stress", "--help"])
    out = capsys.readouterr().out
    assert f"at most {MAX_TASKS}" in out
    assert f"at most {MAX_THREADS}" in out


def test_trace_without_a_script_names_only_the_script_as_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The script's own arguments are optional; the message said "required: script, args"."""
    with pytest.raises(SystemExit) as exit_:
        main(["trace"])
    assert exit_.value.code == 2
    assert (
        capsys.readouterr()
        .err.rstrip()
        .endswith("error: the following arguments are required: script")
    )
