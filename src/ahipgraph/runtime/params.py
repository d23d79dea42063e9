"""Validated descriptions of device work, shared by streams, graph nodes and executables.

A stream operation, a graph node and an executable's prepared op all start from the same
parameter objects, built by the same ``make`` constructors, so a bad argument gets the same
error whether it is launched eagerly, added to a graph or set on an executable, and eager and
graph execution build their ops from one place.

Check order follows HIP: missing arguments, then handles, then parameter values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from ..core.errors import InvalidMemcpyDirection, InvalidValue
from ..core.ints import as_int, as_optional_int, int_or_none
from ..device.current import current_ordinal_now as _current_ordinal
from ..device.host_function import check_host_callable
from ..device.kernel import Dim3, DimLike, Kernel, Threads, launch_dims
from ..device.ops import CopyOp, FillOp, HostOp, KernelOp
from ..device.pointer import DevicePtr
from ..device.properties import CopyKind, DeviceProperties, copy_kind_or_none
from ..device.table import DEVICES as _DEVICES
from ..device.table import check_range, current_properties, resolve_pointer
from .device import Device
from .launch_attributes import DEFAULT_ATTRIBUTES, KernelAttributes

__all__ = [
    "HostParams",
    "KernelParams",
    "MemcpyParams",
    "MemsetParams",
    "check_kind",
    "common_kernel_params",
    "fill_count",
    "memcpy_kind",
]


@dataclass(frozen=True, slots=True)
class KernelParams:
    """A kernel launch: kernel, grid (in blocks), block (in threads), arguments, shared memory.

    ``arg_bytes`` holds the packed kernel-argument bytes, validated once at construction.
    """

    kernel: Kernel
    grid: Dim3
    block: Dim3
    args: tuple[Any, ...]
    shared_mem: int
    arg_bytes: bytes
    threads: Threads = field(compare=False, repr=False)  # derived; shared by every dispatch
    priority: int = 0
    attributes: KernelAttributes = DEFAULT_ATTRIBUTES  # cooperative, access-policy window

    @classmethod
    def make(
        cls,
        kernel: Kernel,
        grid: DimLike,
        block: DimLike,
        args: Sequence[Any] | None = (),
        *,
        shared_mem: int = 0,
        priority: int = 0,
        device: Device | None = None,
    ) -> KernelParams:
        """Validate a launch against ``device``'s limits (the current device by default).

        Raises:
            InvalidValue: ``kernel`` is None.
            TypeError: ``kernel`` is not a :class:`Kernel`, or arguments of the wrong type/count.
            InvalidConfiguration: bad grid or block. InvalidValue: too much shared memory.
        """
        if kernel is None:
            raise InvalidValue("kernel is null")
        if type(kernel) is not Kernel and not isinstance(kernel, Kernel):
            raise TypeError(f"expected a kernel declared with @ahg.kernel, got {kernel!r}")
        props = current_properties() if device is None else device._properties
        entry = None
        if type(grid) is int and type(block) is int and type(shared_mem) is int:
            # _launch_shape's remembered shapes, looked up here: the common case, one dict read
            entry = _SHAPES.get((id(props), grid, block, shared_mem))
        if entry is not None and entry[0] is props:
            _, grid3, block3, threads = entry
        else:
            grid3, block3, threads = _launch_shape(props, grid, block, shared_mem)
            shared_mem = threads.shared_mem  # a plain int even when a numpy one was given
        arg_bytes = kernel.pack(args)  # None is InvalidValue for a kernel that takes arguments
        args = () if args is None else kernel.layout.kept(args, arg_bytes)
        if type(priority) is not int:
            priority = as_int(priority, "priority")
        if not -(2**31) <= priority < 2**31:  # HIP's launch attribute is an int
            raise ValueError(f"priority {priority} does not fit in an int")
        if cls is not KernelParams:
            return cls(kernel, grid3, block3, args, shared_mem, arg_bytes, threads, priority)
        # Every check is done: fill the slots of a draft and make it a KernelParams. A frozen
        # dataclass's ``__init__`` sets each field through ``object.__setattr__``, and this
        # runs once per captured launch and per kernel node (see _KernelParamsDraft).
        draft = _KernelParamsDraft()
        draft.kernel = kernel
        draft.grid = grid3
        draft.block = block3
        draft.args = args
        draft.shared_mem = shared_mem
        draft.arg_bytes = arg_bytes
        draft.threads = threads
        draft.priority = priority
        draft.attributes = DEFAULT_ATTRIBUTES
        draft.__class__ = KernelParams  # type: ignore[assignment]
        params: KernelParams = draft  # type: ignore[assignment]
        return params

    def check_limits(self, device: Device) -> None:
        """Validate the launch configuration against ``device``'s limits again.

        A graph node is validated against the default device when it is added; the device it
        runs on is known only at instantiate, which re-validates there, as HIP does when it
        creates the node's command.

        Raises:
            InvalidConfiguration: the block or grid exceeds ``device``'s limits.
            InvalidValue: too much shared memory for ``device``.
        """
        _launch_shape(device._properties, self.grid, self.block, self.shared_mem)

    def cost_ns(self, device: Device) -> int:
        props = device._properties
        return props.cost.kernel_ns(
            self.threads.count, props.compute_units, self.kernel.duration_ns
        )

    def op(
        self, device: Device, buffer: Any = None, offset: int = 0, writes: Any = None
    ) -> KernelOp:
        """The dispatch op; arguments are read from ``buffer`` (default: a private copy).

        ``writes`` counts the writes to ``buffer`` (see :meth:`KernelOp.make`).
        """
        if buffer is None:
            buffer, offset = self.arg_bytes, 0
        return KernelOp.make(
            self.kernel, self.threads, buffer, offset, self.cost_ns(device), writes
        )


class _KernelParamsDraft:
    """A mutable twin of :class:`KernelParams`: the same slots, in the same order.

    ``make`` fills one with plain attribute stores, then assigns its ``__class__``, which
    CPython allows between classes of identical layout; the result is an ordinary, frozen
    KernelParams. Several times cheaper than the dataclass constructor or the slot
    descriptors' setters, and nothing else ever sees a draft.
    """

    __slots__ = KernelParams.__slots__

    kernel: Kernel
    grid: Dim3
    block: Dim3
    args: tuple[Any, ...]
    shared_mem: int
    arg_bytes: bytes
    threads: Threads
    priority: int
    attributes: KernelAttributes


_SHAPES: dict[tuple[Any, ...], tuple[DeviceProperties, Dim3, Dim3, Threads]] = {}
_DEFAULT_PRIORITY = 0  # compared by identity in common_kernel_params
_SHAPES_LIMIT = 1024


def _launch_shape(
    props: DeviceProperties, grid: Any, block: Any, shared_mem: Any
) -> tuple[Dim3, Dim3, Threads]:
    """:func:`launch_dims` for ``props``, plus the launch's :class:`Threads`, shared between
    launches of the same shape.

    A graph of a million nodes usually has a handful of launch shapes, so validating each shape
    once (rather than once per node) and sharing its ``Dim3`` and ``Threads`` objects takes the
    dimension checks and three objects off every node. Only configurations whose validation
    depends on nothing but their values are remembered: plain ``int`` grid and block (a bool or
    numpy integer takes the full path every time) or the canonical ``Dim3`` of ints a params
    object holds, and a plain ``int`` shared-memory size. Failures are never remembered, so
    every error is raised by :func:`launch_dims` itself, as before. The key holds the properties
    object's identity, and the entry keeps that object alive, so an identity is never reused.
    """
    kind_g, kind_b = type(grid), type(block)
    cacheable = (
        type(shared_mem) is int
        and (kind_g is int or (kind_g is Dim3 and _plain(grid)))
        and (kind_b is int or (kind_b is Dim3 and _plain(block)))
    )
    if cacheable:
        key = (id(props), grid, block, shared_mem)
        entry = _SHAPES.get(key)
        if entry is not None and entry[0] is props:
            return entry[1], entry[2], entry[3]
    grid3, block3 = launch_dims(
        grid,
        block,
        max_threads_per_block=props.max_threads_per_block,
        max_grid=props.max_grid,
        shared_mem=shared_mem,
        max_shared_mem=props.max_shared_memory_per_block,
    )
    threads = Threads(grid3, block3, int(shared_mem))  # launch_dims took it as an int
    if cacheable:
        if len(_SHAPES) >= _SHAPES_LIMIT:
            _SHAPES.clear()
        _SHAPES[key] = (props, grid3, block3, threads)
    return grid3, block3, threads


def common_kernel_params(
    kernel: Any,
    grid: Any,
    block: Any,
    args: Any,
    shared_mem: Any,
    priority: Any,
    device: Device | None = None,
    memo: Any = None,
) -> KernelParams | None:
    """:meth:`KernelParams.make` for the shape almost every kernel node has, or None.

    The common shape: a plain :class:`Kernel`, ``int`` grid, block and shared-memory size of a
    launch shape already validated on ``device`` (the current device by default; see
    :func:`_launch_shape`), and the default priority 0. Everything ``make`` checks before the
    arguments is then known to pass, and the arguments are checked by the same ``pack`` in the
    same place, so any error raised here is the one ``make`` raises. Anything else returns None
    and the caller takes ``make``. Once per added kernel node and per captured launch: the
    separate calls and checks of ``make`` cost more than the node's bookkeeping.

    ``memo`` (a graph or a stream's capture: anything with a ``_last_launch`` attribute that
    its owner's lock guards) remembers the last shape found, as one tuple of the device's
    properties, grid, block, shared memory and the ``_SHAPES`` entry: a graph or a stream adds
    the same launch shape over and over, and comparing four objects costs less than checking
    and hashing a key and looking it up. The comparison is by identity: the very ``int``
    objects of a launch whose types were checked (small ints are shared, and a constant is one
    object at its call site), so a match needs no check of its own, and anything else (an
    equal value in another object, a bool, a numpy integer) takes the checks and the lookup.
    The entry is keyed on the properties object, never on an ordinal, so a task that switches
    devices (``set_device``) or a reconfigured devices table finds no match and looks the shape
    up again. Nothing of the kernel is remembered: its layout's packer and its name are read on
    every call, so a kernel changed since (another layout, a new name) packs and reports
    exactly as ``make`` would. A failed call leaves the memo as it was, and a failed
    validation never reaches it (only ``_SHAPES`` entries do), so every error is still raised
    by ``make``.
    """
    if type(kernel) is not Kernel or priority is not _DEFAULT_PRIORITY:
        return None  # (priority: the int 0 is one shared object; anything else takes make)
    if device is None:
        try:  # current_properties(), without its two calls
            props = _DEVICES[_current_ordinal()]._properties
        except IndexError:  # no table yet, or one that shrank: current_properties sorts it out
            props = current_properties()
    else:
        props = device._properties
    last = None if memo is None else memo._last_launch
    if (
        last is not None
        and last[0] is props
        and last[1] is grid
        and last[2] is block
        and last[3] is shared_mem
    ):
        shape = last[4]
        arg_bytes = kernel.layout.packer(args, kernel.name)  # Kernel.pack, without its call
    else:
        if type(grid) is not int or type(block) is not int or type(shared_mem) is not int:
            return None
        shape = _SHAPES.get((id(props), grid, block, shared_mem))
        if shape is None or shape[0] is not props:
            return None
        arg_bytes = kernel.layout.packer(args, kernel.name)
        if memo is not None:  # remembered once the call can no longer fail
            memo._last_launch = (props, grid, block, shared_mem, shape)
    # Every check is done: fill the slots of a draft (see _KernelParamsDraft)
    draft = _KernelParamsDraft()
    draft.kernel = kernel
    draft.grid = shape[1]
    draft.block = shape[2]
    draft.args = () if args is None else kernel.layout.kept(args, arg_bytes)
    draft.shared_mem = shared_mem
    draft.arg_bytes = arg_bytes
    draft.threads = shape[3]
    draft.priority = 0
    draft.attributes = DEFAULT_ATTRIBUTES
    draft.__class__ = KernelParams  # type: ignore[assignment]
    params: KernelParams = draft  # type: ignore[assignment]
    return params


def _plain(dim: Dim3) -> bool:
    return type(dim.x) is int and type(dim.y) is int and type(dim.z) is int


Endpoint = DevicePtr | npt.NDArray[Any]


def _same_value(a: object, b: object) -> bool:
    """Whether two field values of a parameter record are the same.

    A host array stands for the buffer it names, so two arrays are the same only if they
    are one object: numpy's ``==`` compares elements, and its answer (an array) has no
    truth value, so the dataclass ``==`` of two records with different arrays raised
    numpy's ValueError. A tuple (a host function's arguments) compares item by item.
    """
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    if type(a) is tuple and type(b) is tuple:
        return len(a) == len(b) and all(map(_same_value, a, b))
    return bool(a == b)


def records_equal(record: Any, other: object) -> bool:
    """``==`` of parameter records that may hold host arrays: the dataclass ``==`` (same
    class, every compared field equal), with fields compared by :func:`_same_value`."""
    compared = [f.name for f in fields(record) if f.compare]
    if other.__class__ is not record.__class__:
        return NotImplemented  # type: ignore[no-any-return]
    return all(_same_value(getattr(record, name), getattr(other, name)) for name in compared)


def _host_array(value: Any, role: str, writable: bool) -> npt.NDArray[Any]:
    if value.dtype.hasobject:  # its bytes are object pointers, not data a device could copy
        raise TypeError(f"{role} host array holds Python objects ({value.dtype}), not plain data")
    if not value.flags.c_contiguous:
        raise ValueError(f"{role} host array must be C-contiguous")
    if writable and not value.flags.writeable:
        raise ValueError(f"{role} host array is read-only")
    return value  # type: ignore[no-any-return]


def _check_endpoint(value: Any, role: str) -> None:
    if value is None:
        raise InvalidValue(f"{role} is null")
    if not isinstance(value, DevicePtr | np.ndarray):
        raise TypeError(f"{role} must be a DevicePtr or a numpy array, got {type(value).__name__}")


def _infer_kind(dst: Endpoint, src: Endpoint) -> CopyKind:
    dst_dev, src_dev = isinstance(dst, DevicePtr), isinstance(src, DevicePtr)
    if dst_dev and src_dev:
        return CopyKind.DeviceToDevice
    if dst_dev:
        return CopyKind.HostToDevice
    if src_dev:
        return CopyKind.DeviceToHost
    return CopyKind.HostToHost


def memcpy_kind(kind: object) -> CopyKind:
    """``kind`` as a :class:`CopyKind`, or HIP's direction error: an unknown value, and (the
    integer rule) a bool or a float, is not a kind."""
    given = copy_kind_or_none(kind)
    if given is None:
        raise InvalidMemcpyDirection(f"{kind!r} is not a memcpy kind")
    return given


def copies_nothing(params: MemcpyParams, kind: object) -> bool:
    """Whether a checked eager copy is one HIP's ``ihipMemcpy`` returns ``hipSuccess`` for
    without enqueuing anything: 0 bytes, or a source that is its destination with the
    ``Default`` kind (``kind`` as the call gave it; None, which infers it, is ``Default``).
    Such a copy changes no byte, so it neither waits for the legacy null stream's order nor
    delays later work. Graph nodes are another matter: a setter refuses a copy onto itself.
    """
    if not params.nbytes:
        return True
    dst, src = params.dst, params.src
    if type(dst) is DevicePtr and type(src) is DevicePtr:
        same = dst.address == src.address and dst.device == src.device  # checked: ints
    else:
        same = dst is src  # one host array
    return same and (kind is None or memcpy_kind(kind) is CopyKind.Default)


def check_kind(kind: CopyKind | int | None, inferred: CopyKind) -> None:
    """HIP's direction rule: a copy kind that agrees with the endpoints, or ``Default``."""
    if kind is None:
        return
    given = memcpy_kind(kind)
    if given not in (CopyKind.Default, inferred):
        raise InvalidMemcpyDirection(
            f"{given.name} given, but the endpoints make it {inferred.name}"
        )


@dataclass(frozen=True, slots=True)
class MemcpyParams:
    """A linear copy of ``nbytes`` from ``src`` to ``dst`` (device pointers or host arrays)."""

    dst: Endpoint
    src: Endpoint
    nbytes: int
    kind: CopyKind

    __eq__ = records_equal  # endpoints may be host arrays

    @classmethod
    def make(
        cls,
        dst: Endpoint,
        src: Endpoint,
        nbytes: int | None = None,
        kind: CopyKind | int | None = None,
        *,
        empty_unchecked: bool = False,
    ) -> MemcpyParams:
        """Validate a copy; the direction is inferred from the endpoints unless given.

        ``empty_unchecked``: a copy of 0 bytes is not checked against device memory, as
        ``hipMemcpy[Async]`` returns before it looks at the pointers (stream copies pass it;
        graph nodes refuse a count of 0 anyway; a null pointer is still refused, as a fill's is).
        A copy of 0 bytes touches nothing when run.

        Raises:
            InvalidValue: a null endpoint, a negative size, or a range outside an allocation
                or past a host array.
            InvalidDevicePointer: a device pointer that is not inside live memory.
            InvalidMemcpyDirection: ``kind`` is not a copy kind or contradicts the endpoints.
            TypeError / ValueError: endpoints that are not pointers or contiguous arrays.
        """
        _check_endpoint(dst, "dst")
        _check_endpoint(src, "src")
        inferred = _infer_kind(dst, src)
        check_kind(kind, inferred)
        if nbytes is None:
            hosts = [e for e in (dst, src) if isinstance(e, np.ndarray)]
            if not hosts:
                raise InvalidValue("nbytes is required for a device-to-device copy")
            nbytes = min(h.nbytes for h in hosts)
        nbytes = as_int(nbytes, "nbytes")
        if nbytes < 0:
            raise InvalidValue(f"negative size {nbytes}")
        for end, role in ((dst, "dst"), (src, "src")):
            if isinstance(end, DevicePtr):
                if nbytes or not empty_unchecked:
                    check_range(end, nbytes)
                elif not end:  # nothing to copy, but the null pointer is refused first
                    raise InvalidValue(f"{role} is a null device pointer")
            else:
                _host_array(end, role, writable=role == "dst")
                if nbytes > end.nbytes:
                    raise InvalidValue(f"{nbytes} bytes exceed the {end.nbytes}-byte {role} array")
        return cls(dst, src, nbytes, inferred)

    def cost_ns(self, device: Device) -> int:
        dst, src = self.dst, self.src
        peer = (
            isinstance(dst, DevicePtr) and isinstance(src, DevicePtr) and dst.device != src.device
        )
        return device._properties.cost.copy_ns(self.nbytes, self.kind, peer=peer)

    def op(self, device: Device) -> CopyOp:
        return CopyOp(
            self.dst, self.src, self.nbytes, self.kind, resolve_pointer, self.cost_ns(device)
        )


@dataclass(frozen=True, slots=True)
class MemsetParams:
    """Set ``height`` rows of ``width`` elements (1, 2 or 4 bytes each), ``pitch`` bytes apart."""

    dst: DevicePtr
    value: int
    element_size: int
    width: int
    height: int
    pitch: int

    @classmethod
    def make(
        cls,
        dst: DevicePtr,
        value: int,
        width: int,
        *,
        element_size: int = 1,
        height: int = 1,
        pitch: int | None = None,
        empty_unchecked: bool = False,
    ) -> MemsetParams:
        """Validate a fill.

        ``empty_unchecked``: a fill of 0 bytes is not checked against device memory, as
        ``hipMemset[Async]`` returns before it looks at the pointer (see MemcpyParams.make).

        Raises:
            InvalidValue: null ``dst``, element size other than 1/2/4, negative sizes, a pitch
                narrower than a row, or a region outside the allocation.
            InvalidDevicePointer: ``dst`` is not inside live memory.
            ValueError: ``value`` does not fit in an element.
        """
        if dst is None or (isinstance(dst, DevicePtr) and not dst):
            raise InvalidValue("memset destination is null")
        if not isinstance(dst, DevicePtr):
            raise TypeError(f"memset destination must be a DevicePtr, got {dst!r}")
        element_size = as_int(element_size, "element_size")
        if element_size not in (1, 2, 4):
            raise InvalidValue(f"element size must be 1, 2 or 4, got {element_size!r}")
        width, height = as_int(width, "width"), as_int(height, "height")
        value = as_int(value, "value")
        pitch = as_optional_int(pitch, "pitch")
        if width < 0 or height < 0:
            raise InvalidValue(f"negative memset size {width}x{height}")
        row = width * element_size
        pitch = row if pitch is None else pitch
        if height > 1 and pitch < row:
            raise InvalidValue(f"pitch {pitch} is narrower than a row of {row} bytes")
        limit = 1 << (8 * element_size)
        if not -(limit >> 1) <= value < limit:
            raise ValueError(f"value {value} does not fit in {element_size} byte(s)")
        params = cls(dst, int(value) % limit, element_size, int(width), int(height), pitch)
        if params.extent or not empty_unchecked:
            check_range(dst, params.extent)
        return params

    @property
    def extent(self) -> int:
        if not self.width or not self.height:
            return 0
        return (self.height - 1) * self.pitch + self.width * self.element_size

    @property
    def nbytes(self) -> int:
        return self.width * self.element_size * self.height

    def cost_ns(self, device: Device) -> int:
        return device._properties.cost.fill_ns(self.nbytes)

    def op(self, device: Device) -> FillOp:
        return FillOp(
            self.dst,
            self.value,
            self.element_size,
            self.width,
            self.height,
            self.pitch,
            resolve_pointer,
            self.cost_ns(device),
        )


def fill_count(
    count: int | None,
    nbytes: int | None,
    element_size: int,
    *,
    call: str = "Stream.memset()",
    count_name: str = "count",
) -> int:
    """A fill's element count, from ``count`` or from ``nbytes=`` (exactly one of them).

    ``stream.memset`` and ``graph.add_memset_node`` take their size either way: the count in
    elements (``count``, a node's ``width``) as ``hipMemsetD8/D16/D32`` and a memset node's
    ``width`` do, or the bytes as ``hipMemsetAsync``'s ``sizeBytes`` and ``Device.memset``
    do. ``call`` and ``count_name`` name the caller's API in the errors. A bad element size
    is left for ``MemsetParams.make`` to refuse, as it does for ``count``.

    Raises:
        TypeError: neither or both given; ``nbytes`` not an int.
        InvalidValue: ``nbytes`` is negative, or not a whole number of 2- or 4-byte elements.
    """
    if nbytes is None:
        if count is None:
            raise TypeError(f"{call} missing its size: {count_name} (elements) or nbytes=")
        return as_int(count, count_name)  # named as the call names it (a node's ``width``)
    if count is not None:
        raise TypeError(f"{call} takes {count_name} (elements) or nbytes=, not both")
    nbytes = as_int(nbytes, "nbytes")
    if nbytes < 0:  # named as given: converted to elements it would read as another number
        raise InvalidValue(f"negative memset size nbytes={nbytes}")
    size = int_or_none(element_size)
    if size in (2, 4):
        if nbytes % size:
            raise InvalidValue(f"nbytes={nbytes} is not a whole number of {size}-byte elements")
        return nbytes // size
    return nbytes


@dataclass(frozen=True, slots=True)
class HostParams:
    """A host function and its arguments; it may be ``async`` (the queue waits for it)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]

    __eq__ = records_equal  # arguments may be host arrays

    @classmethod
    def make(cls, fn: Callable[..., Any] | None, args: Sequence[Any] = ()) -> HostParams:
        """Raises: InvalidValue for a null function; TypeError for a non-callable, for a
        generator function (its body would never run), or for ``args`` that are not a
        sequence (a string would become one argument per character)."""
        if fn is None:
            raise InvalidValue("host function is null")
        if not callable(fn):
            raise TypeError(f"host function must be callable, got {fn!r}")
        check_host_callable(fn)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"host function args must be a sequence, got {args!r}")
        return cls(fn, tuple(args))

    def cost_ns(self, device: Device) -> int:
        return device._properties.cost.host_callback_ns

    def op(self, device: Device) -> HostOp:
        return HostOp(self.fn, self.args, self.cost_ns(device))
