"""Declaring device symbols by dtype and shape: the size is the true product of the extents."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.parametrize("shape", [(-2, -3), (-1, -1, 4), -4, (3, -1)])
def test_a_negative_extent_is_refused(shape: object) -> None:
    """Two negative extents multiply to a positive size; the symbol is still nonsense."""
    name = f"test_symbol_shapes.negative{shape}"
    with pytest.raises(ValueError, match="negative extent"):
        ahg.device_symbol(name, dtype=np.int32, shape=shape)
    # Nothing was declared: the name is free for a good declaration.
    assert ahg.device_symbol(name, dtype=np.int32, shape=(6,)).nbytes == 24


def test_large_extents_do_not_wrap_round_to_a_small_size(device: ahg.Device) -> None:
    """In int64, (2**62 + 1) * 4 wraps to 4: the symbol was declared with 4 bytes."""
    symbol = ahg.device_symbol("test_symbol_shapes.large", dtype=np.uint8, shape=(2**62 + 1, 4))
    assert symbol.nbytes == (2**62 + 1) * 4
    before = device.statistics().memory
    with pytest.raises(ahg.OutOfMemory):
        symbol.address(device)  # loading it needs more than the device has
    after = device.statistics().memory
    assert (after.allocations, after.bytes_in_use) == (before.allocations, before.bytes_in_use)


def test_a_scalar_symbol_has_one_element(device: ahg.Device) -> None:
    symbol = ahg.device_symbol("test_symbol_shapes.scalar", dtype=np.int64, shape=())
    assert symbol.nbytes == 8
    assert symbol.view(device).shape == ()


@pytest.mark.parametrize(
    ("dtype", "shape", "expected"),
    [
        (np.dtype((np.float32, (2,))), (3,), (3, 2)),
        (np.dtype((np.int16, (2, 2))), 5, (5, 2, 2)),
        (np.dtype((np.float64, (4,))), None, (4,)),  # a scalar of a subarray type
    ],
)
def test_a_subarray_dtype_is_elements_of_its_base_as_numpy_reads_it(
    device: ahg.Device, dtype: np.dtype[object], shape: object, expected: tuple[int, ...]
) -> None:
    """``np.zeros(3, ("f4", (2,)))`` has shape (3, 2): so has the symbol, and its view works."""
    name = f"test_symbol_shapes.subarray{expected}"
    symbol = ahg.device_symbol(name, dtype=dtype, shape=shape)
    assert (symbol.dtype, symbol.shape) == (dtype.base, expected)
    assert symbol.nbytes == np.zeros(shape or (), dtype).nbytes
    view = symbol.view(device)
    assert (view.dtype, view.shape) == (dtype.base, expected)
    view[...] = 1  # writes reach the symbol's storage
    assert symbol.view(device).sum() == np.prod(expected)
    # the same declaration again is the same symbol, spelled either way
    assert ahg.device_symbol(name, dtype=dtype, shape=shape) is symbol
    assert ahg.device_symbol(name, dtype=dtype.base, shape=expected) is symbol
