"""A wrong call of a stream enqueue names ``Stream.<operation>()``, whichever mixin holds it.

The pitched, symbol and peer copies, the memory operations and ``free_async`` are written in
mixins of :class:`ahipgraph.Stream`; a call with missing or unknown arguments, to the
coroutine or to its ``_nowait`` twin, on a ring with room or a full one, names the method the
user called, as ``memcpy`` and ``launch_kernel`` do, never the mixin's class.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, fresh_devices

OPERATIONS = [
    "memcpy",
    "memcpy_2d",
    "memcpy_3d",
    "memcpy_peer",
    "memcpy_to_symbol",
    "memcpy_from_symbol",
    "free_async",
    "wait_value_32",
    "wait_value_64",
    "write_value_32",
    "write_value_64",
]


@pytest.fixture
def device() -> Iterator[ahg.Device]:
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=2)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


async def wrong_calls(stream: ahg.Stream, name: str) -> None:
    pattern = rf"^Stream\.{name}\(\)"
    with pytest.raises(TypeError, match=pattern):
        await getattr(stream, name)()
    with pytest.raises(TypeError, match=pattern):
        getattr(stream, f"{name}_nowait")()
    with pytest.raises(TypeError, match=pattern):
        await getattr(stream, name)(no_such_argument=1)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", OPERATIONS)
async def test_a_wrong_call_names_the_stream_method(device: ahg.Device, name: str) -> None:
    with device.create_stream() as stream:
        await wrong_calls(stream, name)
        gate = GatedHost()
        await stream.launch_host_func(gate)
        await stream.launch_host_func(int)  # the ring is full: the check before parking
        await wrong_calls(stream, name)
        assert stream.statistics().submitted == 2
        gate.open()
        await stream.synchronize()
