"""What the device layer knows of a device: its ordinal, properties, memory and engine.

The public :class:`~ahipgraph.Device` (``runtime/device.py``) builds on this class and adds
streams, events and the HIP device calls. Code of the device layer (queues, programs, peers,
symbols, the devices table) sees only this part, so it never reaches up into the runtime.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..core.ints import as_optional_int
from .engine import Engine
from .host_function import checked_view
from .memory import DeviceMemory
from .pointer import DevicePtr, require_int_address
from .properties import DeviceProperties

__all__ = ["DeviceBase"]


class DeviceBase:
    """A simulated GPU as the device layer sees it: memory plus the engine that runs work."""

    def __init__(self, ordinal: int, properties: DeviceProperties) -> None:
        self.ordinal = ordinal
        self.properties = properties
        self.memory = DeviceMemory(ordinal, properties.memory_bytes)
        self.engine = engine = Engine(self, properties.hardware_queues)
        self.clock = engine.clock
        self.queues = engine.queues

    @property
    def name(self) -> str:
        return self.properties.name

    def view(
        self, ptr: DevicePtr, dtype: Any, count: int | None = None, *, readonly: bool = False
    ) -> npt.NDArray[Any]:
        """A host-side typed view of device memory (for inspection and tests), bounds-checked.

        Read-only with ``readonly=True``. Inside a host function the view is the function's
        own (see :func:`ahipgraph.host_function`).

        Raises:
            TypeError: ``ptr`` is not a DevicePtr, ``dtype`` is None, not a numpy dtype, one of
                no size or one holding Python objects, or ``count`` is not an int.
            InvalidValue / InvalidDevicePointer: a bad range, or
                bytes a running declared host function did not declare.
        """
        if not isinstance(readonly, bool):
            raise TypeError(f"readonly must be a bool, got {readonly!r}")
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {ptr!r}")
        require_int_address(ptr)  # a hand-made pointer's
        if dtype is None:  # numpy would quietly make it float64
            raise TypeError("dtype is required")
        count = as_optional_int(count, "count", expected="an int or None")
        dt = np.dtype(dtype)
        if dt.itemsize == 0 or dt.hasobject:  # no element count, or Python objects in bytes
            raise TypeError(f"device memory cannot be viewed as {dt!r}: it needs sized plain data")
        self.memory.resolve(ptr, (count or 0) * dt.itemsize)
        # Always a new array object: the allocator's view is cached and every view (a kernel
        # argument's too) is made from it, so a caller setting its shape or flags on it would
        # break every later dispatch and view.
        view = self.memory.view(ptr.address, dt)[:count]
        return checked_view(self, ptr, view, readonly)

    def _retire(self) -> None:
        """Called once ``configure_devices`` replaced this device (the layer above adds to it):
        its engine takes no new work from now on."""
        self.engine.retired = True
