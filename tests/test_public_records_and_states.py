"""The public records, device functions and handle states: their hints resolve and name public
classes, and the enum that each handle's ``state`` returns is importable from ``ahipgraph``."""

from __future__ import annotations

import inspect
import pickle
import typing
from typing import NamedTuple

import pytest

import ahipgraph as ahg


class Handles(NamedTuple):
    """One handle of each kind, listed in an order that destroys them cleanly."""

    graph_exec: ahg.GraphExec
    node: ahg.GraphNode
    graph: ahg.Graph
    stream: ahg.Stream
    event: ahg.Event
    obj: ahg.UserObject

    def destroy(self) -> None:
        for handle in self:
            handle.destroy()


def one_of_each(device: ahg.Device) -> Handles:
    graph = ahg.Graph()
    node = graph.add_empty_node()
    return Handles(
        graph.instantiate(),
        node,
        graph,
        device.create_stream(),
        device.create_event(),
        ahg.UserObject(lambda _data: None),
    )


def _exported_classes() -> list[str]:
    return [name for name in ahg.__all__ if inspect.isclass(getattr(ahg, name))]


def test_get_type_hints_works_on_every_exported_class() -> None:
    """A class is a public callable too: its field hints must resolve although the class now
    says it lives in ``ahipgraph``, a namespace without the names its annotations use."""
    failures = []
    for name in _exported_classes():
        try:
            typing.get_type_hints(getattr(ahg, name))
        except Exception as error:
            failures.append(f"{name}: {error!r}")
    assert failures == []


@pytest.mark.parametrize(
    "name",
    ["KernelParams", "MemcpyParams", "HostParams", "PitchedPtr", "GraphNodeParams", "Trace"],
)
def test_the_hints_of_a_parameter_record_name_real_objects(name: str) -> None:
    hints = typing.get_type_hints(getattr(ahg, name))
    assert hints
    assert not [field for field, hint in hints.items() if isinstance(hint, str)]


def test_a_record_hint_is_the_class_it_names() -> None:
    assert typing.get_type_hints(ahg.KernelParams)["kernel"] is ahg.Kernel


@pytest.mark.asyncio
async def test_each_handles_state_enum_is_exported_from_ahipgraph(device: ahg.Device) -> None:
    handles = one_of_each(device)
    graph_exec, node, graph, stream, event, obj = handles
    for handle in handles:
        state_type = type(handle.state)
        assert getattr(ahg, state_type.__name__) is state_type
        assert state_type.__module__ == "ahipgraph"
        assert pickle.loads(pickle.dumps(handle.state)) is handle.state
    assert stream.state is ahg.StreamState.OPEN
    assert event.state is ahg.EventState.OPEN
    assert graph.state is node.state is obj.state is ahg.HandleState.OPEN
    assert graph_exec.state is ahg.ExecState.OPEN
    handles.destroy()
    assert stream.state is ahg.StreamState.DESTROYED
    assert event.state is ahg.EventState.DESTROYED
    assert graph.state is node.state is obj.state is ahg.HandleState.DESTROYED
    assert graph_exec.state is ahg.ExecState.CLOSED


def test_the_state_enums_are_in_all() -> None:
    assert {"HandleState", "ExecState", "StreamState", "EventState"} <= set(ahg.__all__)


def test_the_device_functions_hint_the_public_device_class() -> None:
    """Run-time hints name what the functions return, ``ahg.Device``, not an internal base."""
    assert typing.get_type_hints(ahg.get_device)["return"] is ahg.Device
    assert typing.get_type_hints(ahg.current_device)["return"] is ahg.Device
    assert typing.get_type_hints(ahg.configure_devices)["return"] == list[ahg.Device]
    assert type(ahg.get_device(0)) is ahg.Device


@pytest.mark.asyncio
async def test_every_handles_id_is_an_exported_handle_id(device: ahg.Device) -> None:
    handles = one_of_each(device)
    for handle in (handles.stream, handles.event, handles.node, handles.graph_exec, handles.obj):
        assert type(handle.hid) is ahg.HandleId
        assert isinstance(handle.hid.slot, int)
        assert isinstance(handle.hid.generation, int)
    assert ahg.HandleId.__module__ == "ahipgraph"
    assert pickle.loads(pickle.dumps(handles.node.hid)) == handles.node.hid
    handles.destroy()
