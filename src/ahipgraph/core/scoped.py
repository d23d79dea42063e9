"""``scoped``: :func:`contextlib.contextmanager` whose blocks also decorate coroutine functions.

The kit's blocks (``ahg.tracing()``, ``ahg.race_check()``, the fault makers of
``ahipgraph.testing``) are meant for async code, and a context manager from
``contextlib.contextmanager`` is also a decorator: but one that wraps a coroutine function
enters its block while the call *makes* the coroutine and leaves it before a line of it ran,
so ``@testing.fail_kernels(1)`` on an ``async def`` test injected nothing, silently. A
:class:`Scoped` block wraps a coroutine function in a coroutine function that runs the whole
coroutine inside a fresh block, and a plain function as ``contextlib`` does.

Each ``with`` (and each call of a decorated function) runs the generator anew, so one block
object may be entered again once it was left, or by several calls at once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar

__all__ = ["Scoped", "scoped"]

P = ParamSpec("P")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Scoped(AbstractContextManager[T], Generic[T]):
    """A block made anew by each ``with``; as a decorator, around the whole call."""

    __slots__ = ("_entered", "_make")

    def __init__(self, make: Callable[[], AbstractContextManager[T]]) -> None:
        self._make = make
        self._entered: list[AbstractContextManager[T]] = []

    def __enter__(self) -> T:
        block = self._make()
        value = block.__enter__()
        self._entered.append(block)
        return value

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return self._entered.pop().__exit__(kind, error, traceback)

    def __call__(self, function: F) -> F:
        make = self._make
        if inspect.iscoroutinefunction(function):

            @functools.wraps(function)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                with make():
                    return await function(*args, **kwargs)

            return run_async  # type: ignore[return-value]

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            with make():
                return function(*args, **kwargs)

        return run  # type: ignore[return-value]


def scoped(generator: Callable[P, Iterator[T]]) -> Callable[P, Scoped[T]]:
    """Like :func:`contextlib.contextmanager`, for blocks that may decorate async code."""
    block = contextlib.contextmanager(generator)

    @functools.wraps(generator)
    def factory(*args: P.args, **kwargs: P.kwargs) -> Scoped[T]:
        return Scoped(lambda: block(*args, **kwargs))

    return factory
