"""Reading device memory on purpose while work that writes it may still run.

A test that proves work has *not* run yet, or polls memory until it has, reads with nothing
ordering the read after the writer: by the API's rules that read races the writer, and
``make race`` (the whole suite under ``AHIPGRAPH_RACE_CHECK=warn``) reports it. ``peek`` is
that read, said out loud: a read-only view inside a collecting race check of its own, so a
report of this read (and only of this read: nothing else runs in the block) is expected and
dropped, and every other read of the suite stays checked.
"""

from __future__ import annotations

import numpy as np

import ahipgraph as ahg

__all__ = ["peek"]


def peek(device: ahg.Device, ptr: ahg.DevicePtr, index: int = 0) -> int:
    """The int64 at ``ptr[index]`` now, read without the ordering a real read would need."""
    with ahg.race_check(on_race="collect") as check:
        value = int(device.view(ptr, np.int64, index + 1, readonly=True)[index])
    for report in check.reports:  # the read itself, never anything else
        assert report.second.where == "host", str(report)
        assert not report.second.write, str(report)
    return value
