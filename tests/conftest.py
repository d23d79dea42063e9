"""Shared fixtures: a fresh simulated device per test, on asyncio and on uvloop.

Every async test runs twice, once per event loop implementation (pytest-asyncio's
``pytest_asyncio_loop_factories`` hook). Every test runs on the kit users get: the autouse
fixture is ``ahipgraph.testing``'s device fixture (``ahg_devices(1)``), so each test starts
with a fresh device 0 and fails at teardown with the kit's report if it left anything alive,
in flight or allocated. ``device`` is that same device. A test whose very point is to leave
something behind says so with ``@pytest.mark.leaks_allowed("why")``: it still gets fresh
devices, without the check.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import sys
import warnings
from collections.abc import Callable, Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.exec.plan_check import unenforced_edges
from ahipgraph.testing import fresh_devices as fresh
from rings import small_ring_device

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
    """Move what collection built out of the collector's sight, so the collection each test
    starts with (see ``fresh_devices``) scans only what tests make."""
    gc.collect()
    gc.freeze()


# pytest keeps every test's reports for its closing summary: a few objects per test, each with
# its own dicts and lists, that the collection each test starts with would walk again, so that
# a test late in the run paid several times what an early one did. What is alive between tests
# is moved out of the collector's sight every so many tests, as collection's objects are above;
# the pass just before makes sure no garbage (a forgotten handle in a cycle) is frozen with it.
_FREEZE_EVERY = 200
_finished = 0


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    global _finished
    _finished += 1
    if _finished % _FREEZE_EVERY == 0:
        gc.collect()
        gc.freeze()


def _leaks_allowed(request: pytest.FixtureRequest) -> bool:
    marker = request.node.get_closest_marker("leaks_allowed")
    if marker is None:
        return False
    if not (marker.args and isinstance(marker.args[0], str) and marker.args[0]):
        raise TypeError("@pytest.mark.leaks_allowed needs a reason: leaks_allowed('why')")
    return True


@pytest.fixture(autouse=True)
def fresh_devices(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts with one fresh device 0 and is leak-checked at teardown by the kit."""
    # Handles earlier tests dropped are freed now, not in the middle of this test, where their
    # release would change the statistics a test compares before and after.
    ahg.collect_forgotten()
    if _leaks_allowed(request):
        with fresh(1, check=False):
            yield
        # What such a test leaves behind on purpose is freed now, quietly, and not in a later test.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)
            ahg.collect_forgotten()
        return
    # The kit's factory fixture, the code path of ``ahg_device``. Not ``ahg_device`` itself:
    # pytest keeps a fixture's value for the whole test, and a test that drops device 0 (by
    # reconfiguring) must be able to see it collected.
    request.getfixturevalue("ahg_devices")(1)
    yield
    # A handle this test dropped without destroy() is freed here, so its ForgottenHandleWarning
    # (an error under the suite's warning filter) names this test and not a later one.
    ahg.collect_forgotten()


@pytest.fixture
def device() -> ahg.Device:
    """Device 0 of this test: what ``ahg_device`` gives, made by the autouse fixture."""
    return ahg.get_device(0)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Make the interpreter switch threads very often, so races get a real chance to happen."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _verified(graph_exec: ahg.GraphExec, what: str) -> None:
    problems = unenforced_edges(graph_exec)
    if problems:
        raise AssertionError(f"the plan verifier rejects {what}:\n" + "\n".join(problems))


@pytest.fixture(autouse=True, scope="session")
def every_plan_verified() -> Iterator[None]:
    """The plan verifier (``exec/plan_check.py``) runs on every executable the suite
    instantiates or updates: a declared edge its slots and signals do not enforce (the
    runtime bug HIP shipped) fails the test that built it, whatever the test asserts."""
    instantiate, update = ahg.Graph.instantiate, ahg.GraphExec.update

    @functools.wraps(instantiate)  # names and docs; test_public_surface checks the wrapped
    def checked_instantiate(self: ahg.Graph, *args: object, **kwargs: object) -> ahg.GraphExec:
        graph_exec = instantiate(self, *args, **kwargs)  # type: ignore[arg-type]
        _verified(graph_exec, "a new executable")
        return graph_exec

    @functools.wraps(update)
    def checked_update(self: ahg.GraphExec, *args: object, **kwargs: object) -> object:
        result = update(self, *args, **kwargs)  # type: ignore[arg-type]
        _verified(self, "an updated executable")
        return result

    checked_instantiate.verifies_plans = True  # type: ignore[attr-defined]
    checked_update.verifies_plans = True  # type: ignore[attr-defined]
    patch = pytest.MonkeyPatch()
    patch.setattr(ahg.Graph, "instantiate", checked_instantiate)
    patch.setattr(ahg.GraphExec, "update", checked_update)
    yield
    patch.undo()


@pytest.fixture
def small_ring() -> Iterator[ahg.Device]:
    """One device of two hardware queues of a few packets each (tests/rings.py)."""
    yield from small_ring_device()
