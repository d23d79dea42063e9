"""``stream.memset(dst, value, nbytes=...)``: the size in bytes, as API.md and HIP write it.

API.md writes the call ``await stream.memset(dst, value, nbytes)`` and ``Device.memset`` names
its size ``nbytes``; the stream's third parameter is ``count``, in elements (so one count means
the same on a stream and in a graph node). A user who writes the size by keyword as the text
names it got ``TypeError: unexpected keyword argument 'nbytes'``. ``nbytes=`` is now the byte
form (``hipMemsetAsync``'s ``sizeBytes``), for every element size, eagerly, while capturing and
from the ``_nowait`` twin; ``count`` stays as it was.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
async def test_nbytes_fills_that_many_bytes_for_each_element_size(device: ahg.Device) -> None:
    buf = device.malloc(64)
    with device.create_stream() as stream:
        await stream.memset(buf, 1, nbytes=64)
        await stream.memset(dst=buf, value=2, nbytes=16, element_size=4)
        stream.memset_nowait(buf + 16, 3, nbytes=8, element_size=2)
        await stream.memset(buf + 24, 4, 8)  # count, in elements of one byte: as before
        await stream.synchronize()
    filled = device.view(buf, np.uint8).tolist()
    assert filled == [2, 0, 0, 0] * 4 + [3, 0] * 4 + [4] * 8 + [1] * 32
    device.free(buf)


@pytest.mark.asyncio
async def test_a_captured_fill_by_nbytes_is_the_node_a_count_gives(device: ahg.Device) -> None:
    buf = device.malloc(64)
    with device.create_stream() as stream:
        async with stream.capture() as by_bytes:
            await stream.memset(buf, 9, nbytes=64, element_size=4)
        async with stream.capture() as by_count:
            await stream.memset(buf, 9, 16, element_size=4)
    assert by_bytes.graph is not None
    assert by_count.graph is not None
    (node,) = by_bytes.graph.nodes()
    assert node.params == by_count.graph.nodes()[0].params
    assert (node.params.width, node.params.element_size) == (16, 4)
    by_bytes.graph.destroy()
    by_count.graph.destroy()
    device.free(buf)


@pytest.mark.asyncio
async def test_a_size_given_twice_or_not_at_all_or_uneven_is_refused(device: ahg.Device) -> None:
    buf = device.malloc(64)
    with device.create_stream() as stream:
        before = stream.statistics()
        with pytest.raises(TypeError, match=r"^Stream\.memset\(\) takes count .* not both"):
            await stream.memset(buf, 0, 4, nbytes=4)
        with pytest.raises(TypeError, match=r"^Stream\.memset\(\) missing its size"):
            await stream.memset(buf, 0)
        with pytest.raises(ahg.InvalidValue, match="whole number of 4-byte elements"):
            await stream.memset(buf, 0, nbytes=6, element_size=4)
        with pytest.raises(ahg.InvalidValue, match="element size"):
            stream.memset_nowait(buf, 0, nbytes=6, element_size=3)
        with pytest.raises(TypeError, match="nbytes must be an int"):
            await stream.memset(buf, 0, nbytes=1.5)  # type: ignore[arg-type]
        assert stream.statistics() == before  # nothing was enqueued
    device.free(buf)


@pytest.mark.asyncio
@pytest.mark.parametrize("element_size", [1, 2, 4])
async def test_a_negative_nbytes_is_refused_as_given(device: ahg.Device, element_size: int) -> None:
    """The refusal names the bytes the caller gave: converted to elements first, ``nbytes=-4``
    of 4-byte elements was refused as "negative memset size -1x1"."""
    buf = device.malloc(64)
    with device.create_stream() as stream:
        before = stream.statistics()
        with pytest.raises(ahg.InvalidValue, match=r"negative memset size nbytes=-4$"):
            await stream.memset(buf, 0, nbytes=-4, element_size=element_size)
        with pytest.raises(ahg.InvalidValue, match=r"negative memset size nbytes=-4$"):
            stream.memset_nowait(buf, 0, nbytes=-4, element_size=element_size)
        assert stream.statistics() == before
    device.free(buf)


@pytest.mark.asyncio
async def test_a_destroyed_stream_is_reported_first_in_either_size_form(
    device: ahg.Device,
) -> None:
    """The stream is checked before the size, whether it is a count or ``nbytes=``."""
    buf = device.malloc(16)
    stream = device.create_stream()
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.memset(buf, 0, -1, element_size=4)
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.memset(buf, 0, nbytes=-4, element_size=4)
    with pytest.raises(ahg.ContextIsDestroyed):
        stream.memset_nowait(buf, 0, nbytes=6, element_size=4)
    device.free(buf)
