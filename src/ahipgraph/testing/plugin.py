"""The ahipgraph pytest plugin: fixtures only.

Registered through the ``pytest11`` entry point, so installing ahipgraph makes these fixtures
available to every test suite — and changes nothing else: no hooks, no autouse fixtures, no
options, no markers. It works under pytest-asyncio and under anyio's pytest plugin (asyncio
backend), because the fixtures are synchronous and touch no event loop.

* ``ahg_device`` — a fresh simulated device 0 for the test. At teardown the test fails with a
  readable report (:func:`ahipgraph.testing.leak_report`) if anything is still alive, in flight
  or allocated; the devices are replaced either way, so left-over work never reaches the next
  test. A fault armed in the test and still armed at its end (a block entered and never
  left) is disarmed then and fails the test the same way, as does a race check or a tracing
  block begun in the test and still on.
* ``ahg_race_check`` — runs the test under :func:`ahipgraph.race_check` (collecting) and fails
  it at teardown with every race report, so a missing stream or graph dependency fails the
  test that has it even when the data happened to come out right.
* ``ahg_devices`` — a factory: ``ahg_devices(2, properties=...)`` returns fresh devices with
  chosen properties, checked the same way at teardown.

A run that is interrupted (Ctrl-C or ``pytest.exit`` inside a test) skips the test's own
teardown; pytest tears its fixtures down while the session finishes, where a failure is no
longer a test's but pytest's own crash. The devices are replaced then as always, and the leak
(or race) report is shown on the terminal as a note, failing nothing: the interrupted test's
left-overs are the interrupt's, and the run ends as interrupted, with its own exit status.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence

import pytest

from ..device.properties import DeviceProperties
from ..device.table import checked_configuration
from ..runtime.device import Device
from ..tools.race import RaceCheck, race_check
from .device_factory import DeviceFactory
from .leaks import LeakError, armed_observers, devices_block, disarm_faults

__all__ = ["ahg_device", "ahg_devices", "ahg_race_check"]

_devices = contextlib.contextmanager(devices_block)


@contextlib.contextmanager
def _reported(stack: contextlib.ExitStack, request: pytest.FixtureRequest) -> Iterator[None]:
    """Close ``stack`` after the test; a leak fails the test with the report alone.

    A fault armed in the test and still armed (its block entered and never left, say by a
    test that failed first) is disarmed here and reported too: left armed, it failed the
    kernels of every later test. The fixture's device blocks leave that to this, as one
    ``ahg_devices`` call replaces another's devices mid-test, maybe inside a fault's block.
    """
    armed = armed_observers()
    try:
        yield
    finally:
        left = disarm_faults(armed)
    report = None
    try:
        stack.close()
    except LeakError as error:
        report = str(error)
    if left:
        title = "ahipgraph: disarmed at teardown, still armed after the test:"
        report = "\n".join([*([report] if report else []), title, *left])
    if report is not None:
        _fail(request, report)


def _fail(request: pytest.FixtureRequest, text: str) -> None:
    """Fail the test at teardown with ``text``; after an interrupt, show it instead.

    A function fixture torn down once the session has an exit status is torn down by the
    session's finish after an interrupt (a finished test's teardown runs before the status is
    set): failing there would turn the interrupt into a crash of pytest's own.
    """
    if request.session.exitstatus == pytest.ExitCode.OK:
        pytest.fail(text, pytrace=False)
    _note(request, text)


def _note(request: pytest.FixtureRequest, text: str) -> None:
    """Show ``text`` on the terminal without failing anything: the report of a test whose
    run was interrupted, so what it left behind is still seen and the run's status stands."""
    title = f"ahipgraph: left behind by the interrupted test {request.node.nodeid}"
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:  # ``-p no:terminal``: stderr, which nothing captures by now
        print(f"{title}\n{text}", file=sys.stderr)
        return
    reporter.ensure_newline()
    reporter.write_sep("-", title, yellow=True)
    reporter.write_line(text)


@pytest.fixture
def ahg_device(request: pytest.FixtureRequest) -> Iterator[Device]:
    """A fresh simulated device; the test fails at teardown if it leaked anything."""
    with contextlib.ExitStack() as stack:
        devices = stack.enter_context(_devices(1, None, check=True, disarm=False))
        with _reported(stack, request):
            yield devices[0]


@pytest.fixture
def ahg_devices(request: pytest.FixtureRequest) -> Iterator[DeviceFactory]:
    """A factory of fresh simulated devices: ``ahg_devices(count=1, properties=None)``."""
    with contextlib.ExitStack() as stack:

        def make(
            count: int = 1,
            properties: DeviceProperties | Sequence[DeviceProperties] | None = None,
        ) -> list[Device]:
            # A second call replaces the first call's devices, once its own arguments are
            # known to be good: a refused call leaves the test the devices it had.
            checked_configuration(count, properties)
            stack.close()
            return stack.enter_context(_devices(count, properties, check=True, disarm=False))

        with _reported(stack, request):
            yield make


@pytest.fixture
def ahg_race_check(request: pytest.FixtureRequest) -> Iterator[RaceCheck]:
    """The test runs under the race checker; any race report fails it at teardown."""
    with race_check(on_race="collect") as check:
        yield check
    if check.reports:
        count = len(check.reports)
        text = "\n".join(str(report) for report in check.reports)
        _fail(request, f"ahipgraph: {count} race(s) found:\n{text}")
