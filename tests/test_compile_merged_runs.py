"""Kernel-run segments back to back on a strand, with no wait or signal between them, are
compiled as one run: the same ops in the same order, and every node still found (setters,
update, the plan verifier that wraps every instantiate in the tests).
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec import compile as compile_module

N = 64


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int64], i: ahg.int64, add: ahg.int64) -> None:
    """x[i] = x[i] * 2 + add: order within a branch shows."""
    if t.ids.size:
        x[i] = x[i] * 2 + add


def _fork_join(
    x: ahg.DevicePtr, branches: int, length: int
) -> tuple[ahg.Graph, list[list[ahg.GraphNode]]]:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    rows = []
    tails = []
    for b in range(branches):
        node = root
        row = []
        for k in range(length):
            node = graph.add_kernel_node(bump, 1, 1, (x, b, k + 1), deps=[node])
            row.append(node)
        rows.append(row)
        tails.append(node)
    graph.add_kernel_node(bump, 1, 1, (x, N - 1, 1), deps=tails)
    return graph, rows


def _expected(branches: int, length: int, adds: dict[tuple[int, int], int]) -> np.ndarray:
    out = np.zeros(N, dtype=np.int64)
    for b in range(branches):
        for k in range(length):
            out[b] = out[b] * 2 + adds.get((b, k), k + 1)
    out[N - 1] = 1
    return out


@pytest.mark.asyncio
@pytest.mark.parametrize(("branches", "length"), [(9, 3), (40, 1), (2, 5)])
async def test_merged_runs_give_the_eager_results_and_setters_find_every_node(
    device: ahg.Device, branches: int, length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = device.malloc(N * 8)
    stream = device.create_stream()
    graph, rows = _fork_join(x, branches, length)
    runs: list[int] = []
    real = compile_module._Builder.emit_kernel_run

    def counted(self: object, graph: object, items: object, *rest: object) -> None:
        runs.append(len(items))  # type: ignore[arg-type]
        real(self, graph, items, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(compile_module._Builder, "emit_kernel_run", counted)
    exec_ = graph.instantiate()
    try:
        strands = exec_.plan.num_strands
        # One run per strand for the branches, the join's own: fewer runs than segments.
        assert len(runs) <= strands + 1
        if branches > strands:
            assert len(runs) < branches + 1
        assert sum(runs) == branches * length + 1
        await device.memset(x, 0, N * 8)
        await exec_.launch(stream)
        await stream.synchronize()
        np.testing.assert_array_equal(device.view(x, np.int64, N), _expected(branches, length, {}))
        # Every branch node's op is found: change the last branch's first node and a middle one.
        adds = {(branches - 1, 0): 7, (branches // 2, length - 1): 5}
        for (b, k), add in adds.items():
            exec_.set_kernel_node_params(rows[b][k], bump, 1, 1, (x, b, add))
        await device.memset(x, 0, N * 8)
        await exec_.launch(stream)
        await stream.synchronize()
        np.testing.assert_array_equal(
            device.view(x, np.int64, N), _expected(branches, length, adds)
        )
        # An update from a rebuilt graph with new arguments: the whole-graph path.
        again, _ = _fork_join(x, branches, length)
        exec_.update(again)
        again.destroy()
        await device.memset(x, 0, N * 8)
        await exec_.launch(stream)
        await stream.synchronize()
        np.testing.assert_array_equal(device.view(x, np.int64, N), _expected(branches, length, {}))
    finally:
        exec_.destroy()
        graph.destroy()
        stream.destroy()
        device.free(x)


def test_a_join_waits_once_per_strand(device: ahg.Device) -> None:
    """The join waits for the latest segment of each other strand, which covers the earlier
    ones: a wide fork-join needs a signal per strand, not one per branch."""
    x = device.malloc(N * 8)
    graph, _ = _fork_join(x, 40, 2)
    exec_ = graph.instantiate()
    try:
        plan = exec_.plan
        join = plan.segments[-1]
        assert len(join.deps) == 40
        assert len(join.waits) == plan.num_strands - 1
        # start, one per other strand's branch head waiting on the root, one per strand's last
        assert plan.num_signals <= 2 * plan.num_strands
    finally:
        exec_.destroy()
        graph.destroy()
        device.free(x)
