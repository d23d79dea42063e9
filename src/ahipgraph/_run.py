"""``ahg.run``: run a coroutine on asyncio or uvloop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["run"]

T = TypeVar("T")


def run(
    main: Callable[[], Coroutine[Any, Any, T]] | Coroutine[Any, Any, T],
    *,
    use_uvloop: bool = False,
) -> T:
    """Run ``main`` (a coroutine or a coroutine function) to completion on a new event loop.

    Args:
        use_uvloop: run on uvloop instead of asyncio's default loop (requires ``uvloop``).
    """
    coroutine = main() if callable(main) else main
    if use_uvloop:
        import uvloop

        return uvloop.run(coroutine)
    return asyncio.run(coroutine)
