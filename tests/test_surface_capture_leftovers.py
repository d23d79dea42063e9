"""Leftovers of the handle surface and of stream capture, each once a bug.

* A stream, an event, a device and a graph took any new attribute: a typo such as
  ``stream.prority = 1`` or ``graph.destory = ...`` was silently kept (and changed nothing),
  and ``stream.synchronize = None`` shadowed the method for every later caller of that handle.
  They refuse one with ``AttributeError`` naming the class and the attribute, as a node and an
  executable do.
* A ``CaptureScope`` entered a second time began a new capture and replaced the graph its
  first block had captured; entered inside its own block, it raised ``IllegalState`` as a
  second ``begin_capture`` does. A scope is entered once (``RuntimeError``, as
  ``asyncio.timeout()`` says), and an exit without an entry raised a bare AssertionError.
* A stream destroyed on another thread just as ``async with stream.capture()`` began its
  capture made the entry fail with a bare AssertionError.

Destroying a capturing stream (HIP's ``hipStreamDestroy`` ends its capture, and a later
``hipStreamEndCapture`` says ``ContextIsDestroyed``) is pinned here for the scope's exit too.
"""

from __future__ import annotations

import weakref
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.runtime import capture_scope
from capture_helpers import NBYTES, Baseline, N, affine, no_capture_left
from cleanup import destroy


def _live(kind: str) -> int:
    return testing.registry_statistics()[kind].live


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


# -- a capture scope is entered once -----------------------------------------------------------


@pytest.mark.asyncio
async def test_a_capture_scope_entered_again_after_its_block_refuses_and_keeps_its_graph(
    device: ahg.Device,
) -> None:
    stream, x = device.create_stream(), device.malloc(NBYTES)
    scope = stream.capture()
    async with scope:
        await stream.memset(x, 0, NBYTES)
    graph = scope.graph
    assert graph is not None
    before = Baseline.take(device)
    with pytest.raises(RuntimeError, match="entered once"):
        async with scope:
            raise AssertionError("the block must not run")  # pragma: no cover
    assert scope.graph is graph  # not replaced by the graph of a new capture
    assert stream.is_capturing() is ahg.CaptureStatus.NONE
    assert Baseline.take(device) == before
    assert len(graph.nodes()) == 1
    destroy(graph, stream, x)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_capture_scope_entered_inside_its_own_block_refuses_and_its_capture_goes_on(
    device: ahg.Device,
) -> None:
    stream, x = device.create_stream(), device.malloc(NBYTES)
    scope = stream.capture()
    async with scope:
        await stream.memset(x, 0, NBYTES)
        info = stream.capture_info()
        with pytest.raises(RuntimeError, match="entered once"):
            async with scope:
                raise AssertionError("the block must not run")  # pragma: no cover
        assert stream.capture_info() == info  # the same capture, still ACTIVE
        await stream.memset(x, 1, NBYTES)
    assert scope.graph is not None
    assert len(scope.graph.nodes()) == 2
    destroy(scope.graph, stream, x)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_capture_scope_whose_entry_failed_can_be_entered_later(
    device: ahg.Device,
) -> None:
    # A failed entry began nothing: it changed nothing, the scope's state included.
    stream = device.create_stream()
    stream.begin_capture()
    scope = stream.capture()
    with pytest.raises(ahg.IllegalState, match="already capturing"):
        async with scope:
            raise AssertionError("the block must not run")  # pragma: no cover
    stream.end_capture().destroy()
    async with scope:
        pass
    assert scope.graph is not None
    destroy(scope.graph, stream)
    no_capture_left()


@pytest.mark.asyncio
async def test_a_capture_scope_exited_without_an_entry_or_twice_raises_runtime_error(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    scope = stream.capture()
    with pytest.raises(RuntimeError, match="not active"):
        await scope.__aexit__(None, None, None)
    async with scope:
        pass
    graph = scope.graph
    with pytest.raises(RuntimeError, match="not active"):
        await scope.__aexit__(None, None, None)
    assert scope.graph is graph
    assert graph is not None
    destroy(graph, stream)
    no_capture_left()


# -- a capturing stream destroyed ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_stream_destroyed_as_its_scope_begins_the_capture_is_context_is_destroyed(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The destroy of another thread, landing just after the begin returned: the entry read
    # the session back from the stream, found none, and failed an assert.
    real_begin = capture_scope.capture.begin

    def begin_then_destroyed(stream: ahg.Stream, mode: Any) -> Any:
        session = real_begin(stream, mode)
        stream.destroy()
        return session

    monkeypatch.setattr(capture_scope.capture, "begin", begin_then_destroyed)
    stream = device.create_stream()
    before = Baseline.take(device)
    scope = stream.capture()
    with pytest.raises(ahg.ContextIsDestroyed):
        async with scope:
            pass
    assert scope.graph is None
    assert Baseline.take(device) == before
    no_capture_left()


@pytest.mark.asyncio
async def test_a_stream_destroyed_inside_its_capture_block_ends_the_capture_and_frees_it(
    device: ahg.Device,
) -> None:
    # HIP ends the capture of a destroyed stream (and leaks its graph); a later end says
    # ContextIsDestroyed. ahipgraph frees the graph; the block's exit is that end.
    x = device.malloc(NBYTES)
    stream = device.create_stream()
    before = Baseline.take(device)
    graphs, nodes = _live("graph"), _live("graph node")
    scope = stream.capture()

    async def destroyed_in_the_block() -> None:
        async with scope:
            await stream.memset(x, 0, NBYTES)
            stream.destroy()
            assert stream.alive is False

    with pytest.raises(ahg.ContextIsDestroyed):
        await destroyed_in_the_block()
    assert scope.graph is None
    assert (_live("graph"), _live("graph node")) == (graphs, nodes)
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(x)


@pytest.mark.asyncio
async def test_a_forked_stream_destroyed_mid_capture_leaves_its_unjoined_work_reported(
    device: ahg.Device,
) -> None:
    x = device.malloc(NBYTES)
    origin, fork = device.create_stream(), device.create_stream()
    event = device.create_event()
    before = Baseline.take(device)
    origin.begin_capture()
    await origin.memset(x, 0, NBYTES)
    await origin.record_event(event)
    await fork.wait_event(event)
    await fork.memset(x, 1, NBYTES)
    fork.destroy()
    assert origin.is_capturing() is ahg.CaptureStatus.ACTIVE
    with pytest.raises(ahg.StreamCaptureUnjoined):
        origin.end_capture()
    assert Baseline.take(device) == before
    no_capture_left()
    destroy(origin, event, x)
