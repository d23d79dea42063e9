"""What a stream, an event or a device is made of, and where it stands, is read-only.

These were plain attributes the runtime acts on, and a user could assign them: a stream's
``tail`` set to None made ``synchronize()`` return with its work still running; its ``state``
set back to OPEN made a destroyed stream run new work; the null stream's ``is_null`` set to
False let ``destroy()`` end it, and every later ``device.memset`` failed; an event's ``device``
set to another device made its ``synchronize()`` wait on that device's engine for good; its
``signal`` set to None made ``query()`` say done while its record was pending; a device's
``memory`` set to another device's made its ``malloc`` allocate there. Each is now a read-only
property over a private attribute only the runtime writes (``hid`` already was, see
``test_hostile_graphs_sweep.py``). HIP has getters for all of them and no setters: none is
meant to be set by a user.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel, registry_statistics
from cleanup import destroy

STREAM_ATTRIBUTES = "device priority non_blocking is_null implicit queue state submitted tail"
EVENT_ATTRIBUTES = "device disable_timing blocking_sync signal state"
DEVICE_ATTRIBUTES = "ordinal properties memory engine clock queues"


@ahg.kernel
def increment(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def _handle(kind: str, device: ahg.Device) -> Any:
    if kind == "stream":
        return device.create_stream()
    if kind == "null stream":
        return device.null_stream
    if kind == "event":
        return device.create_event()
    return device


CASES = [
    *[("stream", name) for name in STREAM_ATTRIBUTES.split()],
    *[("null stream", name) for name in STREAM_ATTRIBUTES.split()],
    *[("event", name) for name in EVENT_ATTRIBUTES.split()],
    *[("device", name) for name in DEVICE_ATTRIBUTES.split()],
]


@pytest.mark.parametrize(("kind", "name"), CASES)
def test_an_identity_attribute_can_be_read_and_not_assigned_or_deleted(
    kind: str, name: str, device: ahg.Device
) -> None:
    handle = _handle(kind, device)
    value = getattr(handle, name)
    with pytest.raises(AttributeError):
        setattr(handle, name, value)  # even the value it has: nothing but the runtime sets it
    with pytest.raises(AttributeError):
        delattr(handle, name)
    assert getattr(handle, name) is value
    if kind in ("stream", "event"):
        handle.destroy()


@pytest.mark.asyncio
async def test_synchronize_waits_for_the_stream_s_work_whatever_is_assigned_to_its_tail(
    device: ahg.Device,
) -> None:
    # The tail is what synchronize() and query() wait for: set to None, both said the stream
    # was idle while its kernel still ran.
    stream, held = device.create_stream(), HeldKernel()
    done = await held.launch(stream)
    with pytest.raises(AttributeError):
        stream.tail = None  # type: ignore[misc]
    assert stream.tail is not None
    assert not stream.query()
    held.release()
    await stream.synchronize()
    assert done.done()
    destroy(stream)


@pytest.mark.asyncio
async def test_a_destroyed_stream_cannot_be_reopened_to_run_new_work(device: ahg.Device) -> None:
    # Its state set back to OPEN, a destroyed stream ran the kernel; it was no longer among the
    # device's streams (whose synchronize reports failures), and a second destroy() said
    # "was already destroyed".
    stream = device.create_stream()
    x = device.malloc(4)
    await device.memset(x, 0, 4)
    stream.destroy()
    with pytest.raises(AttributeError):
        stream.state = ahg.StreamState.OPEN  # type: ignore[misc]
    with pytest.raises(ahg.ContextIsDestroyed):
        await stream.launch_kernel(increment, 1, 1, (x,))
    assert device.view(x, "int32", 1)[0] == 0
    assert device.statistics().in_flight == 0
    destroy(x)


@pytest.mark.asyncio
async def test_the_null_stream_stays_the_null_stream_and_a_user_s_stream_stays_destroyable(
    device: ahg.Device,
) -> None:
    # is_null set to False let destroy() end the null stream, for good: every later
    # device.memset raised ContextIsDestroyed. Set to True on a user's stream, its destroy()
    # said "the null stream cannot be destroyed" and the stream stayed registered.
    null, stream = device.null_stream, device.create_stream()
    live = registry_statistics()["stream"].live
    for handle, value in ((null, False), (stream, True)):
        with pytest.raises(AttributeError):
            handle.is_null = value  # type: ignore[misc]
    with pytest.raises(ahg.InvalidHandle, match="null stream cannot be destroyed"):
        null.destroy()
    stream.destroy()
    assert registry_statistics()["stream"].live == live - 1
    x = device.malloc(4)
    await device.memset(x, 7, 4)
    assert device.view(x, "uint8", 4).tolist() == [7, 7, 7, 7]
    destroy(x)


@pytest.mark.asyncio
async def test_an_event_s_synchronize_waits_on_its_own_device_whatever_is_assigned() -> None:
    # Its device set to device 1, the synchronize of an event recorded on device 0 waited on
    # device 1's engine, which never sees that record complete: it hung.
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    stream, event, held = device0.create_stream(), device0.create_event(), HeldKernel()
    await held.launch(stream)
    await stream.record_event(event)
    with pytest.raises(AttributeError):
        event.device = device1  # type: ignore[misc]
    assert not event.query()
    held.release()
    await event.synchronize()
    assert event.query()
    destroy(stream, event)


@pytest.mark.asyncio
async def test_an_event_s_record_cannot_be_dropped_from_outside(device: ahg.Device) -> None:
    # Its signal set to None, query() said the event was complete and a wait_event on it
    # waited for nothing, while its record was still pending.
    stream, event, held = device.create_stream(), device.create_event(), HeldKernel()
    await held.launch(stream)
    await stream.record_event(event)
    with pytest.raises(AttributeError):
        event.signal = None  # type: ignore[misc]
    assert not event.query()
    held.release()
    await event.synchronize()
    destroy(stream, event)


@pytest.mark.asyncio
async def test_a_device_allocates_and_runs_its_work_on_itself_whatever_is_assigned() -> None:
    # A device's memory set to another's made its malloc allocate in that device's memory (the
    # pointer named device 1); its ordinal set to another's made every call on it raise
    # InvalidDevice ("no longer a configured device"); its engine set to another's put its new
    # streams on that device's queues.
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    for name in ("memory", "ordinal", "engine"):
        with pytest.raises(AttributeError):
            setattr(device0, name, getattr(device1, name))
    x = device0.malloc(4)
    assert x.device == 0
    assert device1.memory.statistics().allocations == 0
    stream = device0.create_stream()
    assert stream.queue in device0.queues
    await stream.memset(x, 1, 4)
    await stream.synchronize()
    assert device0.view(x, "uint8", 4).tolist() == [1, 1, 1, 1]
    destroy(stream, x)


def test_a_replaced_device_s_null_stream_is_retired_with_it() -> None:
    # The null stream's implicit flag set to False, configure_devices no longer retired it:
    # it stayed registered, and kept the replaced device alive, for good.
    device = ahg.get_device(0)
    null = device.null_stream
    with pytest.raises(AttributeError):
        null.implicit = False  # type: ignore[misc]
    live = registry_statistics()["stream"].live
    gone = weakref.ref(device)
    del device
    ahg.configure_devices(1)
    assert registry_statistics()["stream"].live == live - 1
    del null
    gc.collect()  # a device and its engine refer to each other
    assert gone() is None
