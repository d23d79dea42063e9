"""``ahg.set_device`` / ``ahg.current_device``: HIP's current device, per task.

Every API that picks a device when none is given (``get_device()``, ``graph.instantiate()``,
kernel-node validation, ``add_mem_alloc_node``, graph launches on the null stream of the
executable's device) uses the calling task's current device. See
:mod:`ahipgraph.device.current` for why the state is per task.
"""

from __future__ import annotations

from ..core.errors import InvalidDevice
from ..device.current import set_current_ordinal
from .device import Device, get_device

__all__ = ["current_device", "set_device"]


def set_device(device: int | Device) -> None:
    """Make ``device`` (an ordinal or a Device) current for the calling task (``hipSetDevice``).

    Raises:
        InvalidDevice: no such device (the current device is unchanged).
        TypeError: neither an int nor a Device (bools are refused).
    """
    if device is None:  # get_device(None) would mean "the current one": refuse it here
        raise TypeError("set_device needs a device or an ordinal, got None")
    if isinstance(device, Device):
        ordinal = device.ordinal
        if get_device(ordinal) is not device:  # a device of an earlier configure_devices()
            raise InvalidDevice(f"{device!r} is no longer configured")
    else:
        ordinal = get_device(device).ordinal  # validates: TypeError / InvalidDevice
    set_current_ordinal(ordinal)


def current_device() -> Device:
    """The calling task's current device (``hipGetDevice``).

    If ``configure_devices`` shrank the table below the task's choice, device 0 is current
    again, as a fresh runtime would start.
    """
    return get_device()
