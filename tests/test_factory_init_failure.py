"""A factory whose initialiser fails half-way leaves nothing behind.

The factories build on a bare instance (``object.__new__`` and a private ``_init``); when the
last step of a stream's ``_init`` failed (the device's list of streams could not take it: out
of memory), the half-built stream had its finalizer already, and warned as a forgotten handle
the user never had.
"""

from __future__ import annotations

import gc
import warnings

import pytest

import ahipgraph as ahg
from ahipgraph.runtime.device import Device


def _no_stream_list_room(self: Device, stream: ahg.Stream) -> None:
    raise MemoryError("no room for another stream")


@pytest.mark.parametrize("kind", ["create_stream", "per_thread_stream"])
def test_a_stream_whose_init_fails_at_the_last_step_is_not_a_forgotten_handle(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    before = device.statistics()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with monkeypatch.context() as patch:
            patch.setattr(Device, "_add_stream", _no_stream_list_room)
            with pytest.raises(MemoryError, match="no room"):
                getattr(device, kind)()
        gc.collect()
        ahg.collect_forgotten()
    assert [str(w.message) for w in caught] == []
    assert device.statistics() == before
    with device.create_stream() as stream:  # the device still makes streams
        assert stream.alive
