"""``set_child_graph_node_params``' error codes.

HIP's ``hipGraphExecChildGraphNodeSetParams`` answers ``hipErrorUnknown`` when the new child's
topology or node-type sequence differs from the embedded child's; with the same shape it runs
each node's ``SetParams``, whose own error is the answer. Every refusal was reported as
Unknown here, a memcpy's direction change or a 2D memset's new shape included, where the
node's own setter says InvalidValue; a kernel the executable's device cannot run is that
setter's InvalidConfiguration. A refused change still changes nothing.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] = value


@pytest.mark.asyncio
async def test_a_node_change_the_nodes_setter_refuses_is_its_error_not_unknown(
    device: ahg.Device,
) -> None:
    src, dst = device.malloc(64), device.malloc(64)
    device.view(src, np.int64)[:] = 4
    host = np.zeros(8, np.int64)
    child = ahg.Graph()
    child.add_memcpy_node(dst, src, 8)
    child.add_memset_node(src + 16, 1, 2, element_size=4, height=2, pitch=16)
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    graph_exec = parent.instantiate()

    direction = ahg.Graph()  # the same shape; the copy now goes to the host
    direction.add_memcpy_node(host, src, 8)
    direction.add_memset_node(src + 16, 1, 2, element_size=4, height=2, pitch=16)
    with pytest.raises(ahg.InvalidValue, match="direction"):
        graph_exec.set_child_graph_node_params(node, direction)
    shape = ahg.Graph()  # the same shape; the 2D memset's rows are narrower
    shape.add_memcpy_node(dst, src, 8)
    shape.add_memset_node(src + 16, 1, 1, element_size=4, height=2, pitch=16)
    with pytest.raises(ahg.InvalidValue, match="row size"):
        graph_exec.set_child_graph_node_params(node, shape)
    other = ahg.Graph()  # another node type is still HIP's Unknown
    other.add_memset_node(dst, 0, 8)
    other.add_memset_node(src + 16, 1, 2, element_size=4, height=2, pitch=16)
    with pytest.raises(ahg.Unknown, match="does not match"):
        graph_exec.set_child_graph_node_params(node, other)

    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert int(device.view(dst, np.int64)[0]) == 4  # the embedded copy is unchanged
    assert not host.any()
    destroy(graph_exec, parent, child, direction, shape, other, stream, src, dst)


def test_a_kernel_the_device_cannot_run_is_invalid_configuration() -> None:
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=256)]
    )
    small = ahg.get_device(1)
    out = small.malloc(8)
    child = ahg.Graph()
    child.add_kernel_node(put, 1, 128, [1, out])
    parent = ahg.Graph()
    node = parent.add_child_graph_node(child)
    graph_exec = parent.instantiate(device=small)
    wide = ahg.Graph()  # valid on device 0, where it was built; too wide for device 1
    wide.add_kernel_node(put, 1, 512, [2, out])
    with pytest.raises(ahg.InvalidConfiguration):
        graph_exec.set_child_graph_node_params(node, wide)
    destroy(graph_exec, parent, child, wide)
    small.free(out)
