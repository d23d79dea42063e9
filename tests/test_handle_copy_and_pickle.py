"""Handles and values under Python's copy and pickle protocols.

Handles name one runtime object each: ``copy.copy`` made a second handle sharing the first
one's registry slot and resources but not its state, so destroying either left the other
claiming to be alive, and a user object's copy ran the destructor its original still counted
on. Values (device pointers) must copy and pickle like ints.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Callable
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def nothing(t: ahg.Threads) -> None:
    pass


COPIES: dict[str, Callable[[Any], Any]] = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": lambda handle: pickle.loads(pickle.dumps(handle)),
}


def _handles(device: ahg.Device) -> dict[str, Any]:
    graph = ahg.Graph()
    node = graph.add_kernel_node(nothing, 1, 1)
    return {
        "Graph": graph,
        "GraphNode": node,
        "GraphExec": graph.instantiate(),
        "Stream": device.create_stream(),
        "Event": device.create_event(),
        "UserObject": ahg.UserObject(lambda data: None),
        "Device": device,
    }


def _end(handles: dict[str, Any]) -> None:
    handles["UserObject"].release()
    destroy(handles["GraphExec"], handles["Graph"], handles["Stream"], handles["Event"])


@pytest.mark.parametrize("how", list(COPIES))
def test_every_handle_refuses_to_be_copied_or_pickled(device: ahg.Device, how: str) -> None:
    handles = _handles(device)
    for kind, handle in handles.items():
        with pytest.raises(TypeError, match=f"{kind} is a handle"):
            COPIES[how](handle)
    _end(handles)


@pytest.mark.asyncio
async def test_a_refused_copy_leaves_each_handle_whole(device: ahg.Device) -> None:
    """The scenario that split a handle in two: copy, use the copy, destroy the copy."""
    handles = _handles(device)
    for handle in handles.values():
        with pytest.raises(TypeError):
            copy.copy(handle)
    exec_, stream = handles["GraphExec"], handles["Stream"]
    await (await exec_.launch(stream))
    assert exec_.statistics().launches == 1
    assert stream.statistics().submitted == 1
    user_object = handles["UserObject"]
    assert user_object.statistics().refcount == 1
    _end(handles)
    assert not user_object.alive
    assert not exec_.alive
    assert not stream.alive


def test_copying_a_graph_points_to_clone() -> None:
    graph = ahg.Graph()
    with pytest.raises(TypeError, match=r"clone\(\)"):
        copy.deepcopy(graph)
    destroy(graph)


def test_a_record_holding_a_handle_is_not_silently_deep_copied(device: ahg.Device) -> None:
    """``dataclasses.asdict`` deep-copies field values: a record holding a handle refuses
    rather than making a twin of the handle."""
    stream = device.create_stream()

    @dataclasses.dataclass
    class Config:
        stream: ahg.Stream

    with pytest.raises(TypeError, match="Stream is a handle"):
        dataclasses.asdict(Config(stream))
    assert dataclasses.replace(Config(stream)).stream is stream  # no copy of the value
    destroy(stream)


@pytest.mark.parametrize("how", list(COPIES))
def test_a_device_pointer_copies_and_pickles_like_a_value(device: ahg.Device, how: str) -> None:
    """``DevicePtr`` refused ``copy.copy``, ``copy.deepcopy`` and ``pickle`` alike with
    ``AttributeError: DevicePtr is immutable`` (the default protocol restores slots with
    setattr), so a dataclass of pointers could not go through ``dataclasses.asdict``."""
    ptr = device.malloc(64) + 8
    copied = COPIES[how](ptr)
    assert copied == ptr
    assert hash(copied) == hash(ptr)
    assert copied.device == ptr.device
    assert int(copied) == int(ptr)
    assert COPIES[how](ahg.NULL) == ahg.NULL
    device.free(ptr - 8)


def test_a_record_of_pointers_goes_through_asdict(device: ahg.Device) -> None:
    @dataclasses.dataclass
    class Buffers:
        x: ahg.DevicePtr
        y: ahg.DevicePtr

    x, y = device.malloc(16), device.malloc(16)
    assert dataclasses.asdict(Buffers(x, y)) == {"x": x, "y": y}
    destroy(x, y)


@pytest.mark.asyncio
async def test_a_pickled_pointer_still_addresses_its_allocation(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    device.view(ptr, "int32", 4)[:] = [1, 2, 3, 4]
    restored = pickle.loads(pickle.dumps(ptr + 4))
    assert list(device.view(restored, "int32", 3)) == [2, 3, 4]
    destroy(ptr)


@pytest.mark.parametrize(
    ("device_field", "address", "shown"),
    [
        ("0", 1 << 40, "device='0'"),
        (True, 1 << 40, "device=True"),
        (0, -1, "address=-1"),
    ],
)
def test_a_hand_made_pointer_s_repr_shows_its_fields_as_they_are(
    device_field: Any, address: int, shown: str
) -> None:
    """``DevicePtr("0", a)`` printed as ``device=0`` (a real device's pointer, in every error
    message about it) and ``DevicePtr(0, -1)`` as ``0x-1``."""
    text = repr(ahg.DevicePtr(device_field, address))
    assert shown in text
    assert "0x-" not in text


def test_a_real_pointer_s_repr_is_unchanged(device: ahg.Device) -> None:
    ptr = device.malloc(16)
    assert repr(ptr) == f"DevicePtr(device=0, 0x{int(ptr):x})"
    assert repr(ahg.NULL) == "DevicePtr(NULL)"
    destroy(ptr)
