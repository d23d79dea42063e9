"""``fresh_devices(check=)`` and ``snapshot(collect=)`` take a bool, and refuse a truthy string.

``fresh_devices(check="no")`` checked for leaks, the opposite of what it said; ``snapshot``'s
``collect`` read a string the same way. Both now answer a ``TypeError``, as ``stress(faults=)``
and ``ahg.run(use_uvloop=)`` do, before anything is replaced or collected.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import fresh_devices, snapshot


@pytest.mark.parametrize("flag", ["no", 0, None, 1.0])
def test_fresh_devices_refuses_a_check_that_is_not_a_bool(flag: Any) -> None:
    device = ahg.get_device(0)
    with pytest.raises(TypeError, match="check must be a bool"), fresh_devices(1, check=flag):
        pass
    assert ahg.get_device(0) is device  # nothing was replaced


@pytest.mark.parametrize("flag", ["no", 0, None])
def test_snapshot_refuses_a_collect_that_is_not_a_bool(flag: Any) -> None:
    with pytest.raises(TypeError, match="collect must be a bool"):
        snapshot(collect=flag)


def test_numpy_bools_are_bools() -> None:
    with fresh_devices(1, check=np.bool_(True)) as devices:
        assert len(devices) == 1
    assert snapshot(collect=np.bool_(False)).handles["stream"] == 0
