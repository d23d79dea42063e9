"""The stress harness and the ``ahipgraph`` command: short runs (long soaks are marked slow)."""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path

import pytest

import ahipgraph as ahg
from ahipgraph.cli import main
from ahipgraph.testing import StressViolation, random_graph, stress


def test_a_short_stress_run_checks_invariants_from_tasks_and_threads() -> None:
    report = stress(seed=7, ops=1_500, tasks=4, threads=2)
    assert report.ops >= 1_500
    assert report.checks > 100
    assert report.launches > 0
    assert report.cycles > 0
    assert {"task-0", "thread-0", "thread-1"} <= set(report.by_worker)


def test_every_worker_runs_a_cycle_even_when_the_tasks_spend_the_budget_first() -> None:
    """A budget of one operation is spent by the first task before a thread has started:
    the threads still run a cycle each (they used to find the run stopped, and a run asked
    for threads exercised none)."""
    report = stress(seed=5, ops=1, tasks=2, threads=2)
    assert set(report.by_worker) == {"task-0", "task-1", "thread-0", "thread-1"}
    assert all(ops >= 1 for ops in report.by_worker.values())


def test_without_threads_a_seed_gives_the_same_run() -> None:
    first = stress(seed=11, ops=400, tasks=3, threads=0)
    second = stress(seed=11, ops=400, tasks=3, threads=0)
    assert (first.ops, first.checks, first.launches, first.faults) == (
        second.ops,
        second.checks,
        second.launches,
        second.faults,
    )


def test_users_point_the_harness_at_their_own_builders() -> None:
    built: list[int] = []

    def my_builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        built.append(1)
        graph = ahg.Graph()
        graph.add_memset_node(buffer, rng.randrange(256), 8)
        return graph

    report = stress([my_builder, random_graph], seed=3, ops=300, tasks=2, threads=1)
    assert report.ops >= 300
    assert built


def test_a_leaking_builder_is_reported_with_the_seed() -> None:
    kept: list[ahg.UserObject] = []

    def leaky(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
        kept.append(ahg.UserObject(lambda data: None))  # never released: a leak
        return random_graph(rng, buffer)

    with pytest.raises(StressViolation) as caught:
        stress([leaky], seed=5, ops=50, tasks=1, threads=0, faults=False)
    text = str(caught.value)
    assert "2: everything back at baseline" in text
    assert "seed: 5" in text
    assert "user object" in text
    for obj in kept:
        obj.release()


@pytest.mark.slow
def test_a_long_soak() -> None:
    report = stress(seed=1, duration=20, tasks=8, threads=2)
    assert report.checks > 0


def test_cli_stress_exits_zero_and_prints_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plain", "stress", "--ops", "300", "--tasks", "2", "--threads", "1"]) == 0
    assert "ok: seed 0:" in capsys.readouterr().out


def test_cli_trace_runs_a_script_and_writes_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "work.py"
    script.write_text(
        textwrap.dedent(
            """
            import ahipgraph as ahg

            async def main():
                device = ahg.get_device(0)
                stream = device.create_stream()
                x = device.malloc(64)
                await stream.memset(x, 1, 64)
                await stream.synchronize()
                device.free(x)
                stream.destroy()

            ahg.run(main)
            """
        )
    )
    output = tmp_path / "trace.json"
    assert main(["--plain", "trace", "-o", str(output), str(script)]) == 0
    assert "wrote" in capsys.readouterr().out
    events = json.loads(output.read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("ph") == "X"] == ["memset 64B"]


def test_cli_bench_reports_tracing_off_and_on(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plain", "bench", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "tracing off:" in out
    assert "tracing on:" in out
    assert "recorded in bench/results/launch.json" in out
