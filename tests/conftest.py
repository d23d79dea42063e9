"""Shared fixtures: a fresh simulated device per test, on asyncio and on uvloop.

Every async test runs twice, once per event loop implementation (pytest-asyncio's
``pytest_asyncio_loop_factories`` hook). ``device`` gives a freshly configured
device 0 so no state leaks between tests. Fresh devices come from ``ahipgraph.testing`` (the
kit users get); tests that want the leak check at teardown use its ``ahg_device`` fixture.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable, Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.testing import fresh_devices as fresh

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is part of the dev extra
    uvloop = None


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Run every async test on asyncio's loop and on uvloop."""
    factories: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
        "asyncio": asyncio.new_event_loop
    }
    if uvloop is not None:
        factories["uvloop"] = uvloop.new_event_loop
    return factories


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection built out of the collector's sight, so the full collection
    each test starts with (see ``fresh_devices``) scans only what tests make."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def fresh_devices() -> Iterator[None]:
    """Each test starts with one default device, and leaves none behind."""
    with fresh(1, check=False):
        # Handles earlier tests dropped are freed now, not in the middle of this test, where
        # their release would change the statistics a test compares before and after.
        ahg.collect_forgotten()
        yield


@pytest.fixture
def device() -> ahg.Device:
    return ahg.get_device(0)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Make the interpreter switch threads very often, so races get a real chance to happen."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)
