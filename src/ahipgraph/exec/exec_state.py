"""The state of an executable handle, shared by the executable and its launcher."""

from __future__ import annotations

import enum

__all__ = ["ExecState"]


class ExecState(enum.Enum):
    """An executable's ``state``: open, closing while launches it had in flight finish, closed."""

    OPEN = "open"
    CLOSING = "closing"  # destroyed, launches still in flight
    CLOSED = "closed"
