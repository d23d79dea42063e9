"""Pitched (2D/3D) copies on streams, as memcpy nodes, in executables and under capture.

The scenarios follow HIP's hipMemcpy2D / hipMemcpy3D tests: H2D-D2D-D2H round trips of a
pitched allocation, the negative cases (pitch below width, pitch above the maximum, out of
bounds, a bad kind, null endpoints), zero extents, and positions inside the region.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ahipgraph as ahg
from ahipgraph.runtime.pitched import check_pitched_copy
from ahipgraph.testing import snapshot
from cleanup import destroy

P = ahg.PitchedPtr


def _host(rows: int, cols: int, seed: int = 0) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.random.default_rng(seed).integers(0, 255, (rows, cols), dtype=np.uint8)


# -- the pure checks, in HIP's order -----------------------------------------------------------


def test_pitch_below_width_is_invalid_pitch_value(device: ahg.Device) -> None:
    ptr = device.malloc(1024)
    with pytest.raises(ahg.InvalidPitchValue):
        check_pitched_copy(P(ptr, 8), P(ptr, 16), (16, 2, 1), max_pitch=2**31 - 1)
    with pytest.raises(ahg.InvalidPitchValue):
        check_pitched_copy(P(ptr, 16), P(ptr, 0), (16, 2, 1), max_pitch=2**31 - 1)
    destroy(ptr)


def test_pitch_above_the_maximum_is_invalid_value(device: ahg.Device) -> None:
    ptr = device.malloc(1024)
    with pytest.raises(ahg.InvalidValue, match="maximum"):
        check_pitched_copy(P(ptr, 64), P(ptr, 16), (16, 2, 1), max_pitch=32)
    destroy(ptr)


def test_pitch_checks_come_before_the_kind_and_the_bounds(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    # Out of bounds and a bad kind, but the pitch is reported first, as HIP does.
    with pytest.raises(ahg.InvalidPitchValue):
        check_pitched_copy(P(ptr, 4), P(ptr, 4), (8, 100, 1), kind=99, max_pitch=1 << 20)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        check_pitched_copy(P(ptr, 8), P(ptr, 8), (8, 100, 1), kind=99, max_pitch=1 << 20)
    destroy(ptr)


@pytest.mark.parametrize(
    "kind", [ahg.CopyKind.HostToDevice, ahg.CopyKind.DeviceToHost, ahg.CopyKind.HostToHost, 7]
)
def test_a_kind_that_contradicts_the_endpoints_is_invalid_memcpy_direction(
    device: ahg.Device, kind: int
) -> None:
    ptr = device.malloc(256)
    with pytest.raises(ahg.InvalidMemcpyDirection):
        check_pitched_copy(P(ptr, 16), P(ptr + 128, 16), (16, 2, 1), kind=kind, max_pitch=1 << 20)
    destroy(ptr)


@pytest.mark.parametrize(
    ("extent", "dst_pos", "src_pos", "slice_height"),
    [
        ((16, 5, 1), (0, 0, 0), (0, 0, 0), None),  # 5 rows of a 16-byte pitch: 80 > 64 bytes
        ((16, 2, 1), (0, 3, 0), (0, 0, 0), None),  # the destination starts at row 3
        ((16, 2, 1), (0, 0, 0), (1, 3, 0), None),  # the source starts at row 3, byte 1
        ((16, 2, 2), (0, 0, 0), (0, 0, 0), 3),  # 2 slices of 3 rows: (3 + 1) * 16 + 16 = 80
    ],
)
def test_a_region_out_of_bounds_is_invalid_value(
    device: ahg.Device, extent: Any, dst_pos: Any, src_pos: Any, slice_height: Any
) -> None:
    a, b = device.malloc(64), device.malloc(64)
    with pytest.raises(ahg.InvalidValue, match="past"):
        check_pitched_copy(
            P(a, 16, slice_height),
            P(b, 16, slice_height),
            extent,
            dst_pos=dst_pos,
            src_pos=src_pos,
            max_pitch=1 << 20,
        )
    destroy(a, b)


def test_a_host_region_out_of_bounds_is_invalid_value(device: ahg.Device) -> None:
    dev = device.malloc(4096)
    host = np.zeros(40, np.uint8)
    with pytest.raises(ahg.InvalidValue, match="40-byte"):
        check_pitched_copy(P(dev, 16), P(host, 16), (16, 3, 1), max_pitch=1 << 20)
    destroy(dev)


def test_null_endpoints_and_slice_height_below_height_are_invalid_value(
    device: ahg.Device,
) -> None:
    ptr = device.malloc(4096)
    for bad in (P(ahg.NULL, 16), P(None, 16)):  # type: ignore[arg-type]
        with pytest.raises(ahg.InvalidValue, match="null"):
            check_pitched_copy(bad, P(ptr, 16), (16, 2, 1), max_pitch=1 << 20)
    with pytest.raises(ahg.InvalidValue, match="slice height"):
        check_pitched_copy(P(ptr, 16, 1), P(ptr, 16), (16, 2, 2), max_pitch=1 << 20)
    with pytest.raises(ahg.InvalidValue, match="negative"):
        check_pitched_copy(P(ptr, 16), P(ptr, 16), (16, 2, 1), dst_pos=(0, -1, 0), max_pitch=64)
    with pytest.raises(ahg.InvalidDevicePointer):
        check_pitched_copy(
            P(ahg.DevicePtr(0, 12345), 16), P(ptr, 16), (16, 2, 1), max_pitch=1 << 20
        )
    destroy(ptr)


def test_python_misuse_is_a_type_error(device: ahg.Device) -> None:
    ptr = device.malloc(4096)
    with pytest.raises(TypeError, match="PitchedPtr"):
        check_pitched_copy(ptr, P(ptr, 16), (16, 2, 1), max_pitch=64)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="extent"):
        check_pitched_copy(P(ptr, 16), P(ptr, 16), (16, 2), max_pitch=64)
    with pytest.raises(TypeError, match="pitch"):
        check_pitched_copy(P(ptr, 16.0), P(ptr, 16), (16, 2, 1), max_pitch=64)  # type: ignore[arg-type]
    destroy(ptr)


def test_zero_extents_are_valid_and_copy_nothing(device: ahg.Device) -> None:
    ptr = device.malloc(64)
    for extent in ((0, 5, 1), (16, 0, 1), (16, 5, 0)):
        params = check_pitched_copy(P(ptr, 16), P(ptr, 16), extent, max_pitch=64)
        assert params.nbytes == 0
    destroy(ptr)


# -- on streams: results equal numpy -----------------------------------------------------------


@pytest.mark.asyncio
async def test_2d_round_trip_h2d_d2d_d2h_equals_numpy(ahg_device: ahg.Device) -> None:
    device = ahg_device
    rows, width, dpitch = 7, 13, 32
    host = _host(rows, width)
    a, b = device.malloc(dpitch * rows), device.malloc(dpitch * rows)
    out = np.zeros((rows, width), np.uint8)
    stream = device.create_stream()
    await stream.memcpy_2d(a, dpitch, host, width, width, rows)
    await stream.memcpy_2d(b, dpitch, a, dpitch, width, rows, ahg.CopyKind.DeviceToDevice)
    done = await stream.memcpy_2d(out, width, b, dpitch, width, rows, ahg.CopyKind.Default)
    await done
    np.testing.assert_array_equal(out, host)
    # The padding between rows was never written.
    raw = device.view(a, np.uint8, dpitch * rows).reshape(rows, dpitch)
    assert not raw[:, width:].any()
    stream.destroy()
    device.free(a)
    device.free(b)


@pytest.mark.asyncio
async def test_3d_copy_with_positions_equals_numpy(ahg_device: ahg.Device) -> None:
    device = ahg_device
    depth, rows, cols = 3, 4, 6
    volume = np.arange(depth * rows * cols, dtype=np.uint8).reshape(depth, rows, cols)
    pitch, slice_rows = 8, 5
    dev = device.malloc(pitch * slice_rows * (depth + 1))
    stream = device.create_stream()
    # Place the volume at (x=1, y=1, z=1) of a padded device volume.
    await stream.memcpy_3d(
        P(dev, pitch, slice_rows), P(volume, cols, rows), (cols, rows, depth), dst_pos=(1, 1, 1)
    )
    back = np.zeros((depth, rows, cols), np.uint8)
    await stream.memcpy_3d(
        P(back, cols, rows), P(dev, pitch, slice_rows), (cols, rows, depth), src_pos=(1, 1, 1)
    )
    await stream.synchronize()
    np.testing.assert_array_equal(back, volume)
    raw = device.view(dev, np.uint8).reshape(depth + 1, slice_rows, pitch)
    np.testing.assert_array_equal(raw[1:, 1 : rows + 1, 1 : cols + 1], volume)
    assert raw[0].sum() == 0
    stream.destroy()
    device.free(dev)


@pytest.mark.asyncio
async def test_a_failed_stream_copy_enqueues_nothing_and_leaks_nothing(
    ahg_device: ahg.Device,
) -> None:
    device = ahg_device
    dev = device.malloc(64)
    stream = device.create_stream()
    before = (snapshot(), stream.statistics())
    host = np.zeros(64, np.uint8)
    with pytest.raises(ahg.InvalidPitchValue):
        await stream.memcpy_2d(dev, 4, host, 8, 8, 2)
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy_2d(dev, 1 << 31, host, 8, 8, 2)
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy_2d(dev, 32, host, 8, 8, 3)  # 2 * 32 + 8 > 64
    with pytest.raises(ahg.InvalidMemcpyDirection):
        await stream.memcpy_2d(dev, 8, host, 8, 8, 2, ahg.CopyKind.DeviceToHost)
    assert (snapshot(), stream.statistics()) == before
    stream.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.memcpy_2d(dev, 8, host, 8, 8, 2)
    device.free(dev)


@pytest.mark.asyncio
async def test_max_pitch_is_a_device_property() -> None:
    ahg.configure_devices(1, ahg.DeviceProperties(max_pitch=64))
    device = ahg.get_device(0)
    dev = device.malloc(1024)
    stream = device.create_stream()
    await (await stream.memcpy_2d(dev, 64, dev + 512, 64, 8, 2))
    with pytest.raises(ahg.InvalidValue, match="maximum"):
        await stream.memcpy_2d(dev, 128, dev + 512, 64, 8, 2)
    destroy(dev, stream)


@pytest.mark.asyncio
async def test_a_pitched_copy_costs_its_bytes_not_its_span(device: ahg.Device) -> None:
    cost = device.properties.cost
    host = np.zeros((4, 1000), np.uint8)
    dev = device.malloc(1 << 20)
    stream = device.create_stream()
    done = await stream.memcpy_2d(dev, 100_000, host, 1000, 1000, 4)
    await done
    assert done.end_ns - done.start_ns == cost.copy_ns(4000, ahg.CopyKind.HostToDevice)
    destroy(dev, stream)


# -- as memcpy nodes ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_3d_node_in_a_graph_equals_the_eager_copy(ahg_device: ahg.Device) -> None:
    device = ahg_device
    host = _host(6, 10, seed=1)
    dev = device.malloc(16 * 6)
    out = np.zeros((6, 10), np.uint8)
    graph = ahg.Graph()
    up = graph.add_memcpy_3d_node(P(dev, 16), P(host, 10), (10, 6, 1))
    down = graph.add_memcpy_3d_node(P(out, 10), P(dev, 16), (10, 6, 1), deps=[up])
    assert up.type is ahg.NodeType.Memcpy
    assert down.type is ahg.NodeType.Memcpy
    assert up.params.kind is ahg.CopyKind.HostToDevice
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(out, host)
    # Clones copy the node; the clone replays the same copy.
    out[:] = 0
    clone = graph.clone()
    clone_exec = clone.instantiate()
    await (await clone_exec.launch(stream))
    np.testing.assert_array_equal(out, host)
    for handle in (clone_exec, graph_exec, clone, graph, stream):
        handle.destroy()
    device.free(dev)


def test_a_failed_node_add_changes_nothing(device: ahg.Device) -> None:
    dev = device.malloc(64)
    graph = ahg.Graph()
    host = np.zeros(64, np.uint8)
    before = graph.statistics()
    for call, error in (
        (lambda: graph.add_memcpy_3d_node(P(dev, 4), P(host, 8), (8, 2, 1)), ahg.InvalidPitchValue),
        (lambda: graph.add_memcpy_3d_node(P(dev, 8), P(host, 8), (8, 9, 1)), ahg.InvalidValue),
        (
            lambda: graph.add_memcpy_3d_node(P(dev, 8), P(host, 8), (8, 2, 1), kind=2),
            ahg.InvalidMemcpyDirection,
        ),
    ):
        with pytest.raises(error):
            call()
        assert graph.statistics() == before
    graph.destroy()
    destroy(dev)


@pytest.mark.asyncio
async def test_node_and_exec_setters_round_trip(ahg_device: ahg.Device) -> None:
    device = ahg_device
    host_a, host_b = _host(4, 8, seed=2), _host(4, 8, seed=3)
    dev = device.malloc(16 * 4)
    graph = ahg.Graph()
    node = graph.add_memcpy_3d_node(P(dev, 16), P(host_a, 8), (8, 4, 1))
    node.set_memcpy_3d_params(P(dev, 16), P(host_b, 8), (8, 4, 1))
    assert node.params.src is host_b
    with pytest.raises(ahg.InvalidValue, match="direction"):
        node.set_memcpy_3d_params(P(host_a, 8), P(dev, 16), (8, 4, 1))  # D2H on an H2D node
    with pytest.raises(ahg.InvalidPitchValue):
        node.set_memcpy_3d_params(P(dev, 4), P(host_b, 8), (8, 4, 1))
    assert node.params.src is host_b  # failed sets changed nothing
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    view = device.view(dev, np.uint8).reshape(4, 16)
    np.testing.assert_array_equal(view[:, :8], host_b)
    graph_exec.set_memcpy_3d_node_params(node, P(dev, 16), P(host_a, 8), (8, 4, 1))
    with pytest.raises(ahg.InvalidValue, match="kind"):
        graph_exec.set_memcpy_3d_node_params(
            node, P(dev, 16), P(host_a, 8), (8, 4, 1), kind=ahg.CopyKind.Default
        )
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_memcpy_3d_node_params(node, P(host_a, 8), P(dev, 16), (8, 4, 1))
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(view[:, :8], host_a)
    # A linear setter on the pitched node keeps its direction rule too.
    graph_exec.set_memcpy_node_params(node, dev, host_b, 32)
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(view.reshape(-1)[:32], host_b.reshape(-1)[:32])
    for handle in (graph_exec, graph, stream):
        handle.destroy()
    device.free(dev)


@pytest.mark.asyncio
async def test_exec_update_takes_a_pitched_copy_of_the_same_direction(
    ahg_device: ahg.Device,
) -> None:
    device = ahg_device
    host_a, host_b = _host(3, 8, seed=4), _host(3, 8, seed=5)
    dev = device.malloc(16 * 3)

    def build(host: Any) -> ahg.Graph:
        graph = ahg.Graph()
        graph.add_memcpy_3d_node(P(dev, 16), P(host, 8), (8, 3, 1))
        return graph

    first, second = build(host_a), build(host_b)
    graph_exec = first.instantiate()
    graph_exec.update(second)
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(device.view(dev, np.uint8).reshape(3, 16)[:, :8], host_b)
    for handle in (graph_exec, first, second, stream):
        handle.destroy()
    device.free(dev)


@pytest.mark.asyncio
async def test_captured_pitched_copy_becomes_a_memcpy_node(ahg_device: ahg.Device) -> None:
    device = ahg_device
    host = _host(5, 9, seed=6)
    dev = device.malloc(16 * 5)
    out = np.zeros((5, 9), np.uint8)
    stream = device.create_stream(non_blocking=True)  # a blocking one would make the null stream
    stream.begin_capture()
    await stream.memcpy_2d(dev, 16, host, 9, 9, 5)
    await stream.memcpy_3d(P(out, 9), P(dev, 16), (9, 5, 1))
    await stream.memcpy_2d(dev, 16, host, 9, 0, 5)  # empty: adds nothing, as HIP
    graph = stream.end_capture()
    assert [n.type for n in graph.nodes()] == [ahg.NodeType.Memcpy, ahg.NodeType.Memcpy]
    assert not out.any()  # captured, not run
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    np.testing.assert_array_equal(out, host)
    for handle in (graph_exec, graph, stream):
        handle.destroy()
    device.free(dev)


# -- random regions: stream, graph node and numpy agree ------------------------------------------


@st.composite
def regions(draw: st.DrawFn) -> tuple[Any, ...]:
    width = draw(st.integers(0, 12))
    height = draw(st.integers(0, 5))
    depth = draw(st.integers(0, 3))
    pitches = [width + draw(st.integers(1, 6)) for _ in range(2)]  # never an empty buffer
    slices = [height + draw(st.integers(1, 3)) for _ in range(2)]
    positions = [
        (draw(st.integers(0, 3)), draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        for _ in range(2)
    ]
    return width, height, depth, pitches, slices, positions


@settings(max_examples=60, deadline=None)
@given(regions())
def test_random_pitched_copies_equal_numpy_eagerly_and_in_a_graph(region: tuple[Any, ...]) -> None:
    width, height, depth, (dpitch, spitch), (dslice, sslice), (dpos, spos) = region
    device = ahg.get_device(0)
    src_shape = (spos[2] + depth + 1, sslice, spitch)
    dst_shape = (dpos[2] + depth + 1, dslice, dpitch)
    source = np.random.default_rng(width * 31 + height).integers(1, 255, src_shape, dtype=np.uint8)
    expected = np.zeros(dst_shape, np.uint8)
    if width and height and depth:
        x, y, z = spos
        block = source[z : z + depth, y : y + height, x : x + width]
        # A position's x may spill into the next row (HIP addresses bytes); keep the model
        # simple: only regions that stay inside their rows are compared with numpy slicing.
        if x + width > spitch or dpos[0] + width > dpitch or y + height > sslice:
            return
        if dpos[1] + height > dslice:
            return
        dx, dy, dz = dpos
        expected[dz : dz + depth, dy : dy + height, dx : dx + width] = block

    async def run() -> tuple[Any, Any]:
        dev = device.malloc(expected.nbytes)
        stream = device.create_stream(non_blocking=True)
        dst = P(dev, dpitch, dslice)
        src = P(source, spitch, sslice)
        extent = (width, height, depth)
        await stream.memcpy_3d(dst, src, extent, dst_pos=dpos, src_pos=spos)
        await stream.synchronize()
        eager = device.view(dev, np.uint8, expected.nbytes).reshape(dst_shape).copy()
        device.view(dev, np.uint8, expected.nbytes)[:] = 0
        graph = ahg.Graph()
        graph.add_memcpy_3d_node(dst, src, extent, dst_pos=dpos, src_pos=spos)
        graph_exec = graph.instantiate()
        await (await graph_exec.launch(stream))
        replay = device.view(dev, np.uint8, expected.nbytes).reshape(dst_shape).copy()
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
        device.free(dev)
        return eager, replay

    eager, replay = ahg.run(run())
    np.testing.assert_array_equal(eager, expected)
    np.testing.assert_array_equal(replay, expected)
