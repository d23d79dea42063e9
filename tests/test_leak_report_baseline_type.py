"""``ahipgraph.testing.leak_report``: a baseline of the wrong type.

``leak_report(baseline)`` takes what :func:`snapshot` returned. Anything else (the statistics
of one device, a dict, a number) failed deep inside with an ``AttributeError`` about a missing
``devices`` attribute, or, for ``current``, was read as a snapshot; Python-level misuse is a
``TypeError`` that names the argument.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.testing import leak_report, snapshot


@pytest.mark.parametrize("wrong", [3, "baseline", {"devices": ()}, True])
def test_leak_report_refuses_a_baseline_that_is_not_a_snapshot(
    device: ahg.Device, wrong: object
) -> None:
    with pytest.raises(TypeError, match="baseline must be a Snapshot"):
        leak_report(wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="current must be a Snapshot"):
        leak_report(None, wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="baseline must be a Snapshot"):
        leak_report(wrong, snapshot())  # type: ignore[arg-type]


def test_leak_report_still_compares_two_snapshots(device: ahg.Device) -> None:
    before = snapshot()
    stream = device.create_stream()
    assert leak_report(before) == "live handles: 1 stream"
    assert leak_report(before, before) is None
    stream.destroy()
    assert leak_report(before) is None
