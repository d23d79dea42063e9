"""``ahg.run``: run a coroutine on asyncio or uvloop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .core.ints import is_bool

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

    Raises:
        ModuleNotFoundError: ``use_uvloop`` is set and uvloop is not installed; the message says
            how to install it. ``main`` is then not started (a coroutine passed in is closed, so
            it does not warn that it was never awaited).
        TypeError: ``use_uvloop`` is not a bool, Python's or numpy's (a string such as
            ``"no"`` is truthy, so it is refused rather than guessed at); ``main`` is then not
            started either. Also when ``main`` is neither a coroutine nor a function returning
            one.
        RuntimeError: called from a coroutine, where an event loop already runs; ``main`` is
            not started (a coroutine function is not even called), as above.
    """
    flag: object = use_uvloop  # typed callers pass a bool; untyped ones may pass anything
    if not is_bool(flag):  # numpy's bool too, as the kit's other switches take it
        if not callable(main) and hasattr(main, "close"):
            main.close()
        raise TypeError(f"use_uvloop must be a bool, got {use_uvloop!r}")
    use_uvloop = bool(flag)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass  # no loop runs in this thread: the usual case
    else:
        # asyncio.run would refuse too, but only after ``main()`` made a coroutine that then
        # warns "never awaited" when collected, far from this call.
        if not callable(main) and hasattr(main, "close"):
            main.close()
        raise RuntimeError(
            "ahg.run() cannot be called while an event loop runs in this thread; "
            "await the coroutine instead"
        )
    runner: Callable[[Coroutine[Any, Any, T]], T] = asyncio.run
    if use_uvloop:
        try:
            import uvloop
        except ImportError as error:
            if not callable(main) and hasattr(main, "close"):
                main.close()
            raise ModuleNotFoundError(
                "ahg.run(..., use_uvloop=True) needs uvloop, which is not installed; "
                "install it with: pip install 'ahipgraph[uvloop]'",
                name="uvloop",
            ) from error
        runner = uvloop.run
    coro: object = main() if callable(main) else main
    if not inspect.iscoroutine(coro):
        # asyncio says ValueError and uvloop "can't be used in 'await' expression": one
        # answer for both loops, the one Python gives a wrong type.
        raise TypeError(
            f"ahg.run needs a coroutine or a coroutine function, got {main!r}"
            + (f" (which returned {coro!r})" if callable(main) else "")
        )
    return runner(coro)
