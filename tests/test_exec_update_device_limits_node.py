"""An update refused by the executable's device limits names the node, as every other
refusal does (HIP's error node: the node whose ``SetParams`` failed).

A new graph's kernels are checked against the current device when they are added and against
the executable's device at update; that second check reported its kind and reason with no
node at all.
"""

from __future__ import annotations

from typing import Any

import pytest

import ahipgraph as ahg


@ahg.kernel
def tick(t: ahg.Threads) -> None:
    pass


@pytest.fixture
def small_second_device() -> ahg.Device:
    small = ahg.DeviceProperties(max_threads_per_block=256, max_shared_memory_per_block=1024)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    return ahg.get_device(1)


def shaped(block: int, shared_mem: int, *, in_child: bool) -> tuple[ahg.Graph, ahg.GraphNode]:
    """An empty node, then a kernel (or a child graph holding it): the graph and the node an
    update failure on that kernel should name."""
    graph = ahg.Graph()
    graph.add_empty_node()
    if not in_child:
        return graph, graph.add_kernel_node(tick, 1, block, shared_mem=shared_mem)
    child = ahg.Graph()
    child.add_kernel_node(tick, 1, block, shared_mem=shared_mem)
    node = graph.add_child_graph_node(child)
    child.destroy()
    return graph, node


@pytest.mark.parametrize("in_child", [False, True])
@pytest.mark.parametrize(
    ("change", "kind"),
    [
        ({"block": 512, "shared_mem": 0}, ahg.UpdateResultKind.NotSupported),
        ({"block": 64, "shared_mem": 4096}, ahg.UpdateResultKind.ParametersChanged),
    ],
)
def test_a_kernel_the_device_cannot_run_is_named(
    small_second_device: ahg.Device, in_child: bool, change: dict[str, Any], kind: Any
) -> None:
    graph, _ = shaped(64, 0, in_child=in_child)
    graph_exec = graph.instantiate(device=small_second_device)
    before = graph_exec.statistics()
    new, culprit = shaped(**change, in_child=in_child)
    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        graph_exec.update(new)
    result = info.value.result  # type: ignore[attr-defined]
    assert result.kind is kind
    assert result.node is culprit
    assert graph_exec.statistics() == before  # nothing changed
    graph_exec.destroy()
    new.destroy()
    graph.destroy()
