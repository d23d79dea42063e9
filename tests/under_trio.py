"""Running ahipgraph calls as a trio task would, with or without trio installed.

ahipgraph runs on asyncio (or uvloop); under trio every call that needs a loop must say so
at once. Without trio installed, :func:`pretend_trio` puts a stand-in module in
``sys.modules`` that answers ``trio.lowlevel.current_task()`` the way trio does inside a trio
task, and a coroutine stepped with no asyncio loop running sees what a trio task sees.
"""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Awaitable, Callable

import pytest

NOT_TRIO = "ahipgraph runs on asyncio \\(or uvloop\\), not trio"


def pretend_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the caller look like a trio task for the rest of the test."""
    fake = types.SimpleNamespace(lowlevel=types.SimpleNamespace(current_task=lambda: object()))
    monkeypatch.setitem(sys.modules, "trio", fake)


def refused_under_real_trio(call: Callable[[], Awaitable[object]]) -> None:
    """Await ``call()`` in a real trio task (skip if trio is not installed): it must refuse."""
    with warnings.catch_warnings():
        # hypothesis warns about trio's module-level Random as trio is first imported
        warnings.simplefilter("ignore")
        pytest.importorskip("trio")
    import anyio

    async def main() -> None:
        with pytest.raises(RuntimeError, match=NOT_TRIO):
            await call()

    anyio.run(main, backend="trio")
