"""Abandoned host functions, faults for devices that do not exist, and the race checker's bad
modes.

* An async host function its event loop cancelled while shutting down failed as
  ``LaunchFailure("host function X raised RuntimeError('cancelled')")``: the message said the
  user's function raised, when the loop gave up on it. It now says the work was abandoned by
  its loop, and carries no made-up cause.
* ``fail_allocations(device=99)`` was accepted, a fault that could never fire.
* ``race_check(on_race=None)`` raised a bare ValueError for a value of the wrong type, and a
  bad ``AHIPGRAPH_RACE_CHECK`` named only some of the accepted values.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

import ahipgraph as ahg
from ahipgraph.testing import fail_allocations


async def _forever() -> None:
    await asyncio.Event().wait()  # nothing ever sets it: only the loop's shutdown ends this


@pytest.mark.leaks_allowed(
    "its loop shuts down with a host function running: the device counts it as abandoned"
)
def test_a_host_function_abandoned_by_its_loop_says_so(device: ahg.Device) -> None:
    stream = device.create_stream()
    launched: list[ahg.Completion] = []

    async def leave_it_running() -> None:
        launched.append(await stream.launch_host_func(_forever))
        for _ in range(5):  # the host function starts and parks
            await asyncio.sleep(0)
        # returns: asyncio.run cancels the parked host function while shutting down

    asyncio.run(leave_it_running())

    async def collect() -> ahg.HipError:
        with pytest.raises(ahg.LaunchFailure) as caught:
            await launched[0]
        with pytest.raises(ahg.LaunchFailure, match="abandoned"):
            await stream.synchronize()  # the stream reports it as well
        await stream.synchronize()  # once: the stream is usable again
        return caught.value

    error = asyncio.run(collect())
    message = str(error)
    assert "_forever" in message
    assert "abandoned" in message
    assert "event loop" in message
    assert "raised" not in message
    assert "RuntimeError" not in message
    assert error.__cause__ is None  # the user's function did not raise anything
    assert device.statistics().in_flight == 0
    stream.destroy()


def test_a_host_function_that_raises_cancelled_error_itself_still_says_it_raised(
    device: ahg.Device,
) -> None:
    async def gives_up() -> None:
        raise asyncio.CancelledError

    async def main() -> None:
        stream = device.create_stream()
        done = await stream.launch_host_func(gives_up)
        with pytest.raises(ahg.LaunchFailure, match=r"gives_up.* raised CancelledError"):
            await done
        stream.destroy()

    asyncio.run(main())


@pytest.mark.parametrize("ordinal", [1, 99])
def test_an_allocation_fault_for_a_device_that_does_not_exist_is_refused(ordinal: int) -> None:
    assert ahg.device_count() == 1
    with (
        pytest.raises(ahg.InvalidDevice, match=f"device {ordinal} does not exist"),
        fail_allocations(device=ordinal),
    ):
        pytest.fail("the block must not run")  # pragma: no cover
    # Nothing was installed: the next allocation succeeds.
    device = ahg.get_device(0)
    ptr = device.malloc(16)
    device.free(ptr)


def test_an_allocation_fault_for_an_existing_device_still_fires(device: ahg.Device) -> None:
    with fail_allocations(device=0) as fault, pytest.raises(ahg.OutOfMemory):
        device.malloc(16)
    assert fault.hits == 1
    assert device.memory_info()[0] == device.memory_info()[1]


@pytest.mark.parametrize("mode", [None, 1, True, b"raise", ["raise"]])
def test_a_race_mode_of_the_wrong_type_is_a_type_error(mode: object) -> None:
    with pytest.raises(TypeError, match="on_race must be one of raise, warn, collect"):
        ahg.race_check(on_race=mode)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # what it raised before, still caught the same way
        ahg.race_check(on_race=mode)  # type: ignore[arg-type]


def test_a_race_mode_str_not_known_is_a_value_error_only() -> None:
    with pytest.raises(ValueError, match="got 'loud'") as caught:
        ahg.race_check(on_race="loud")
    assert not isinstance(caught.value, TypeError)


def test_a_bad_race_check_environment_names_every_accepted_value() -> None:
    env = dict(os.environ, AHIPGRAPH_RACE_CHECK="loud")
    done = subprocess.run(
        [sys.executable, "-c", "import ahipgraph"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert "AHIPGRAPH_RACE_CHECK='loud'" in last
    for accepted in (
        "raise",
        "warn",
        "collect",
        "1",
        "on",
        "true",
        "yes",
        "0",
        "off",
        "false",
        "no",
    ):
        assert f" {accepted}" in last or f"{accepted}," in last, accepted
