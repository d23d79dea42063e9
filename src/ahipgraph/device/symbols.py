"""Device symbols: named, sized globals that live on every device (HIP's ``__device__`` globals).

A symbol is declared once, next to the kernels that use it (``ahg.device_symbol("coeffs",
dtype=np.float32, shape=(16,))``). Like a global of a code object that HIP loads lazily, it
gets storage on a device the first time it is used there (an address asked for, a copy made),
zero-filled, and keeps it as long as that device lives: that storage shows in the device's
memory statistics from then on, and is not a leak.

Copies name a symbol by the object or by its name; anything else, or a name never declared,
is ``InvalidSymbol`` (HIP's answer for an address that is not a registered symbol). A copy of
``nbytes`` at ``offset`` that runs past the symbol is ``InvalidValue``.

Thread-safety: one lock guards the name table and the set of loaded devices.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import TYPE_CHECKING, Any, SupportsIndex, TypeAlias

import numpy as np
import numpy.typing as npt

from ..core.errors import InvalidSymbol, InvalidValue
from ..core.ints import as_int, int_or_none
from ..core.lifecycle import FactoryOnly, safe_repr
from .dtypes import element_dtype
from .pointer import DevicePtr

if TYPE_CHECKING:
    from .base import DeviceBase
    from .memory import DeviceMemory

__all__ = ["DeviceSymbol", "SymbolLike", "device_symbol", "lookup_symbol", "symbol_statistics"]

_FACTORY = FactoryOnly("device symbols are declared with ahg.device_symbol()")
_lock = threading.Lock()
_by_name: dict[str, DeviceSymbol] = {}


class DeviceSymbol:
    """A named device global. Make one with :func:`device_symbol`.

    Attributes:
        name: the symbol's name (unique in the process).
        nbytes: its size (``hipGetSymbolSize``).
        dtype, shape: the element type and shape it was declared with (``uint8`` bytes if only
            a size was given), used by :meth:`view`.
    """

    __slots__ = ("__weakref__", "_dtype", "_name", "_nbytes", "_shape", "_storage")

    def __init__(self, *args: object, **kwargs: object) -> None:
        """Refuse, whatever the arguments: :func:`device_symbol` checks the declaration and
        keeps one symbol per name (a hand-made one could have a negative extent, or be a
        second symbol of a declared name with storage of its own)."""
        _FACTORY.refuse()

    # A symbol is its name's one declaration, as a module global is: a copy is the symbol
    # itself (a second object would be no declared symbol, and a deep one would have storage
    # of its own), and a pickle declares it again by name, as ``device_symbol`` does when a
    # module is run again (the same symbol in this process).
    def __copy__(self) -> DeviceSymbol:
        return self

    def __deepcopy__(self, memo: object) -> DeviceSymbol:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return _declared, (self._name, self._dtype, self._shape)

    # What the symbol was declared as: read-only, as a module global's declaration is. A
    # name assigned from outside made the symbol unknown to its own name's entry (every copy
    # to or from it raised InvalidSymbol, "not a declared symbol"); a shape assigned made
    # ``view`` fail to reshape its storage; an ``nbytes`` assigned let copies past the
    # declared size through the symbol's range check.

    @property
    def name(self) -> str:
        """The symbol's name (unique in the process)."""
        return self._name

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element type it was declared with (``uint8`` if only a size was given)."""
        return self._dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape it was declared with."""
        return self._shape

    @property
    def nbytes(self) -> int:
        """Its size (``hipGetSymbolSize``)."""
        return self._nbytes

    def _init(self, name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
        self._name = name
        self._dtype = dtype
        self._shape = shape
        # Python ints: a product of large extents in int64 would wrap round to a small size.
        self._nbytes = math.prod(shape) * dtype.itemsize
        self._storage: weakref.WeakKeyDictionary[DeviceMemory, DevicePtr] = (
            weakref.WeakKeyDictionary()
        )

    def address(self, device: DeviceBase | int | None = None) -> DevicePtr:
        """The symbol's address on ``device`` (``hipGetSymbolAddress``), the current device by
        default. Kernels take it as a ``Ptr`` argument like any device pointer.

        Raises:
            InvalidDevice: no such device. TypeError: not a Device, ordinal or None.
        """
        return self.address_on(_configured(device).memory)

    def address_on(self, memory: DeviceMemory) -> DevicePtr:
        with _lock:
            ptr = self._storage.get(memory)
        if ptr is None:  # first use on this device: load it
            ptr = _load_one(self, memory)
        return ptr

    def view(self, device: DeviceBase | int | None = None) -> npt.NDArray[Any]:
        """A host-side typed view of the symbol on ``device`` (for inspection and tests)."""
        dev = _configured(device)
        ptr = self.address_on(dev.memory)
        count = self._nbytes // self._dtype.itemsize
        return dev.view(ptr, self._dtype, count).reshape(self._shape)

    @safe_repr
    def __repr__(self) -> str:
        shape = list(self._shape)
        return f"<DeviceSymbol {self._name!r} {self._nbytes} bytes {self._dtype}{shape}>"


# What the symbol copies take: the declared symbol, or its name (HIP passes the symbol).
SymbolLike: TypeAlias = DeviceSymbol | str


def _configured(device: Any) -> DeviceBase:
    """``device`` (a Device, an ordinal, or None for the current one) as a configured device.

    A device ``configure_devices`` replaced is refused: loading a symbol there would give
    memory to a device nothing can use any more.

    Raises:
        InvalidDevice: no such device, or a replaced one. TypeError: not a Device or an int.
    """
    from .base import DeviceBase
    from .table import get_device, live

    return live(device) if isinstance(device, DeviceBase) else get_device(device)


def _load_one(symbol: DeviceSymbol, memory: DeviceMemory) -> DevicePtr:
    """Give ``symbol`` storage on ``memory`` (once). Raises OutOfMemory, changing nothing."""
    with _lock:
        ptr = symbol._storage.get(memory)
        if ptr is None:
            ptr = memory.malloc(symbol._nbytes)
            memory.mark_static(ptr)  # lives as long as the device: not a user's allocation
            symbol._storage[memory] = ptr
        return ptr


def device_symbol(
    name: str,
    nbytes: int | None = None,
    *,
    dtype: npt.DTypeLike | None = None,
    shape: SupportsIndex | tuple[SupportsIndex, ...] | list[SupportsIndex] | None = None,
) -> DeviceSymbol:
    """Declare a device global of ``nbytes`` bytes, or of ``shape`` elements of ``dtype`` (a
    numpy dtype, or a scalar kernel parameter type such as ``ahg.float32``).

    Declaring the same name again with the same size and type returns the existing symbol
    (re-running a module); a different declaration is an error, as a duplicate global is.

    Raises:
        TypeError: ``name`` is not a non-empty str, a size/shape of the wrong type, or a
            ``dtype`` that is neither numpy's nor a scalar kernel parameter type
            (``ahg.float32``).
        ValueError: neither or both of ``nbytes`` and ``shape``/``dtype``; a size below 1;
            ``name`` declared before with another size or type.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"a symbol name must be a non-empty str, got {name!r}")
    if nbytes is not None:
        if dtype is not None or shape is not None:
            raise ValueError("give either nbytes or dtype/shape, not both")
        dims: tuple[int, ...] = (as_int(nbytes, "nbytes"),)
        dt: np.dtype[Any] = np.dtype(np.uint8)
    else:
        if dtype is None:
            raise ValueError("give nbytes, or dtype (and optionally shape)")
        dt = element_dtype(dtype)  # ahg.float32 too
        if dt.hasobject:
            raise TypeError(f"a device symbol cannot hold Python objects ({dt})")
        # numpy's shapes: an int, or a tuple or list of them (a str or bytes is no shape)
        if shape is None:
            raw: tuple[Any, ...] = ()
        elif isinstance(shape, tuple | list):
            raw = tuple(shape)
        else:
            raw = (shape,)
        extents = [int_or_none(extent) for extent in raw]
        if None in extents:
            raise TypeError(f"shape must be ints, got {shape!r}")
        dims = tuple(extent for extent in extents if extent is not None)
        if any(extent < 0 for extent in dims):  # two negatives would make a positive size
            raise ValueError(f"symbol {name!r}: shape {shape!r} has a negative extent")
        if dt.subdtype is not None:
            # A subarray type (``("f4", (2,))``) is elements of its base, as numpy reads it
            # (``np.zeros(3, ("f4", (2,)))`` has shape (3, 2)): views, redeclarations and
            # statistics then see the one shape a host array of that type would have.
            dt, inner = dt.subdtype
            dims += inner
    symbol: DeviceSymbol = object.__new__(DeviceSymbol)
    symbol._init(name, dt, dims)
    if symbol._nbytes < 1:
        raise ValueError(f"symbol {name!r} must have at least one byte, got {symbol._nbytes}")
    with _lock:
        existing = _by_name.get(name)
        if existing is not None:
            if (existing._nbytes, existing._dtype, existing._shape) != (symbol._nbytes, dt, dims):
                raise ValueError(f"symbol {name!r} is already declared as {existing!r}")
            return existing
        _by_name[name] = symbol
    return symbol


def _declared(name: str, dtype: np.dtype[Any], shape: tuple[int, ...]) -> DeviceSymbol:
    """A pickled symbol, declared again (see ``DeviceSymbol.__reduce__``)."""
    return device_symbol(name, dtype=dtype, shape=shape)


def lookup_symbol(symbol: object) -> DeviceSymbol:
    """The declared symbol ``symbol`` names (the object or its name).

    Raises:
        InvalidSymbol: None, a name never declared, or anything that is not a symbol.
    """
    if isinstance(symbol, DeviceSymbol):
        with _lock:
            if _by_name.get(symbol._name) is symbol:
                return symbol
        raise InvalidSymbol(f"{symbol!r} is not a declared symbol")
    if isinstance(symbol, str):
        with _lock:
            found = _by_name.get(symbol)
        if found is not None:
            return found
    raise InvalidSymbol(f"{symbol!r} is not a device symbol")


def check_symbol_range(symbol: DeviceSymbol, nbytes: int, offset: int) -> tuple[int, int]:
    """HIP's rule: ``offset + nbytes`` must stay inside the symbol (InvalidValue).

    Returns ``nbytes`` and ``offset`` as plain ints (numpy ints are accepted).
    """
    nbytes, offset = as_int(nbytes, "nbytes"), as_int(offset, "offset")
    if nbytes < 0 or offset < 0 or nbytes + offset > symbol._nbytes:
        raise InvalidValue(
            f"{nbytes} bytes at offset {offset} do not fit in {symbol._name!r} "
            f"({symbol._nbytes} bytes)"
        )
    return nbytes, offset


def symbol_statistics() -> dict[str, int]:
    """How many symbols are declared and how many (symbol, device) storages are loaded."""
    with _lock:
        loaded = sum(len(symbol._storage) for symbol in _by_name.values())
        return {"symbols": len(_by_name), "loaded": loaded}
