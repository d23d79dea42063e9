"""Kernels: declaration, argument layout and packing, launch configuration, numerical results."""

from __future__ import annotations

import gc
import struct
import weakref
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from ahipgraph.device.kernel import launch_dims
from ahipgraph.device.kernel_args import ArgLayout, ArgType, PointerType, ScalarType, arg_type_of
from ahipgraph.device.program import Program
from ahipgraph.device.signal import Signal
from ahipgraph.device.thread_ids import MAX_THREADS_PER_LAUNCH as MAX_THREADS
from ahipgraph.device.thread_ids import THREAD_IDS, ThreadIdsCache
from ahipgraph.runtime.completion import make_completion
from ahipgraph.runtime.params import KernelParams
from cleanup import destroy


def as_arg_type(declared: Any) -> ArgType:
    """The ArgType behind an annotation such as ``ahg.int32`` (or an ArgType itself)."""
    arg_type = declared if isinstance(declared, ArgType) else arg_type_of(declared)
    assert arg_type is not None, declared
    return arg_type


SCALARS = [
    as_arg_type(declared)
    for declared in (
        ahg.int8,
        ahg.int16,
        ahg.int32,
        ahg.int64,
        ahg.uint8,
        ahg.uint16,
        ahg.uint32,
        ahg.uint64,
        ahg.float32,
        ahg.float64,
    )
]


@ahg.kernel
def saxpy(
    t: ahg.Threads, n: ahg.int32, a: ahg.float32, x: ahg.Ptr[ahg.float32], y: ahg.Ptr[ahg.float32]
) -> None:
    i = t.ids[t.ids < n]
    y[i] = a * x[i] + y[i]


@ahg.kernel
def block_sums(
    t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int64], partial: ahg.Ptr[ahg.int64]
) -> None:
    # One partial sum per block: the first reduction pass.
    per_block = t.block.volume
    padded = np.zeros(t.grid.volume * per_block, dtype=np.int64)
    padded[:n] = x[:n]
    partial[: t.grid.volume] = padded.reshape(t.grid.volume, per_block).sum(axis=1)


@ahg.kernel
def final_sum(t: ahg.Threads, count: ahg.int32, partial: ahg.Ptr[ahg.int64]) -> None:
    # The second pass: thread 0 folds the partial sums into partial[0].
    partial[0] = partial[:count].sum()


@ahg.kernel
def takes_int8_int64(t: ahg.Threads, a: ahg.int8, b: ahg.int64) -> None:
    pass


# -- declaration -------------------------------------------------------------------------------


def test_kernel_declaration_records_name_parameters_and_options() -> None:
    assert saxpy.name == "saxpy"
    assert saxpy.layout.names == ("n", "a", "x", "y")
    assert saxpy.layout.types[:2] == (as_arg_type(ahg.int32), as_arg_type(ahg.float32))
    assert saxpy.layout.types[2] == as_arg_type(ahg.Ptr[ahg.float32])
    assert saxpy.duration_ns is None
    assert not saxpy.is_async
    assert repr(saxpy) == (
        "<Kernel saxpy(n: ahg.int32, a: ahg.float32, x: ahg.Ptr[float32], y: ahg.Ptr[float32])>"
    )

    @ahg.kernel(name="renamed", duration_ns=500)
    async def body(t: ahg.Threads) -> None:
        pass

    assert (body.name, body.duration_ns, body.is_async) == ("renamed", 500, True)
    assert body.layout.size == 0


def test_kernel_declaration_errors_are_type_or_value_errors() -> None:
    def no_threads() -> None:
        pass

    def untyped(t: ahg.Threads, n: int) -> None:
        pass

    def keyword_only(t: ahg.Threads, *, n: ahg.int32) -> None:
        pass

    with pytest.raises(TypeError, match="first parameter"):
        ahg.kernel(no_threads)
    with pytest.raises(TypeError, match="argument type annotation"):
        ahg.kernel(untyped)
    with pytest.raises(TypeError, match="positional"):
        ahg.kernel(keyword_only)
    with pytest.raises(TypeError, match="callable"):
        ahg.Kernel(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="duration_ns"):
        ahg.kernel(duration_ns=-1)(lambda t: None)
    with pytest.raises(TypeError, match="scalar type"):
        ahg.Ptr[int]  # type: ignore[index]


def _variadic(t: ahg.Threads, x: ahg.Ptr[ahg.float32], *rest: ahg.int32) -> None:
    pass


def _variadic_unannotated(t: ahg.Threads, x: ahg.Ptr[ahg.float32], *rest: Any) -> None:
    pass


def _keywords(t: ahg.Threads, x: ahg.Ptr[ahg.float32], **options: ahg.int32) -> None:
    pass


def _keyword_only_default(t: ahg.Threads, x: ahg.Ptr[ahg.float32], *, n: ahg.int32 = 1) -> None:
    pass


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (_variadic, r"'\*rest' is variadic positional"),
        (_variadic_unannotated, r"'\*rest' is variadic positional"),  # not "needs a type"
        (_keywords, r"'\*\*options' is variadic keyword"),
        (_keyword_only_default, r"'n' is keyword-only"),
    ],
)
def test_a_parameter_of_another_kind_is_named_with_its_kind(body: Any, named: str) -> None:
    # A kernel's argument list is fixed: the error says which parameter and what it is,
    # whatever its annotation (``*rest`` read as an ordinary parameter "must be positional")
    with pytest.raises(TypeError, match=named + "; kernel parameters must be positional"):
        ahg.kernel(body)


def test_a_kernel_whose_first_parameter_cannot_take_the_threads_is_refused() -> None:
    def forgot_threads(x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
        pass

    def threads_by_keyword(*, t: ahg.Threads) -> None:
        pass

    def threads_in_kwargs(**kw: Any) -> None:
        pass

    with pytest.raises(TypeError, match="'x' is annotated as a kernel argument"):
        ahg.kernel(forgot_threads)
    for body in (threads_by_keyword, threads_in_kwargs):
        with pytest.raises(TypeError, match=r"first parameter .* must be positional"):
            ahg.kernel(body)
    # An unannotated first parameter, or *args, still takes the Threads.
    assert ahg.kernel(lambda t: None).layout.names == ()
    assert ahg.kernel(lambda *rest: None).layout.names == ()


def test_a_first_parameter_typed_as_a_bare_pointer_or_an_optional_argument_is_refused() -> None:
    """Only a fully typed argument was seen: ``x: ahg.Ptr`` (the element forgotten too) or
    ``n: ahg.int32 | None`` first took the Threads, and every launch had one argument too many."""

    def bare_pointer(x: ahg.Ptr, n: ahg.int32) -> None:  # type: ignore[type-arg]
        pass

    def optional_scalar(n: ahg.int32 | None) -> None:
        pass

    def optional_pointer(x: ahg.ConstPtr[ahg.float32] | None) -> None:
        pass

    for body in (bare_pointer, optional_scalar, optional_pointer):
        with pytest.raises(TypeError, match="is annotated as a kernel argument"):
            ahg.kernel(body)
    assert ahg.kernel(lambda t: None).layout.names == ()

    def threads_or_none(t: ahg.Threads | None, n: ahg.int32) -> None:
        pass

    assert ahg.kernel(threads_or_none).layout.names == ("n",)


# -- argument layout ---------------------------------------------------------------------------


def layout_of(*declared: Any) -> ArgLayout:
    return ArgLayout([f"p{i}" for i in range(len(declared))], [as_arg_type(d) for d in declared])


def test_int8_then_int64_puts_the_int64_at_offset_8() -> None:
    assert takes_int8_int64.layout.offsets == (0, 8)
    assert takes_int8_int64.layout.size == 16


@pytest.mark.parametrize(
    ("types", "offsets", "size"),
    [
        ((), (), 0),
        ((ahg.int8,), (0,), 8),
        ((ahg.int8, ahg.int8, ahg.int16, ahg.int32), (0, 1, 2, 4), 8),
        ((ahg.int32, ahg.Ptr[ahg.float32]), (0, 8), 16),
        ((ahg.int16, ahg.float64, ahg.int8), (0, 8, 16), 24),
        ((ahg.uint8, ahg.float32, ahg.uint8, ahg.Ptr[ahg.int8]), (0, 4, 8, 16), 24),
    ],
)
def test_parameters_sit_at_their_natural_alignment(
    types: tuple[Any, ...], offsets: tuple[int, ...], size: int
) -> None:
    layout = layout_of(*types)
    assert layout.offsets == offsets
    assert layout.size == size


arg_types = st.one_of(st.sampled_from(SCALARS), st.sampled_from(SCALARS).map(PointerType))


def value_for(arg_type: ArgType) -> st.SearchStrategy[Any]:
    if isinstance(arg_type, PointerType):
        return st.builds(ahg.DevicePtr, st.just(0), st.integers(0, 2**64 - 1))
    assert isinstance(arg_type, ScalarType)
    if arg_type.is_float:
        return st.floats(width=8 * arg_type.size, allow_nan=False)
    return st.integers(arg_type.minimum, arg_type.maximum)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(arg_types, max_size=10).flatmap(lambda ts: st.tuples(st.just(ts), *map(value_for, ts)))
)
def test_layout_is_aligned_disjoint_and_round_trips(case: tuple[Any, ...]) -> None:
    types, values = case[0], case[1:]
    layout = layout_of(*types)
    end = 0
    for arg_type, offset in zip(types, layout.offsets, strict=True):
        assert offset % arg_type.align == 0  # pointers and 64-bit values on 8 bytes
        assert offset >= end  # no overlap, in declaration order
        end = offset + arg_type.size
    assert layout.size % 8 == 0
    assert end <= layout.size < end + 8
    packed = layout.pack(values, "k")
    assert len(packed) == layout.size
    for arg_type, offset, value in zip(types, layout.offsets, values, strict=True):
        (raw,) = struct.unpack_from("<" + arg_type.code, packed, offset)
        expected = value.address if isinstance(value, ahg.DevicePtr) else value
        assert raw == expected


# -- packing errors ----------------------------------------------------------------------------


def test_wrong_argument_count_is_a_type_error_naming_the_kernel() -> None:
    with pytest.raises(TypeError, match=r"'saxpy' takes 4 arguments \(n, a, x, y\), got 3"):
        saxpy.pack((1, 2.0, None))
    with pytest.raises(TypeError, match="takes 0 arguments"):
        ahg.kernel(lambda t: None).pack((1,))


@pytest.mark.parametrize(
    ("arg_type", "value"),
    [
        (ahg.int32, 1.5),
        (ahg.int32, "3"),
        (ahg.int32, True),
        (ahg.float32, "1.0"),
        (ahg.float64, False),
        (ahg.float32, None),
        (ahg.Ptr[ahg.float32], 4096),
        (ahg.Ptr[ahg.float32], np.zeros(4, np.float32)),
    ],
)
def test_values_of_the_wrong_type_are_type_errors(arg_type: Any, value: Any) -> None:
    with pytest.raises(TypeError, match="parameter 'p0'"):
        layout_of(arg_type).pack((value,), "k")


@pytest.mark.parametrize(
    ("arg_type", "value"),
    [
        (ahg.int8, 128),
        (ahg.int8, -129),
        (ahg.uint8, -1),
        (ahg.uint16, 65536),
        (ahg.int32, 2**31),
        (ahg.uint64, 2**64),
        (ahg.int64, np.uint64(2**63)),
        (ahg.float32, 1e39),
        (ahg.float32, -1e39),
        pytest.param(ahg.float64, 10**400, id="float64-10**400"),
    ],
)
def test_values_out_of_range_are_value_errors(arg_type: Any, value: Any) -> None:
    with pytest.raises(ValueError, match="out of range"):
        layout_of(arg_type).pack((value,), "k")


@pytest.mark.parametrize("address", [-1, -(2**63), 2**64, 2**70])
def test_pointer_addresses_outside_64_bits_are_value_errors_not_struct_errors(
    address: int,
) -> None:
    with pytest.raises(ValueError, match=r"parameter 'x' \(Ptr\[float32\]\) address out of range"):
        saxpy.pack((1, 2.0, ahg.DevicePtr(0, address), None))


def test_pointer_with_a_non_int_address_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="non-int address"):
        saxpy.pack((1, 2.0, None, ahg.DevicePtr(0, 1.5)))  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_launch_with_a_pointer_moved_below_zero_fails_and_changes_nothing(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(64)
    stream = device.create_stream()
    memory, streams = device.memory.statistics(), stream.statistics()
    below_zero = ptr - (ptr.address + 256)
    with pytest.raises(ValueError, match="out of range"):
        await stream.launch_kernel(saxpy, 1, 16, (16, 1.0, below_zero, ptr))
    with ahg.Graph() as graph, pytest.raises(ValueError, match="out of range"):
        graph.add_kernel_node(saxpy, 1, 16, (16, 1.0, ptr, ptr + 2**64))
    assert device.memory.statistics() == memory
    assert stream.statistics() == streams
    stream.destroy()
    device.free(ptr)


def test_range_edges_and_numpy_scalars_are_accepted() -> None:
    layout = layout_of(ahg.int8, ahg.uint64, ahg.float32, ahg.float32, ahg.float64)
    values = (-128, 2**64 - 1, float(np.finfo(np.float32).max), np.float32(1.5), np.int16(7))
    assert layout.unpack_from(layout.pack(values, "k"), 0)[:4] == (
        -128,
        2**64 - 1,
        float(np.finfo(np.float32).max),
        1.5,
    )
    inf = layout_of(ahg.float32).pack((float("inf"),), "k")  # infinity is a float32 value
    assert struct.unpack_from("<f", inf)[0] == float("inf")


def test_args_must_be_a_sequence() -> None:
    with pytest.raises(TypeError, match="sequence"):
        takes_int8_int64.pack("ab")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence"):
        takes_int8_int64.pack({1, 2})  # type: ignore[arg-type]


def test_null_pointer_arguments_pack_as_zero_and_decode_as_none(device: ahg.Device) -> None:
    layout = layout_of(ahg.Ptr[ahg.float32], ahg.int32)
    packed = layout.pack((None, 5), "k")
    assert layout.decode(packed, 0, device.memory) == [None, 5]
    assert layout.pack((ahg.NULL, 5), "k") == packed


def test_pointer_arguments_decode_as_typed_views_of_device_memory(device: ahg.Device) -> None:
    ptr = device.malloc(32)
    layout = layout_of(ahg.Ptr[ahg.int32], ahg.Ptr[ahg.float64])
    words, doubles = layout.decode(layout.pack((ptr + 4, ptr + 8), "k"), 0, device.memory)
    assert (words.dtype, words.shape) == (np.int32, (7,))
    assert (doubles.dtype, doubles.shape) == (np.float64, (3,))
    words[0] = 42
    assert device.view(ptr + 4, np.int32, 1)[0] == 42
    destroy(ptr)


def test_freed_pointer_argument_fails_to_decode(device: ahg.Device) -> None:
    ptr = device.malloc(32)
    layout = layout_of(ahg.Ptr[ahg.int32])
    packed = layout.pack((ptr,), "k")
    device.free(ptr)
    with pytest.raises(ahg.InvalidDevicePointer):
        layout.decode(packed, 0, device.memory)


# -- launch configuration ----------------------------------------------------------------------

LIMITS = {"max_threads_per_block": 1024, "max_grid": (2**31 - 1, 65536, 65536)}


@pytest.mark.parametrize(
    ("grid", "block"),
    [
        (0, 64),
        (4, 0),
        (-1, 64),
        ((4, 0, 1), 64),
        (4, (8, 8, 0)),
        (4, 1025),
        (4, (32, 32, 2)),
        (2**31, 64),
        ((1, 65537), 64),
        ((1, 1, 65537), 64),
    ],
)
def test_zero_or_oversized_dimensions_are_invalid_configuration(grid: Any, block: Any) -> None:
    with pytest.raises(ahg.InvalidConfiguration):
        launch_dims(grid, block, **LIMITS)


@pytest.mark.parametrize(
    ("grid", "block"),
    [
        ((1, 2, 3, 4), 1),
        (1.0, 1),
        (1, "64"),
        (True, 1),
        (1, (2, False)),
        (b"x", 1),  # bytes hold ints, but are no dimensions
        (1, bytearray(b"\x40")),
        (memoryview(b"\x01\x02"), 1),
    ],
)
def test_malformed_dimensions_are_type_errors(grid: Any, block: Any) -> None:
    with pytest.raises(TypeError):
        launch_dims(grid, block, **LIMITS)


def test_dimensions_accept_ints_tuples_and_numpy_ints() -> None:
    grid, block = launch_dims((np.int64(3), 2), 1024, **LIMITS)
    assert (grid, block) == (ahg.Dim3(3, 2, 1), ahg.Dim3(1024, 1, 1))
    assert grid.volume == 6
    # Every dimension at the device limit passes the per-dimension checks; the total is far past
    # what the simulator materialises, so the default thread limit is lifted here.
    limit = launch_dims((2**31 - 1, 65536, 65536), (16, 8, 8), max_threads=2**100, **LIMITS)
    assert limit[1].volume == 1024


@pytest.mark.parametrize(
    ("grid", "block"), [((2**31 - 1, 65536, 65536), 1024), (2**31 - 1, 1024), (MAX_THREADS + 1, 1)]
)
def test_more_threads_than_the_simulator_materialises_is_invalid_configuration(
    grid: Any, block: Any
) -> None:
    before = THREAD_IDS.statistics()
    with pytest.raises(ahg.InvalidConfiguration, match="materialises at most"):
        launch_dims(grid, block, **LIMITS)
    assert launch_dims(MAX_THREADS // 1024, 1024, **LIMITS)[0].volume * 1024 == MAX_THREADS
    assert THREAD_IDS.statistics() == before  # nothing was built


def test_a_launch_past_the_thread_limit_is_refused_when_it_is_made(device: ahg.Device) -> None:
    stats = device.memory.statistics()
    with pytest.raises(ahg.InvalidConfiguration, match="materialises"):
        KernelParams.make(takes_int8_int64, (2**31 - 1, 65536), 1024, (1, 2), device=device)
    with pytest.raises(ahg.InvalidConfiguration, match="materialises"):
        ahg.Threads(ahg.Dim3(2**31 - 1, 65536), ahg.Dim3(1024)).ids  # noqa: B018
    assert device.memory.statistics() == stats


# -- thread ids ------------------------------------------------------------------------------


def test_thread_ids_are_shared_read_only_and_bounded_by_count() -> None:
    cache = ThreadIdsCache(max_entries=4, max_bytes=1 << 20)
    first = cache.ids(10)
    assert first.tolist() == list(range(10))
    assert not first.flags.writeable
    assert cache.ids(10) is first  # a hit
    for count in (11, 12, 13):
        cache.ids(count)
    cache.ids(10)  # 10 becomes the most recently used
    cache.ids(14)  # evicts 11, the least recently used
    stats = cache.statistics()
    assert stats.counts == (12, 13, 10, 14)
    assert (stats.entries, stats.hits, stats.misses, stats.evictions) == (4, 2, 5, 1)
    assert stats.nbytes == 8 * (12 + 13 + 10 + 14)
    assert repr(cache) == f"<ThreadIdsCache entries=4/4 bytes={stats.nbytes}/{1 << 20}>"


def test_thread_ids_are_bounded_by_bytes_and_huge_arrays_are_not_cached() -> None:
    cache = ThreadIdsCache(max_entries=100, max_bytes=8 * 1000)
    cache.ids(600)
    cache.ids(300)
    cache.ids(500)  # 600 + 300 + 500 ids do not fit in 1000: the oldest go first
    assert cache.statistics().counts == (300, 500)
    big = cache.ids(1001)  # bigger than the whole budget: built, handed out, not cached
    assert len(big) == 1001
    assert cache.ids(1001) is not big
    stats = cache.statistics()
    assert (stats.counts, stats.nbytes) == ((300, 500), 8 * 800)
    cache.clear()
    assert (cache.statistics().entries, cache.statistics().nbytes) == (0, 0)


def test_a_thousand_distinct_sizes_do_not_keep_a_thousand_arrays_alive() -> None:
    cache = ThreadIdsCache(max_entries=16, max_bytes=1 << 20)
    alive: list[weakref.ref[Any]] = []
    for count in range(1, 1001):
        alive.append(weakref.ref(cache.ids(count)))
    gc.collect()
    assert sum(ref() is not None for ref in alive) == 16
    stats = cache.statistics()
    assert stats.counts == tuple(range(985, 1001))
    assert (stats.entries, stats.evictions) == (16, 1000 - 16)


@pytest.mark.asyncio
async def test_kernels_of_many_sizes_leave_the_shared_cache_bounded(device: ahg.Device) -> None:
    seen: list[int] = []

    @ahg.kernel
    def count_ids(t: ahg.Threads) -> None:
        seen.append(len(t.ids))

    stream = device.create_stream()
    sizes = range(1, 3 * THREAD_IDS.max_entries + 1)
    for size in sizes:
        await stream.launch_kernel(count_ids, 1, size, ())
    await stream.synchronize()
    assert seen == list(sizes)
    stats = THREAD_IDS.statistics()
    assert stats.entries <= stats.max_entries
    assert stats.nbytes <= stats.max_bytes
    assert stats.counts[-1] == sizes[-1]
    destroy(stream)


def test_shared_memory_is_checked() -> None:
    with pytest.raises(ahg.InvalidValue, match="shared memory"):
        launch_dims(1, 1, shared_mem=65537, **LIMITS)
    with pytest.raises(ahg.InvalidValue):
        launch_dims(1, 1, shared_mem=-1, **LIMITS)
    with pytest.raises(TypeError):
        launch_dims(1, 1, shared_mem=1.0, **LIMITS)  # type: ignore[arg-type]


def test_launch_limits_come_from_the_device() -> None:
    (device,) = ahg.configure_devices(
        1, ahg.DeviceProperties(max_threads_per_block=256, max_grid=(8, 1, 1))
    )
    KernelParams.make(takes_int8_int64, 8, 256, (1, 2), device=device)
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(takes_int8_int64, 8, 257, (1, 2), device=device)
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(takes_int8_int64, 9, 1, (1, 2), device=device)
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(takes_int8_int64, (1, 2), 1, (1, 2), device=device)


def test_only_declared_kernels_can_be_launched(device: ahg.Device) -> None:
    with pytest.raises(TypeError, match=r"@ahg\.kernel"):
        KernelParams.make(lambda t: None, 1, 1, device=device)  # type: ignore[arg-type]


# -- dispatch ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_threads_describe_the_launch(device: ahg.Device) -> None:
    seen: list[tuple[Any, ...]] = []

    @ahg.kernel
    def record(t: ahg.Threads, tag: ahg.int32) -> None:
        seen.append((tag, t.grid, t.block, t.count, t.ids.copy(), t.shared_mem))

    stream = device.create_stream()
    await stream.launch_kernel(record, (2, 3), (4, 1, 2), (7,), shared_mem=128)
    await stream.synchronize()
    ((tag, grid, block, count, ids, shared),) = seen
    assert (tag, grid, block, count, shared) == (7, (2, 3, 1), (4, 1, 2), 48, 128)
    assert ids.tolist() == list(range(48))
    destroy(stream)


@pytest.mark.asyncio
async def test_arguments_are_read_from_their_bytes_when_the_kernel_runs(
    device: ahg.Device,
) -> None:
    seen: list[int] = []

    @ahg.kernel
    def capture(t: ahg.Threads, value: ahg.int32) -> None:
        seen.append(value)

    params = KernelParams.make(capture, 1, 1, (1,), device=device)
    arena = bytearray(16)
    capture.layout.pack_into(arena, 8, (1,), capture.name)
    signal = Signal(1)
    device.queues[0].submit(Program((params.op(device, arena, 8),), signal))
    # The dispatch is queued, not run: the bytes can still change under it.
    capture.layout.pack_into(arena, 8, (2,), capture.name)
    await make_completion(signal, device)
    assert seen == [2]


# -- numerical correctness ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_saxpy_matches_numpy(device: ahg.Device) -> None:
    n, a = 10_000, np.float32(2.5)
    rng = np.random.default_rng(1)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    x, y = device.malloc(x_host.nbytes), device.malloc(y_host.nbytes)
    stream = device.create_stream()
    await stream.memcpy(x, x_host)
    await stream.memcpy(y, y_host)
    await stream.launch_kernel(saxpy, (n + 255) // 256, 256, (n, a, x, y))
    out = np.empty_like(y_host)
    await stream.memcpy(out, y)
    await stream.synchronize()
    np.testing.assert_array_equal(out, a * x_host + y_host)
    device.free(x)
    device.free(y)
    assert device.memory.bytes_in_use == 0
    destroy(stream)


@pytest.mark.asyncio
async def test_two_kernel_reduction_matches_numpy(device: ahg.Device) -> None:
    n, block = 100_003, 256  # not a multiple of the block: the tail block is partial
    blocks = (n + block - 1) // block
    values = np.random.default_rng(2).integers(-(10**6), 10**6, n, dtype=np.int64)
    x, partial = device.malloc(values.nbytes), device.malloc(blocks * 8)
    stream = device.create_stream()
    await stream.memcpy(x, values)
    await stream.launch_kernel(block_sums, blocks, block, (n, x, partial))
    await stream.launch_kernel(final_sum, 1, 1, (blocks, partial))
    total = np.zeros(1, dtype=np.int64)
    await stream.memcpy(total, partial, 8)
    await stream.synchronize()
    assert int(total[0]) == int(values.sum())
    device.free(x)
    device.free(partial)
    destroy(stream)
