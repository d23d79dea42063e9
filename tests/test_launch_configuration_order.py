"""Which error a launch with several things wrong gets: HIP's order.

``hipLaunchKernel`` (and ``ihipLaunchKernel_validate`` behind it, which kernel nodes and their
setters use too) checks a grid past its limits and zero dimensions first
(``InvalidConfiguration``), then the dynamic shared memory (``InvalidValue``), then the
block's thread count (``InvalidConfiguration``). Every call that takes a launch configuration
gives the same answer, and a refused call changes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy

TOO_MUCH_SHARED = 65536 + 1


@ahg.kernel
def tick(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    pass


CASES: list[tuple[Any, Any, int, type[ahg.HipError]]] = [
    # (grid, block, shared_mem, expected)
    (1, 2048, TOO_MUCH_SHARED, ahg.InvalidValue),  # shared memory before the block
    (1, (1024, 2), -1, ahg.InvalidValue),
    (0, 2048, TOO_MUCH_SHARED, ahg.InvalidConfiguration),  # a zero dimension before both
    (1, (0, 1), TOO_MUCH_SHARED, ahg.InvalidConfiguration),
    ((1, 65537), 1, TOO_MUCH_SHARED, ahg.InvalidConfiguration),  # the grid limit before both
    (1, 2048, 0, ahg.InvalidConfiguration),
    (1, 1, TOO_MUCH_SHARED, ahg.InvalidValue),
]


@pytest.mark.parametrize(("grid", "block", "shared_mem", "expected"), CASES)
def test_a_graph_node_and_its_setters_follow_hips_order(
    device: ahg.Device, grid: Any, block: Any, shared_mem: int, expected: type[ahg.HipError]
) -> None:
    x = device.malloc(4)
    graph = ahg.Graph()
    with pytest.raises(expected) as caught:
        graph.add_kernel_node(tick, grid, block, (x,), shared_mem=shared_mem)
    assert type(caught.value) is expected
    assert graph.nodes() == []
    node = graph.add_kernel_node(tick, 1, 1, (x,))
    with pytest.raises(expected) as caught:
        node.set_kernel_params(tick, grid, block, (x,), shared_mem=shared_mem)
    assert type(caught.value) is expected
    graph_exec = graph.instantiate()
    with pytest.raises(expected) as caught:
        graph_exec.set_kernel_node_params(node, tick, grid, block, (x,), shared_mem=shared_mem)
    assert type(caught.value) is expected
    params = node.get_kernel_params()
    assert (params.grid, params.block, params.shared_mem) == ((1, 1, 1), (1, 1, 1), 0)
    destroy(graph_exec, graph, x)


@pytest.mark.asyncio
@pytest.mark.parametrize(("grid", "block", "shared_mem", "expected"), CASES)
async def test_an_eager_and_a_captured_launch_follow_hips_order(
    device: ahg.Device, grid: Any, block: Any, shared_mem: int, expected: type[ahg.HipError]
) -> None:
    x = device.malloc(4)
    stream = device.create_stream()
    with pytest.raises(expected) as caught:
        await stream.launch_kernel(tick, grid, block, (x,), shared_mem=shared_mem)
    assert type(caught.value) is expected
    async with stream.capture() as capture:
        with pytest.raises(expected) as caught:
            await stream.launch_kernel(tick, grid, block, (x,), shared_mem=shared_mem)
        assert type(caught.value) is expected
    assert capture.graph.nodes() == []
    await stream.synchronize()
    assert stream.statistics().submitted == 0
    destroy(capture.graph, stream, x)
