"""Device memory re-entered by the collector: a ``__del__`` run by a collection that an
allocation's own bookkeeping triggers may allocate or free memory of the same device on the same
thread (the allocator's lock is re-entrant). Every pointer must stay findable and the figures
must add up afterwards.
"""

from __future__ import annotations

import gc
import random

import numpy as np

import ahipgraph as ahg
from reentrant import AllocatesWhenCollected


def test_allocations_made_by_a_collection_inside_malloc_stay_findable() -> None:
    device = ahg.get_device(0)
    before = device.statistics().memory
    rng = random.Random(7)
    made: list[ahg.DevicePtr] = []  # by the __del__s
    mine: list[ahg.DevicePtr] = []
    old = gc.get_threshold()
    try:
        for threshold in range(1, 8):  # a collection lands inside malloc at some point
            gc.set_threshold(threshold, 1, 1)
            for _ in range(200):
                for _ in range(rng.randrange(3)):
                    AllocatesWhenCollected(device, made, rng)
                mine.append(device.malloc(rng.choice([1, 256, 513])))
                if rng.random() < 0.2:
                    device.free(mine.pop(rng.randrange(len(mine))))
    finally:
        gc.set_threshold(*old)
    gc.collect()
    live = mine + made
    lost = []
    for ptr in live:
        try:
            device.view(ptr, np.uint8, 1, readonly=True)
        except ahg.HipError:
            lost.append(ptr)
    assert not lost, f"{len(lost)} of {len(live)} live allocations cannot be found"
    stats = device.statistics().memory
    assert stats.allocations == before.allocations + len(live)
    free, total = device.memory_info()
    assert total - free == stats.bytes_in_use
    for ptr in live:
        device.free(ptr)
    after = device.statistics().memory
    assert (after.allocations, after.bytes_in_use) == (before.allocations, before.bytes_in_use)
    assert device.memory_info() == (total - before.bytes_in_use, total)
