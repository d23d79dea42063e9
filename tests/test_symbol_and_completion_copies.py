"""Copies and pickles of a device symbol and of a completion.

A symbol is its name's one declaration: a copy used to be a second object that no call took
as a declared symbol (``InvalidSymbol``), a deep copy one with storage of its own, and a
pickle failed inside a weak dictionary. A completion's deep copy and pickle failed naming the
device it refers to rather than the completion.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import ahipgraph as ahg


def test_a_copy_or_pickle_of_a_symbol_is_the_declared_symbol() -> None:
    symbol = ahg.device_symbol("copies_of_a_symbol", dtype=np.int32, shape=(2, 3))
    sized = ahg.device_symbol("copies_of_a_sized_symbol", 12)
    for declared in (symbol, sized):
        assert copy.copy(declared) is declared
        assert copy.deepcopy(declared) is declared
        assert copy.deepcopy([declared])[0] is declared
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            assert pickle.loads(pickle.dumps(declared, protocol=protocol)) is declared
        assert copy.copy(declared).address() == declared.address()


@pytest.mark.asyncio
async def test_a_copied_symbol_is_still_accepted_by_symbol_copies(device: ahg.Device) -> None:
    symbol = ahg.device_symbol("a_copied_symbol_in_use", dtype=np.int32, shape=(4,))
    source = np.arange(4, dtype=np.int32)
    back = np.zeros(4, dtype=np.int32)
    with device.create_stream() as stream:
        await stream.memcpy_to_symbol(copy.deepcopy(symbol), source)
        await stream.memcpy_from_symbol(back, copy.copy(symbol))
        await stream.synchronize()
    assert back.tolist() == [0, 1, 2, 3]


@pytest.mark.asyncio
async def test_a_completion_copies_as_itself_and_refuses_a_pickle_by_name(
    device: ahg.Device,
) -> None:
    out = device.malloc(8)
    with device.create_stream() as stream:
        done = await stream.memset(out, 1, 8)
        assert copy.copy(done) is done
        assert copy.deepcopy(done) is done
        with pytest.raises(TypeError, match=r"Completion .*cannot be pickled"):
            pickle.dumps(done)
        await done
    device.free(out)
