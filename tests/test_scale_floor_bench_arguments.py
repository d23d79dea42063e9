"""``bench/scale_floor.py``'s arguments: sizes in increasing order (the first is the reference
every ratio divides by) and at least one round, refused as usage errors before any build."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from benches import load_bench


@pytest.mark.parametrize(
    "argv",
    [
        ["--sizes", "400,200"],  # the reference would not be the smallest
        ["--sizes", "200,200"],  # one figure would overwrite the other
        ["--sizes", "100,400,200"],
        ["--sizes", "100,200", "--rounds", "0"],  # min() of no runs
        ["--sizes", "100,200", "--rounds", "-2"],
        ["--sizes", "100,200", "--rounds", "x"],
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_bench("scale_floor.py", "scale_floor_bench_arguments")
    before = ahg.get_device(0).memory_info()
    with pytest.raises(SystemExit) as exit_info:
        bench.main(argv)
    assert exit_info.value.code == 2  # argparse's usage error, not a traceback mid-run
    assert "usage" in capsys.readouterr().err
    assert ahg.get_device(0).memory_info() == before
