"""``scoped``: :func:`contextlib.contextmanager` whose blocks also decorate coroutine functions.

The kit's blocks (``ahg.tracing()``, ``ahg.race_check()``, the fault makers of
``ahipgraph.testing``) are meant for async code, and a context manager from
``contextlib.contextmanager`` is also a decorator: but one that wraps a coroutine function
enters its block while the call *makes* the coroutine and leaves it before a line of it ran,
so ``@testing.fail_kernels(1)`` on an ``async def`` test injected nothing, silently. A
:class:`Scoped` block wraps a coroutine function in a coroutine function that runs the whole
coroutine inside a fresh block, and a plain function as ``contextlib`` does.

Each ``with`` (and each call of a decorated function) runs the generator anew, so one block
object may be entered again once it was left, or by several calls at once. Several tasks or
threads may also be inside ``with`` blocks of one object at once: each ``__exit__`` leaves
the block its own task or thread entered (the innermost in its context), not the one entered
last anywhere.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar

__all__ = ["Scoped", "checked_scoped", "scoped"]

P = ParamSpec("P")
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# The blocks entered by ``with`` in this context (task or thread), innermost last, each with
# the Scoped object that made it. A block left in another context stays listed here until
# this context enters a block again (which drops it).
_OPEN: ContextVar[tuple[tuple[Scoped[Any], AbstractContextManager[Any]], ...]] = ContextVar(
    "ahipgraph_scoped_open", default=()
)


class Scoped(AbstractContextManager[T], Generic[T]):
    """A block made anew by each ``with``; as a decorator, around the whole call."""

    __slots__ = ("_entered", "_lock", "_make")

    def __init__(self, make: Callable[[], AbstractContextManager[T]]) -> None:
        self._make = make
        self._entered: list[AbstractContextManager[T]] = []
        self._lock = threading.Lock()

    def __enter__(self) -> T:
        block = self._make()
        value = block.__enter__()
        with self._lock:
            self._entered.append(block)
        still = tuple(entry for entry in _OPEN.get() if entry[0]._holds(entry[1]))
        _OPEN.set((*still, (self, block)))
        return value

    def _holds(self, block: AbstractContextManager[Any]) -> bool:
        """Whether ``block`` (made by this object) is still entered."""
        with self._lock:
            return any(entered is block for entered in self._entered)

    def _leaving(self) -> AbstractContextManager[T]:
        """The block this ``__exit__`` leaves: the innermost this context entered, else (a
        ``with`` left in another context than it was entered in) the last one entered."""
        open_here = _OPEN.get()
        with self._lock:
            for index in range(len(open_here) - 1, -1, -1):
                owner, block = open_here[index]
                if owner is self:
                    for at, entered in enumerate(self._entered):
                        if entered is block:
                            del self._entered[at]
                            _OPEN.set(open_here[:index] + open_here[index + 1 :])
                            return block
            if not self._entered:
                raise RuntimeError("a block was left (__exit__) without being entered")
            return self._entered.pop()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return self._leaving().__exit__(kind, error, traceback)

    def __call__(self, function: F) -> F:
        make = self._make
        if isinstance(function, staticmethod | classmethod):  # decorated below the block
            return type(function)(self(function.__func__))
        if inspect.isasyncgenfunction(function) or inspect.isgeneratorfunction(function):
            # A call only makes the generator: the block would end before its body ran.
            raise TypeError(
                f"{function.__qualname__} is a generator function: a block decorating it "
                "would end before its body runs; use the block as `with` inside it"
            )
        if inspect.iscoroutinefunction(function) or _async_callable(function):

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
    return _factory(generator, None)


def checked_scoped(
    check: Callable[P, object],
) -> Callable[[Callable[P, Iterator[T]]], Callable[P, Scoped[T]]]:
    """:func:`scoped`, with ``check`` called on the arguments when the block is made: a bad
    value fails at the call, as a bad signature does, not at the first ``with`` (for a
    decorated function, its first call)."""

    def decorate(generator: Callable[P, Iterator[T]]) -> Callable[P, Scoped[T]]:
        return _factory(generator, check)

    return decorate


def _factory(
    generator: Callable[P, Iterator[T]], check: Callable[P, object] | None
) -> Callable[P, Scoped[T]]:
    block = contextlib.contextmanager(generator)
    signature = inspect.signature(generator)
    name = generator.__name__

    @functools.wraps(generator)
    def factory(*args: P.args, **kwargs: P.kwargs) -> Scoped[T]:
        # The block is made at each ``with``: a wrong call must fail here, not there (or,
        # for ``@block`` without its parentheses, at the decorated function's first call).
        if len(args) == 1 and not kwargs and inspect.isroutine(args[0]):
            raise TypeError(f"{name}() decorates with its parentheses: @{name}(), not @{name}")
        try:
            signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{name}(): {error}") from error
        if check is not None:
            check(*args, **kwargs)
        return Scoped(lambda: block(*args, **kwargs))

    return factory


def _async_callable(function: object) -> bool:
    """Whether ``function`` is an object (not a function) whose ``__call__`` is ``async``."""
    if inspect.isfunction(function) or inspect.ismethod(function) or isinstance(function, type):
        return False
    call = getattr(type(function), "__call__", None)  # noqa: B004 - its kind, not callable()
    return inspect.iscoroutinefunction(call)
