"""Synchronising under trio fails at once, even with nothing to wait for.

A synchronize of idle work needs no event loop, so under anyio's trio backend it used to
return, and a trio program only failed later, at its first wait for real work. Every
synchronize now says at once that ahipgraph runs on asyncio (or uvloop), as every enqueue does.
Called with no loop at all (a coroutine stepped by hand), an idle synchronize still returns
without yielding.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from cleanup import destroy
from under_trio import NOT_TRIO, pretend_trio, refused_under_real_trio

Make = Callable[[ahg.Device, ahg.Stream, ahg.Event], Coroutine[Any, Any, None]]
CALLS: list[tuple[str, Make]] = [
    ("Stream.synchronize", lambda device, stream, event: stream.synchronize()),
    ("Device.synchronize", lambda device, stream, event: device.synchronize()),
    ("Event.synchronize", lambda device, stream, event: event.synchronize()),
]
IDS = [name for name, _ in CALLS]


@pytest.fixture
def handles(device: ahg.Device) -> Iterator[tuple[ahg.Device, ahg.Stream, ahg.Event]]:
    stream, event = device.create_stream(), device.create_event()
    yield device, stream, event
    destroy(stream, event)


def _step(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` to its end with no event loop; it must not yield."""
    try:
        coroutine.send(None)
    except StopIteration:
        return
    coroutine.close()
    raise AssertionError("an idle synchronize yielded")


@pytest.mark.parametrize(("name", "make"), CALLS, ids=IDS)
def test_an_idle_synchronize_under_trio_names_trio(
    name: str, make: Make, handles: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    pretend_trio(monkeypatch)
    coroutine = make(*handles)
    try:
        with pytest.raises(RuntimeError, match=NOT_TRIO):
            coroutine.send(None)
    finally:
        coroutine.close()


@pytest.mark.parametrize(("name", "make"), CALLS, ids=IDS)
def test_an_idle_synchronize_without_any_loop_still_returns(
    name: str, make: Make, handles: Any
) -> None:
    _step(make(*handles))


@pytest.mark.parametrize(("name", "make"), CALLS, ids=IDS)
def test_an_idle_synchronize_under_the_real_trio_names_trio(
    name: str, make: Make, handles: Any
) -> None:
    refused_under_real_trio(lambda: make(*handles))
