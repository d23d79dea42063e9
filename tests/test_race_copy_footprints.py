"""The dynamic and static checkers see every kind of copy, with the bytes it really touches.

Pitched (2D/3D), symbol and peer copies are enqueued through their own stream path; each must
reach the checker as an eager memcpy does. A pitched copy touches its rows only, from its
offset: an op on the bytes between rows (the pitch's gap) does not race with it.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

SYMBOL = ahg.device_symbol("race_copy_footprints_coeffs", dtype=np.float32, shape=(16,))


async def _unordered(first: str, second: str) -> list[ahg.RaceReport]:
    device = ahg.get_device(0)
    a, b = device.malloc(256), device.malloc(256)
    s1, s2 = (device.create_stream(non_blocking=True) for _ in range(2))
    ops = {
        "fill a": lambda s: s.memset(a, 1, 256),
        "fill gap": lambda s: s.memset(a + 16, 1, 16),  # bytes 16..32: between two rows
        "2d into a": lambda s: s.memcpy_2d(a, 32, b, 32, 16, 4),  # rows at 0, 32, 64, 96
        "3d into a": lambda s: s.memcpy_3d(
            ahg.PitchedPtr(a, 32, 2), ahg.PitchedPtr(b, 32, 2), (16, 2, 2)
        ),
        "peer into a": lambda s: s.memcpy_peer(a, 0, b, 0, 64),
        "symbol from a": lambda s: s.memcpy_to_symbol(SYMBOL, a, 64),
        "symbol into a": lambda s: s.memcpy_from_symbol(a, SYMBOL, 64),
    }
    with ahg.race_check(on_race="collect") as rc:
        await ops[first](s1)
        await ops[second](s2)
        await device.synchronize()
    for stream in (s1, s2):
        stream.destroy()
    device.free(a)
    device.free(b)
    return rc.reports


@pytest.mark.asyncio
async def test_pitched_symbol_and_peer_copies_are_checked() -> None:
    for second in ("2d into a", "3d into a", "peer into a", "symbol from a", "symbol into a"):
        reports = await _unordered("fill a", second)
        assert len(reports) == 1, second
        assert reports[0].kind == ("read-after-write" if second == "symbol from a" else
                                   "write-after-write")  # fmt: skip


@pytest.mark.asyncio
async def test_a_pitched_copy_touches_its_rows_not_the_gaps_between_them() -> None:
    assert await _unordered("fill gap", "2d into a") == []
    assert await _unordered("fill gap", "3d into a") == []
    (report,) = await _unordered("fill a", "2d into a")
    assert report.second.precision == "exact"
    assert report.second.end - report.second.start == 16  # one row, not the whole span


def test_the_static_check_sees_a_pitched_copy_node_rows_and_offset() -> None:
    device = ahg.get_device(0)
    a, b = device.malloc(256), device.malloc(256)
    graph = ahg.Graph()
    graph.add_memset_node(a + 16, 1, 16)  # a gap of the rows below: no edge needed
    graph.add_memcpy_3d_node(
        ahg.PitchedPtr(a, 32, 4), ahg.PitchedPtr(b, 32, 4), (16, 4, 1), dst_pos=(0, 0, 0)
    )
    assert graph.check_races() == []
    graph.add_memset_node(a + 96, 1, 1)  # the last row's first byte: a race
    (report,) = graph.check_races()
    sides = {
        (site.start - a.address, site.end - a.address) for site in (report.first, report.second)
    }
    assert sides == {(96, 112), (96, 97)}  # the last row, from the copy's offset
    graph.destroy()
    device.free(a)
    device.free(b)
