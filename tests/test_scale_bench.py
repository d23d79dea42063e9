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
        first = bench.repeats(5) + (shape == bench.SHAPES[0])  # the warm-up run
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
        assert sequence == [5] * bench.repeats(5) + [5] * runs + [7] * bench.repeats(7) + [5] * runs
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
