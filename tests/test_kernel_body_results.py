"""What a synchronous kernel body's return value means.

A ``def`` body that returns an awaitable (it calls an ``async def`` helper and returns the
coroutine, or it wraps an async function) has its work in that awaitable. It was dropped: the
work was silently lost and Python warned that the coroutine was never awaited. It is now
awaited as an async body's coroutine is, wherever the kernel runs (an eager launch, a graph
replay, a conditional node's body, a captured launch): the queue stays busy until it ends, and
its failure is the kernel's ``LaunchFailure``. Any other value is ignored, as a C kernel's
``void`` return. The suite turns warnings into errors, so a coroutine left unawaited fails it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Generator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


async def _add_later(x: Any, amount: int) -> None:
    await asyncio.sleep(0)  # a turn of the loop: later work on the queue must wait for this
    await asyncio.sleep(0)
    x[0] += amount


async def _fail_later(x: Any) -> None:
    await asyncio.sleep(0)
    raise ValueError(f"bad value {int(x[0])}")


@ahg.kernel
def add_later(t: ahg.Threads, x: ahg.Ptr[ahg.int64], amount: ahg.int64) -> Awaitable[None]:
    """A plain ``def`` handing back its async helper's coroutine."""
    return _add_later(x, amount)


@ahg.kernel
def fail_later(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> Awaitable[None]:
    return _fail_later(x)


@ahg.kernel
def copy_first(t: ahg.Threads, src: ahg.Ptr[ahg.int64], dst: ahg.Ptr[ahg.int64]) -> None:
    dst[0] = src[0]


@ahg.kernel
def answer(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> int:
    x[0] = 42
    return 42  # a value: ignored, as a C kernel's void return


@ahg.kernel
def hand_back_view(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> Any:
    x[0] += 1
    return x


class _Ready:
    """An awaitable that is not a coroutine."""

    def __init__(self, x: Any) -> None:
        self.x = x

    def __await__(self) -> Generator[Any, None, None]:
        yield from asyncio.sleep(0).__await__()
        self.x[0] += 100


class _Broken:
    def __await__(self) -> Generator[Any, None, None]:
        raise RuntimeError("cannot be awaited")
        yield  # pragma: no cover - makes this a generator


@ahg.kernel
def ready_later(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> Any:
    return _Ready(x)


@ahg.kernel
def broken_awaitable(t: ahg.Threads, x: ahg.Ptr[ahg.int64]) -> Any:
    return _Broken()


def read(device: ahg.Device, ptr: ahg.DevicePtr) -> int:
    return int(device.view(ptr, np.int64, 1)[0])


@pytest.mark.asyncio
async def test_an_eager_launch_awaits_the_coroutine_a_plain_body_returns(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    x, y = device.malloc(8), device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.launch_kernel(add_later, 1, 1, (x, 5))
    # The next kernel on the stream runs after the coroutine ended, not after it was made.
    await stream.launch_kernel(copy_first, 1, 1, (x, y))
    await stream.synchronize()
    assert (read(device, x), read(device, y)) == (5, 5)
    destroy(stream, x, y)


@pytest.mark.asyncio
async def test_a_graph_replay_awaits_it_on_every_launch(device: ahg.Device) -> None:
    stream = device.create_stream()
    x, y = device.malloc(8), device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.synchronize()
    graph = ahg.Graph()
    first = graph.add_kernel_node(add_later, 1, 1, (x, 3))
    graph.add_kernel_node(copy_first, 1, 1, (x, y), deps=[first])
    graph_exec = graph.instantiate()
    for launch in range(1, 4):
        await (await graph_exec.launch(stream))
        assert (read(device, x), read(device, y)) == (3 * launch, 3 * launch)
    destroy(graph_exec, graph, stream, x, y)


@pytest.mark.asyncio
async def test_a_long_run_of_such_nodes_awaits_each(device: ahg.Device) -> None:
    """A run of many nodes of one kernel shares one op class (instantiate's large-graph path)."""
    stream = device.create_stream()
    x = device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.synchronize()
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for _ in range(40):
        previous = [graph.add_kernel_node(add_later, 1, 1, (x, 1), deps=previous)]
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert read(device, x) == 40
    destroy(graph_exec, graph, stream, x)


@pytest.mark.asyncio
async def test_a_captured_launch_replays_it(device: ahg.Device) -> None:
    stream = device.create_stream()
    x, y = device.malloc(8), device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.synchronize()
    async with stream.capture() as capture:
        await stream.launch_kernel(add_later, 1, 1, (x, 7))
        await stream.launch_kernel(copy_first, 1, 1, (x, y))
    graph_exec = capture.graph.instantiate()
    await (await graph_exec.launch(stream))
    await (await graph_exec.launch(stream))
    assert (read(device, x), read(device, y)) == (14, 14)
    destroy(graph_exec, capture.graph, stream, x, y)


@pytest.mark.asyncio
async def test_a_conditional_body_awaits_it(device: ahg.Device) -> None:
    stream = device.create_stream()
    x, y = device.malloc(8), device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.synchronize()
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    node, (then,) = graph.add_conditional_node(handle, ahg.ConditionalKind.If)
    then.add_kernel_node(add_later, 1, 1, (x, 2))
    graph.add_kernel_node(copy_first, 1, 1, (x, y), deps=[node])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert (read(device, x), read(device, y)) == (2, 2)
    destroy(graph_exec, graph, stream, x, y)


@pytest.mark.asyncio
async def test_the_coroutines_failure_is_the_kernels_launch_failure(device: ahg.Device) -> None:
    stream = device.create_stream()
    x, y = device.malloc(8), device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.memset(y, 0, 8)
    await stream.synchronize()
    graph = ahg.Graph()
    bad = graph.add_kernel_node(fail_later, 1, 1, (x,))
    graph.add_kernel_node(copy_first, 1, 1, (x, y), deps=[bad])
    graph_exec = graph.instantiate()
    handle = await graph_exec.launch(stream)
    with pytest.raises(ahg.LaunchFailure, match="fail_later") as caught:
        await handle
    assert isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()  # the stream reports it once
    eager = await stream.launch_kernel(fail_later, 1, 1, (x,))
    with pytest.raises(ahg.LaunchFailure, match="fail_later"):
        await eager
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    await stream.launch_kernel(add_later, 1, 1, (x, 1))  # the queue goes on
    await stream.synchronize()
    assert read(device, x) == 1
    destroy(graph_exec, graph, stream, x, y)


@pytest.mark.asyncio
async def test_wrappers_around_async_functions_are_awaited(device: ahg.Device) -> None:
    """A lambda, a decorator's plain wrapper and a callable object with a plain ``__call__``
    all hide the async function from the kernel's declaration."""
    log: list[str] = []

    async def note(what: str) -> None:
        await asyncio.sleep(0)
        log.append(what)

    def plain_wrapper(fn: Any) -> Any:
        @functools.wraps(fn)  # the signature follows fn; the wrapper itself is a plain def
        def wrapper(*args: Any) -> Any:
            return fn(*args)

        return wrapper

    @plain_wrapper
    async def wrapped(t: ahg.Threads, n: ahg.int32) -> None:
        await note(f"wrapped {n}")

    def say(what: str, t: ahg.Threads) -> Awaitable[None]:
        return note(what)

    class Caller:
        def __call__(self, t: ahg.Threads, n: ahg.int32) -> Awaitable[None]:
            return note(f"object {n}")

    kernels = [
        ahg.kernel(name="by_lambda")(lambda t: note("lambda")),
        ahg.kernel(wrapped),
        ahg.kernel(Caller(), name="by_object"),
        ahg.kernel(functools.partial(say, "partial"), name="by_partial"),
    ]
    assert not any(k.is_async for k in kernels)
    stream = device.create_stream()
    for k in kernels:
        await stream.launch_kernel(k, 1, 1, (3,) if k.layout.names else ())
    await stream.synchronize()
    assert log == ["lambda", "wrapped 3", "object 3", "partial"]
    destroy(stream)


@pytest.mark.asyncio
async def test_other_awaitables_are_awaited_and_their_failures_reported(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    x = device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.launch_kernel(ready_later, 1, 1, (x,))
    await stream.synchronize()
    assert read(device, x) == 100
    failed = await stream.launch_kernel(broken_awaitable, 1, 1, (x,))
    with pytest.raises(ahg.LaunchFailure, match="broken_awaitable") as caught:
        await failed
    assert isinstance(caught.value.__cause__, RuntimeError)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    destroy(stream, x)


@pytest.mark.asyncio
async def test_a_future_of_another_loop_fails_the_launch_not_the_queue(
    device: ahg.Device,
) -> None:
    other = asyncio.new_event_loop()
    foreign = other.create_future()

    @ahg.kernel
    def hand_foreign(t: ahg.Threads) -> Any:
        return foreign

    stream = device.create_stream()
    x = device.malloc(8)
    await stream.memset(x, 0, 8)
    failed = await stream.launch_kernel(hand_foreign, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure, match="hand_foreign"):
        await failed
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    await stream.launch_kernel(add_later, 1, 1, (x, 1))
    await stream.synchronize()
    assert read(device, x) == 1
    other.close()
    destroy(stream, x)


@pytest.mark.asyncio
async def test_a_returned_value_that_is_not_awaitable_is_ignored(device: ahg.Device) -> None:
    stream = device.create_stream()
    x = device.malloc(8)
    await stream.memset(x, 0, 8)
    await stream.launch_kernel(answer, 1, 1, (x,))
    await stream.launch_kernel(hand_back_view, 1, 1, (x,))
    await stream.synchronize()
    assert read(device, x) == 43
    graph = ahg.Graph()
    first = graph.add_kernel_node(answer, 1, 1, (x,))
    graph.add_kernel_node(hand_back_view, 1, 1, (x,), deps=[first])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    await (await graph_exec.launch(stream))
    assert read(device, x) == 43
    destroy(graph_exec, graph, stream, x)
