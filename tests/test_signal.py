"""Signals and programs: the device's countdown values and the packets that run on queues."""

from __future__ import annotations

import asyncio

import pytest

import ahipgraph as ahg
from ahipgraph.device.ops import HostOp, KernelOp, SignalIndexOp, WaitSignalsOp
from ahipgraph.device.program import Program
from ahipgraph.device.signal import Signal
from ahipgraph.runtime.completion import make_completion
from ahipgraph.runtime.params import KernelParams
from fakes import loop_turns


@ahg.kernel
def explode(t: ahg.Threads) -> None:
    raise RuntimeError("boom")


def test_decrement_counts_down_and_stamps_the_time() -> None:
    signal = Signal(2)
    assert not signal.reached()
    signal.decrement(100)
    assert (signal.value, signal.time) == (1, 100)
    assert signal.reached(1)
    signal.decrement(250)
    assert signal.reached()
    assert signal.time == 250


def test_watchers_fire_once_when_their_target_is_reached() -> None:
    signal = Signal(2)
    fired: list[str] = []
    signal.when_reached(1, lambda: fired.append("at 1"))
    signal.when_reached(0, lambda: fired.append("at 0"))
    assert signal.waiters == 2
    signal.decrement(1)
    assert fired == ["at 1"]
    signal.decrement(2)
    assert fired == ["at 1", "at 0"]
    assert signal.waiters == 0
    signal.when_reached(0, lambda: fired.append("already"))  # runs at once
    assert fired[-1] == "already"


def test_set_moves_the_value_and_notifies() -> None:
    signal = Signal(5)
    fired: list[int] = []
    signal.when_reached(0, lambda: fired.append(signal.time))
    signal.set(0, 42)
    assert fired == [42]


def test_the_first_error_sticks() -> None:
    signal = Signal(2)
    first, second = ahg.LaunchFailure("first"), ahg.LaunchFailure("second")
    signal.decrement(1, first)
    signal.decrement(2, second)
    assert signal.error is first


def test_rearm_makes_the_signal_pending_again() -> None:
    signal = Signal(1)
    signal.decrement(10, ahg.LaunchFailure("x"))
    signal.rearm(3)
    assert (signal.value, signal.time, signal.error) == (3, 0, None)
    signal.when_reached(0, lambda: None)
    with pytest.raises(AssertionError, match="device waiters"):
        signal.rearm()
    assert repr(signal) == "<Signal value=3 t=0ns waiters=1>"


@pytest.mark.asyncio
async def test_rearm_with_a_host_waiter_is_refused() -> None:
    signal = Signal(1)
    waiter = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)  # the waiter parks on the signal
    with pytest.raises(AssertionError, match="host waiters"):
        signal.rearm()
    signal.decrement(1)
    await waiter


@pytest.mark.asyncio
async def test_host_wait_returns_only_once_the_target_is_reached() -> None:
    signal = Signal(3)
    to_one = asyncio.ensure_future(signal.wait(1))
    to_zero = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0)  # both park
    signal.decrement(1)
    await asyncio.sleep(0)  # both wake, see 2, park again
    assert not to_one.done()
    assert not to_zero.done()
    signal.decrement(2)
    await to_one
    assert not to_zero.done()
    signal.decrement(3)
    await to_zero
    assert signal.waiters == 0


@pytest.mark.asyncio
async def test_a_failed_op_stops_nothing_else_and_its_error_travels_with_the_signals(
    device: ahg.Device,
) -> None:
    log: list[str] = []
    done, raised = Signal(1), Signal(1)
    program = Program(
        [
            HostOp(log.append, ("before",), 0),
            KernelParams.make(explode, 1, 1, device=device).op(device),
            HostOp(log.append, ("after",), 0),  # a failure stops nothing else, as on a stream
            SignalIndexOp(0),
        ],
        done,
        signals=[raised],
    )
    device.queues[0].submit(program)
    with pytest.raises(ahg.LaunchFailure, match="explode"):
        await make_completion(done, device)
    assert log == ["before", "after"]
    assert raised.reached()
    assert raised.error is program.error
    assert isinstance(program.error, ahg.LaunchFailure)


@pytest.mark.asyncio
async def test_a_barrier_parks_its_queue_until_the_signal_is_reached(device: ahg.Device) -> None:
    gate = Signal(1)
    log: list[str] = []
    queue = device.queues[2]
    first = Signal(1)
    queue.submit(Program([WaitSignalsOp([gate])], first))
    second = Signal(1)
    queue.submit(Program([HostOp(log.append, ("after",), 0)], second))
    await loop_turns()  # the queue runs up to the barrier and parks there
    assert queue.pending == 2
    assert log == []
    gate.decrement(7_000)
    await make_completion(second, device)
    assert log == ["after"]
    assert first.time == 7_000  # the barrier finished when its signal was reached
    assert queue.statistics().completed == 2
    assert "pending=0" in repr(queue)


def test_kernel_op_repr_and_fault_name_the_kernel(device: ahg.Device) -> None:
    op = KernelParams.make(explode, 2, 3, device=device).op(device)
    assert isinstance(op, KernelOp)
    assert repr(op) == "<KernelOp explode Threads(grid=(2, 1, 1), block=(3, 1, 1))>"
    error = op.fault(ValueError("bad"))
    assert isinstance(error, ahg.LaunchFailure)
    assert "explode" in str(error)
