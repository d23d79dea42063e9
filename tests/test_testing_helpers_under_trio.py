"""The testing kit's async helpers under trio fail at once with ahipgraph's clear error.

ahipgraph runs on asyncio (or uvloop). Under anyio's trio backend asyncio's own message, a bare
``RuntimeError: no running event loop`` (or trio's complaint about an unrecognised yield),
would not say why; every helper a test awaits says that ahipgraph needs asyncio instead.

Without trio installed, a stand-in module answers ``trio.lowlevel.current_task()`` the way
trio does inside a trio task, and each coroutine is stepped with no asyncio loop running,
which is what a trio task sees.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import pytest

from ahipgraph import testing

NOT_TRIO = "ahipgraph runs on asyncio \\(or uvloop\\), not trio"

HELPERS: list[tuple[str, Callable[[], Awaitable[object]]]] = [
    ("Interleave.turn", lambda: testing.Interleave(["a", "b"]).turn("b")),
    ("GatedHost()", lambda: testing.GatedHost()()),
    ("GatedHost.started", lambda: testing.GatedHost().started()),
    ("loop_turns", lambda: testing.loop_turns()),
]


@pytest.fixture
def in_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(lowlevel=types.SimpleNamespace(current_task=lambda: object()))
    monkeypatch.setitem(sys.modules, "trio", fake)


@pytest.mark.usefixtures("in_trio")
@pytest.mark.parametrize(("name", "make"), HELPERS, ids=[name for name, _ in HELPERS])
def test_a_helper_awaited_under_trio_names_trio(
    name: str, make: Callable[[], Coroutine[Any, Any, object]]
) -> None:
    coroutine = make()
    try:
        with pytest.raises(RuntimeError, match=NOT_TRIO):
            coroutine.send(None)
    finally:
        coroutine.close()


@pytest.mark.parametrize(("name", "make"), HELPERS, ids=[name for name, _ in HELPERS])
def test_a_helper_under_the_real_trio_names_trio(
    name: str, make: Callable[[], Awaitable[object]]
) -> None:
    with warnings.catch_warnings():
        # hypothesis warns about trio's module-level Random as trio is first imported
        warnings.simplefilter("ignore")
        pytest.importorskip("trio")
    import anyio

    async def main() -> None:
        with pytest.raises(RuntimeError, match=NOT_TRIO):
            await make()

    anyio.run(main, backend="trio")
