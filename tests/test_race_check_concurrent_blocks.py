"""The race checker under misuse: checks from two threads and two event loops, tasks
whose checks interleave, blocks left by an exception or a cancellation, bad modes, and raise
mode refusing a racing free (which must then change nothing)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device import hooks
from ahipgraph.runtime import observe
from ahipgraph.testing import fresh_devices
from cleanup import destroy

# Under AHIPGRAPH_RACE_CHECK the whole run is one outer check: its observer stays installed.
WHOLE_RUN = bool(os.environ.get("AHIPGRAPH_RACE_CHECK", "").strip("0 "))


def nothing_installed() -> bool:
    return WHOLE_RUN or (observe.observer is None and hooks.observers is None)


async def racing_pair(device: ahg.Device) -> None:
    """Two unordered writes of one buffer, then everything synchronised and freed."""
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(64)
    try:
        await s1.memset(buf, 0, 64)
        await s2.memset(buf, 1, 64)  # races s1's memset
    finally:
        await device.synchronize()
        destroy(s1, s2, buf)


# -- two threads, two event loops ---------------------------------------------------------------


def in_thread(body: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as error:  # handed to the test
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


@pytest.mark.leaks_allowed("makes its own two devices, checked by their own fresh_devices")
def test_checks_of_two_threads_each_get_their_own_reports_and_mode() -> None:
    with fresh_devices(2) as (d0, d1):
        entered, raced = threading.Event(), threading.Event()
        result: dict[str, Any] = {}

        def collecting() -> None:  # thread A, its own loop, device 0: collect mode
            with ahg.race_check(on_race="collect") as check:
                entered.set()
                assert raced.wait(10)  # B's raise-mode check is now the latest entered
                asyncio.run(racing_pair(d0))  # reported here, not raised by B's mode
                result["a"] = check
            # B's check is still on: A leaving first (out of order) must not end it

        def raising() -> None:  # thread B, its own loop, device 1: raise mode
            assert entered.wait(10)
            with ahg.race_check(on_race="raise") as check:
                raced.set()
                thread_a.join(10)
                assert observe.observer is not None
                try:
                    asyncio.run(racing_pair(d1))
                except ahg.RaceError as error:
                    result["b_error"] = error
                result["b"] = check

        thread_a, errors_a = in_thread(collecting)
        thread_b, errors_b = in_thread(raising)
        thread_a.join(30)
        thread_b.join(30)
        assert errors_a == []
        assert errors_b == []
        a, b = result["a"], result["b"]
        assert [r.kind for r in a.reports] == ["write-after-write"]
        assert a.reports[0].allocation.startswith("allocation")
        assert "device 0" in a.reports[0].allocation
        assert len(b.reports) == 1
        assert "device 1" in b.reports[0].allocation
        assert result["b_error"].reports == b.reports
        assert not a.active
        assert not b.active
    assert nothing_installed()


@pytest.mark.asyncio
async def test_interleaved_tasks_report_to_their_own_checks(device: ahg.Device) -> None:
    """Task one enters first and leaves first, while task two's check (raise mode) is the
    latest entered: one's race is still one's, collected; two's race still raises."""
    one_in, two_in, one_out = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def one() -> ahg.RaceCheck:
        with ahg.race_check(on_race="collect") as check:
            one_in.set()
            await two_in.wait()
            await racing_pair(device)
        one_out.set()
        return check

    async def two() -> tuple[ahg.RaceCheck, BaseException | None]:
        await one_in.wait()
        with ahg.race_check(on_race="raise") as check:
            two_in.set()
            await one_out.wait()
            try:
                await racing_pair(device)
            except ahg.RaceError as error:
                return check, error
        return check, None

    (first, (second, error)) = await asyncio.gather(one(), two())
    assert len(first.reports) == 1
    assert len(second.reports) == 1
    assert isinstance(error, ahg.RaceError)
    assert nothing_installed()


# -- leaving a block ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_cancelled_task_leaves_its_check(device: ahg.Device) -> None:
    started = asyncio.Event()

    async def checked_forever() -> None:
        with ahg.race_check(on_race="collect"):
            started.set()
            await asyncio.Event().wait()

    task = asyncio.ensure_future(checked_forever())
    await started.wait()
    assert observe.observer is not None
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert nothing_installed()
    with ahg.race_check(on_race="collect") as check:  # a later check starts cleanly
        await racing_pair(device)
    assert len(check.reports) == 1
    assert not check.active


def test_nested_blocks_left_by_exceptions_leave_the_outer_one_on() -> None:
    with ahg.race_check(on_race="collect") as outer:
        for error in (ValueError("inner"), KeyboardInterrupt()):
            with pytest.raises(type(error)), ahg.race_check(on_race="raise") as inner:
                raise error
            assert not inner.active
            assert outer.active
            assert observe.observer is not None
    assert not outer.active
    assert nothing_installed()


@pytest.mark.parametrize(
    "mode", [None, True, 1, b"raise", ["raise"], np.array(["raise"]), "Raise", " raise"]
)
def test_a_bad_mode_fails_at_the_call_and_turns_nothing_on(mode: object) -> None:
    with pytest.raises(ValueError, match="on_race must be one of raise, warn, collect"):
        ahg.race_check(on_race=mode)  # type: ignore[arg-type]  # not even entered
    assert nothing_installed()


def test_a_str_subclass_mode_is_taken_as_its_value() -> None:
    class Mode(str):
        pass

    with ahg.race_check(on_race=Mode("collect")) as check:
        assert type(check.on_race) is str
        assert check.on_race == "collect"


# -- raise mode refuses a racing free ------------------------------------------------------------


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_racing_free_and_frees_nothing(device: ahg.Device) -> None:
    stream = device.create_stream(non_blocking=True)
    buf = device.malloc(4096)
    with ahg.race_check(on_race="raise") as check:
        await stream.memset(buf, 7, 4096)  # in flight
        before = device.memory.statistics()
        with pytest.raises(ahg.RaceError) as caught:
            device.free(buf)
        assert device.memory.statistics() == before  # the memory is still allocated
        assert caught.value.reports == check.reports
        assert caught.value.reports[0].second.op.endswith("free()")
        await stream.synchronize()
        assert device.view(buf, np.uint8, 4096, readonly=True).tolist() == [7] * 4096
        device.free(buf)  # ordered now: allowed
    assert len(check.reports) == 1
    destroy(stream)


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_racing_free_async_and_enqueues_nothing(
    device: ahg.Device,
) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(4096)
    with ahg.race_check(on_race="raise"):
        await s1.memset(buf, 7, 4096)
        submitted = s2.statistics().submitted
        memory = device.memory.statistics()
        with pytest.raises(ahg.RaceError):
            await s2.free_async(buf)  # s2 knows nothing of s1's memset
        assert s2.statistics().submitted == submitted
        assert device.memory.statistics() == memory
        event = device.create_event()
        await s1.record_event(event)
        await s2.wait_event(event)
        await s2.free_async(buf)  # the pair the report suggested: allowed
        await device.synchronize()
    destroy(s1, s2, event)


# -- the environment switch ----------------------------------------------------------------------

SWITCHED = textwrap.dedent(
    """
    import warnings
    import ahipgraph as ahg
    from ahipgraph.tools import race

    async def main():
        device = ahg.get_device(0)
        s1 = device.create_stream(non_blocking=True)
        s2 = device.create_stream(non_blocking=True)
        buf = device.malloc(64)
        await s1.memset(buf, 0, 64)
        await s2.memset(buf, 1, 64)
        await device.synchronize()

    ahg.run(main())
    check = race.install_from_environment()
    print(check.on_race if check is not None else None, len(check.reports) if check else 0)
    """
)


@pytest.mark.parametrize(
    ("value", "mode", "warned"),
    [
        ("1", "warn", True),
        ("On", "warn", True),
        ("collect", "collect", False),
        ("off", None, False),
    ],
)
def test_the_environment_switch_values(
    tmp_path: Path, value: str, mode: str | None, warned: bool
) -> None:
    script = tmp_path / "switched.py"
    script.write_text(SWITCHED)
    env = dict(os.environ, AHIPGRAPH_RACE_CHECK=value)
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    reports = 1 if mode is not None else 0
    assert done.stdout.split() == [str(mode), str(reports)]
    assert ("RaceWarning" in done.stderr) is warned
