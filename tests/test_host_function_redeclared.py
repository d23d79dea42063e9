"""``ahg.host_function``: declaring a declared function again.

``HostFunction`` set its ``reads``/``writes`` and then called ``functools.update_wrapper``,
which copies the wrapped object's ``__dict__``: wrapping a ``HostFunction`` (or any callable
carrying ``reads``/``writes``/``fn`` attributes) silently replaced the new declarations with
the old ones. ``host_function(writer, reads=[b])`` kept only ``writer``'s writes, so a view of
``b`` inside it was refused as undeclared.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@pytest.mark.asyncio
async def test_declaring_a_host_function_again_adds_to_its_declarations(
    device: ahg.Device,
) -> None:
    written, read = device.malloc(64), device.malloc(64)
    device.view(read, np.uint8)[:] = 5
    seen: list[int] = []

    def body() -> None:
        device.view(written, np.uint8)[:] = 1
        seen.append(int(device.view(read, np.uint8, readonly=True)[0]))

    writer = ahg.host_function(body, writes=[written])
    both = ahg.host_function(writer, reads=[read])
    assert (len(both.reads), len(both.writes)) == (1, 1)
    assert (len(writer.reads), len(writer.writes)) == (0, 1)  # the first is unchanged
    stream = device.create_stream()
    await (await stream.launch_host_func(both))
    assert seen == [5]
    assert (device.view(written, np.uint8) == 1).all()
    with pytest.raises(ahg.LaunchFailure):  # the first alone still may not view `read`
        await (await stream.launch_host_func(writer))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(stream, written, read)


def test_a_callable_with_its_own_reads_attribute_keeps_the_declaration(
    device: ahg.Device,
) -> None:
    buf = device.malloc(64)

    def fn() -> None:
        pass

    fn.reads = "not a declaration"  # type: ignore[attr-defined]
    fn.writes = ()  # type: ignore[attr-defined]
    declared = ahg.host_function(fn, reads=[buf], writes=[(buf, 8)])
    assert declared.reads == ((buf, None),)
    assert declared.writes == ((buf, 8),)
    assert declared.fn is fn
    assert declared.__name__ == "fn"
    device.free(buf)
