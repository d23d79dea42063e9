"""The testing kit's async helpers under trio fail at once with ahipgraph's clear error.

ahipgraph runs on asyncio (or uvloop). Under anyio's trio backend asyncio's own message, a bare
``RuntimeError: no running event loop`` (or trio's complaint about an unrecognised yield),
would not say why; every helper a test awaits says that ahipgraph needs asyncio instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from ahipgraph import testing
from under_trio import NOT_TRIO, pretend_trio, refused_under_real_trio

HELPERS: list[tuple[str, Callable[[], Awaitable[object]]]] = [
    ("Interleave.turn", lambda: testing.Interleave(["a", "b"]).turn("b")),
    ("GatedHost()", lambda: testing.GatedHost()()),
    ("GatedHost.started", lambda: testing.GatedHost().started()),
    ("loop_turns", lambda: testing.loop_turns()),
]
IDS = [name for name, _ in HELPERS]


@pytest.mark.parametrize(("name", "make"), HELPERS, ids=IDS)
def test_a_helper_awaited_under_trio_names_trio(
    name: str, make: Callable[[], Coroutine[Any, Any, object]], monkeypatch: pytest.MonkeyPatch
) -> None:
    pretend_trio(monkeypatch)
    coroutine = make()
    try:
        with pytest.raises(RuntimeError, match=NOT_TRIO):
            coroutine.send(None)
    finally:
        coroutine.close()


@pytest.mark.parametrize(("name", "make"), HELPERS, ids=IDS)
def test_a_helper_under_the_real_trio_names_trio(
    name: str, make: Callable[[], Awaitable[object]]
) -> None:
    refused_under_real_trio(make)
