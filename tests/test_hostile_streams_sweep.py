"""A hostile sweep of the stream / event / capture / stream-memory surface: what it found.

Each test pins one bug the sweep found (named after what the hostile user did); the attacks
that found nothing are covered by the sweep files before this one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def _store(t: ahg.Threads, p: ahg.Ptr[ahg.int32]) -> None:
    pass


def _old_pointer_calls(
    stream: ahg.Stream, ptr: ahg.DevicePtr, host: np.ndarray[Any, Any], *, nowait: bool
) -> list[Callable[[], object]]:
    """Every eager enqueue of ``stream`` that names ``ptr``, as the coroutine or its twin."""
    if nowait:
        return [
            lambda: stream.memset_nowait(ptr, 0, 16),
            lambda: stream.memcpy_nowait(host, ptr, 16),
            lambda: stream.memcpy_nowait(ptr, host, 16),
            lambda: stream.memcpy_2d_nowait(host, 8, ptr, 8, 8, 2),
            lambda: stream.launch_kernel_nowait(_store, 1, 1, (ptr,)),
            lambda: stream.write_value_32_nowait(ptr, 1),
            lambda: stream.wait_value_32_nowait(ptr, 0),
        ]
    return [
        lambda: stream.memset(ptr, 0, 16),
        lambda: stream.memcpy(host, ptr, 16),
        lambda: stream.memcpy(ptr, host, 16),
        lambda: stream.memcpy_2d(host, 8, ptr, 8, 8, 2),
        lambda: stream.launch_kernel(_store, 1, 1, (ptr,)),
        lambda: stream.write_value_32(ptr, 1),
        lambda: stream.wait_value_32(ptr, 0),
    ]


async def _outcome(call: Callable[[], object]) -> object:
    result = call()
    if isinstance(result, Awaitable):
        result = await result
    return result


@pytest.mark.asyncio
@pytest.mark.parametrize("nowait", [False, True], ids=["coroutine", "nowait"])
async def test_a_kept_stream_of_a_replaced_device_is_refused_before_its_old_pointer_is_looked_up(
    nowait: bool,
) -> None:
    # The successor has nothing at the old pointer's address: the old pointer, resolved by
    # ordinal against the successor's memory, was "not inside a live allocation"
    # (InvalidDevicePointer), while the same call on the same stream with a pointer the
    # successor happens to hold was InvalidDevice. The stream's device is what is wrong.
    old = ahg.get_device(0)
    old_ptr = old.malloc(16)
    old_stream = old.create_stream()
    ahg.configure_devices(1)
    new = ahg.get_device(0)
    host = np.zeros(16, np.uint8)
    before = (old_stream.statistics(), new.statistics().memory, new.memory_info())
    for call in _old_pointer_calls(old_stream, old_ptr, host, nowait=nowait):
        with pytest.raises(ahg.InvalidDevice, match="replaced"):
            await _outcome(call)
    assert (old_stream.statistics(), new.statistics().memory, new.memory_info()) == before
    assert host.tolist() == [0] * 16
    destroy(old_stream)
    old.free(old_ptr)
