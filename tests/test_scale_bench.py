"""``bench/scale.py``'s ratios: each larger size against the smallest measured around it."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from benches import load_bench


def _bench() -> ModuleType:
    return load_bench("scale.py", "scale_bench_ratios")


@pytest.mark.asyncio
async def test_a_ratio_divides_by_the_smallest_size_measured_around_the_larger_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = _bench()
    calls: list[tuple[str, int]] = []

    # The machine's speed as the run goes: the smallest size first measured at speed 1, and
    # everything around the larger size at half speed (each figure twice as large).
    def fake_time_one(shape: str, size: int, device: Any, x: Any) -> Any:
        calls.append((shape, size))
        first = bench.RUNS + (shape == bench.SHAPES[0])  # the warm-up run
        slow = 1.0 if len([c for c in calls if c[0] == shape]) <= first else 2.0

        async def figures() -> dict[str, Any]:
            row: dict[str, Any] = dict.fromkeys(bench.PHASES, slow * (3.0 if size == 7 else 1.0))
            row.update(first_yield_us=0.0, gc_collections=[0, 0, 0])
            return row

        return figures()

    monkeypatch.setattr(bench, "time_one", fake_time_one)
    out = await bench.measure((5, 7), memory=False)
    runs = bench.REFERENCE_RUNS
    for shape in bench.SHAPES:
        sequence = [size for s, size in calls if s == shape]
        if shape == bench.SHAPES[0]:
            assert sequence[0] == 5  # the warm-up run, left out
            sequence = sequence[1:]
        assert sequence == [5] * bench.RUNS + [5] * runs + [7] * bench.RUNS + [5] * runs
        assert out[shape]["5"]["build_us"] == 1.0
        assert out["reference"][shape]["7"]["build_us"] == 2.0
        # 6.0 / 2.0, not 6.0 / 1.0: the drift between the start and the larger size is gone
        assert out["ratios_vs_smallest"][shape]["7"]["build_us"] == pytest.approx(3.0)
    table = bench.table(out)
    assert "@7" in table
    assert "measured around N" in table


def test_a_run_without_references_divides_by_the_smallest_size() -> None:
    bench = _bench()
    row = dict.fromkeys(bench.PHASES, 2.0)
    out = {
        shape: {"5": dict(row, bytes_per_node=100.0), "7": dict(row, bytes_per_node=150.0)}
        for shape in bench.SHAPES
    }
    ratios = bench.ratios(out, (5, 7))
    for shape in bench.SHAPES:
        assert ratios[shape]["7"]["build_us"] == 1.0
        assert ratios[shape]["7"]["bytes_per_node"] == 1.5


def test_the_floor_build_is_a_chain_of_every_node_with_its_packed_arguments() -> None:
    import struct

    import ahipgraph as ahg

    bench = _bench()
    x = ahg.get_device(0).malloc(64)
    try:
        nodes = bench.floor_build(4, x)
        assert list(nodes) == [0, 1, 2, 3]
        assert nodes[0].deps is None
        assert [nodes[i].deps for i in (1, 2, 3)] == [nodes[0], nodes[1], nodes[2]]
        assert [nodes[i].succ for i in (0, 1, 2)] == [nodes[1], nodes[2], nodes[3]]
        assert nodes[3].succ is None
        assert nodes[2].params[3] == (x, 2)
        assert nodes[2].params[4] == struct.pack("<Qi", x.address, 2)
        assert bench.time_floor_build(10, x) > 0.0
    finally:
        ahg.get_device(0).free(x)


def test_the_table_shows_the_build_over_the_floor_when_a_row_has_one() -> None:
    bench = _bench()
    row: dict[str, Any] = dict.fromkeys(bench.PHASES, 2.0)
    row.update(first_yield_us=0.0, gc_collections=[0, 0, 0])
    out: dict[str, Any] = {"sizes": [5]}
    for shape in bench.SHAPES:
        out[shape] = {"5": dict(row, floor_build_us=0.5)}
    out["ratios_vs_smallest"] = bench.ratios(out, (5,))
    assert "4.00x" in bench.table(out)  # build 2.0 over floor 0.5
    for shape in bench.SHAPES:
        out[shape]["5"].pop("floor_build_us")
    assert "4.00x" not in bench.table(out)  # a row without the floor shows dashes


def test_a_repeated_phase_is_the_median_and_each_result_is_undone_before_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = _bench()
    clock = iter([0.0, 5.0, 10.0, 11.0, 20.0, 29.0])  # three calls: 5, 1 and 9 seconds
    monkeypatch.setattr(bench.time, "perf_counter", lambda: next(clock))
    made: list[int] = []
    undone: list[int] = []

    def call() -> int:
        assert len(made) == len(undone)  # the previous call's result was undone first
        made.append(len(made))
        return made[-1]

    assert bench._median_time(call, then=undone.append) == 5.0
    assert made == undone == [0, 1, 2]


def test_updates_in_turn_apply_each_graph_alternately() -> None:
    bench = _bench()
    applied: list[str] = []

    class Exec:
        def update(self, graph: str) -> None:
            applied.append(graph)

    graphs = ["one", "two"]
    for _ in range(3):
        bench._update_in_turn(Exec(), graphs)
    assert applied == ["one", "two", "one"]


def test_a_fresh_page_is_timed_twice_capped_by_what_is_available(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = _bench()
    figures = bench.page_cost(1 << 20)
    assert figures["bytes"] == 1 << 20
    assert figures["first_touch_us_per_page"] > 0.0
    assert figures["second_touch_us_per_page"] > 0.0
    monkeypatch.setattr(bench, "_available_memory", lambda: 1 << 16)
    assert bench.page_cost(1 << 30)["bytes"] == 1 << 15  # half of what is available


def test_the_edges_floor_is_a_pair_per_edge_of_the_floor_chain() -> None:
    import ahipgraph as ahg

    bench = _bench()
    x = ahg.get_device(0).malloc(64)
    try:
        nodes = bench.floor_build(4, x)
        assert bench.floor_edges(nodes) == [(nodes[i], nodes[i + 1]) for i in range(3)]
        assert bench.time_floor_edges(10, x) > 0.0
        text = bench.table(_one_row_table(bench))
        assert "fl.edges" in text
        assert "a page of fresh memory (0 MiB touched)" in text
    finally:
        ahg.get_device(0).free(x)


def _one_row_table(bench: ModuleType) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(bench.PHASES, 2.0)
    row.update(first_yield_us=0.0, gc_collections=[0, 0, 0])
    out: dict[str, Any] = {"sizes": [5], "fresh_page": bench.page_cost(1 << 16)}
    for shape in bench.SHAPES:
        out[shape] = {"5": row}
    out["ratios_vs_smallest"] = bench.ratios(out, (5,))
    return out
