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
