"""One block object (``testing.fail_kernels(...)``, ``ahg.tracing()``, ...) entered by ``with``
in several tasks or threads at once: each leaves the block it entered itself."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from cleanup import destroy


@ahg.kernel(duration_ns=1_000)
def noop(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
async def test_tasks_leave_their_own_blocks(device: ahg.Device) -> None:
    stream = device.create_stream()
    faults = testing.fail_kernels(None)
    a_in, a_out = asyncio.Event(), asyncio.Event()

    async def first() -> testing.KernelFault:
        with faults as fault:
            a_in.set()
            await asyncio.sleep(0)
        a_out.set()  # left while the second task is still inside its block
        return fault

    async def second() -> testing.KernelFault:
        await a_in.wait()
        with faults as fault:
            await a_out.wait()
            await stream.launch_kernel(noop, 1, 1)
            with pytest.raises(ahg.LaunchFailure):
                await stream.synchronize()
        return fault

    fault_a, fault_b = await asyncio.gather(first(), second())
    assert fault_b.hits == 1  # the second task's block was still in force
    assert fault_a.hits == 0  # the first task's was over
    await stream.launch_kernel(noop, 1, 1)  # both blocks are over
    await stream.synchronize()
    destroy(stream)


def test_threads_leave_their_own_blocks(device: ahg.Device) -> None:
    before = device.memory_info()
    faults = testing.fail_allocations(None)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, testing.AllocationFault] = {}

    def first() -> None:
        with faults as fault:
            a_in.set()
            b_in.wait()
        seen["a"] = fault
        a_out.set()

    def second() -> None:
        a_in.wait()
        with faults as fault:
            b_in.set()
            a_out.wait()
            seen["b"] = fault
            with contextlib.suppress(ahg.OutOfMemory):  # the block is in force: this fails
                device.free(device.malloc(16))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen["b"].hits == 1
    assert seen["a"].hits == 0
    assert device.memory_info() == before


def test_a_block_left_in_another_context_is_not_kept_where_it_was_entered() -> None:
    """An async fixture may enter in its setup task and leave in its teardown task: the
    context that entered does not keep the finished block (nor what it holds)."""
    from ahipgraph.core.scoped import _OPEN

    around = _OPEN.get()  # the blocks this test runs inside (the device fixture's)
    tracing = ahg.tracing()
    setup, teardown = contextvars.copy_context(), contextvars.copy_context()
    trace = setup.run(tracing.__enter__)
    teardown.run(tracing.__exit__, None, None, None)
    assert len(setup.run(_OPEN.get)) == len(around) + 1  # listed until it enters again

    def enter_another() -> int:
        with testing.fail_kernels(0):
            return len(_OPEN.get())

    assert setup.run(enter_another) == len(around) + 1  # the finished block was dropped
    assert setup.run(_OPEN.get) == around
    assert trace is not None


@pytest.mark.parametrize(
    "make",
    [ahg.tracing, ahg.race_check, lambda: testing.fail_kernels(None)],
    ids=["tracing", "race_check", "fail_kernels"],
)
def test_leaving_a_block_never_entered_is_a_runtime_error(make: object) -> None:
    block = make()  # type: ignore[operator]
    with pytest.raises(RuntimeError, match="without being entered"):
        block.__exit__(None, None, None)
    with block:  # still usable: entered and left as usual
        pass
    with pytest.raises(RuntimeError, match="without being entered"):
        block.__exit__(None, None, None)  # left once already
