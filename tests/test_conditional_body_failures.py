"""Work that fails inside a conditional node's body fails the launch as it would anywhere else:
the failing kernel's own ``LaunchFailure``, whatever it raised (an ``Exception`` or a
``BaseException`` that is not an interrupt, from a plain or an async kernel, however deep the
nesting), and the rest of the body and of the graph still runs, but a WHILE loop starts no
iteration after the failure."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing.leaks import leak_report
from ahipgraph.testing.leaks import snapshot as leak_snapshot

K = ahg.ConditionalKind


class Escape(BaseException):
    """A user's own BaseException: not an interrupt, so the kernel failed."""


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int32, index: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[index] = value


@ahg.kernel
def raises_base(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    raise Escape("from a kernel")


@ahg.kernel
async def async_raises_base(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    await asyncio.sleep(0)
    raise Escape("from an async kernel")


@ahg.kernel
async def async_raises(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    await asyncio.sleep(0)
    raise ValueError("from an async kernel")


@ahg.kernel
async def async_cancels_itself(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    await asyncio.sleep(0)
    raise asyncio.CancelledError


@ahg.kernel
def count_down(t: ahg.Threads, x: ahg.Ptr[ahg.int32], h: ahg.CondHandle) -> None:
    x[0] -= 1
    ahg.set_conditional(h, 1 if x[0] > 0 else 0)


FAILING = [
    pytest.param(raises_base, Escape, id="kernel-BaseException"),
    pytest.param(async_raises_base, Escape, id="async-kernel-BaseException"),
    pytest.param(async_raises, ValueError, id="async-kernel-Exception"),
    pytest.param(async_cancels_itself, asyncio.CancelledError, id="async-kernel-CancelledError"),
]


def nested(depth: int, fill: Callable[[ahg.Graph], None]) -> ahg.Graph:
    """A graph whose IF node holds, ``depth`` levels down (IF in child graph in IF ...), a
    body that ``fill`` fills."""
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.If)
    if depth == 1:
        fill(body)
    else:
        child = nested(depth - 1, fill)
        body.add_child_graph_node(child)
        child.destroy()
    return graph


@pytest.mark.asyncio
@pytest.mark.parametrize(("kernel", "raised"), FAILING)
@pytest.mark.parametrize("depth", [1, 3])
async def test_a_failing_body_kernel_fails_the_launch_with_its_own_error(
    device: ahg.Device, kernel: ahg.Kernel, raised: type[BaseException], depth: int
) -> None:
    x = device.malloc(16)
    stream = device.create_stream()
    baseline = leak_snapshot()

    def fill(body: ahg.Graph) -> None:
        bad = body.add_kernel_node(kernel, 1, 1, (x,))
        body.add_kernel_node(put, 1, 1, (5, 1, x), deps=[bad])  # after the failure

    graph = nested(depth, fill)
    graph.add_kernel_node(put, 1, 1, (6, 2, x))  # beside the conditional node
    graph_exec = graph.instantiate()
    before = graph_exec.statistics()
    for launch in range(3):
        device.view(x, np.int32, 4)[:] = 0
        done = await graph_exec.launch(stream)
        with pytest.raises(ahg.LaunchFailure, match=f"kernel '{kernel.name}' failed") as info:
            await done
        assert isinstance(info.value.__cause__, raised)
        assert device.view(x, np.int32, 4).tolist() == [0, 5, 6, 0], launch
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()  # the stream reports the launch's error once
    await stream.synchronize()
    after = graph_exec.statistics()
    assert (after.in_flight, after.signal_pool.in_use) == (0, 0)
    assert after.signal_pool.free == before.signal_pool.free
    graph_exec.destroy()
    graph.destroy()
    assert leak_report(baseline) is None
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize(("kernel", "raised"), FAILING)
async def test_a_while_body_that_fails_runs_no_further_iteration(
    device: ahg.Device, kernel: ahg.Kernel, raised: type[BaseException]
) -> None:
    """The failing iteration's other work still runs, as a failing op never stops the rest,
    but no iteration starts after it: the loop's handle may be one the failed work never set."""
    x = device.malloc(16)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.While)
    step = body.add_kernel_node(count_down, 1, 1, (x, handle))
    body.add_kernel_node(kernel, 1, 1, (x,), deps=[step])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    for start in (4, 1, 7):
        device.view(x, np.int32, 1)[0] = start
        with pytest.raises(ahg.LaunchFailure, match=f"kernel '{kernel.name}' failed") as info:
            await (await graph_exec.launch(stream))
        assert isinstance(info.value.__cause__, raised)
        assert device.view(x, np.int32, 1)[0] == start - 1  # the first iteration only
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
    assert graph_exec.statistics().in_flight == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
@pytest.mark.parametrize(("kernel", "raised"), FAILING)
@pytest.mark.parametrize("depth", [1, 3])
async def test_a_while_loop_whose_handle_setter_fails_ends_the_launch(
    device: ahg.Device, kernel: ahg.Kernel, raised: type[BaseException], depth: int
) -> None:
    """The kernel that would end the loop fails before setting its handle (left at 1 by
    the launch's default): the launch fails with that kernel's error instead of looping
    for ever, however deep the loop sits, and the device is idle once it has failed."""
    x = device.malloc(16)
    stream = device.create_stream()

    def fill(body: ahg.Graph) -> None:
        handle = body.conditional_handle(default=1)
        _, (loop,) = body.add_conditional_node(handle, K.While)
        loop.add_kernel_node(kernel, 1, 1, (x,))

    graph = nested(depth, fill)
    graph_exec = graph.instantiate()
    for _ in range(2):
        done = await graph_exec.launch(stream)
        with pytest.raises(ahg.LaunchFailure, match=f"kernel '{kernel.name}' failed") as info:
            async with asyncio.timeout(10):
                await done
        assert isinstance(info.value.__cause__, raised)
        with pytest.raises(ahg.LaunchFailure):
            await stream.synchronize()
    await device.synchronize()
    assert device.statistics().in_flight == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_in_an_async_body_kernel_abandons_the_launch_and_the_next_one_runs(
    device: ahg.Device, interrupt: type[BaseException]
) -> None:
    """KeyboardInterrupt/SystemExit escape to the loop's caller, as from any async body, and
    the launch fails as abandoned rather than succeeding; the executable launches again."""
    raising = [True]

    @ahg.kernel
    async def maybe_interrupts(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
        await asyncio.sleep(0)
        if raising[0]:
            raise interrupt

    x = device.malloc(16)
    graph = ahg.Graph()
    handle = graph.conditional_handle(default=1)
    _, (body,) = graph.add_conditional_node(handle, K.If)
    first = body.add_kernel_node(maybe_interrupts, 1, 1, (x,))
    body.add_kernel_node(put, 1, 1, (5, 1, x), deps=[first])
    graph_exec = graph.instantiate()
    stream = device.create_stream()

    async def launch() -> ahg.Completion:
        done = await graph_exec.launch(stream)
        for _ in range(4):  # the device runs the body on the loop's next turns
            await asyncio.sleep(0)
        return done

    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(launch())
        with pytest.raises(interrupt):
            loop.run_until_complete(task)

        async def afterwards() -> None:
            with pytest.raises(ahg.LaunchFailure, match="maybe_interrupts"):
                await (await task)
            with pytest.raises(ahg.LaunchFailure):
                await stream.synchronize()
            assert device.view(x, np.int32, 2).tolist() == [0, 0]  # the rest was abandoned
            raising[0] = False
            await (await graph_exec.launch(stream))
            assert device.view(x, np.int32, 2).tolist() == [0, 5]
            assert graph_exec.statistics().in_flight == 0

        loop.run_until_complete(afterwards())
    finally:
        loop.close()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
