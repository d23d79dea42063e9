"""HIP_SEMANTICS.md, rule by rule: where a call's error or the order of its checks differed
from HIP's, the case that showed it. Each test names the section whose rule it pins down, and
proves a refused call changed nothing."""

from __future__ import annotations

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
