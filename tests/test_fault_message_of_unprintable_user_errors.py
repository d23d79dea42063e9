"""A fault's message when user code's exception, or its host function, cannot be printed.

A kernel body or host function that raises fails its work with a ``LaunchFailure`` whose
message shows what it raised (``repr``), and a trace records it too. That repr is user code
too: an exception (or a callable object) whose ``__repr__`` raised, or whose ``__qualname__``
lookup did, made the message itself raise, on the device's pump, which stopped: the
completion never ended and every later wait on the device hung. The repr's failure is now
contained, shown as the object's class, and the device goes on.

``asyncio.wait_for`` is only a guard: before the fix, each of these hung for good.
"""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from cleanup import destroy

GUARD = 10.0


class Unprintable(Exception):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        raise RuntimeError("no str")


class UnprintableCallable:
    """A host function object whose repr raises (and which has no ``__qualname__``)."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __call__(self) -> None:
        raise ValueError("plain")


class NamelessCallable:
    """A host function object whose ``__qualname__`` lookup raises something else than
    AttributeError (which ``getattr``'s default does not catch)."""

    def __getattr__(self, name: str) -> object:
        if name == "__qualname__":
            raise RuntimeError("no name")
        raise AttributeError(name)

    def __repr__(self) -> str:
        return "NamelessCallable()"

    def __call__(self) -> None:
        raise ValueError("plain")


def _raise_unprintable() -> None:
    raise Unprintable


@ahg.kernel
def raises_unprintable(t: ahg.Threads) -> None:
    raise Unprintable


async def _failed(done: ahg.Completion) -> str:
    with pytest.raises(ahg.LaunchFailure) as caught:
        await asyncio.wait_for(done.wait(), GUARD)
    return str(caught.value)


@pytest.mark.asyncio
async def test_a_host_function_raising_an_unprintable_error_fails_its_work(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    message = await _failed(await stream.launch_host_func(_raise_unprintable))
    assert "_raise_unprintable raised <Unprintable object; its repr() raised>" in message
    with pytest.raises(ahg.LaunchFailure):  # the stream reports it, and goes on
        await asyncio.wait_for(stream.synchronize(), GUARD)
    message = await _failed(await stream.launch_host_func(UnprintableCallable()))
    assert "<UnprintableCallable object; its repr() raised> raised ValueError('plain')" in message
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(stream.synchronize(), GUARD)
    message = await _failed(await stream.launch_host_func(NamelessCallable()))
    assert "host function NamelessCallable() raised ValueError('plain')" in message
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(stream.synchronize(), GUARD)
    await asyncio.wait_for(stream.synchronize(), GUARD)
    stream.destroy()


@pytest.mark.asyncio
async def test_a_kernel_raising_an_unprintable_error_fails_its_work(device: ahg.Device) -> None:
    stream = device.create_stream()
    message = await _failed(await stream.launch_kernel(raises_unprintable, 1, 1, ()))
    assert "kernel 'raises_unprintable' failed: <Unprintable object" in message
    with pytest.raises(ahg.LaunchFailure):
        await asyncio.wait_for(stream.synchronize(), GUARD)
    stream.destroy()


@pytest.mark.asyncio
async def test_a_graph_node_raising_an_unprintable_error_fails_its_launch(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_host_node(_raise_unprintable)
    graph_exec = graph.instantiate()
    try:
        message = await _failed(await graph_exec.launch(stream))
        assert "<Unprintable object; its repr() raised>" in message
        with pytest.raises(ahg.LaunchFailure):
            await asyncio.wait_for(stream.synchronize(), GUARD)
        assert graph_exec.statistics().in_flight == 0
    finally:
        destroy(graph_exec, graph, stream)


async def _raise_unprintable_later() -> None:
    raise Unprintable


@pytest.mark.asyncio
async def test_a_trace_records_an_unprintable_error(device: ahg.Device) -> None:
    """Tracing records each failed op's error (a sync body's, and an async body's when it
    ends) by its repr, on the pump too."""
    stream = device.create_stream()
    with ahg.tracing() as trace:
        for fn in (_raise_unprintable, _raise_unprintable_later, NamelessCallable()):
            await _failed(await stream.launch_host_func(fn))
            with pytest.raises(ahg.LaunchFailure):
                await asyncio.wait_for(stream.synchronize(), GUARD)
    errors = [op.error for op in trace.ops if op.kind == "host"]
    assert errors == [
        "<Unprintable object; its repr() raised>",
        "<Unprintable object; its repr() raised>",
        "ValueError('plain')",
    ]
    assert [op.name for op in trace.ops if op.kind == "host"][-1] == "host function"
    stream.destroy()
