"""The device's synchronous copies (``memcpy_2d``, ``memcpy_3d``, ``memcpy_to_symbol``,
``memcpy_from_symbol``, ``memcpy_peer``) take the parameters of the ``Stream`` methods they run
on the null stream, so ``help()``, ``inspect.signature`` and type checkers see the real call,
and a call that does not fit is refused when it is made, before anything is enqueued or any
capture is invalidated."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Coroutine
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import snapshot
from cleanup import destroy

SYNC_COPIES = ["memcpy_2d", "memcpy_3d", "memcpy_to_symbol", "memcpy_from_symbol", "memcpy_peer"]

SYMBOL = ahg.device_symbol("test_sync_copy_signatures.symbol", 16)

Call = Callable[..., Coroutine[Any, Any, None]]


@pytest.mark.parametrize("name", SYNC_COPIES)
def test_a_sync_copy_has_the_parameters_of_its_stream_method(name: str) -> None:
    on_device = inspect.signature(getattr(ahg.Device, name))
    on_stream = inspect.signature(getattr(ahg.Stream, name))
    assert list(on_device.parameters.values()) == list(on_stream.parameters.values())
    assert on_device.return_annotation in (None, "None")  # it waits: nothing to await after
    device_hints = typing.get_type_hints(getattr(ahg.Device, name))
    stream_hints = typing.get_type_hints(getattr(ahg.Stream, name))
    assert device_hints.pop("return") is type(None)
    stream_hints.pop("return")
    assert device_hints == stream_hints
    method = getattr(ahg.Device, name)
    assert method.__qualname__ == f"Device.{name}"
    assert f":meth:`Stream.{name}`" in (method.__doc__ or "")


def _calls(device: ahg.Device) -> dict[str, tuple[Call, tuple[Any, ...], dict[str, Any]]]:
    """Each sync copy with arguments that fit it, not yet called."""
    host = np.zeros(16, np.uint8)
    dev = ahg.DevicePtr(device.ordinal, 0x1000)  # never used: every call here is refused
    return {
        "memcpy_2d": (device.memcpy_2d, (dev, 8, host, 8, 8, 2), {}),
        "memcpy_3d": (
            device.memcpy_3d,
            (ahg.PitchedPtr(dev, 8), ahg.PitchedPtr(host, 8), (8, 2, 1)),
            {"dst_pos": (0, 0, 0)},
        ),
        "memcpy_to_symbol": (device.memcpy_to_symbol, (SYMBOL, host), {"offset": 0}),
        "memcpy_from_symbol": (device.memcpy_from_symbol, (host, SYMBOL), {"offset": 0}),
        "memcpy_peer": (device.memcpy_peer, (dev, 0, dev, 0, 16), {}),
    }


@pytest.mark.asyncio
@pytest.mark.parametrize("name", SYNC_COPIES)
async def test_a_wrong_keyword_is_refused_at_the_call_and_changes_nothing(
    device: ahg.Device, name: str
) -> None:
    method, args, kwargs = _calls(device)[name]
    stream = device.create_stream()
    stream.begin_capture()  # a sync copy that ran would invalidate it
    before = snapshot()
    with pytest.raises(TypeError, match=rf"^Device\.{name}\(\) got an unexpected keyword "
                       r"argument 'bogus'$"):  # fmt: skip
        method(*args, **kwargs, bogus=1)  # not awaited: the call itself is refused
    with pytest.raises(TypeError, match=rf"^Device\.{name}\(\) missing"):
        method()
    assert snapshot() == before  # nothing enqueued, no null stream made
    assert stream.is_capturing() == ahg.CaptureStatus.ACTIVE
    destroy(stream.end_capture(), stream)


@pytest.mark.asyncio
async def test_the_sync_copies_take_their_parameters_by_name(device: ahg.Device) -> None:
    host = np.arange(16, dtype=np.uint8)
    out = np.zeros(16, np.uint8)
    dev, other = device.malloc(64), device.malloc(64)
    await device.memcpy_to_symbol(symbol=SYMBOL, src=host, nbytes=16, offset=0, kind=None)
    await device.memcpy_from_symbol(dst=out, symbol=SYMBOL, nbytes=16, offset=0, kind=None)
    np.testing.assert_array_equal(out, host)
    await device.memcpy_2d(
        dst=dev, dst_pitch=32, src=host, src_pitch=8, width=8, height=2, kind=None
    )
    await device.memcpy_peer(dst=other, dst_device=device, src=dev, src_device=0, nbytes=64)
    out[:] = 0
    await device.memcpy_3d(
        dst=ahg.PitchedPtr(out, 8),
        src=ahg.PitchedPtr(other, 32),
        extent=(8, 2, 1),
        dst_pos=(0, 0, 0),
        src_pos=(0, 0, 0),
        kind=None,
    )
    np.testing.assert_array_equal(out, host)  # each returned once its copy was done
    destroy(dev, other)
