"""Integer kernel arguments follow the project's integer rule: anything that is an integer by
``__index__`` except a bool or a device pointer, checked against the slot's bounds."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


@ahg.kernel
def takes_ints(t: ahg.Threads, a: ahg.int8, b: ahg.uint16, c: ahg.int64, d: ahg.uint64) -> None:
    pass


class Count:
    """An integer type of the user's own: ``__index__`` makes it one."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def _args(slot: int, value: Any) -> list[Any]:
    args: list[Any] = [0, 0, 0, 0]
    args[slot] = value
    return args


@pytest.mark.parametrize("slot", range(4))
@pytest.mark.parametrize(
    "value", [np.timedelta64(1), np.timedelta64(1, "s"), np.datetime64(1, "s"), np.float64(1.0)]
)
def test_a_duration_or_a_date_is_not_an_integer_argument(slot: int, value: Any) -> None:
    """``np.timedelta64`` subclasses ``np.integer``, so a duration was packed as its count
    (of any unit), while ``malloc`` and every other integer argument refuse it."""
    with pytest.raises(TypeError, match="needs an int"):
        takes_ints.pack(_args(slot, value))


@pytest.mark.parametrize("slot", range(4))
def test_a_device_pointer_is_not_an_integer_argument(device: ahg.Device, slot: int) -> None:
    ptr = device.malloc(8)
    with pytest.raises(TypeError, match="needs an int"):
        takes_ints.pack(_args(slot, ptr))
    device.free(ptr)


def test_integers_of_any_kind_pack_exactly() -> None:
    raw = takes_ints.pack([np.int8(-128), Count(65535), np.int64(-(2**63)), np.uint64(2**64 - 1)])
    assert struct.unpack("<bxHxxxxqQ", raw) == (-128, 65535, -(2**63), 2**64 - 1)
    with pytest.raises(ValueError, match="out of range"):
        takes_ints.pack([0, Count(65536), 0, 0])
