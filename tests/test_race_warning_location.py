"""``race_check(on_race="warn")``: where the warning points.

The warning was issued with a fixed ``stacklevel``, which fits one call depth only: a race
found at an eager ``memset`` was reported at a line of ``runtime/stream.py``, so the printed
``file:line: RaceWarning`` and every warnings filter by module named the library instead of
the racing call. The warning now names the first frame outside ahipgraph.
"""

from __future__ import annotations

import warnings

import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
async def test_a_race_warning_names_the_racing_line(device: ahg.Device) -> None:
    first, second = device.create_stream(), device.create_stream()
    buffer = device.malloc(64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with ahg.race_check(on_race="warn"):
            await first.memset(buffer, 1, 64)
            await second.memset(buffer, 2, 64)  # nothing orders it after the first
            await first.synchronize()
            await second.synchronize()
    races = [w for w in caught if issubclass(w.category, ahg.RaceWarning)]
    assert len(races) == 1
    assert races[0].filename == __file__
    first.destroy()
    second.destroy()
    device.free(buffer)
