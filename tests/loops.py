"""The event loop implementations a test that makes its own loops runs on.

Async tests run on both through ``conftest.py``'s loop factories; a test that drives loops
itself (``asyncio.Runner``, ``run_until_complete``) parametrizes over :data:`LOOPS`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is part of the dev extra
    uvloop = None

__all__ = ["LOOPS"]

LOOPS: list[Callable[[], asyncio.AbstractEventLoop]] = [asyncio.new_event_loop]
if uvloop is not None:
    LOOPS.append(uvloop.new_event_loop)
