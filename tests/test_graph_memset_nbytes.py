"""``graph.add_memset_node(dst, value, nbytes=...)``: the size in bytes, as ``stream.memset``.

``stream.memset`` and ``Device.memset`` take the size as ``nbytes=`` (``hipMemsetAsync``'s
``sizeBytes``); the memset node took only ``width``, in elements, and ``nbytes=`` was an
unexpected keyword. The node now takes exactly one of the two, through the stream's own check,
with the stream's errors; ``nbytes=`` is for a fill of one row (HIP's 2D fills count a row's
width, which ``width`` gives).
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.asyncio
@pytest.mark.parametrize("element_size", [1, 2, 4])
async def test_nbytes_makes_the_node_the_width_gives(device: ahg.Device, element_size: int) -> None:
    buf = device.malloc(64)
    with ahg.Graph() as graph:
        by_bytes = graph.add_memset_node(buf, 7, nbytes=64, element_size=element_size)
        by_width = graph.add_memset_node(buf, 7, 64 // element_size, element_size=element_size)
        assert by_bytes.params == by_width.params
        assert by_bytes.params.nbytes == 64
        with graph.instantiate() as graph_exec, device.create_stream() as stream:
            await (await graph_exec.launch(stream))
    expected = np.zeros(64 // element_size, dtype=f"u{element_size}") + 7
    assert device.view(buf, expected.dtype).tolist() == expected.tolist()
    device.free(buf)


def test_a_size_given_twice_or_not_at_all_or_uneven_is_refused(device: ahg.Device) -> None:
    buf = device.malloc(64)
    with ahg.Graph() as graph:
        before = graph.statistics()
        with pytest.raises(TypeError, match=r"^Graph\.add_memset_node\(\) takes width .* not both"):
            graph.add_memset_node(buf, 0, 4, nbytes=4)
        with pytest.raises(TypeError, match=r"^Graph\.add_memset_node\(\) missing its size"):
            graph.add_memset_node(buf, 0)
        with pytest.raises(ahg.InvalidValue, match="whole number of 4-byte elements"):
            graph.add_memset_node(buf, 0, nbytes=6, element_size=4)
        with pytest.raises(ahg.InvalidValue, match=r"negative memset size nbytes=-4$"):
            graph.add_memset_node(buf, 0, nbytes=-4, element_size=4)
        with pytest.raises(ahg.InvalidValue, match="element size"):
            graph.add_memset_node(buf, 0, nbytes=6, element_size=3)
        with pytest.raises(TypeError, match="nbytes must be an int"):
            graph.add_memset_node(buf, 0, nbytes=1.5)  # type: ignore[arg-type]
        with pytest.raises(ahg.InvalidValue, match="empty"):
            graph.add_memset_node(buf, 0, nbytes=0)  # HIP refuses a memset node of width 0
        with pytest.raises(TypeError, match="one row"):
            graph.add_memset_node(buf, 0, nbytes=16, height=2, pitch=32)
        with pytest.raises(TypeError, match="height must be an int"):
            graph.add_memset_node(buf, 0, nbytes=16, height="1")  # type: ignore[arg-type]
        with pytest.raises(ahg.InvalidValue):
            graph.add_memset_node(buf, 0, nbytes=128)  # past the allocation
        assert graph.statistics() == before  # nothing was added
        node = graph.add_memset_node(buf, 0, nbytes=np.int64(8), height=np.int64(1))
        assert node.params.width == 8
    device.free(buf)


def test_a_destroyed_graph_is_reported_before_the_size(device: ahg.Device) -> None:
    buf = device.malloc(16)
    graph = ahg.Graph()
    graph.destroy()
    for kwargs in ({"nbytes": -4}, {"nbytes": 4}, {}):
        with pytest.raises(ahg.InvalidValue, match="destroyed"):
            graph.add_memset_node(buf, 0, **kwargs)  # type: ignore[arg-type]
    device.free(buf)


@pytest.mark.asyncio
async def test_both_setters_take_nbytes_as_the_add_does(device: ahg.Device) -> None:
    buf = device.malloc(64)
    with ahg.Graph() as graph:
        node = graph.add_memset_node(buf, 1, nbytes=64)
        node.set_memset_params(buf, 2, nbytes=32, element_size=4)
        assert (node.params.width, node.params.element_size) == (8, 4)
        with pytest.raises(TypeError, match=r"^GraphNode\.set_memset_params\(\) takes width"):
            node.set_memset_params(buf, 2, 8, nbytes=32)
        with pytest.raises(TypeError, match=r"^GraphNode\.set_memset_params\(\) missing its size"):
            node.set_memset_params(buf, 2)
        assert node.params.width == 8  # a refused set changes nothing
        with graph.instantiate() as graph_exec, device.create_stream() as stream:
            graph_exec.set_memset_node_params(node, buf, 3, nbytes=16, element_size=4)
            with pytest.raises(
                TypeError, match=r"^GraphExec\.set_memset_node_params\(\) takes nbytes= for"
            ):
                graph_exec.set_memset_node_params(node, buf, 3, nbytes=16, height=2, pitch=32)
            with pytest.raises(ahg.InvalidValue, match="whole number of 4-byte elements"):
                graph_exec.set_memset_node_params(node, buf, 3, nbytes=6, element_size=4)
            await (await graph_exec.launch(stream))
    assert device.view(buf, np.uint32).tolist()[:8] == [3] * 4 + [0] * 4
    device.free(buf)
