"""Arithmetic on ``DevicePtr``: offsets follow the integer rule (numpy integers move a pointer,
bools never do), and whatever arithmetic produces is caught where the pointer is used."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.parametrize("flag", [True, False, np.True_, np.False_])
def test_a_bool_is_not_an_offset(device: ahg.Device, flag: Any) -> None:
    ptr = device.malloc(64)
    for move in (
        lambda: ptr + flag,
        lambda: flag + ptr,
        lambda: ptr - flag,
    ):
        with pytest.raises(TypeError):
            move()
    device.free(ptr)


@pytest.mark.parametrize("offset", [np.int64(8), np.uint8(8), np.int32(8)])
def test_a_numpy_integer_moves_a_pointer_as_an_int_does(device: ahg.Device, offset: Any) -> None:
    ptr = device.malloc(64)
    for moved in (ptr + offset, offset + ptr):
        assert moved == ptr + 8
        assert type(moved) is ahg.DevicePtr
        assert type(moved.address) is int  # no numpy scalar is stored in a pointer
    back = (ptr + 16) - offset
    assert back == ptr + 8
    assert type(back.address) is int
    device.free(ptr)


def test_floats_strings_and_pointers_are_not_offsets(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    for bad in (1.0, "8", None, ptr):
        with pytest.raises(TypeError):
            ptr + bad  # type: ignore[operator]
    for bad in (1.0, "8", None):
        with pytest.raises(TypeError):
            ptr - bad  # type: ignore[operator]
    device.free(ptr)


def test_pointers_outside_their_allocation_are_refused_where_used(device: ahg.Device) -> None:
    before = device.statistics().memory
    ptr = device.malloc(64)
    for outside in (ptr - 1, ptr + 64, ptr - (1 << 70), ptr + (1 << 70)):
        with pytest.raises(ahg.InvalidDevicePointer):
            device.view(outside, np.uint8, 1)
    with pytest.raises(ahg.InvalidValue):
        device.view(ptr + 60, np.uint8, 8)  # starts inside, runs past the end
    device.free(ptr)
    after = device.statistics().memory
    assert (after.allocations, after.bytes_in_use) == (before.allocations, before.bytes_in_use)


def test_null_pointers_of_every_device_are_one_value() -> None:
    ahg.configure_devices(2)
    other_null = ahg.get_device(1).malloc(0)
    assert not other_null
    assert not ahg.NULL
    assert other_null == ahg.NULL
    assert hash(other_null) == hash(ahg.NULL)
    assert len({ahg.NULL, other_null}) == 1
