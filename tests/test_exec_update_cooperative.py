"""An executable's kernel node keeps the launch mode it was instantiated with.

Whether a kernel launches cooperatively is fixed at instantiate: `exec.update` reports a switch
as `AttributesChanged` naming the node (CUDA's documented update limit) and changes nothing,
and the per-node setters refuse it with `InvalidValue`, as `set_kernel_node_attribute` does.
Other attributes (priority, access-policy window) still update.
"""

from __future__ import annotations

import dataclasses

import pytest

import ahipgraph as ahg
from cleanup import destroy

KA = ahg.KernelNodeAttribute


@ahg.kernel
def noop(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    pass


def _graph(x: ahg.DevicePtr, *, cooperative: bool, priority: int = 0) -> ahg.Graph:
    graph = ahg.Graph()
    node = graph.add_kernel_node(noop, 1, 1, (x, 1))
    node.set_attribute(KA.Cooperative, cooperative)
    node.set_attribute(KA.Priority, priority)
    return graph


@pytest.mark.parametrize("before", [False, True])
def test_update_refuses_to_switch_the_launch_mode(device: ahg.Device, before: bool) -> None:
    x = device.malloc(64)
    graph = _graph(x, cooperative=before)
    (node,) = graph.nodes()
    exec_ = graph.instantiate()
    other = _graph(x, cooperative=not before, priority=-1)
    with pytest.raises(ahg.GraphExecUpdateFailure) as info:
        exec_.update(other)
    assert info.value.result.kind is ahg.UpdateResultKind.AttributesChanged
    assert info.value.result.node is other.nodes()[0]
    assert exec_.kernel_node_attribute(node, KA.Cooperative) is before
    assert exec_.kernel_node_attribute(node, KA.Priority) == 0  # nothing applied
    same_mode = _graph(x, cooperative=before, priority=-1)
    assert exec_.update(same_mode).kind is ahg.UpdateResultKind.Success
    assert exec_.kernel_node_attribute(node, KA.Priority) == -1
    destroy(exec_, graph, other, same_mode, x)


def test_setters_refuse_to_switch_the_launch_mode(device: ahg.Device) -> None:
    x = device.malloc(64)
    graph = _graph(x, cooperative=True)
    (node,) = graph.nodes()
    exec_ = graph.instantiate()
    ordinary = dataclasses.replace(
        node.get_kernel_params(),
        attributes=dataclasses.replace(node.get_kernel_params().attributes, cooperative=False),
    )
    with pytest.raises(ahg.InvalidValue, match="cooperative"):
        exec_.set_node_params(node, ahg.GraphNodeParams(ahg.NodeType.Kernel, ordinary))
    with pytest.raises(ahg.InvalidValue, match="cooperative"):
        exec_.set_kernel_node_attribute(node, KA.Cooperative, False)
    assert exec_.kernel_node_attribute(node, KA.Cooperative) is True
    exec_.set_kernel_node_params(node, noop, 2, 1, (x, 3))  # keeps the node's attributes
    assert exec_.kernel_node_attribute(node, KA.Cooperative) is True
    destroy(exec_, graph, x)
