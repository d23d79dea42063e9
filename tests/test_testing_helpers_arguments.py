"""``ahipgraph.testing``'s fakes refuse arguments that would make a test hang or lie."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import GatedHost, HeldKernel, Interleave, run_together


@pytest.mark.parametrize("run", [True, "0", 0.0, None])
def test_a_gate_named_by_something_other_than_an_int_is_a_type_error(run: Any) -> None:
    """``open("0")`` opened a gate no run waits on: the run it meant waited forever."""
    gate = GatedHost()
    with pytest.raises(TypeError, match="run"):
        gate.open(run)


def test_a_negative_gate_is_a_value_error() -> None:
    gate = GatedHost()
    with pytest.raises(ValueError, match="counted from 0"):
        gate.open(-1)
    with pytest.raises(ValueError, match="runs"):
        gate.open_all(-2)
    with pytest.raises(TypeError, match="runs"):
        gate.open_all(True)
    assert repr(gate) == "<GatedHost 'gate' runs=0 open=[]>"


def test_waiting_for_a_run_that_cannot_exist_fails_before_it_waits() -> None:
    """The refusal comes in the coroutine's first step (it waited forever), before it needs
    an event loop at all."""
    gate = GatedHost()
    waiting = gate.started(-1)
    try:
        with pytest.raises(ValueError, match="counted from 0"):
            waiting.send(None)
    finally:
        waiting.close()


@pytest.mark.asyncio
async def test_a_numpy_run_number_opens_that_run(device: ahg.Device) -> None:
    log: list[str] = []
    gate = GatedHost("g", log)
    stream = device.create_stream()
    await stream.launch_host_func(gate)
    await gate.started(np.int64(0))
    gate.open(np.int32(0))
    await stream.synchronize()
    assert log == ["g start 0", "g end 0"]
    stream.destroy()


def test_run_together_refuses_what_is_not_callable_before_any_thread_starts() -> None:
    ran: list[int] = []
    with pytest.raises(TypeError, match="callables"):
        run_together(lambda: ran.append(1), 42)  # type: ignore[arg-type]
    assert ran == []


def test_run_together_needs_a_target() -> None:
    with pytest.raises(ValueError, match="at least one target"):
        run_together()


def test_run_together_still_returns_what_the_targets_raised() -> None:
    def fails() -> None:
        raise KeyboardInterrupt

    errors = run_together(fails, lambda: None)
    assert [type(e) for e in errors] == [KeyboardInterrupt]


@pytest.mark.parametrize("fake", [GatedHost, HeldKernel])
def test_a_log_that_is_not_a_list_is_refused_when_the_fake_is_made(fake: Any) -> None:
    """A tuple or a str failed only when the fake ran, as that run's LaunchFailure."""
    with pytest.raises(TypeError, match="log must be a list"):
        fake("f", ())


def test_interleave_refuses_names_that_are_not_str() -> None:
    """``Interleave([1, 2])`` made an order no ``turn`` could ever take."""
    with pytest.raises(TypeError, match="names must be str"):
        Interleave(["a", 1])  # type: ignore[list-item]
    assert Interleave("a", ["b", "a"]).order == ["a", "b", "a"]
