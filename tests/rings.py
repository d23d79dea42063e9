"""A device with small hardware rings, for tests that fill one and wait for room in it.

The ``small_ring`` fixture (tests/conftest.py) gives such a device: two hardware queues of
:data:`CAPACITY` packets, so streams made one after the other get one queue each.
"""

from __future__ import annotations

from collections.abc import Iterator

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, fresh_devices

CAPACITY = 4


def small_ring_device() -> Iterator[ahg.Device]:
    """The fixture's body: one device of two hardware queues of CAPACITY packets."""
    properties = ahg.DeviceProperties(hardware_queues=2, hardware_queue_capacity=CAPACITY)
    with fresh_devices(1, properties) as devices:
        yield devices[0]


def ring_of(device: ahg.Device, stream: ahg.Stream) -> ahg.QueueStatistics:
    """The statistics of the hardware queue ``stream`` runs on."""
    return device.statistics().queues[stream.statistics().queue]


async def fill_ring(device: ahg.Device, stream: ahg.Stream) -> HeldKernel:
    """A held kernel running at the head of ``stream``'s ring, and the ring full behind it:
    the next enqueue on ``stream`` waits for room until the kernel is released."""
    held = HeldKernel()
    await held.launch(stream)
    while ring_of(device, stream).pending < CAPACITY:
        await stream.launch_host_func(int)
    await held.started.wait()
    return held
