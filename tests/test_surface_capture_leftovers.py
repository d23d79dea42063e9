"""Leftovers of the handle surface and of stream capture, each once a bug.

* A stream, an event, a device and a graph took any new attribute: a typo such as
  ``stream.prority = 1`` or ``graph.destory = ...`` was silently kept (and changed nothing),
  and ``stream.synchronize = None`` shadowed the method for every later caller of that handle.
  They refuse one with ``AttributeError`` naming the class and the attribute, as a node and an
  executable do.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest

import ahipgraph as ahg
from capture_helpers import NBYTES, N, affine
from cleanup import destroy

# -- new attributes on a handle --------------------------------------------------------------------


class _Four:
    """One live stream, event, device and graph, and a call that shows each still works."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.x = device.malloc(NBYTES)
        self.stream = device.create_stream()
        self.event = device.create_event()
        self.graph = ahg.Graph()
        self.graph.add_kernel_node(affine, N, 1, (N, 1, 1, self.x, self.x))

    def of(self, cls: type) -> Any:
        return {
            ahg.Stream: self.stream,
            ahg.Event: self.event,
            ahg.Device: self.device,
            ahg.Graph: self.graph,
        }[cls]

    async def still_work(self) -> None:
        await self.stream.memset(self.x, 0, NBYTES)
        graph_exec = self.graph.instantiate()
        await (await graph_exec.launch(self.stream))
        await self.stream.record_event(self.event)
        await self.event.synchronize()
        await self.stream.synchronize()
        await self.device.synchronize()
        assert list(self.device.view(self.x, "int64", N)) == [1] * N
        graph_exec.destroy()

    def destroy(self) -> None:
        destroy(self.graph, self.stream, self.event, self.x)


# A typo of a public attribute, a name nobody declared, and a method shadowed on the instance.
NEW_NAMES = {
    ahg.Stream: ("prority", "extra", "synchronize", "launch_kernel", "destroy"),
    ahg.Event: ("disable_timming", "extra", "synchronize", "query"),
    ahg.Device: ("ordnial", "extra", "synchronize", "malloc", "create_stream"),
    ahg.Graph: ("destory", "extra", "add_kernel_node", "instantiate", "destroy"),
}
CASES = [(cls, name) for cls, names in NEW_NAMES.items() for name in names]


@pytest.mark.asyncio
@pytest.mark.parametrize(("cls", "name"), CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
async def test_a_handle_refuses_a_new_attribute_naming_its_class_and_the_attribute(
    cls: type, name: str, device: ahg.Device
) -> None:
    four = _Four(device)
    handle = four.of(cls)
    for value in (None, 1, lambda *args: None):
        with pytest.raises(AttributeError, match=rf"'{cls.__name__}' object.*'{name}'"):
            setattr(handle, name, value)
    with pytest.raises(AttributeError):
        delattr(handle, name)
    assert not hasattr(handle, "__dict__")  # nothing was kept anywhere
    if hasattr(cls, name):  # the method, still the class's
        assert getattr(handle, name).__func__ is getattr(cls, name)
    else:
        assert not hasattr(handle, name)
    await four.still_work()
    four.destroy()


def test_the_four_handles_can_still_be_referred_to_weakly(device: ahg.Device) -> None:
    four = _Four(device)
    for cls in NEW_NAMES:
        handle = four.of(cls)
        assert weakref.ref(handle)() is handle
    four.destroy()
