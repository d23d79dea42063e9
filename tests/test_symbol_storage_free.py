"""A device symbol's storage belongs to the device, not to the caller: freeing its address is
``InvalidValue`` (as freeing anything ``malloc`` did not return), and the symbol keeps working."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg

TABLE = ahg.device_symbol("test_symbol_storage_free.table", dtype=np.int32, shape=(4,))


@pytest.mark.asyncio
async def test_freeing_a_symbols_address_is_invalid_value(device: ahg.Device) -> None:
    """The free went through: the symbol's address then pointed at nothing, on that device,
    for the rest of the process."""
    address = TABLE.address(device)
    before = device.statistics().memory
    with pytest.raises(ahg.InvalidValue, match="symbol's storage"):
        device.free(address)
    assert device.statistics().memory == before
    assert before.static_allocations == 1
    await device.memcpy_to_symbol(TABLE, np.arange(4, dtype=np.int32))
    assert TABLE.view(device).tolist() == [0, 1, 2, 3]
    assert TABLE.address(device) == address


def test_an_ordinary_allocation_still_frees(device: ahg.Device) -> None:
    TABLE.address(device)
    ptr = device.malloc(64)
    device.free(ptr)
    memory = device.statistics().memory
    assert (memory.allocations, memory.static_allocations) == (1, 1)
