"""A Ctrl-C that lands as a collector pause sets or ends its thresholds (``core/gcpause.py``).

``gc.set_threshold`` is a call like any other: a ``KeyboardInterrupt`` may be raised as it
returns, the pause's thresholds applied and the call that set them cut short. The end of the
pause must still tell them from thresholds the program set, and put the program's back.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from ahipgraph.core import gcpause


@pytest.fixture
def collector() -> Iterator[tuple[int, ...]]:
    """The collector as the program set it, checked unchanged after the test."""
    assert not gcpause.is_paused()
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    yield thresholds
    assert not gcpause.is_paused(), "the collector was left paused"
    assert gc.get_threshold() == thresholds
    assert gc.callbacks == callbacks


def interrupt_next_set(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, ...]]:
    """Make the next ``gc.set_threshold`` apply its thresholds and then raise
    KeyboardInterrupt (a Ctrl-C landing as it returns); returns what it applied."""
    real = gc.set_threshold
    applied: list[tuple[int, ...]] = []

    def set_then_interrupt(*thresholds: int) -> None:
        real(*thresholds)
        if not applied:
            applied.append(thresholds)
            raise KeyboardInterrupt

    monkeypatch.setattr(gc, "set_threshold", set_then_interrupt)
    return applied


class Build:
    """What a watched pause asks: how many nodes a build has made."""

    def __init__(self) -> None:
        self.nodes = 0


def nodes(build: Build) -> int:
    return build.nodes


def test_a_ctrl_c_as_a_pause_sets_its_thresholds_leaves_no_pause(
    collector: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    applied = interrupt_next_set(monkeypatch)
    with pytest.raises(KeyboardInterrupt), gcpause.paused():
        pytest.fail("the block ran although the pause was interrupted")
    assert applied == [(gcpause.PAUSED_YOUNG, *collector[1:])]
    assert gc.get_threshold() == collector


def test_a_ctrl_c_as_a_watched_pause_s_end_sets_thresholds_still_ends_the_pause(
    collector: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No running loop: the build's pause is watched, at its own smaller threshold. The next
    # bulk operation (paused()) ends it, and the threshold goes back up to PAUSED_YOUNG for
    # the pause left: the Ctrl-C lands there.
    build = Build()
    gcpause.pause_until_yield(build, nodes)
    assert gc.get_threshold()[0] == gcpause.WATCHED_YOUNG
    applied = interrupt_next_set(monkeypatch)
    with pytest.raises(KeyboardInterrupt), gcpause.paused():
        pass
    assert applied == [(gcpause.PAUSED_YOUNG, *collector[1:])]
    assert gc.get_threshold() == collector


def test_thresholds_the_program_sets_during_a_pause_still_stay(
    collector: tuple[int, ...],
) -> None:
    """What the record tells apart: the program's own thresholds, set during a pause."""
    chosen = (collector[0] + 1, *collector[1:])
    try:
        with gcpause.paused():
            gc.set_threshold(*chosen)
        assert gc.get_threshold() == chosen
    finally:
        gc.set_threshold(*collector)


# -- a Ctrl-C as a collector pause ends ------------------------------------------------------------


def interrupt_once(call: Callable[..., object]) -> tuple[Callable[..., object], list[bool]]:
    """``call`` that, once armed (``armed[0] = True``), returns as usual and then raises
    KeyboardInterrupt (a Ctrl-C landing as it returns), once."""
    armed = [False]

    def then_interrupt(*args: int) -> object:
        result = call(*args)
        if armed[0]:
            armed[0] = False
            raise KeyboardInterrupt
        return result

    return then_interrupt, armed


@pytest.mark.parametrize("name", ["get_threshold", "set_threshold"])
def test_a_ctrl_c_as_a_pause_ends_still_ends_it_and_puts_everything_back(
    collector: tuple[int, ...], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """The end reads the thresholds in force, then puts the program's back: a Ctrl-C as
    either call returns must leave neither the pause, its thresholds nor its callback."""
    interrupted, armed = interrupt_once(getattr(gc, name))
    monkeypatch.setattr(gc, name, interrupted)
    with pytest.raises(KeyboardInterrupt), gcpause.paused():
        armed[0] = True  # the block's end is the first call from now on
    assert not armed[0]  # the interrupt came
    monkeypatch.undo()
    assert gc.get_threshold() == collector
