"""``record_event`` / ``wait_event``: which error a call with several faults gets, as in HIP.

``hipEventRecord_common`` and ``hipStreamWaitEvent_common`` check the flags, then the event (a
null one is ``hipErrorInvalidHandle``), and only then the stream. A call on a destroyed stream
with bad flags or a null event gets the flags' or the event's error, in every spelling: the
coroutine, its ``_nowait`` twin and ``Event.record``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import fresh_devices


@pytest.fixture
def device() -> Iterator[ahg.Device]:
    with fresh_devices(1) as devices:
        yield devices[0]


async def _record(stream: ahg.Stream, event: Any, flags: Any) -> None:
    await stream.record_event(event, flags)


async def _record_nowait(stream: ahg.Stream, event: Any, flags: Any) -> None:
    stream.record_event_nowait(event, flags)


async def _wait(stream: ahg.Stream, event: Any, flags: Any) -> None:
    await stream.wait_event(event, flags)


async def _wait_nowait(stream: ahg.Stream, event: Any, flags: Any) -> None:
    stream.wait_event_nowait(event, flags)


RECORDS = [_record, _record_nowait]
WAITS = [_wait, _wait_nowait]


@pytest.mark.asyncio
@pytest.mark.parametrize("call", RECORDS + WAITS, ids=lambda call: call.__name__)
async def test_bad_flags_come_before_a_destroyed_stream(device: ahg.Device, call: Any) -> None:
    event = device.create_event()
    stream = device.create_stream()
    stream.destroy()
    with pytest.raises(ahg.InvalidValue, match="flag"):
        await call(stream, event, 5)
    with pytest.raises(ahg.InvalidHandle, match="event is null"):
        await call(stream, None, 0)
    with pytest.raises(ahg.ContextIsDestroyed):
        await call(stream, event, 0)  # the stream's own error once the rest is right
    event.destroy()
    with pytest.raises(ahg.InvalidHandle, match="destroyed"):
        await call(stream, event, 0)  # the event is checked before the stream


@pytest.mark.asyncio
@pytest.mark.parametrize("call", RECORDS + WAITS, ids=lambda call: call.__name__)
async def test_bad_flags_come_before_a_null_event(device: ahg.Device, call: Any) -> None:
    with device.create_stream() as stream, pytest.raises(ahg.InvalidValue, match="flag"):
        await call(stream, None, 5)


@pytest.mark.asyncio
async def test_event_record_method_checks_flags_before_the_event_and_the_stream(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    stream.destroy()
    event = device.create_event()
    with pytest.raises(ahg.InvalidValue, match="record flag"):
        await event.record(stream, 5)
    with pytest.raises(ahg.InvalidValue, match="record flag"):
        event.record_nowait(stream, 5)
    with pytest.raises(ahg.ContextIsDestroyed):
        await event.record(stream)
    event.destroy()
    with pytest.raises(ahg.InvalidValue, match="record flag"):
        await event.record(stream, 5)
    with pytest.raises(ahg.InvalidHandle, match="destroyed"):
        await event.record(stream)
