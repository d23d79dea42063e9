"""User code that runs in the middle of the runtime's own calls, on the same thread.

An argument's ``__index__`` runs while a call converts its arguments, and a ``__del__`` runs
whenever an allocation starts a collection: either may call back into the runtime (destroy,
allocate, free) between a call's checks and its commit. The tests that attack those windows
share these two.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable

import ahipgraph as ahg


class Converting:
    """An int whose conversion first runs ``then`` (once)."""

    def __init__(self, value: int, then: Callable[[], object]) -> None:
        self.value, self.then = value, then

    def __index__(self) -> int:
        then, self.then = self.then, lambda: None
        then()
        return self.value


class AllocatesWhenCollected:
    """Cyclic garbage whose ``__del__`` allocates or frees on ``device``: a collection run
    inside an allocation's bookkeeping re-enters the allocator on the same thread.

    ``free_share``: how often it frees one of ``made`` rather than allocating. With
    ``tolerate_out_of_memory``, an allocation refused for want of room is skipped (a device
    whose address range is nearly used up).
    """

    def __init__(
        self,
        device: ahg.Device,
        made: list[ahg.DevicePtr],
        rng: random.Random,
        *,
        free_share: float = 0.3,
        tolerate_out_of_memory: bool = False,
    ) -> None:
        self.cycle = self
        self.device, self.made, self.rng = device, made, rng
        self.free_share, self.tolerate = free_share, tolerate_out_of_memory

    def __del__(self) -> None:
        if self.made and self.rng.random() < self.free_share:
            self.device.free(self.made.pop(self.rng.randrange(len(self.made))))
            return
        refused = (ahg.OutOfMemory,) if self.tolerate else ()
        with contextlib.suppress(*refused):
            self.made.append(self.device.malloc(self.rng.choice([1, 256, 700])))
