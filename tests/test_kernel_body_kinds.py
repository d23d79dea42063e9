"""What a kernel body may be and do: generator functions are refused when declared (their
body would never run), a generator a wrapper hands back fails its launch, and the launch
description a body receives is shared and read-only."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


def test_a_generator_function_is_not_a_kernel_body() -> None:
    def steps(t: ahg.Threads, n: ahg.int32) -> Iterator[int]:
        yield n

    with pytest.raises(TypeError, match="generator function"):
        ahg.kernel(steps)


def test_an_async_generator_function_is_not_a_kernel_body() -> None:
    async def steps(t: ahg.Threads) -> AsyncIterator[int]:
        yield 1

    with pytest.raises(TypeError, match="generator function"):
        ahg.kernel(name="steps")(steps)


class StepsObject:
    def __call__(self, t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> Iterator[int]:
        out[0] = 1
        yield 1


class AsyncStepsObject:
    async def __call__(self, t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> AsyncIterator[int]:
        out[0] = 1
        yield 1


@pytest.mark.parametrize("body", [StepsObject(), AsyncStepsObject()])
def test_a_callable_object_whose_call_is_a_generator_function_is_not_a_kernel_body(
    body: Any,
) -> None:
    # as host functions and destructors: calling it only makes a generator
    with pytest.raises(TypeError, match="generator function"):
        ahg.kernel(body)


def _steps(t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> Iterator[int]:
    out[0] = 1
    yield 1


async def _async_steps(t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> AsyncIterator[int]:
    out[0] = 1
    yield 1


@functools.wraps(_steps)
def _wraps_steps(*args: Any) -> Any:
    return _steps(*args)


@functools.wraps(_async_steps)
def _wraps_async_steps(*args: Any) -> Any:
    return _async_steps(*args)


@pytest.mark.asyncio
@pytest.mark.parametrize("wrapper", [_wraps_steps, _wraps_async_steps])
async def test_a_wrapper_that_hands_back_a_generator_fails_its_launch(
    device: ahg.Device, wrapper: Any
) -> None:
    # ``kernel`` cannot see through a plain wrapper; the launch would pass for done with
    # the body never run, so the dispatch fails instead, eagerly and in a graph alike
    steps = ahg.kernel(wrapper)
    stream = device.create_stream()
    out = device.malloc(4)
    await stream.memset(out, 0, 4)
    with pytest.raises(ahg.LaunchFailure, match="generator") as caught:
        await (await stream.launch_kernel(steps, 1, 1, (out,)))
    assert isinstance(caught.value.__cause__, TypeError)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    graph = ahg.Graph()
    graph.add_kernel_node(steps, 1, 1, (out,))
    graph_exec = graph.instantiate()
    with pytest.raises(ahg.LaunchFailure, match="generator"):
        await (await graph_exec.launch(stream))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    host = np.ones(1, np.int32)
    await stream.memcpy(host, out, 4)
    await stream.synchronize()
    assert host[0] == 0  # the body never ran
    destroy(graph_exec, graph, stream, out)


@ahg.kernel
def shrink_launch(t: ahg.Threads) -> None:
    t.count = 1  # type: ignore[misc]


@ahg.kernel
def widen_grid(t: ahg.Threads) -> None:
    del t.grid  # type: ignore[misc]


@ahg.kernel
def fill_ones(t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> None:
    out[t.ids] = 1


@ahg.kernel
def unlock_ids(t: ahg.Threads) -> None:
    t.ids.flags.writeable = True
    t.ids[:] = 0


@pytest.mark.asyncio
async def test_a_body_cannot_make_the_shared_thread_ids_writeable(device: ahg.Device) -> None:
    """The ids array of a launch shape is shared by every launch of that shape: a body that
    made it writeable again could rewrite every later launch's ids."""
    stream = device.create_stream()
    out = device.malloc(4 * 64)
    failed = await stream.launch_kernel(unlock_ids, 1, 64, ())
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed
    assert isinstance(caught.value.__cause__, ValueError)
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    await stream.launch_kernel(fill_ones, 1, 64, (out,))
    await stream.synchronize()
    assert device.view(out, np.int32).tolist() == [1] * 64
    device.free(out)
    destroy(stream)


@pytest.mark.asyncio
async def test_a_body_cannot_change_the_launch_shape_of_other_kernels(device: ahg.Device) -> None:
    """One Threads serves every launch of a shape: a body that assigned ``t.count`` made every
    later launch of 64 threads, of any kernel, run over one thread."""
    stream = device.create_stream()
    out = device.malloc(4 * 64)
    for vandal in (shrink_launch, widen_grid):
        failed = await stream.launch_kernel(vandal, 1, 64, ())
        with pytest.raises(ahg.LaunchFailure) as caught:
            await failed
        assert isinstance(caught.value.__cause__, AttributeError)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()  # the stream reports the failure once
    await stream.launch_kernel(fill_ones, 1, 64, (out,))
    await stream.synchronize()
    assert int(device.view(out, np.int32).sum()) == 64
    device.free(out)
    destroy(stream)


def test_threads_built_by_hand_take_dimensions_as_a_launch_does() -> None:
    """A kernel body can be called directly with a Threads (a unit test of the body); ints
    and tuples made an AttributeError from inside the class."""
    threads = ahg.Threads(4, (2, 2))
    assert threads.grid == ahg.Dim3(4, 1, 1)
    assert threads.block == ahg.Dim3(2, 2, 1)
    assert threads.count == 16
    assert threads.ids.tolist() == list(range(16))
    for grid, block in ((1.5, 1), ("4", 1), ((1, 2, 3, 4), 1), (1, True)):
        with pytest.raises(TypeError, match="must be an int or a tuple"):
            ahg.Threads(grid, block)  # type: ignore[arg-type]
    for grid, block in ((0, 1), (4, (2, -1))):
        with pytest.raises(ahg.InvalidConfiguration):
            ahg.Threads(grid, block)
