"""``bench/scale_floor.py``: plain Python's per-node floors and their ratios, as reported."""

from __future__ import annotations

from pathlib import Path

import pytest

import ahipgraph as ahg
from benches import load_bench


def test_the_report_has_each_phase_per_size_and_ratios_to_the_smallest(tmp_path: Path) -> None:
    bench = load_bench("scale_floor.py", "scale_floor_bench")
    out = bench.measure((200, 400), rounds=1)
    assert out["sizes"] == [200, 400]
    assert set(out["figures"]) == {"200", "400"}
    for row in out["figures"].values():
        assert set(row) == {"edges_us", "clone_us", "wide_order_us", "pairs_us", "wide_pairs_us"}
        assert all(value > 0 for value in row.values())
    assert set(out["ratios"]) == {"400"}
    for key, ratio in out["ratios"]["400"].items():
        assert ratio == pytest.approx(out["figures"]["400"][key] / out["reference"][key])
        assert out["reference"][key] <= out["figures"]["200"][key]  # the least small run
    assert "400/200" in bench.table(out)
    assert (
        bench.main(["--sizes", "100,200", "--rounds", "1", "--json", str(tmp_path / "f.json")]) == 0
    )
    assert (tmp_path / "f.json").exists()


def test_sizes_must_be_two_or_more_positive_counts() -> None:
    bench = load_bench("scale_floor.py", "scale_floor_bench_sizes")
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "100"])
    with pytest.raises(SystemExit):
        bench.main(["--sizes", "0,100"])


def test_the_floors_make_what_the_phases_make() -> None:
    bench = load_bench("scale_floor.py", "scale_floor_bench_shapes")
    device = ahg.get_device(0)
    x = device.malloc(64)
    nodes = bench.scale.floor_build(5, x)
    assert len(bench.floor_edges(nodes)) == 4  # a chain of 5 has 4 edges
    copies = bench.floor_clone(nodes)
    assert len(copies) == 5
    assert all(copies[k] is not nodes[k] and copies[k].id == nodes[k].id for k in nodes)
    wide = bench.scale.floor_build(3000, x)  # 1,000 branches of 3 nodes each
    order = bench.floor_wide_order(wide)
    assert [node.id for node in order[:3]] == [0, 3, 6]  # each branch's first node, in turn
    assert [node.id for node in order[1000:1002]] == [1, 4]  # then each branch's second
    assert sorted(node.id for node in order) == list(range(3000))
    positions = bench.wide_positions(3000)
    assert positions[:3] == [0, 3, 6]
    assert [wide[i] for i in positions] == order  # the walk floor_wide_order makes
    again = bench.scale.floor_build(3000, x)
    for walk in (range(3000), positions):  # every node paired with the same node of the other
        changes = bench.floor_pairs(wide, again, walk)
        assert [(node.id, params) for node, params in changes] == [
            (i, again[i].params) for i in walk
        ]
    del wide, order, again, changes
    del nodes, copies
    device.free(x)
