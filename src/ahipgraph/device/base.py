"""What the device layer knows of a device: its ordinal, properties, memory and engine.

The public :class:`~ahipgraph.Device` (``runtime/device.py``) builds on this class and adds
streams, events and the HIP device calls. Code of the device layer (queues, programs, peers,
symbols, the devices table) sees only this part, so it never reaches up into the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy.typing as npt

from ..core.errors import InvalidValue
from ..core.ints import as_optional_int
from .dtypes import element_dtype
from .engine import Engine
from .host_function import checked_view
from .memory import DeviceMemory
from .pointer import DevicePtr, require_int_address
from .properties import DeviceProperties

if TYPE_CHECKING:
    from ..core.clock import SimClock
    from .hwqueue import HardwareQueue

__all__ = ["DeviceBase"]


class DeviceBase:
    """A simulated GPU as the device layer sees it: memory plus the engine that runs work."""

    # Slots, here and in the public ``Device``: a device takes no attribute it does not
    # declare, so a typo (``device.ordnial = 1``) or a method shadowed on the instance is
    # refused with AttributeError rather than silently kept.
    __slots__ = ("_clock", "_engine", "_memory", "_ordinal", "_properties", "_queues")

    def __init__(self, ordinal: int, properties: DeviceProperties) -> None:
        self._ordinal = ordinal
        self._properties = properties
        self._memory = DeviceMemory(ordinal, properties.memory_bytes)
        self._engine = engine = Engine(self, properties.hardware_queues)
        self._clock = engine._clock
        self._queues = engine._queues

    # What the device is and what it is made of, fixed for its life: read-only. Streams,
    # pointers and the devices table find the device through them (its ordinal names it in the
    # table and in every pointer to its memory; its engine and queues run its streams' work;
    # its memory is what malloc takes from), so one assigned from outside would send the
    # device's work, allocations or checks to another device, or make it unknown to the table.

    @property
    def ordinal(self) -> int:
        """Its index among the configured devices (HIP's device id)."""
        return self._ordinal

    @property
    def properties(self) -> DeviceProperties:
        """What it was configured with (``hipGetDeviceProperties``)."""
        return self._properties

    @property
    def memory(self) -> DeviceMemory:
        """Its allocator: every allocation on the device comes from here."""
        return self._memory

    @property
    def engine(self) -> Engine:
        """What runs its queues' work on the event loop that submits it."""
        return self._engine

    @property
    def clock(self) -> SimClock:
        """Its simulated clock (each device keeps its own)."""
        return self._clock

    @property
    def queues(self) -> tuple[HardwareQueue, ...]:
        """Its hardware queues (streams are mapped onto them round-robin)."""
        return self._queues

    @property
    def name(self) -> str:
        return self._properties.name

    def view(
        self,
        ptr: DevicePtr,
        dtype: npt.DTypeLike,
        count: int | None = None,
        *,
        readonly: bool = False,
    ) -> npt.NDArray[Any]:
        """A host-side typed view of device memory (for inspection and tests), bounds-checked.

        Read-only with ``readonly=True``. Inside a host function the view is the function's
        own (see :func:`ahipgraph.host_function`).

        Raises:
            TypeError: ``ptr`` is not a DevicePtr, ``dtype`` is None, neither a numpy dtype
                nor a scalar kernel parameter type (``ahg.float32``), one of no size or one
                holding Python objects, or ``count`` is not an int.
            InvalidValue / InvalidDevicePointer: a negative count, a bad range, or
                bytes a running declared host function did not declare.
        """
        if not isinstance(readonly, bool):
            raise TypeError(f"readonly must be a bool, got {readonly!r}")
        if not isinstance(ptr, DevicePtr):
            raise TypeError(f"expected a DevicePtr, got {ptr!r}")
        require_int_address(ptr)  # a hand-made pointer's
        dt = element_dtype(dtype)  # ahg.float32 too; None refused, not made float64
        count = as_optional_int(count, "count", expected="an int or None")
        if dt.itemsize == 0 or dt.hasobject:  # no element count, or Python objects in bytes
            raise TypeError(f"device memory cannot be viewed as {dt!r}: it needs sized plain data")
        if count is not None and count < 0:  # named as given, not as the bytes it would be
            raise InvalidValue(f"negative count {count}")
        self._memory.resolve(ptr, (count or 0) * dt.itemsize)
        # Always a new array object: the allocator's view is cached and every view (a kernel
        # argument's too) is made from it, so a caller setting its shape or flags on it would
        # break every later dispatch and view.
        view = self._memory.view(ptr.address, dt)[:count]
        return checked_view(self, ptr, view, readonly)

    def _retire(self) -> None:
        """Called once ``configure_devices`` replaced this device (the layer above adds to it):
        its engine takes no new work from now on."""
        self._engine._retired = True
        self._memory._origin.replace()  # its pointers are refused as kernel arguments
