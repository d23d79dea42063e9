"""Every public API that takes an integer follows one rule (``ahipgraph.core.ints``).

A numpy integer (``np.int64``, ``np.int32``, ``np.uint8``) is accepted wherever a plain ``int``
is, gives the same result, and is never stored: what the runtime keeps is a plain ``int``. A
bool (Python's or numpy's), a float, a string, a device pointer and None (where None is not a
documented default) are refused with the error the API always raised, and a refused call
changes nothing: the leak report against a snapshot taken before it is empty, and the API's own
state is as it was.

Each case is a callable taking the integer under test; it returns what the call made (compared
between a plain int and its numpy twins) and undoes it, so a case can run many times.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core.ints import as_int, as_optional_int, int_or_none
from ahipgraph.testing import leak_report, loop_turns, snapshot, stress
from ahipgraph.tools.launch_bench import measure_launch_host

# A DevicePtr has __index__ (for numpy) but is never an integer argument.
REFUSED: tuple[Any, ...] = (
    True,
    False,
    np.True_,
    np.False_,
    1.0,
    np.float64(1.0),
    "1",
    ahg.DevicePtr(0, 64),
)


@ahg.kernel
def store(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
    x[0] = n


# -- the rule itself ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", [0, 7, -3, 2**70, np.int64(7), np.int32(-3), np.uint8(255), np.uint64(2**63)]
)
def test_integers_become_plain_ints(value: Any) -> None:
    result = as_int(value, "n")
    assert type(result) is int
    assert result == int(value)
    assert int_or_none(value) == result


def test_int_enums_become_plain_ints() -> None:
    result = as_int(ahg.CaptureMode.RELAXED, "mode")
    assert type(result) is int
    assert result == 2


@pytest.mark.parametrize("value", [*REFUSED, None, 1 + 0j, [1], np.array([1]), object()])
def test_everything_else_is_refused_with_the_argument_named(value: Any) -> None:
    assert int_or_none(value) is None
    with pytest.raises(TypeError, match=r"^nbytes must be an int, got ") as caught:
        as_int(value, "nbytes")
    assert str(caught.value) == f"nbytes must be an int, got {value!r}"
    with pytest.raises(TypeError, match=r"^flags must be an int or X, got "):
        as_int(value, "flags", expected="an int or X")


def test_numpy_bool_is_refused_by_numpy_itself_too() -> None:
    """The name check is a second guard: numpy 2 already refuses ``bool_`` in ``__index__``."""
    if int(np.__version__.split(".")[0]) >= 2:
        with pytest.raises(TypeError):
            operator.index(np.True_)
    assert int_or_none(np.True_) is None


def test_optional_keeps_none() -> None:
    assert as_optional_int(None, "ops") is None
    assert as_optional_int(np.int64(3), "ops") == 3
    with pytest.raises(TypeError, match="ops must be an int, got True"):
        as_optional_int(True, "ops")


# -- the APIs -----------------------------------------------------------------------------------


@dataclass
class Case:
    """An API taking an integer: ``call(n)`` with the good value ``good``."""

    name: str
    call: Callable[[Any], Any]
    good: int
    error: type[Exception] = TypeError
    none_is_default: bool = False
    state: Callable[[], Any] = lambda: None


def _plain(result: Any) -> None:
    """No numpy scalar survives in what a call made."""
    assert not isinstance(result, np.generic), result
    if is_dataclass(result) and not isinstance(result, type):
        for field in fields(result):
            _plain(getattr(result, field.name))
    elif isinstance(result, tuple | list):
        for item in result:
            _plain(item)


def _twins(good: int) -> list[Any]:
    twins: list[Any] = [np.int64(good), np.int32(good)]
    if 0 <= good <= 255:
        twins.append(np.uint8(good))
    return twins


def _refused(case: Case) -> tuple[Any, ...]:
    return REFUSED if case.none_is_default else (*REFUSED, None)


def _check(case: Case) -> None:
    expected = case.call(case.good)
    _plain(expected)
    for twin in _twins(case.good):
        result = case.call(twin)
        assert result == expected, (case.name, twin)
        _plain(result)
    for value in _refused(case):
        before, state = snapshot(), case.state()
        with pytest.raises(case.error):
            case.call(value)
        assert case.state() == state, (case.name, value)
        assert leak_report(before) is None, (case.name, value)


async def _acheck(case: Case) -> None:
    """:func:`_check` for a coroutine API."""
    expected = await case.call(case.good)
    _plain(expected)
    for twin in _twins(case.good):
        result = await case.call(twin)
        assert result == expected, (case.name, twin)
        _plain(result)
    for value in _refused(case):
        before, state = snapshot(), case.state()
        with pytest.raises(case.error):
            await case.call(value)
        assert case.state() == state, (case.name, value)
        assert leak_report(before) is None, (case.name, value)


def _memset_case(graph: ahg.Graph, x: ahg.DevicePtr, field: str, good: int) -> Case:
    args: dict[str, Any] = {"value": 5, "width": 8, "element_size": 1, "height": 2, "pitch": 16}

    def call(n: Any) -> Any:
        node = graph.add_memset_node(x, **{**args, field: n})
        params = node.params
        node.destroy()
        return params

    pitch = field == "pitch"  # None: a row's width
    return Case(
        f"memset {field}", call, good, none_is_default=pitch, state=lambda: len(graph.nodes())
    )


def test_device_memory_and_ordinals(device: ahg.Device) -> None:
    def malloc(n: Any) -> Any:
        free = device.memory_info()[0]
        ptr = device.malloc(n)
        taken = free - device.memory_info()[0]
        device.free(ptr)
        return taken

    def view(n: Any) -> Any:
        ptr = device.malloc(64)
        try:
            return device.view(ptr, np.uint8, n).shape
        finally:
            device.free(ptr)

    def set_device(n: Any) -> Any:
        ahg.set_device(n)
        return ahg.current_device().ordinal

    for case in [
        Case("malloc", malloc, 64, state=device.memory_info),
        Case("view count", view, 16, none_is_default=True),
        Case("get_device", lambda n: ahg.get_device(n).ordinal, 0, none_is_default=True),
        Case("set_device", set_device, 0, state=lambda: ahg.current_device().ordinal),
        Case("create_stream priority", _stream_priority(device), 0),
    ]:
        _check(case)


def _stream_priority(device: ahg.Device) -> Callable[[Any], Any]:
    def call(n: Any) -> Any:
        with device.create_stream(priority=n) as stream:
            return stream.priority

    return call


def test_configure_devices_count() -> None:
    _check(
        Case(
            "configure_devices", lambda n: len(ahg.configure_devices(n)), 2, state=ahg.device_count
        )
    )


def test_peer_access_flags() -> None:
    def enable(n: Any) -> Any:
        first, second = ahg.configure_devices(2)
        first.enable_peer_access(second, flags=n)
        return True

    _check(Case("peer flags", enable, 0))


def test_graph_node_parameters(device: ahg.Device) -> None:
    x, y = device.malloc(256), device.malloc(256)
    graph = ahg.Graph()
    nodes = lambda: len(graph.nodes())  # noqa: E731

    def memcpy(n: Any) -> Any:
        node = graph.add_memcpy_node(y, x, n)
        params = node.params
        node.destroy()
        return params

    def alloc(n: Any) -> Any:
        with ahg.Graph() as own:  # a MemAlloc node goes only with its graph
            node = own.add_mem_alloc_node(n)
            assert own.nodes() == [node]
            return node.params.nbytes

    def kernel(**fixed: Any) -> Callable[[Any], Any]:
        def call(n: Any) -> Any:
            arguments = {"grid": 1, "block": 1, "shared_mem": 0, "priority": 0}
            arguments.update({key: n for key, value in fixed.items() if value is None})
            node = graph.add_kernel_node(store, args=(x, 1), **arguments)
            params = node.params
            node.destroy()
            return params

        return call

    cases = [
        _memset_case(graph, x, f, g)
        for f, g in [("value", 7), ("width", 8), ("element_size", 2), ("height", 2), ("pitch", 32)]
    ]
    cases += [
        Case("memcpy nbytes", memcpy, 64, none_is_default=True, state=nodes),
        Case("mem alloc nbytes", alloc, 64),
        Case("kernel grid", kernel(grid=None), 3, error=TypeError, state=nodes),
        Case("kernel block", kernel(block=None), 4, state=nodes),
        Case("kernel shared_mem", kernel(shared_mem=None), 16, state=nodes),
        Case("kernel priority", kernel(priority=None), 0, state=nodes),
    ]
    try:
        for case in cases:
            _check(case)
    finally:
        graph.destroy()
        device.free(x)
        device.free(y)


def test_user_object_counts() -> None:
    destroyed: list[int] = []

    def made(n: Any) -> Any:
        obj = ahg.UserObject(destroyed.append, 1, initial_refcount=n)
        count = obj.refcount
        obj.destroy()
        return count

    keep = ahg.UserObject(destroyed.append, 2)
    graph = ahg.Graph()

    def retain(n: Any) -> Any:
        keep.retain(n)
        count = keep.refcount
        keep.release(n)
        return count

    def graph_retain(n: Any) -> Any:
        graph.retain_user_object(keep, n)
        held = graph.user_objects()[keep]
        graph.release_user_object(keep, n)
        return held, keep.refcount

    def release(n: Any) -> Any:
        keep.retain(3)
        try:
            keep.release(n)
        except TypeError:
            keep.release(3)  # what the case took: the refused release itself took nothing
            raise
        count = keep.refcount
        keep.release(3 - n)
        return count

    try:
        for case in [
            Case("UserObject initial_refcount", made, 3),
            Case("retain", retain, 2, state=lambda: keep.refcount),
            Case("release", release, 2, state=lambda: keep.refcount),
            Case("retain_user_object", graph_retain, 2, state=lambda: keep.refcount),
        ]:
            _check(case)
        graph.retain_user_object(keep, 3)
        for value in _refused(Case("release_user_object", print, 1)):
            with pytest.raises(TypeError):
                graph.release_user_object(keep, value)
            assert graph.user_objects() == {keep: 3}
        graph.release_user_object(keep, np.uint8(3))
        assert graph.user_objects() == {}
        assert keep.refcount == 1
    finally:
        graph.destroy()
        keep.destroy()
    assert destroyed == [1, 1, 1, 1, 2]


def test_graph_flags_modes_and_conditionals(device: ahg.Device) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()

    def instantiate(n: Any) -> Any:
        with graph.instantiate(flags=n) as exe:
            return exe.flags

    def conditional(kind: Any = 0, size: Any = 1) -> Any:
        with ahg.Graph() as outer:
            handle = outer.conditional_handle(0)
            node, bodies = outer.add_conditional_node(handle, kind, size)
            return node.params.kind, len(bodies)

    def mode(n: Any) -> Any:
        previous = ahg.exchange_capture_mode(n)
        return ahg.exchange_capture_mode(previous)

    try:
        for case in [
            Case("instantiate flags", instantiate, 1),
            Case("to_dot flags", lambda n: graph.to_dot(n), 1),
            Case("capture mode", mode, 2, error=ahg.InvalidValue),
            Case("conditional default", lambda n: graph.conditional_handle(n).default, 9),
            Case("conditional kind", lambda n: conditional(kind=n), 1, error=ahg.InvalidValue),
            Case("conditional size", lambda n: conditional(kind=2, size=n), 3),
        ]:
            _check(case)
    finally:
        graph.destroy()


def test_launch_attributes_pool_attributes_and_host_functions(device: ahg.Device) -> None:
    x = device.malloc(64)
    graph = ahg.Graph()
    node = graph.add_kernel_node(store, 1, 1, (x, 1))
    priority = ahg.KernelNodeAttribute.Priority

    def set_priority(n: Any) -> Any:
        node.set_attribute(priority, n)
        value = node.get_attribute(priority)
        node.set_attribute(priority, 0)
        return value

    def reads(n: Any) -> Any:
        return ahg.host_function(print, reads=[(x, n)]).reads

    try:
        for case in [
            # None is a null value: InvalidValue, as before
            Case("priority attribute", set_priority, 0, none_is_default=True),
            Case("attribute id", lambda n: node.get_attribute(n), 8, none_is_default=True),
            Case("graph mem attribute", lambda n: device.graph_mem_attribute(n), 1),
            Case("graph mem value", lambda n: device.set_graph_mem_attribute(1, n), 0),
            Case("host function nbytes", reads, 16),
            Case(
                "kernel duration_ns",
                lambda n: ahg.kernel(duration_ns=n)(store.body).duration_ns,
                9,
                none_is_default=True,
            ),
            Case("DeviceProperties", lambda n: ahg.DeviceProperties(compute_units=n), 4),
            Case(
                "DeviceProperties max_grid",
                lambda n: ahg.DeviceProperties(max_grid=(n, 1, 1)).max_grid,
                4,
            ),
            Case("CostModel", lambda n: ahg.CostModel(wave_ns=n), 7),
        ]:
            _check(case)
    finally:
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_stream_copies_fills_and_memops(ahg_device: ahg.Device) -> None:
    device = ahg_device
    x, y = device.malloc(64), device.malloc(64)
    stream = device.create_stream()
    host = np.zeros(64, np.uint8)

    async def memset(n: Any) -> Any:
        await stream.memset(x, 0, 64)
        await stream.synchronize()  # only the call under test is left to fail
        await stream.memset(x, 7, n)
        await stream.memcpy(host, x, 64)
        await stream.synchronize()
        return bytes(host)

    async def memset_value(n: Any) -> Any:
        await stream.memset(x, n, 8)
        await stream.memcpy(host, x, 64)
        await stream.synchronize()
        return bytes(host)

    async def memcpy(n: Any) -> Any:
        await stream.memset(y, 0, 64)
        await stream.memset(x, 3, 64)
        await stream.synchronize()
        await stream.memcpy(y, x, n)
        await stream.memcpy(host, y, 64)
        await stream.synchronize()
        return bytes(host)

    async def write(n: Any) -> Any:
        await stream.write_value_32(x, n)
        await stream.memcpy(host, x, 64)
        await stream.synchronize()
        return bytes(host[:4])

    async def wait(n: Any) -> Any:
        await stream.write_value_32(x, 5)
        await stream.synchronize()
        await stream.wait_value_32(x, n, ahg.StreamWaitFlag.GEQ)
        await stream.synchronize()
        return stream.query()

    async def malloc_async(n: Any) -> Any:
        ptr = await stream.malloc_async(n)
        await stream.free_async(ptr)
        await stream.synchronize()
        return ptr.device

    try:
        for case in [
            Case("memset nbytes", memset, 16),
            Case("memset value", memset_value, 200),
            Case("memcpy nbytes", memcpy, 32, none_is_default=True),
            Case("write_value_32 value", write, 9),
            Case("wait_value_32 value", wait, 4),
            Case("malloc_async nbytes", malloc_async, 64),
            Case("loop_turns", loop_turns, 3, none_is_default=True),
        ]:
            await _acheck(case)
    finally:
        stream.destroy()
        device.free(x)
        device.free(y)


@pytest.mark.asyncio
async def test_symbols(ahg_device: ahg.Device) -> None:
    device = ahg_device
    stream = device.create_stream()
    values = np.arange(16, dtype=np.uint8)

    def declare(n: Any) -> Any:
        return ahg.device_symbol("test_int_arguments.sym", n).nbytes

    async def copy(nbytes: Any = 8, offset: Any = 0) -> Any:
        await stream.memcpy_to_symbol(SYMBOL, np.zeros(16, np.uint8))
        await stream.synchronize()
        await stream.memcpy_to_symbol(SYMBOL, values, nbytes, offset)
        await stream.synchronize()
        return bytes(SYMBOL.view(device))

    async def from_symbol(n: Any) -> Any:
        out = np.zeros(16, np.uint8)
        await stream.memcpy_to_symbol(SYMBOL, values)
        await stream.synchronize()
        await stream.memcpy_from_symbol(out, SYMBOL, n)
        await stream.synchronize()
        return bytes(out)

    try:
        _check(Case("device_symbol nbytes", declare, 16, none_is_default=True))
        for case in [
            Case("to_symbol nbytes", lambda n: copy(nbytes=n), 8, none_is_default=True),
            Case("to_symbol offset", lambda n: copy(offset=n), 4),
            Case("from_symbol nbytes", from_symbol, 8, none_is_default=True),
        ]:
            await _acheck(case)
    finally:
        stream.destroy()


SYMBOL = ahg.device_symbol("test_int_arguments.copies", 16)


def test_stress_limits_and_bench_rounds() -> None:

    def run(**limits: Any) -> Any:
        report = stress(**{"seed": 1, "ops": 20, "tasks": 1, "threads": 0, **limits})
        return report.seed, report.ops

    for name, good in [("seed", 3), ("ops", 20), ("tasks", 2)]:
        case = Case(f"stress {name}", lambda n, name=name: run(**{name: n}), good)
        case.none_is_default = name == "ops"
        # one twin: a stress run takes a while
        assert case.call(np.int64(good)) == case.call(good)
        for value in _refused(case):
            with pytest.raises(TypeError, match=f"{name} must be an int"):
                case.call(value)
    for value in REFUSED:
        with pytest.raises(TypeError, match="rounds must be an int"):
            measure_launch_host(value)


def test_fault_injection_filters(device: ahg.Device) -> None:
    from ahipgraph.testing import fail_allocations, fail_kernels

    def allocations(**fixed: Any) -> Callable[[Any], Any]:
        def call(n: Any) -> Any:
            limits = {"count": 2, "device": 0, "nbytes": 64}
            limits.update(dict.fromkeys(fixed, n))
            with fail_allocations(**limits) as fault:
                with pytest.raises(ahg.OutOfMemory):
                    device.malloc(64)
                return fault.remaining, fault.device, fault.nbytes, fault.hits

        return call

    def kernels(n: Any) -> Any:
        with fail_kernels(n) as fault:
            return fault.remaining

    for case in [
        Case("fail_allocations count", allocations(count=None), 2, none_is_default=True),
        Case("fail_allocations device", allocations(device=None), 0, none_is_default=True),
        Case("fail_allocations nbytes", allocations(nbytes=None), 64, none_is_default=True),
        Case("fail_kernels count", kernels, 3, none_is_default=True),
    ]:
        _check(case)
