"""``with`` support shared by every handle that has a ``destroy()``.

``with device.create_stream() as stream:`` destroys the stream when the block ends, however it
ends, unless the block destroyed it already; the same holds for graphs, nodes, executables and
events. Kept to these two methods so that each handle keeps its own liveness rule and HIP's
error code for a destroyed handle.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace, TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

__all__ = ["DestroyOnExit", "report_unraisable"]


class DestroyOnExit:
    """Mixin: ``__enter__`` returns the handle, ``__exit__`` destroys it if it is still alive."""

    __slots__ = ()

    if TYPE_CHECKING:  # provided by the handle this mixes into

        @property
        def alive(self) -> bool: ...

        def destroy(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.alive:
            self.destroy()


def report_unraisable(error: BaseException, message: str, obj: object = None) -> None:
    """Hand ``error`` to ``sys.unraisablehook``, as Python does for an error in ``__del__``.

    For errors in user code run where nobody can receive them, such as a destructor run by a
    completion after its event loop closed.
    """
    args = SimpleNamespace(
        exc_type=type(error),
        exc_value=error,
        exc_traceback=error.__traceback__,
        err_msg=message,
        object=obj,
    )
    sys.unraisablehook(cast(Any, args))
