"""``hang_kernels``: the block ending on another thread.

A hung kernel waits on a future of the loop that runs the device. ``cancel()`` (and the end
of the ``hang_kernels`` block, which calls it) resolved that future directly, from whatever
thread it ran on. From the test's own thread, while the device's loop ran on a worker thread,
that is a future of one loop resolved from another thread: asyncio does not wake a loop
sleeping in its selector for it, so the worker's loop, waiting for the hung launch, slept on
with the failure already set. Cancellation now hands each future to its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, HeldKernel, hang_kernels


@ahg.kernel
def _fill(t: ahg.Threads, out: ahg.Ptr[ahg.int32]) -> None:
    out[t.ids] = 1


def test_a_hang_cancelled_from_another_thread_wakes_the_loop_that_runs_it(
    device: ahg.Device,
) -> None:
    buffer = device.malloc(256)
    hung = threading.Event()
    outcome: list[BaseException | None] = []

    async def worker() -> None:
        stream = device.create_stream()
        launched = await stream.launch_kernel(_fill, 1, 64, (buffer,))
        await hang.started.wait()  # the kernel reached its hang (set on this loop)
        hung.set()
        try:
            # Only a safety net: the cancellation from the other thread must wake this wait.
            async with asyncio.timeout(60):
                await launched
        except BaseException as error:  # the LaunchFailure of the cancelled hang, we expect
            outcome.append(error)
        else:
            outcome.append(None)
        with contextlib.suppress(ahg.LaunchFailure):  # the same failure, sticky on the stream
            await stream.synchronize()
        stream.destroy()

    with hang_kernels(1) as hang:
        thread = threading.Thread(target=asyncio.run, args=(worker(),))
        thread.start()
        assert hung.wait(30)
    # the block's end cancelled the hang from this thread
    thread.join(20)
    assert not thread.is_alive(), "the worker's loop was never woken"
    assert len(outcome) == 1
    assert isinstance(outcome[0], ahg.LaunchFailure)
    device.free(buffer)


def test_a_held_kernel_released_from_another_thread_wakes_the_loop_that_runs_it(
    device: ahg.Device,
) -> None:
    """``HeldKernel.release`` (and ``GatedHost.open``) set an ``asyncio.Event`` from the
    caller's thread: the waiting loop on another thread was marked done but never woken."""
    held = HeldKernel()
    gate = GatedHost()
    ready = threading.Event()
    outcome: list[str] = []

    async def worker() -> None:
        stream = device.create_stream()
        kernel_done = await held.launch(stream)
        host_done = await stream.launch_host_func(gate)
        await held.started.wait()
        ready.set()
        async with asyncio.timeout(60):  # only a safety net
            await kernel_done
            outcome.append("kernel")
            await gate.started()
            ready.set()
            await host_done
            outcome.append("host")
        stream.destroy()

    thread = threading.Thread(target=asyncio.run, args=(worker(),))
    thread.start()
    assert ready.wait(30)
    ready.clear()
    held.release()  # from this thread, while the worker's loop sleeps
    assert ready.wait(30), "the held kernel was never let go"
    gate.open()
    thread.join(20)
    assert not thread.is_alive(), "the worker's loop was never woken"
    assert outcome == ["kernel", "host"]
