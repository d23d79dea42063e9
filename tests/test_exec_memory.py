"""What an executable holds per node: kernel ops of a run share what they have in common."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device.ops import KernelOp


@ahg.kernel
def add_to(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] += value


@ahg.kernel
def scalar_only(t: ahg.Threads, value: ahg.int64) -> None:
    """No pointers: the op unpacks its scalars on every dispatch."""


def _kernel_ops(graph_exec: ahg.GraphExec) -> list[KernelOp]:
    return [
        op
        for ops in graph_exec._launcher.compiled.strand_ops
        for op in ops
        if isinstance(op, KernelOp)
    ]


@pytest.mark.asyncio
async def test_a_run_of_one_shape_shares_one_class_and_gives_eager_results(
    device: ahg.Device,
) -> None:
    x = device.malloc(8)
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(50):
        previous = [graph.add_kernel_node(add_to, 1, 1, (x, i), deps=previous)]
    graph_exec = graph.instantiate()
    ops = _kernel_ops(graph_exec)
    assert len(ops) == 50
    assert len({type(op) for op in ops}) == 1
    assert [op.offset for op in ops] == sorted({op.offset for op in ops})
    alone = KernelOp(add_to, ops[0].threads, ops[0].buffer, ops[0].offset, ops[0].cost_ns)
    assert sys.getsizeof(ops[0]) < sys.getsizeof(alone)
    assert repr(ops[0]) == repr(alone)
    assert ops[0].kernel is add_to
    assert ops[0].is_async is False
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    await (await graph_exec.launch(stream))
    assert int(device.view(x, np.int64, 1)[0]) == 2 * sum(range(50))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_shared_ops_see_argument_writes_and_scalar_kernels_run(device: ahg.Device) -> None:
    x, y = device.malloc(8), device.malloc(8)
    graph = ahg.Graph()
    first = graph.add_kernel_node(add_to, 1, 1, (x, 1))
    graph.add_kernel_node(scalar_only, 1, 1, (7,), deps=[first])
    second = graph.add_kernel_node(add_to, 1, 1, (x, 2), deps=[first])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    graph_exec.set_kernel_node_params(second, add_to, 1, 1, (y, 5))
    held = await graph_exec.launch(stream)  # enqueued with (y, 5) ...
    graph_exec.set_kernel_node_params(second, add_to, 1, 1, (y, 50))  # ... rewritten after
    await held
    await (await graph_exec.launch(stream))
    assert int(device.view(x, np.int64, 1)[0]) == 1 + 2 + 1 + 1
    assert int(device.view(y, np.int64, 1)[0]) == 5 + 50
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)
