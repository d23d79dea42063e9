"""Copy parameters: the copy kind and a copy onto itself.

``kind`` is an enum argument, and the integer rule (``core.ints``) says a bool or a float is a
bug, never a value: ``kind=True`` used to pass as ``HostToDevice`` (``CopyKind(True)``) and
``kind=1.0`` too, on every copy entry point, where ``begin_capture(mode=True)`` was refused.

HIP refuses a linear copy node of 0 bytes when it is added (``hipGraphAddMemcpyNode1D``), as
the setters do; ours took it. HIP's linear-copy setters (``hipGraphMemcpyNodeSetParams1D`` and
``hipGraphExecMemcpyNodeSetParams1D``) refuse a copy whose source and destination are the same
address with ``hipErrorInvalidValue``, as they refuse a count of 0; ours took it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

NOT_KINDS = [True, False, np.True_, 1.0, 3.0, "1", object()]


@pytest.fixture
def ends(device: ahg.Device) -> Any:
    src, dst = device.malloc(64), device.malloc(64)
    yield src, dst
    destroy(src, dst)


@pytest.mark.parametrize("kind", NOT_KINDS, ids=repr)
def test_graph_copy_nodes_refuse_a_kind_that_is_not_an_int(ends: Any, kind: Any) -> None:
    src, dst = ends
    host = np.zeros(16, np.float32)
    graph = ahg.Graph()
    symbol = ahg.device_symbol("copy_kind_table", dtype=np.float32, shape=(16,))
    adds: list[Callable[[], object]] = [
        lambda: graph.add_memcpy_node(dst, src, 64, kind=kind),
        lambda: graph.add_memcpy_node(dst, host, kind=kind),
        lambda: graph.add_memcpy_node_to_symbol(symbol, host, kind=kind),
        lambda: graph.add_memcpy_node_from_symbol(host, symbol, kind=kind),
        lambda: graph.add_memcpy_3d_node(
            ahg.PitchedPtr(dst, 64), ahg.PitchedPtr(src, 64), (64, 1, 1), kind=kind
        ),
    ]
    for add in adds:
        with pytest.raises(ahg.InvalidMemcpyDirection, match="is not a memcpy kind"):
            add()
    assert graph.statistics().nodes == 0
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", [True, 1.0, np.True_], ids=repr)
async def test_stream_copies_refuse_a_kind_that_is_not_an_int(
    device: ahg.Device, ends: Any, kind: Any
) -> None:
    src, dst = ends
    host = np.zeros(16, np.float32)
    symbol = ahg.device_symbol("copy_kind_table", dtype=np.float32, shape=(16,))
    stream = device.create_stream()
    before = stream.statistics().submitted
    with pytest.raises(ahg.InvalidMemcpyDirection, match="is not a memcpy kind"):
        await stream.memcpy(dst, host, kind=kind)
    copies: list[Callable[[], Any]] = [
        lambda: stream.memcpy_nowait(dst, src, 64, kind=kind),
        lambda: stream.memcpy_to_symbol_nowait(symbol, host, kind=kind),
        lambda: stream.memcpy_from_symbol_nowait(host, symbol, kind=kind),
        lambda: stream.memcpy_2d_nowait(dst, 64, src, 64, 64, 1, kind=kind),
    ]
    for copy in copies:
        with pytest.raises(ahg.InvalidMemcpyDirection, match="is not a memcpy kind"):
            copy()
    assert stream.statistics().submitted == before
    await stream.synchronize()
    stream.destroy()


def test_an_int_enum_value_and_a_numpy_int_still_name_a_kind(ends: Any) -> None:
    src, dst = ends
    graph = ahg.Graph()
    node = graph.add_memcpy_node(dst, src, 64, kind=np.int64(3))
    assert node.params.kind is ahg.CopyKind.DeviceToDevice
    graph.add_memcpy_node(dst, src, 64, kind=ahg.CopyKind.Default)
    graph.destroy()


@pytest.mark.parametrize("kind", [True, 3.0], ids=repr)
def test_executable_copy_setters_refuse_a_kind_that_is_not_an_int(ends: Any, kind: Any) -> None:
    src, dst = ends
    graph = ahg.Graph()
    node = graph.add_memcpy_node(dst, src, 64)
    graph_exec = graph.instantiate()
    for call in (
        lambda: graph_exec.set_memcpy_node_params(node, dst, src, 64, kind=kind),
        lambda: graph_exec.set_memcpy_3d_node_params(
            node, ahg.PitchedPtr(dst, 64), ahg.PitchedPtr(src, 64), (64, 1, 1), kind=kind
        ),
    ):
        with pytest.raises(ahg.InvalidValue, match="is not a memcpy kind"):
            call()
    assert graph_exec.statistics().versions == 1
    destroy(graph_exec, graph)


def test_a_node_setter_refuses_a_copy_onto_itself_and_keeps_its_parameters(ends: Any) -> None:
    src, dst = ends
    graph = ahg.Graph()
    node = graph.add_memcpy_node(dst, src, 64)
    before = node.params
    with pytest.raises(ahg.InvalidValue, match="same"):
        node.set_memcpy_params(src, src, 64)
    with pytest.raises(ahg.InvalidValue, match="same"):
        node.set_memcpy_params(dst + 8, dst + 8, 16)
    assert node.params == before
    node.set_memcpy_params(dst + 8, dst, 16)  # overlapping but distinct: HIP takes it
    graph.destroy()


def test_a_node_setter_refuses_a_host_copy_onto_the_same_array(device: ahg.Device) -> None:
    host = np.zeros(16, np.float32)
    graph = ahg.Graph()
    node = graph.add_memcpy_node(host, np.ones(16, np.float32))
    with pytest.raises(ahg.InvalidValue, match="same"):
        node.set_memcpy_params(host, host)
    with pytest.raises(ahg.InvalidValue, match="same"):
        node.set_memcpy_params(host[:8], host.view(np.uint8)[:32])
    node.set_memcpy_params(host[8:], host[:8])
    graph.destroy()


@pytest.mark.asyncio
async def test_an_executable_setter_refuses_a_copy_onto_itself_and_replays_the_old_copy(
    device: ahg.Device, ends: Any
) -> None:
    src, dst = ends
    device.view(src, np.uint8)[:] = 7
    graph = ahg.Graph()
    node = graph.add_memcpy_node(dst, src, 64)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    before = graph_exec.statistics()
    with pytest.raises(ahg.InvalidValue, match="same"):
        graph_exec.set_memcpy_node_params(node, src, src, 64)
    assert graph_exec.statistics() == before
    await (await graph_exec.launch(stream))
    assert (device.view(dst, np.uint8) == 7).all()
    destroy(graph_exec, graph, stream)


@pytest.mark.asyncio
async def test_adding_an_empty_copy_node_is_invalid_value_but_capturing_one_adds_nothing(
    device: ahg.Device, ends: Any
) -> None:
    """``hipGraphAddMemcpyNode1D`` refuses a count of 0, as the setters and the memset add do;
    only a capture skips an empty copy (and succeeds)."""
    src, dst = ends
    graph = ahg.Graph()
    for args in ((dst, src, 0), (dst, np.zeros(0, np.float32)), (np.zeros(0, np.uint8), src)):
        with pytest.raises(ahg.InvalidValue, match="count must not be 0"):
            graph.add_memcpy_node(*args)
    assert graph.statistics().nodes == 0
    graph.destroy()
    stream = device.create_stream()
    stream.begin_capture()
    await stream.memcpy(dst, src, 0)
    captured = stream.end_capture()
    assert captured.nodes() == []
    destroy(captured, stream)
