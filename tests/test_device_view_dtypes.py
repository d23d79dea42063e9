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


SCALAR_TYPES = [
    (ahg.int8, np.int8),
    (ahg.uint16, np.uint16),
    (ahg.int32, np.int32),
    (ahg.uint64, np.uint64),
    (ahg.float32, np.float32),
    (ahg.float64, np.float64),
]


@pytest.mark.parametrize(("scalar", "expected"), SCALAR_TYPES)
def test_a_kernel_parameter_type_views_as_its_numpy_dtype(
    device: ahg.Device, scalar: Any, expected: Any
) -> None:
    """A kernel declares ``x: ahg.Ptr[ahg.float32]``; the host views it as ``ahg.float32``
    (numpy could not read the annotation: a TypeError from numpy naming the Annotated alias)."""
    ptr = device.malloc(16)
    view = device.view(ptr, scalar, 2)
    assert view.dtype == np.dtype(expected)
    view[:] = 3
    assert device.view(ptr, expected, 2).tolist() == [3, 3]
    device.free(ptr)


@pytest.mark.parametrize(
    "dtype", [ahg.Ptr[ahg.float32], ahg.ConstPtr[ahg.int32], "nonsense", 3, ahg.CondHandle]
)
def test_what_numpy_cannot_read_as_a_dtype_is_a_type_error_naming_it(
    device: ahg.Device, dtype: Any
) -> None:
    """numpy raised ValueError for some of these (a pointer type): the view's own TypeError
    names what was given, and a pointer type says to view its elements."""
    ptr = device.malloc(16)
    before = device.statistics().memory
    with pytest.raises(TypeError, match="not a data type") as info:
        device.view(ptr, dtype, 1)
    assert ("pointer type" in str(info.value)) == ("Ptr" in repr(dtype))
    assert device.statistics().memory == before
    device.free(ptr)


def test_a_device_symbol_takes_a_kernel_parameter_type_as_its_dtype() -> None:
    symbol = ahg.device_symbol("view_dtypes_scalar_symbol", dtype=ahg.float64, shape=3)
    assert symbol.view().dtype == np.float64
    assert symbol.nbytes == 24
    with pytest.raises(TypeError, match="not a data type"):
        ahg.device_symbol("view_dtypes_pointer_symbol", dtype=ahg.Ptr[ahg.float64], shape=3)
