"""Device pointers: an address in one device's address space, with offset arithmetic.

A :class:`DevicePtr` is a plain immutable value. It does not keep memory alive and is not checked
when it is made; every access resolves it against the owning device's allocation table, which is
where a freed, foreign or out-of-range pointer is caught.

A pointer the allocator handed out (and every pointer moved from it) also knows its
:class:`PointerOrigin`: the device memory it came from, by a small token that does not keep that
memory alive. A device ``configure_devices`` replaced is succeeded by one with the same ordinal
and the same addresses, so only the origin tells an old pointer from a new one: the allocator
refuses to resolve or free a pointer of another memory, and a kernel argument of a replaced
memory is refused (HIP has no pointer that outlives its device; ours would name the successor's
memory at the same address). A hand-made pointer has no known origin and resolves by its
ordinal, as before.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import InvalidDevicePointer
from ..core.ints import int_or_none, not_an_int

__all__ = [
    "NULL",
    "UNTRACKED",
    "DevicePtr",
    "PointerOrigin",
    "issued",
    "replacements",
    "require_int_address",
]

_replacements = 0


def replacements() -> int:
    """How many device memories were replaced so far (:meth:`PointerOrigin.replace`).

    What holds pointers checked when they were given (a graph's kernel nodes) notes this
    count, and needs no look at them again while it is unchanged: none of its pointers can
    have become a replaced memory's since.
    """
    return _replacements


class PointerOrigin:
    """The device memory a pointer came from, as its pointers see it: whether that memory's
    device was replaced (``configure_devices``). One per memory; a pointer holds it rather than
    the memory, which it must not keep alive."""

    __slots__ = ("replaced",)

    def __init__(self) -> None:
        self.replaced = False

    def replace(self) -> None:
        """This memory's device was replaced: its pointers are refused from now on."""
        global _replacements
        self.replaced = True
        _replacements += 1  # only ever grows: a count noted before never matches again

    def lend(self) -> None:
        """This memory's device left the devices table for a while (the testing kit's
        ``fresh_devices`` block lends it, and another device takes its ordinal and
        addresses): its pointers are refused as a replaced device's are, until
        :meth:`give_back`."""
        self.replace()

    def give_back(self) -> None:
        """This memory's device is back in the devices table: its pointers are its own again."""
        global _replacements
        self.replaced = False
        _replacements += 1


UNTRACKED = PointerOrigin()
"""The origin of a pointer made by hand (or unpickled): unknown, so it resolves by ordinal."""

_new = object.__new__
_set = object.__setattr__  # DevicePtr refuses its own __setattr__: it is immutable


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

    __slots__ = ("_origin", "address", "device")

    address: int
    device: int
    _origin: PointerOrigin

    def __init__(self, device: int, address: int) -> None:
        _set(self, "device", device)
        _set(self, "address", address)
        _set(self, "_origin", UNTRACKED)

    def _moved(self, address: int) -> DevicePtr:
        """This pointer moved to ``address``: the same device, and the same origin."""
        moved: DevicePtr = _new(DevicePtr)
        _set(moved, "device", self.device)
        _set(moved, "address", address)
        _set(moved, "_origin", self._origin)
        return moved

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
        return self._moved(self.address + offset)

    __radd__ = __add__

    def __sub__(self, other: int | DevicePtr) -> Any:
        if isinstance(other, DevicePtr):
            if other.device != self.device:
                raise ValueError("cannot subtract pointers of different devices")
            return self.address - other.address
        offset = other if type(other) is int else int_or_none(other)
        if offset is None:
            return NotImplemented
        return self._moved(self.address - offset)

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


def issued(device: int, address: int, origin: PointerOrigin) -> DevicePtr:
    """A pointer the allocator of ``origin``'s memory hands out."""
    ptr: DevicePtr = _new(DevicePtr)
    _set(ptr, "device", device)
    _set(ptr, "address", address)
    _set(ptr, "_origin", origin)
    return ptr
