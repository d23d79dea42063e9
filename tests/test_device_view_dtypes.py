"""``Device.view``: the dtypes device memory can be viewed as, and the error for the others."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.parametrize("dtype", [np.dtype("V0"), object, np.dtype([("o", object)]), "O"])
def test_a_dtype_without_size_or_holding_objects_is_a_type_error(
    device: ahg.Device, dtype: Any
) -> None:
    """A zero-size element divided by zero; an object dtype failed inside numpy."""
    ptr = device.malloc(64)
    before = device.statistics().memory
    for count in (None, 1):
        with pytest.raises(TypeError, match="cannot be viewed"):
            device.view(ptr, dtype, count)
    assert device.statistics().memory == before
    device.free(ptr)


@pytest.mark.parametrize(
    "dtype", [np.float64, "U2", np.dtype([("a", "<i4"), ("b", "<f4")]), "V4", np.bool_]
)
def test_sized_plain_dtypes_view_the_bytes(device: ahg.Device, dtype: Any) -> None:
    ptr = device.malloc(64)
    view = device.view(ptr, dtype)
    assert view.nbytes == 64 // np.dtype(dtype).itemsize * np.dtype(dtype).itemsize
    device.view(ptr, np.uint8)[:] = 7
    assert bytes(device.view(ptr, dtype, 1).tobytes()) == b"\x07" * np.dtype(dtype).itemsize
    device.free(ptr)


def test_a_read_only_view_refuses_writes(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    view = device.view(ptr, np.int32, 4, readonly=True)
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1
    with pytest.raises(IndexError):
        view[4]
    assert device.view(ptr, np.int32, 4)[0] == 0
    device.free(ptr)
