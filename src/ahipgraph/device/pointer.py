"""Device pointers: an address in one device's address space, with offset arithmetic.

A :class:`DevicePtr` is a plain immutable value. It does not keep memory alive and is not checked
when it is made; every access resolves it against the owning device's allocation table, which is
where a freed, foreign or out-of-range pointer is caught.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import InvalidDevicePointer
from ..core.ints import int_or_none, not_an_int

__all__ = ["DevicePtr", "NULL", "require_int_address"]


def require_int_address(ptr: DevicePtr) -> None:
    """Refuse a hand-made pointer whose address is not an int, with HIP's error.

    Only an int is an address: arithmetic on another object (``+``, ``%``) would give
    Python's own error, or run user code, and a float or numpy integer equal to a live
    allocation's address would be found there and fail only when the work ran.

    Raises:
        InvalidDevicePointer: the address is not an int.
    """
    if type(ptr.address) is not int:
        raise InvalidDevicePointer(f"{ptr!r} has an address that is not an int")


@not_an_int  # its __index__ is for numpy; a pointer is never a size, count or ordinal
class DevicePtr:
    """An address on a device. ``ptr + n`` / ``ptr - n`` move it by ``n`` bytes."""

    __slots__ = ("address", "device")

    address: int
    device: int

    def __init__(self, device: int, address: int) -> None:
        object.__setattr__(self, "device", device)
        object.__setattr__(self, "address", address)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("DevicePtr is immutable")

    # A plain value, like an int: a copy is the pointer itself, and a pickle rebuilds it
    # through the constructor (the default protocol restores slots with setattr, which an
    # immutable value refuses, so ``copy``, ``deepcopy`` and ``dataclasses.asdict`` failed).
    def __copy__(self) -> DevicePtr:
        return self

    def __deepcopy__(self, memo: object) -> DevicePtr:
        return self

    def __reduce__(self) -> tuple[type[DevicePtr], tuple[Any, Any]]:
        return (DevicePtr, (self.device, self.address))

    # An offset follows the integer rule (core/ints.py): numpy integers move a pointer as ints
    # do, and a bool never does (``ptr + flag`` is a bug, not a one-byte step), although
    # ``bool`` subclasses ``int``. Refused offsets give Python's TypeError for the operator.
    def __add__(self, offset: int) -> DevicePtr:
        if type(offset) is not int:
            checked = int_or_none(offset)
            if checked is None:
                return NotImplemented
            offset = checked
        return DevicePtr(self.device, self.address + offset)

    __radd__ = __add__

    def __sub__(self, other: int | DevicePtr) -> Any:
        if isinstance(other, DevicePtr):
            if other.device != self.device:
                raise ValueError("cannot subtract pointers of different devices")
            return self.address - other.address
        offset = other if type(other) is int else int_or_none(other)
        if offset is None:
            return NotImplemented
        return DevicePtr(self.device, self.address - offset)

    def __int__(self) -> int:
        return self.address

    def __index__(self) -> int:
        return self.address

    def __bool__(self) -> bool:
        # A hand-made pointer's address may be any object (a numpy integer's ``!=`` gives a
        # numpy bool, which ``bool()`` refuses): only the int 0 is null; anything else is
        # left to the call that uses the pointer to refuse with its own error.
        return type(self.address) is not int or self.address != 0

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DevicePtr)
            and other.address == self.address
            and (other.device == self.device or self.address == 0)
        )

    def __hash__(self) -> int:
        return hash((self.device if self.address else -1, self.address))

    def __repr__(self) -> str:
        address: object = self.address
        device: object = self.device
        if type(address) is not int or type(device) is not int or self.address < 0:
            # Made by hand with a wrong type or a negative address: error messages show the
            # fields as they are (a device of "0" must not read as device 0, nor -1 as 0x-1).
            return f"DevicePtr(device={device!r}, address={address!r})"
        if not address:
            return "DevicePtr(NULL)"
        return f"DevicePtr(device={self.device}, 0x{address:x})"


NULL = DevicePtr(0, 0)
"""The null device pointer."""
