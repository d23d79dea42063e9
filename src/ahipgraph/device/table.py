"""The devices table: which simulated devices exist (``hipGetDeviceCount``, ``hipSetDevice``'s
ordinals).

Process-wide and thread-safe; unless configured, one device with default properties exists.
The table holds device-layer :class:`DeviceBase` objects; the public ``Device`` class, a layer
above, installs the factory that makes them (:func:`install_factory`), so ``get_device`` hands
out public devices while this module depends on nothing above it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from ..core.errors import InvalidDevice, InvalidDevicePointer
from ..core.ints import as_int
from .base import DeviceBase
from .current import current_ordinal, current_ordinal_now
from .memory import DeviceMemory
from .pointer import DevicePtr, require_int_address
from .properties import DeviceProperties

__all__ = [
    "DEVICES",
    "MAX_DEVICES",
    "check_range",
    "configure_devices",
    "configured",
    "current_properties",
    "device_count",
    "get_device",
    "install_factory",
    "live",
    "resolve_pointer",
    "restore_devices",
    "take_devices",
]

MAX_DEVICES = 64  # far more than a node has; bounds a mistyped count
_devices_lock = threading.Lock()
_devices: list[DeviceBase] = []
# The table itself, for the per-node paths that read the current device's properties inline
# (runtime/params.py): read-only there. It is only ever changed in place, so this name stays
# the table for the process's life.
DEVICES = _devices
_factory: Callable[[int, DeviceProperties], DeviceBase] | None = None


def install_factory(factory: Callable[[int, DeviceProperties], DeviceBase]) -> None:
    """Set how devices are made (the public ``Device`` installs itself when imported)."""
    global _factory
    _factory = factory


def _make(ordinal: int, properties: DeviceProperties) -> DeviceBase:
    if _factory is None:  # ahipgraph's package import installs it before anything runs
        raise RuntimeError("import ahipgraph before using the devices table")
    return _factory(ordinal, properties)


def configure_devices(
    count: int = 1, properties: DeviceProperties | Sequence[DeviceProperties] | None = None
) -> list[DeviceBase]:
    """Replace the simulated devices: ``count`` of them, with one or per-device properties.

    Meant for program start-up and test fixtures: existing device objects are dropped, and
    take no new work. Work still queued on them runs, but resolves pointers by ordinal, in
    the new devices (same ordinals, same addresses): synchronize the old devices first. A
    pointer an old device handed out is refused by the new one of its ordinal (see
    device/pointer.py); the old device still frees it. Everything is checked before the
    table changes.

    Raises:
        TypeError: ``count`` is not an int, or ``properties`` are not DeviceProperties.
        ValueError: ``count`` outside 1..MAX_DEVICES, or a property list of another length.
    """
    props = checked_configuration(count, properties)
    with _devices_lock:
        dropped = list(_devices)
        _devices[:] = [_make(i, p) for i, p in enumerate(props)]
        configured = list(_devices)
    for device in dropped:
        device._retire()
    return configured


def checked_configuration(
    count: int, properties: DeviceProperties | Sequence[DeviceProperties] | None
) -> list[DeviceProperties]:
    """The properties of each of ``count`` devices, or the error :func:`configure_devices`
    gives for them. Changes nothing, so a caller that drops devices before configuring new
    ones (the testing kit's factory) checks first and fails with its devices intact.

    Raises: as :func:`configure_devices`. A string is not a list of properties.
    """
    count = as_int(count, "count")
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(f"need at least one device and at most {MAX_DEVICES}, got {count}")
    given: object = properties  # typed callers pass properties; untyped ones may pass a str
    if isinstance(given, Sequence) and not isinstance(given, str | bytes):
        props: list[object] = list(given)
        if len(props) != count:
            raise ValueError(f"{count} devices but {len(props)} property sets")
    else:
        # Only None means "the defaults": an empty dict, 0 or "" is a mistake to report.
        props = [DeviceProperties() if given is None else given] * count
    checked: list[DeviceProperties] = []
    for prop in props:
        if not isinstance(prop, DeviceProperties):
            raise TypeError(f"properties must be DeviceProperties, got {prop!r}")
        checked.append(prop)
    return checked


def take_devices() -> list[DeviceBase]:
    """Empty the table and return its devices, still alive (none is retired).

    The testing kit lends the table to a block (``fresh_devices``) and puts these back after
    it with :func:`restore_devices`, so a block nested in another (a test using a device
    fixture) leaves the outer block its own devices. An empty table makes device 0 afresh on
    first use, as at start-up. While out of the table their pointers are refused as kernel
    arguments, as a replaced device's are (see device/pointer.py): the block's devices reuse
    their ordinals and addresses.
    """
    with _devices_lock:
        taken = list(_devices)
        _devices.clear()
    for device in taken:
        device._memory._origin.lend()
    return taken


def restore_devices(devices: Sequence[DeviceBase]) -> None:
    """Put back devices :func:`take_devices` returned (their pointers their own again), and
    retire the ones in the table now."""
    with _devices_lock:
        dropped = list(_devices)
        _devices[:] = devices
    for device in devices:
        device._memory._origin.give_back()
    for device in dropped:
        device._retire()


def _table() -> list[DeviceBase]:
    if not _devices:
        with _devices_lock:
            if not _devices:
                _devices.append(_make(0, DeviceProperties()))
    return _devices


def device_count() -> int:
    """``hipGetDeviceCount``."""
    return len(_table())


def get_device(ordinal: int | None = None) -> DeviceBase:
    """The device with this ordinal (the calling task's current device by default).

    Raises:
        InvalidDevice: no such device.
    """
    table = _table()
    if ordinal is None:
        ordinal = current_ordinal()
        if ordinal >= len(table):  # the table shrank under the task's choice
            ordinal = 0
    ordinal = as_int(ordinal, "a device ordinal")
    if not 0 <= ordinal < len(table):
        raise InvalidDevice(f"device {ordinal} does not exist ({len(table)} configured)")
    return table[ordinal]


def current_properties() -> DeviceProperties:
    """``get_device().properties`` for the calling task, in one step.

    Validating a kernel node or a captured launch reads the current device's limits once per
    node; this skips ``get_device``'s argument checks, which a task's own current ordinal never
    needs. A table that shrank under the task's choice falls back to device 0, as there.
    """
    try:
        return _devices[current_ordinal_now()].properties
    except IndexError:  # an empty (not yet made) or shrunk table: get_device sorts it out
        return get_device().properties


def live(device: DeviceBase) -> DeviceBase:
    """``device`` if it is still the configured device of its ordinal (else InvalidDevice)."""
    table = _table()
    if not (0 <= device._ordinal < len(table) and table[device._ordinal] is device):
        raise InvalidDevice(f"{device!r} is no longer a configured device")
    return device


def configured(device: object, what: str) -> DeviceBase:
    """The configured device an argument names: a Device still in the table, or an ordinal.

    For arguments that name a device explicitly (a peer, a copy's endpoint device): None is
    not "the current device" there, and a Device ``configure_devices`` replaced is no device.

    Raises:
        InvalidDevice: no such device, or a replaced one.
        TypeError: None, or neither a Device nor an int.
    """
    if isinstance(device, DeviceBase):
        return live(device)
    if device is None:
        raise TypeError(f"{what} must be a Device or an ordinal, got None")
    return get_device(device)  # type: ignore[arg-type]  # TypeError / InvalidDevice


def check_range(ptr: DevicePtr, nbytes: int) -> None:
    """Validate a range on any device: committed memory or reserved address space."""
    _memory_of(ptr).check_range(ptr, nbytes)


def _memory_of(ptr: DevicePtr) -> DeviceMemory:
    table = _table()
    device = ptr.device
    # A hand-made pointer may carry anything as its device: only a table index is one.
    if type(device) is not int or not 0 <= device < len(table):
        raise InvalidDevicePointer(f"{ptr!r} belongs to no device")
    require_int_address(ptr)  # nor is anything but an int an address
    return table[device]._memory


def resolve_pointer(ptr: DevicePtr, nbytes: int) -> tuple[npt.NDArray[np.uint8], int]:
    """Resolve a pointer of any device to (buffer, offset), bounds-checked."""
    return _memory_of(ptr).resolve(ptr, nbytes)
