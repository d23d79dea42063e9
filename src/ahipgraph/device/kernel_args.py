"""Kernel argument types and their byte layout.

A kernel's parameters are declared with fixed-width scalar types (``ahg.int32``, ``ahg.float32``,
...) and typed device pointers (``ahg.Ptr[ahg.float32]``). :class:`ArgLayout` places each
parameter at its natural alignment (pointers and 64-bit values on 8 bytes), exactly as a HIP
kernel-argument segment does, packs Python values into those bytes with validation, and decodes
them back at dispatch — pointers becoming typed views of device memory — so what a kernel sees is
exactly what the bytes say at the moment it runs.

The declarations are real static types, so a kernel body type-checks under ``mypy --strict``:
``ahg.int32`` is ``Annotated[int, <ScalarType int32>]`` (the body receives a Python ``int``) and
``ahg.Ptr[ahg.float32]`` is a numpy array to the type checker (the body receives a numpy view).
The runtime reads the :class:`ArgType` back from the annotation with :func:`arg_type_of`.
"""

from __future__ import annotations

import math
import struct
import types
from collections.abc import Callable, Sequence
from typing import (
    TYPE_CHECKING,
    Annotated,
    Any,
    ClassVar,
    Generic,
    TypeVar,
    Union,
    get_args,
    get_origin,
)

import numpy as np

from ..core.errors import InvalidDevicePointer, InvalidValue
from ..core.ints import int_or_none
from .pointer import DevicePtr
from .symbols import DeviceSymbol

if TYPE_CHECKING:
    from .memory import DeviceMemory

__all__ = [
    "ArgLayout",
    "ArgType",
    "AtomicPtr",
    "CheckedArgLayout",
    "ConstPtr",
    "PointerField",
    "PointerType",
    "Ptr",
    "ScalarType",
    "arg_type_of",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
]


class ArgType:
    """A kernel parameter type: its struct code, size and alignment."""

    __slots__ = ("align", "code", "name", "size")
    takes_handle: ClassVar[bool] = False  # a conditional handle's parameter (CondHandle)

    def __init__(self, name: str, code: str) -> None:
        self.name = name
        self.code = code
        self.size = struct.calcsize("<" + code)
        self.align = self.size

    def check(self, value: Any, param: str) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"ahg.{self.name}"


_FLOAT32_STRUCT = struct.Struct("<f")


class ScalarType(ArgType):
    """A fixed-width integer or floating-point parameter."""

    __slots__ = ("dtype", "is_float", "maximum", "minimum")

    def __init__(self, name: str, code: str) -> None:
        super().__init__(name, code)
        self.dtype: np.dtype[Any] = np.dtype(name)
        self.is_float = self.dtype.kind == "f"
        if self.is_float:
            self.minimum = self.maximum = 0
        else:
            info = np.iinfo(self.dtype)
            self.minimum, self.maximum = int(info.min), int(info.max)

    def check(self, value: Any, param: str) -> Any:
        if isinstance(value, bool):
            raise TypeError(f"parameter {param!r} ({self.name}) got a bool")
        if self.is_float:
            # A duration is not a number (numpy's timedelta64 subclasses np.integer): refused
            # here as the integer rule refuses it, rather than packed as its count of any unit.
            if isinstance(value, np.timedelta64) or not isinstance(
                value, int | float | np.integer | np.floating
            ):
                raise TypeError(f"parameter {param!r} ({self.name}) needs a number, got {value!r}")
            try:
                number = float(value)
                if math.isinf(number) and not np.isinf(value):
                    raise OverflowError  # a finite numpy long double past float64's range
                if self.size == 4:
                    _FLOAT32_STRUCT.pack(number)  # finite values past float32's range overflow here
            except OverflowError:
                raise ValueError(
                    f"parameter {param!r} ({self.name}) out of range: {value!r}"
                ) from None
            return number
        # The integer rule (core/ints.py), as every other integer argument: numpy's
        # timedelta64 is an np.integer subclass, but a duration is not an integer.
        integer = int(value) if isinstance(value, int) else int_or_none(value)
        if integer is None:
            raise TypeError(f"parameter {param!r} ({self.name}) needs an int, got {value!r}")
        value = integer
        if not self.minimum <= value <= self.maximum:
            raise ValueError(
                f"parameter {param!r} ({self.name}) out of range "
                f"[{self.minimum}, {self.maximum}]: {value}"
            )
        return value


_MAX_ADDRESS = (1 << 64) - 1


_ACCESS_NAMES = {"rw": "Ptr", "const": "ConstPtr", "atomic": "AtomicPtr"}


class PointerType(ArgType):
    """A device pointer to elements of ``element``; decoded as a typed view of device memory.

    ``access`` is what the kernel promises to do through it: ``"rw"`` (``Ptr``, read and
    write), ``"const"`` (``ConstPtr``, read only: the body gets a read-only view) or
    ``"atomic"`` (``AtomicPtr``, concurrent updates meant to race benignly). The race checker
    reads it; dispatch enforces ``"const"``.
    """

    __slots__ = ("access", "element")

    def __init__(self, element: ScalarType, access: str = "rw") -> None:
        super().__init__(f"{_ACCESS_NAMES[access]}[{element.name}]", "Q")
        self.element = element
        self.access = access

    def check(self, value: Any, param: str) -> Any:
        if value is None:
            return 0
        if not isinstance(value, DevicePtr):
            hint = ""
            if isinstance(value, DeviceSymbol):  # HIP code names the global in the kernel
                hint = "; a kernel takes its address: symbol.address(device) (hipGetSymbolAddress)"
            elif isinstance(value, np.ndarray):  # host memory, which a kernel cannot reach
                hint = "; a host array is not device memory: memcpy it into device.malloc() memory"
            raise TypeError(
                f"parameter {param!r} ({self.name}) needs a DevicePtr or None, got {value!r}" + hint
            )
        address = value.address
        # A DevicePtr is not checked when made (pointer arithmetic can leave any range); no
        # device address lies outside 64 bits, and such a value cannot be packed.
        if isinstance(address, bool) or not isinstance(address, int):
            raise TypeError(f"parameter {param!r} ({self.name}) has a non-int address: {address!r}")
        if not 0 <= address <= _MAX_ADDRESS:
            raise ValueError(
                f"parameter {param!r} ({self.name}) address out of range [0, 2**64): {address:#x}"
            )
        if value._origin.replaced:  # its ordinal and address name the successor's memory
            raise InvalidDevicePointer(
                f"parameter {param!r} ({self.name}) is {value!r}, a pointer of a device "
                "configure_devices replaced"
            )
        return address

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PointerType)
            and other.element is self.element
            and other.access == self.access
        )

    def __hash__(self) -> int:
        return hash(("ptr", self.element.name, self.access))


# The scalar parameter types. Each is an ``Annotated`` alias: a plain ``int`` or ``float`` to a type
# checker (which is what a body receives), carrying the ScalarType the runtime lays out.
int8 = Annotated[int, ScalarType("int8", "b")]
int16 = Annotated[int, ScalarType("int16", "h")]
int32 = Annotated[int, ScalarType("int32", "i")]
int64 = Annotated[int, ScalarType("int64", "q")]
uint8 = Annotated[int, ScalarType("uint8", "B")]
uint16 = Annotated[int, ScalarType("uint16", "H")]
uint32 = Annotated[int, ScalarType("uint32", "I")]
uint64 = Annotated[int, ScalarType("uint64", "Q")]
float32 = Annotated[float, ScalarType("float32", "f")]
float64 = Annotated[float, ScalarType("float64", "d")]

_Element = TypeVar("_Element", bound=float)


class Ptr(np.ndarray[Any, np.dtype[Any]], Generic[_Element]):
    """The static type of a pointer parameter: ``x: ahg.Ptr[ahg.float32]``.

    To a type checker, ``Ptr[...]`` is a numpy array, because that is what a kernel body gets: a
    typed view from the pointer to the end of its allocation, which it indexes, assigns, reduces
    and does arithmetic with. (A null pointer arrives as ``None``; like a C pointer type, the
    static type leaves that case implicit.) Bodies receive plain ``np.ndarray`` views, never
    ``Ptr`` instances; ``Ptr`` only names the parameter type, and subscripting it checks that
    the element is one of the scalar types.
    """

    def __class_getitem__(cls, element: Any) -> Any:
        if isinstance(element, tuple) and len(element) == 1:  # typing re-subscripts with a tuple
            (element,) = element
        if not isinstance(element, TypeVar):
            _scalar_of(element)
        return types.GenericAlias(cls, (element,))


def _pointer_alias(cls: type, element: Any) -> Any:
    if isinstance(element, tuple) and len(element) == 1:
        (element,) = element
    if not isinstance(element, TypeVar):
        _scalar_of(element)
    return types.GenericAlias(cls, (element,))


class ConstPtr(np.ndarray[Any, np.dtype[Any]], Generic[_Element]):
    """A read-only pointer parameter: ``x: ahg.ConstPtr[ahg.float32]``.

    The body receives a read-only view (writing through it fails the dispatch), so the race
    checker can count the argument as a read without trusting the annotation.
    """

    def __class_getitem__(cls, element: Any) -> Any:
        return _pointer_alias(cls, element)


class AtomicPtr(np.ndarray[Any, np.dtype[Any]], Generic[_Element]):
    """A pointer parameter updated concurrently on purpose: ``x: ahg.AtomicPtr[ahg.int32]``.

    The race checker never reports two atomic accesses against each other (a histogram or a
    counter that several streams bump); an atomic access still races with a plain one.
    """

    def __class_getitem__(cls, element: Any) -> Any:
        return _pointer_alias(cls, element)


_POINTER_ORIGINS: dict[Any, str] = {Ptr: "rw", ConstPtr: "const", AtomicPtr: "atomic"}


def _scalar_of(annotation: Any) -> ScalarType:
    """The ScalarType an ``ahg.int32``-style annotation carries. Raises TypeError otherwise."""
    if get_origin(annotation) is Annotated:
        for meta in annotation.__metadata__:
            if isinstance(meta, ScalarType):
                return meta
    raise TypeError(f"Ptr[...] needs a scalar type such as ahg.float32, got {annotation!r}")


def arg_type_of(annotation: Any) -> ArgType | None:
    """The argument type a kernel parameter annotation declares, or None if it declares none.

    Args:
        annotation: an evaluated annotation such as ``ahg.int32`` or ``ahg.Ptr[ahg.float32]``.
    """
    if get_origin(annotation) is Annotated:
        return next((m for m in annotation.__metadata__ if isinstance(m, ArgType)), None)
    access = _POINTER_ORIGINS.get(get_origin(annotation))
    if access is not None:
        (element,) = get_args(annotation)
        return PointerType(_scalar_of(element), access)
    return None


def names_an_argument(annotation: Any) -> bool:
    """Whether ``annotation`` reads as a kernel argument's: one :func:`arg_type_of` takes, a
    pointer type without its element (``ahg.Ptr``), or a union holding either."""
    if arg_type_of(annotation) is not None or annotation in _POINTER_ORIGINS:
        return True
    if get_origin(annotation) in (types.UnionType, Union):
        return any(names_an_argument(member) for member in get_args(annotation))
    return False


# Whether a layout with a conditional-handle parameter (``CondHandle``) was ever made in this
# process. Until one is, no kernel argument can be a handle, and a pass over every node that
# looks for one (an update's check that the executable knows each handle) has nothing to find.
any_handle_layout = False


class ArgLayout:
    """Where each parameter lives in the kernel-argument bytes.

    Attributes:
        size: bytes of the packed segment (a multiple of 8, 0 for a kernel without parameters).
        offsets: byte offset of each parameter.
        unpack_from: decodes the raw field values from (buffer, offset).
        packer: :meth:`pack` as a plain function of ``(args, kernel_name)``.
    """

    __slots__ = (
        "_fast_types",
        "_pointer_fields",
        "_pointers",
        "_reaches",
        "_struct",
        "decode_method",
        "names",
        "offsets",
        "packer",
        "size",
        "types",
        "unpack_from",
    )

    def __init__(self, names: Sequence[str], types: Sequence[ArgType]) -> None:
        global any_handle_layout
        self.names = tuple(names)
        self.types = tuple(types)
        if not any_handle_layout and any(arg_type.takes_handle for arg_type in self.types):
            any_handle_layout = True
        code = ["<"]
        offset = 0
        offsets = []
        for arg_type in self.types:
            padding = -offset % arg_type.align
            if padding:
                code.append(f"{padding}x")
            offset += padding
            offsets.append(offset)
            code.append(arg_type.code)
            offset += arg_type.size
        tail = -offset % 8
        if tail:
            code.append(f"{tail}x")
        self.offsets = tuple(offsets)
        self._struct = struct.Struct("".join(code))
        self.size = self._struct.size
        self.unpack_from: Callable[..., tuple[Any, ...]] = self._struct.unpack_from
        self._pointer_fields = tuple(
            (index, arg_type.element.dtype)
            for index, arg_type in enumerate(self.types)
            if isinstance(arg_type, PointerType)
        )
        # Per parameter, the one Python type the fast path of :meth:`pack` takes as is.
        self._fast_types: tuple[type, ...] = tuple(
            DevicePtr
            if isinstance(arg_type, PointerType)
            else float
            if isinstance(arg_type, ScalarType) and arg_type.is_float
            else int
            for arg_type in self.types
        )
        # pack(), as a plain function of (args, kernel_name): what the hot paths call.
        self.packer: Callable[[Any, str], bytes] = _fast_packer(
            self._fast_types, self._struct.pack, self._pack_checked
        )
        # One bound method shared by every dispatch op of this layout (not one per op).
        self.decode_method: Callable[..., list[Any]] = self.decode

    @property
    def has_pointers(self) -> bool:
        return bool(self._pointer_fields)

    @property
    def pointers(self) -> tuple[PointerField, ...]:
        """Each pointer parameter: position, element size, access and declared extent.

        What the race checker needs to turn a dispatch's arguments into byte ranges.
        """
        try:
            return self._pointers
        except AttributeError:
            self._pointers: tuple[PointerField, ...] = tuple(
                PointerField(index, t.element.size, t.access, None)
                for index, t in enumerate(self.types)
                if isinstance(t, PointerType)
            )
            return self._pointers

    @property
    def pointer_reaches(self) -> tuple[tuple[int, bool, bool], ...] | None:
        """``(index, write, atomic)`` of each pointer parameter when every one may touch up
        to the end of its allocation (no declared extent), else None.

        The race checker's common case, worked out once per kernel rather than per node.
        """
        try:
            return self._reaches
        except AttributeError:
            fields = self.pointers
            self._reaches: tuple[tuple[int, bool, bool], ...] | None = (
                None
                if any(field.extent is not None for field in fields)
                else tuple(
                    (field.index, field.access != "const", field.access == "atomic")
                    for field in fields
                )
            )
            return self._reaches

    def check(self, args: Sequence[Any] | None, kernel_name: str) -> tuple[Any, ...]:
        """Validate ``args`` against the parameters; return the raw field values.

        ``None`` stands for "no arguments", as HIP's null ``kernelParams``: fine for a kernel
        without parameters, ``InvalidValue`` for one that has some (HIP's answer).

        Raises:
            InvalidValue: ``args`` is None and the kernel takes arguments.
            TypeError: wrong number of arguments or a value of the wrong type.
            ValueError: an integer outside its type's range.
        """
        if args is None:
            if self.types:
                raise InvalidValue(
                    f"kernel {kernel_name!r} takes {len(self.types)} arguments, got None"
                )
            return ()
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"kernel {kernel_name!r}: args must be a sequence, got {args!r}")
        if len(args) != len(self.types):
            expected = ", ".join(self.names) or "none"
            raise TypeError(
                f"kernel {kernel_name!r} takes {len(self.types)} arguments ({expected}), "
                f"got {len(args)}"
            )
        return tuple(
            arg_type.check(value, name)
            for arg_type, name, value in zip(self.types, self.names, args, strict=True)
        )

    def pack(self, args: Sequence[Any] | None, kernel_name: str) -> bytes:
        """Validate and pack ``args`` into kernel-argument bytes.

        The common shapes — a tuple or list of plain ``int``, ``float`` and ``DevicePtr`` values
        of the declared kinds — are packed directly by this layout's own packer (see
        :func:`_fast_packer`): for those, ``struct`` enforces exactly the ranges :meth:`check`
        does (an integer type's bounds, a float32's finite range, a 64-bit address), so a value
        it refuses is sent down the full path, which raises the usual error. Anything else
        (bools, numpy scalars, None pointers, the wrong count) takes the full path directly.
        """
        return self.packer(args, kernel_name)

    def _pack_checked(self, args: Sequence[Any] | None, kernel_name: str) -> bytes:
        """The full path of :meth:`pack`: every check, then the bytes."""
        return self._struct.pack(*self.check(args, kernel_name))

    def kept(self, args: Sequence[Any], arg_bytes: bytes) -> tuple[Any, ...]:
        """The argument values a launch's parameters keep, once ``args`` packed to ``arg_bytes``.

        Plain values are kept as given. Any other scalar argument (a numpy scalar, a 0-d
        array, an object with ``__index__``) is kept as the value that was packed: a mutable
        one changed after the launch was made would otherwise show, and on revalidation pack,
        a value the launch does not run with.
        """
        plain = _KEPT_AS_IS
        for value in args:
            if type(value) not in plain:
                return self._kept_as_packed(tuple(args), arg_bytes)
        return args if type(args) is tuple else tuple(args)

    def _kept_as_packed(self, values: tuple[Any, ...], arg_bytes: bytes) -> tuple[Any, ...]:
        """:meth:`kept` for arguments not all plain: the scalars as packed."""
        packed = self.unpack_from(arg_bytes, 0)
        return tuple(
            packed[index]
            if isinstance(arg_type, ScalarType) and type(value) not in _KEPT_AS_IS
            else value
            for index, (arg_type, value) in enumerate(zip(self.types, values, strict=True))
        )

    def pack_into(self, buffer: Any, offset: int, args: Sequence[Any], kernel_name: str) -> None:
        self._struct.pack_into(buffer, offset, *self.check(args, kernel_name))

    def decode(self, buffer: Any, offset: int, memory: DeviceMemory) -> list[Any]:
        """The kernel's view of the arguments stored at ``offset``: scalars and typed views.

        Raises:
            InvalidDevicePointer: a pointer argument does not point into live memory.
        """
        values = list(self._struct.unpack_from(buffer, offset))
        view = memory.view
        for index, dtype in self._pointer_fields:
            address = values[index]
            # The body's own array object, never the allocator's cached view: a body that
            # sets its shape, dtype or flags changes nothing for other launches or host views.
            values[index] = view(address, dtype).view() if address else None
        return values

    def memo_decoder(self) -> tuple[Callable[[Any, int, Any], tuple[Any, ...]], Callable[[], None]]:
        """:meth:`decode` as a tuple, remembering each pointer's view by address; and its reset.

        What a run of dispatch ops of one layout decodes with: a run's ops mostly point at the
        same few allocations, so after the first, a pointer costs one dict read instead of a
        view lookup keyed by address and dtype. The caller resets it whenever a view could go
        stale (memory freed), as it drops the arguments it kept; a failed decode remembers
        nothing. The memory passed must be the same on every call until a reset. The views
        are the run's own, never the allocator's cached ones: a body that changes one (its
        shape, dtype or flags) changes it for the run's later dispatches only.
        """
        unpack_from = self._struct.unpack_from
        fields: tuple[tuple[int, Any, dict[int, Any]], ...] = tuple(
            (index, dtype, {}) for index, dtype in self._pointer_fields
        )
        memos: tuple[dict[int, Any], ...] = tuple(memo for _, _, memo in fields)

        def reset() -> None:
            for memo in memos:
                memo.clear()

        if len(fields) == 1:  # the common shape: straight-line code, no loop
            ((index, dtype, memo),) = fields
            memo_get = memo.get
            after = index + 1

            def decode_one(buffer: Any, offset: int, memory: Any) -> tuple[Any, ...]:
                raw = unpack_from(buffer, offset)
                address = raw[index]
                view = memo_get(address)
                if view is None and address:
                    view = memo[address] = memory.view(address, dtype).view()
                return (*raw[:index], view, *raw[after:])

            return decode_one, reset

        def decode(buffer: Any, offset: int, memory: Any) -> tuple[Any, ...]:
            values = list(unpack_from(buffer, offset))
            for index, dtype, memo in fields:
                address = values[index]
                view = memo.get(address)
                if view is None and address:
                    view = memo[address] = memory.view(address, dtype).view()
                values[index] = view
            return tuple(values)

        return decode, reset


_KEPT_AS_IS = frozenset({int, float, DevicePtr, type(None)})  # immutable: kept by ArgLayout.kept


def _fast_packer(
    fast_types: tuple[type, ...],
    struct_pack: Callable[..., bytes],
    full: Callable[[Any, str], bytes],
) -> Callable[[Any, str], bytes]:
    """A packer for one layout that takes its common shape in straight-line code.

    Made once per kernel, from source text written for its parameter list (as ``dataclasses``
    and ``namedtuple`` write their methods): one unpack of the argument sequence, one exact
    type test per parameter, each pointer's address read and tested, then one ``struct`` call.
    A loop over the parameters doing the same tests costs several times more, and this runs
    once per kernel node added, captured or set, and per eager launch. Anything the tests do
    not accept goes to ``full`` (:meth:`ArgLayout._pack_checked`), as does a value ``struct``
    refuses, so every error is the full path's own.
    """
    count = len(fast_types)
    names = [f"a{i}" for i in range(count)]
    namespace: dict[str, Any] = {"_pack": struct_pack, "_full": full, "_error": struct.error}
    tests = []
    fields = []
    addresses = []
    for i, (name, expected) in enumerate(zip(names, fast_types, strict=True)):
        namespace[f"T{i}"] = expected
        tests.append(f"type({name}) is T{i}")
        if expected is DevicePtr:
            addresses.append(f"p{i} = {name}.address")
            fields.append(f"p{i}")
        else:
            fields.append(name)
    lines = ["def pack(args, kernel_name):", "    kind = type(args)"]
    if count == 0:
        lines += ["    if (kind is tuple or kind is list) and not args:", "        return _pack()"]
    else:
        lines += [
            f"    if (kind is tuple or kind is list) and len(args) == {count}:",
            f"        {', '.join(names)}, = args",
            f"        if {' and '.join(tests)}:",
        ]
        indent = "            "
        if addresses:
            lines += [indent + line for line in addresses]
            # A pointer of a replaced device goes to the full path, which refuses it.
            checks = " and ".join(
                f"type(p{i}) is int and not a{i}._origin.replaced"
                for i, field in enumerate(fields)
                if field[0] == "p"
            )
            lines.append(f"{indent}if {checks}:")
            indent += "    "
        lines += [
            f"{indent}try:",
            f"{indent}    return _pack({', '.join(fields)})",
            f"{indent}except (_error, OverflowError):",
            f"{indent}    pass  # out of range: the full path says which parameter and why",
        ]
    lines.append("    return _full(args, kernel_name)")
    exec("\n".join(lines), namespace)  # the source is made above, from types only
    packer: Callable[[Any, str], bytes] = namespace["pack"]
    return packer


class PointerField:
    """One pointer parameter as the race checker sees it.

    ``extent`` is None (the pointer may touch up to the end of its allocation), an int (that
    many elements) or ``("param", index)`` (as many elements as the scalar argument at
    ``index`` says), from ``@ahg.kernel(extents=...)``.
    """

    __slots__ = ("access", "extent", "index", "itemsize")

    def __init__(
        self, index: int, itemsize: int, access: str, extent: int | tuple[str, int] | None
    ) -> None:
        self.index, self.itemsize, self.access, self.extent = index, itemsize, access, extent

    def elements(self, values: Sequence[Any]) -> int | None:
        """Declared element count for raw argument ``values``, or None when undeclared."""
        extent = self.extent
        if extent is None or isinstance(extent, int):
            return extent
        return int(values[extent[1]])  # may be negative: dispatch refuses it

    def __repr__(self) -> str:
        return f"<PointerField #{self.index} {self.access} extent={self.extent!r}>"


class CheckedArgLayout(ArgLayout):
    """An argument layout whose dispatch enforces pointer annotations.

    ``ConstPtr`` parameters arrive as read-only views and parameters with a declared extent as
    views of exactly that many elements (a declared extent past the end of the allocation
    fails the dispatch), so what the race checker assumes about a kernel is what the kernel
    can do. Kernels without annotations keep :class:`ArgLayout` and its plain decode.
    """

    __slots__ = ("_fields",)

    def __init__(
        self,
        names: Sequence[str],
        types: Sequence[ArgType],
        extents: dict[int, int | tuple[str, int]],
    ) -> None:
        super().__init__(names, types)
        self._fields = tuple(
            PointerField(index, t.element.size, t.access, extents.get(index))
            for index, t in enumerate(self.types)
            if isinstance(t, PointerType)
        )

    @property
    def pointers(self) -> tuple[PointerField, ...]:
        return self._fields

    def memo_decoder(self) -> tuple[Callable[[Any, int, Any], tuple[Any, ...]], Callable[[], None]]:
        """:meth:`decode` as a tuple, remembering nothing across calls; and a reset that has
        nothing to forget.

        The plain layout's memo shares one view per address between the dispatches of a run,
        but here a view depends on more than its address (its length may come from another
        argument, and a read-only view must not be handed to a parameter that may write), so
        every dispatch gets views made by this layout's own :meth:`decode`. A run's caller
        keeps each dispatch's decoded arguments anyway, so this costs the first replay only.
        """
        decode = self.decode

        def decode_checked(buffer: Any, offset: int, memory: Any) -> tuple[Any, ...]:
            return tuple(decode(buffer, offset, memory))

        return decode_checked, _forget_nothing

    def decode(self, buffer: Any, offset: int, memory: DeviceMemory) -> list[Any]:
        values = self._struct.unpack_from(buffer, offset)
        out = list(values)
        view = memory.view
        for (index, dtype), field in zip(self._pointer_fields, self._fields, strict=True):
            address = values[index]
            if not address:
                out[index] = None
                continue
            array: Any = view(address, dtype)
            count = field.elements(values)
            if count is not None:
                if count < 0:
                    raise InvalidValue(
                        f"parameter {self.names[index]!r} declares a negative extent ({count})"
                    )
                if count > len(array):
                    raise InvalidValue(
                        f"parameter {self.names[index]!r} declares {count} elements, but only "
                        f"{len(array)} remain in its allocation"
                    )
                array = array[:count]  # a new array object
            else:
                array = array.view()  # the body's own object (see ArgLayout.decode)
            if field.access == "const":
                array = _read_only(array)
            out[index] = array
        return out


def _read_only(array: Any) -> Any:
    """``array``'s elements as an array no body can make writeable again.

    Clearing the writeable flag of a view is not enough: numpy lets a body set it back
    whenever the memory the view was made from is writeable, as device memory is. An array
    over a read-only buffer refuses that, so a ``ConstPtr`` stays read-only, as the race
    checker assumes.
    """
    return np.frombuffer(memoryview(array).toreadonly(), dtype=array.dtype)


def _forget_nothing() -> None:
    """The reset of a decoder that remembers nothing."""
