"""Device symbols: declaration, copies to and from them on streams and as nodes, HIP's errors."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device.symbols import symbol_statistics
from ahipgraph.testing import leak_report, snapshot
from cleanup import destroy

COEFFS = ahg.device_symbol("test_symbols.coeffs", dtype=np.float32, shape=(8,))
COUNTER = ahg.device_symbol("test_symbols.counter", 4)


@ahg.kernel
def scale_by_coeffs(
    t: ahg.Threads, n: ahg.int32, coeffs: ahg.Ptr[ahg.float32], x: ahg.Ptr[ahg.float32]
) -> None:
    i = t.ids[t.ids < n]
    x[i] = x[i] * coeffs[i % 8]


def test_declaration_rules() -> None:
    assert COEFFS.nbytes == 32
    assert COUNTER.nbytes == 4
    # Declaring the same global again returns it (a module re-run); anything else is an error.
    assert ahg.device_symbol("test_symbols.coeffs", dtype=np.float32, shape=(8,)) is COEFFS
    # A shape is an int, a tuple or a list, as numpy takes it.
    assert ahg.device_symbol("test_symbols.coeffs", dtype=np.float32, shape=[8]) is COEFFS
    assert ahg.device_symbol("test_symbols.coeffs", dtype=np.float32, shape=8) is COEFFS
    for bad_shape in ("8", b"8", [8.0], {8}):
        with pytest.raises(TypeError, match="shape must be ints"):
            ahg.device_symbol("test_symbols.bad_shape", dtype=np.float32, shape=bad_shape)
    with pytest.raises(ValueError, match="already declared"):
        ahg.device_symbol("test_symbols.coeffs", 32)
    for bad_name in ("", None, 3):
        with pytest.raises(TypeError):
            ahg.device_symbol(bad_name, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one byte"):
        ahg.device_symbol("test_symbols.empty", 0)
    with pytest.raises(ValueError, match="either"):
        ahg.device_symbol("test_symbols.both", 4, dtype=np.int32)
    with pytest.raises(ValueError, match="give nbytes"):
        ahg.device_symbol("test_symbols.neither")
    with pytest.raises(TypeError, match="Python objects"):
        ahg.device_symbol("test_symbols.objects", dtype=object)
    with pytest.raises(TypeError):
        ahg.device_symbol("test_symbols.bool", True)
    assert "test_symbols.empty" not in repr(symbol_statistics())


def test_storage_is_per_device_zero_filled_and_loaded_on_first_use() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    before = d1.memory.statistics().allocations
    a0, a1 = COEFFS.address(d0), COEFFS.address(1)
    assert a0.device == 0
    assert a1.device == 1
    assert COEFFS.address(d0) == a0  # loaded once
    assert d1.memory.statistics().allocations == before + 1
    assert not COEFFS.view(d0).any()
    assert COEFFS.view(d0).shape == (8,)
    assert COEFFS.view(d0).dtype == np.float32
    with pytest.raises(ahg.InvalidDevice):
        COEFFS.address(5)


@pytest.mark.asyncio
async def test_stream_copies_to_and_from_a_symbol_round_trip(device: ahg.Device) -> None:
    stream = device.create_stream()
    values = np.arange(8, dtype=np.float32) + 1
    await stream.memcpy_to_symbol(COEFFS, values)
    out = np.zeros(4, np.float32)
    # By name, with an offset: elements 2..5.
    await stream.memcpy_from_symbol(out, "test_symbols.coeffs", 16, 8)
    await stream.synchronize()
    np.testing.assert_array_equal(out, values[2:6])
    np.testing.assert_array_equal(COEFFS.view(device), values)
    # Device to device, through a symbol.
    dev = device.malloc(32)
    await stream.memcpy_from_symbol(dev, COEFFS, 32, 0, ahg.CopyKind.DeviceToDevice)
    await stream.memcpy_to_symbol(COUNTER, dev, 4, 0, ahg.CopyKind.DeviceToDevice)
    await stream.synchronize()
    np.testing.assert_array_equal(device.view(dev, np.float32, 8), values)
    assert COUNTER.view(device).view(np.float32)[0] == 1.0
    destroy(stream, dev)


@pytest.mark.asyncio
async def test_a_kernel_takes_a_symbol_address_as_a_pointer(device: ahg.Device) -> None:
    stream = device.create_stream()
    coeffs = np.linspace(0.5, 4.0, 8, dtype=np.float32)
    await stream.memcpy_to_symbol(COEFFS, coeffs)
    x = device.malloc(4 * 16)
    host = np.arange(16, dtype=np.float32)
    await stream.memcpy(x, host)
    await stream.launch_kernel(scale_by_coeffs, 1, 16, (16, COEFFS.address(), x))
    await stream.synchronize()
    np.testing.assert_allclose(device.view(x, np.float32, 16), host * coeffs[np.arange(16) % 8])
    destroy(stream, x)


@pytest.mark.asyncio
async def test_symbol_errors_follow_hip_and_change_nothing(device: ahg.Device) -> None:
    stream = device.create_stream()
    host = np.zeros(8, np.float32)
    COEFFS.address(device)  # loaded before the baseline: its storage is not a leak
    before = (snapshot(), stream.statistics())
    for bad in (None, "test_symbols.unknown", 42, object(), host):
        with pytest.raises(ahg.InvalidSymbol):
            await stream.memcpy_to_symbol(bad, host)
        with pytest.raises(ahg.InvalidSymbol):
            await stream.memcpy_from_symbol(host, bad)
    with pytest.raises(ahg.InvalidValue, match="do not fit"):
        await stream.memcpy_to_symbol(COEFFS, host, 32, 4)  # 4 + 32 > 32
    with pytest.raises(ahg.InvalidValue, match="do not fit"):
        await stream.memcpy_from_symbol(host, COEFFS, 4, 29)
    with pytest.raises(ahg.InvalidValue, match="do not fit"):
        await stream.memcpy_from_symbol(host, COEFFS, -1, 0)
    with pytest.raises(ahg.InvalidValue, match="do not fit"):
        await stream.memcpy_to_symbol(COEFFS, np.zeros(9, np.float32))  # 36 bytes by default
    source = device.malloc(4)
    with pytest.raises(ahg.InvalidValue, match="nbytes is required"):
        await stream.memcpy_to_symbol(COEFFS, source)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await stream.memcpy_to_symbol(COEFFS, host, 8, 0, ahg.CopyKind.DeviceToHost)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await stream.memcpy_from_symbol(host, COEFFS, 8, 0, ahg.CopyKind.HostToDevice)
    with pytest.raises(ahg.InvalidMemcpyDirection):  # contradicts the host source
        await stream.memcpy_to_symbol(COEFFS, host, 8, 0, ahg.CopyKind.DeviceToDevice)
    with pytest.raises(ahg.InvalidValue, match="null"):
        await stream.memcpy_to_symbol(COEFFS, ahg.NULL, 8)
    with pytest.raises(TypeError):
        await stream.memcpy_to_symbol(COEFFS, host, 8.0)  # type: ignore[arg-type]
    now = snapshot()
    assert now.devices[0].memory.allocations == before[0].devices[0].memory.allocations + 1
    assert stream.statistics() == before[1]
    destroy(stream, source)


@pytest.mark.asyncio
async def test_symbol_nodes_setters_and_exec_setters(device: ahg.Device) -> None:
    COEFFS.address(device)  # symbol storage lives as long as the device: not a leak
    baseline = snapshot()
    a = np.arange(8, dtype=np.float32)
    b = a[::-1].copy()
    out = np.zeros(8, np.float32)
    graph = ahg.Graph()
    to = graph.add_memcpy_node_to_symbol(COEFFS, a)
    back = graph.add_memcpy_node_from_symbol(out, COEFFS, deps=[to])
    assert to.type is ahg.NodeType.Memcpy
    assert back.type is ahg.NodeType.Memcpy
    with pytest.raises(ahg.InvalidSymbol):
        graph.add_memcpy_node_to_symbol("nope", a)
    with pytest.raises(ahg.InvalidValue):
        graph.add_memcpy_node_from_symbol(out, COEFFS, 8, 28)
    assert len(graph.nodes()) == 2
    stream = device.create_stream()
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(out, a)
    # Node setters: the graph's copy changes, the executable keeps its own.
    to.set_memcpy_to_symbol_params(COEFFS, b)
    with pytest.raises(ahg.InvalidSymbol):
        to.set_memcpy_to_symbol_params(None, b)
    with pytest.raises(ahg.InvalidValue, match="direction"):
        to.set_memcpy_from_symbol_params(out, COEFFS)  # D2H on an H2D node
    assert to.params.src is b
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(out, a)
    # Exec setters.
    graph_exec.set_memcpy_node_to_symbol(to, COEFFS, b)
    graph_exec.set_memcpy_node_from_symbol(back, out, COEFFS, 16, 16)
    with pytest.raises(ahg.InvalidSymbol):
        graph_exec.set_memcpy_node_to_symbol(to, "nope", b)
    with pytest.raises(ahg.InvalidValue, match="kind"):
        graph_exec.set_memcpy_node_to_symbol(to, COEFFS, b, kind=ahg.CopyKind.Default)
    out[:] = 0
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(out[:4], b[4:])
    for handle in (graph_exec, graph, stream):
        handle.destroy()
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_exec_symbol_setter_refuses_a_move_to_another_device() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    host = np.zeros(8, np.float32)
    graph = ahg.Graph()
    node = graph.add_memcpy_node_to_symbol(COEFFS, host)  # on the current device, 0
    assert node.params.dst.device == 0
    exec1 = graph.instantiate(device=d1)
    with pytest.raises(ahg.InvalidValue, match="cannot move"):
        exec1.set_memcpy_node_to_symbol(node, COEFFS, host)
    exec0 = graph.instantiate(device=d0)
    exec0.set_memcpy_node_to_symbol(node, COEFFS, host)
    exec0.destroy()
    exec1.destroy()
    graph.destroy()


@pytest.mark.asyncio
async def test_captured_symbol_copies_replay(device: ahg.Device) -> None:
    stream = device.create_stream(non_blocking=True)
    values = np.full(8, 3.0, np.float32)
    out = np.zeros(8, np.float32)
    stream.begin_capture()
    await stream.memcpy_to_symbol(COEFFS, values)
    await stream.memcpy_from_symbol(out, COEFFS)
    graph = stream.end_capture()
    assert [n.type for n in graph.nodes()] == [ahg.NodeType.Memcpy] * 2
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(out, values)
    destroy(stream, graph, graph_exec)


@pytest.mark.asyncio
async def test_a_device_without_room_for_a_symbol_is_out_of_memory() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=16))
    device = ahg.get_device(0)
    stream = device.create_stream()
    before = device.memory.statistics()
    with pytest.raises(ahg.OutOfMemory):
        await stream.memcpy_to_symbol(COEFFS, np.zeros(8, np.float32))
    with pytest.raises(ahg.OutOfMemory):
        COEFFS.address()
    assert device.memory.statistics() == before
    await stream.memcpy_to_symbol(COUNTER, np.ones(1, np.float32))  # 4 bytes fit
    await stream.synchronize()
    assert COUNTER.view(device).view(np.float32)[0] == 1.0
    destroy(stream)
