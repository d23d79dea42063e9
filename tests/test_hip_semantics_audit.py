"""HIP_SEMANTICS.md, rule by rule: where a call's error or the order of its checks differed
from HIP's, the case that showed it. Each test names the section whose rule it pins down, and
proves a refused call changed nothing."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy

DEVICE_LAUNCH = ahg.InstantiateFlags.DEVICE_LAUNCH
UPLOAD = ahg.InstantiateFlags.UPLOAD


def _cyclic() -> ahg.Graph:
    graph = ahg.Graph()
    first = graph.add_empty_node()
    second = graph.add_empty_node(deps=first)
    graph.add_dependencies(second, first)
    return graph


# -- §3.1 instantiate: the graph's checks come before what a flag selects ----------------------


def test_device_launch_on_a_destroyed_graph_is_invalid_value(device: ahg.Device) -> None:
    """§3.1: ``ihipGraphInstantiate`` refuses a null graph (step 1) before anything else;
    ``DEVICE_LAUNCH``'s NotSupported (a simulator limit) must not hide it."""
    graph = ahg.Graph()
    graph.add_empty_node()
    graph.destroy()
    before = device.statistics()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.instantiate(DEVICE_LAUNCH)
    assert device.statistics() == before


def test_device_launch_on_a_cyclic_graph_is_invalid_value(device: ahg.Device) -> None:
    """§3.1 step 4 and §3.2: a cycle is InvalidValue at instantiate, whatever the flag."""
    graph = _cyclic()
    before = (device.statistics(), graph.statistics())
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate(DEVICE_LAUNCH)
    assert (device.statistics(), graph.statistics()) == before
    destroy(graph)


def test_device_launch_on_a_graph_with_a_cyclic_child_is_invalid_value(
    device: ahg.Device,
) -> None:
    """§3.1 step 4: scheduling also catches a cyclic child graph."""
    child = _cyclic()
    graph = ahg.Graph()
    graph.add_child_graph_node(child)
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate(DEVICE_LAUNCH)
    assert not graph.instantiated
    destroy(graph, child)


def test_device_launch_still_not_supported_on_a_good_graph(device: ahg.Device) -> None:
    """The simulator's own limit stands once the graph passes HIP's checks."""
    graph = ahg.Graph()
    graph.add_empty_node()
    with pytest.raises(ahg.NotSupported, match="device-side"):
        graph.instantiate(DEVICE_LAUNCH)
    assert not graph.instantiated
    destroy(graph)


def test_upload_with_a_destroyed_stream_reports_the_graph_first(device: ahg.Device) -> None:
    """§3.1: ``hipGraphInstantiateWithParams`` instantiates, then uploads: a destroyed or
    cyclic graph is InvalidValue even when the upload stream is bad too."""
    gone = device.create_stream()
    gone.destroy()
    dead = ahg.Graph()
    dead.destroy()
    cyclic = _cyclic()
    good = ahg.Graph()
    good.add_empty_node()
    before = device.statistics()
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        dead.instantiate(UPLOAD, upload_stream=gone)
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        cyclic.instantiate(UPLOAD, upload_stream=gone)
    with pytest.raises(ahg.ContextIsDestroyed):  # the stream's error once the graph is good
        good.instantiate(UPLOAD, upload_stream=gone)
    assert device.statistics() == before
    assert not good.instantiated
    destroy(cyclic, good)


# -- §5.2 exec update: each node's SetParams checks the new parameters again -------------------


def _memset_graph(ptr: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_memset_node(ptr, 7, nbytes=8)
    return graph


def _memcpy_graph(dst: ahg.DevicePtr, src: ahg.DevicePtr) -> ahg.Graph:
    graph = ahg.Graph()
    graph.add_memcpy_node(dst, src, 8)
    return graph


@pytest.mark.parametrize("kind", ["memset", "memcpy"])
def test_update_to_freed_memory_is_parameters_changed(device: ahg.Device, kind: str) -> None:
    """§5.2: ``old->SetParams(new)`` validates the memory as the per-node setter does; its
    InvalidValue or InvalidDevicePointer is ``ParametersChanged``. The update accepted memory
    freed since the new graph was built, and every launch then failed on it."""
    live, other, freed = device.malloc(64), device.malloc(64), device.malloc(64)
    if kind == "memset":
        graph, new = _memset_graph(live), _memset_graph(freed)
    else:
        graph, new = _memcpy_graph(live, other), _memcpy_graph(freed, other)
    graph_exec = graph.instantiate()
    node = new.nodes()[0]
    device.free(freed)
    before = graph_exec.statistics()
    with pytest.raises(ahg.GraphExecUpdateFailure) as failure:
        graph_exec.update(new)
    assert failure.value.result.kind is ahg.UpdateResultKind.ParametersChanged
    assert failure.value.result.node is node
    assert graph_exec.statistics() == before
    target = graph.nodes()[0]
    set_params = (
        functools.partial(graph_exec.set_memset_node_params, target, freed, 7, nbytes=8)
        if kind == "memset"
        else functools.partial(graph_exec.set_memcpy_node_params, target, freed, other, 8)
    )
    with pytest.raises(ahg.InvalidDevicePointer):  # what the per-node setter says of it
        set_params()
    destroy(graph_exec, graph, new)
    device.free(live)
    device.free(other)


@pytest.mark.asyncio
async def test_update_refused_for_freed_memory_leaves_launches_working(
    device: ahg.Device,
) -> None:
    """§5.2: the refused update changed nothing, so the executable still runs as before."""
    live, freed = device.malloc(64), device.malloc(64)
    graph, new = _memset_graph(live), _memset_graph(freed)
    graph_exec = graph.instantiate()
    device.free(freed)
    with pytest.raises(ahg.GraphExecUpdateFailure):
        graph_exec.update(new)
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert set(device.view(live, "uint8", 8, readonly=True).tolist()) == {7}
    destroy(graph_exec, graph, new, stream)
    device.free(live)


# -- §1.3 hipGraphRemoveDependencies: a missing edge is InvalidValue --------------------------


def test_removing_a_missing_edge_from_a_graph_with_memory_nodes_is_invalid_value() -> None:
    """§1.3: ``hipGraphRemoveDependencies`` returns InvalidValue for an edge that does not
    exist. The refusal to remove edges from a graph with memory nodes (CUDA's rule, which
    HIP lacks) comes after HIP's own checks, so it no longer hides that error."""
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    empty = graph.add_empty_node(deps=[alloc])
    other = graph.add_empty_node()
    before = graph.statistics()
    with pytest.raises(ahg.InvalidValue, match="no edge"):
        graph.remove_dependencies(empty, alloc)  # the edge runs the other way
    with pytest.raises(ahg.InvalidValue, match="no edge"):
        graph.remove_dependencies([alloc, other], [empty, empty])  # the second is missing
    with pytest.raises(ahg.InvalidValue, match="twice"):
        graph.remove_dependencies([alloc, alloc], [empty, empty])
    with pytest.raises(ahg.NotSupported):  # an edge that exists: CUDA's rule stands
        graph.remove_dependencies(alloc, empty)
    assert graph.statistics() == before
    assert graph.edges() == [(alloc, empty)]
    destroy(graph)


def test_update_of_a_host_copy_to_live_memory_still_succeeds(device: ahg.Device) -> None:
    """§5.2: the memory check of an update passes live memory, host endpoints included."""
    first, second = device.malloc(64), device.malloc(64)
    graph, new = ahg.Graph(), ahg.Graph()
    graph.add_memcpy_node(first, np.zeros(8, np.int64), 64)
    new.add_memcpy_node(second, np.ones(8, np.int64), 64)
    graph_exec = graph.instantiate()
    assert graph_exec.update(new).kind is ahg.UpdateResultKind.Success
    destroy(graph_exec, graph, new)
    device.free(first)
    device.free(second)
