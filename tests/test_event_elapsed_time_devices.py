"""Events: elapsed time between two devices.

Each simulated device keeps its own clock, so the time between an event of device 0 and one
of device 1 means nothing; ``elapsed_time`` answered 0.0 (or any difference of two unrelated
clocks). HIP's ``hipEventElapsedTime`` refuses events of different devices with
``hipErrorInvalidResourceHandle`` (HIP's alias of ``hipErrorInvalidHandle``), after its null
checks and before it looks at timing or records.
"""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from cleanup import destroy


@pytest.mark.asyncio
async def test_elapsed_time_between_two_devices_is_invalid_handle() -> None:
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    stream0, stream1 = device0.create_stream(), device1.create_stream()
    start, end = device0.create_event(), device1.create_event()
    await stream0.record_event(start)
    await stream1.record_event(end)
    await start.synchronize()
    await end.synchronize()
    for pair in ((start, end), (end, start)):
        with pytest.raises(ahg.InvalidHandle, match="different devices"):
            ahg.elapsed_time(*pair)
    same = device1.create_event()
    await stream1.record_event(same)
    await same.synchronize()
    assert ahg.elapsed_time(end, same) >= 0.0
    destroy(stream0, stream1, start, end, same)


@pytest.mark.asyncio
async def test_the_device_check_comes_after_the_handle_checks_and_before_the_records() -> None:
    ahg.configure_devices(2)
    device0, device1 = ahg.get_device(0), ahg.get_device(1)
    unrecorded0 = device0.create_event()
    untimed1 = device1.create_event(disable_timing=True)
    # Neither was recorded and one has no timing: the devices decide first, as in HIP.
    with pytest.raises(ahg.InvalidHandle, match="different devices"):
        ahg.elapsed_time(unrecorded0, untimed1)
    with pytest.raises(ahg.InvalidHandle, match="null"):
        ahg.elapsed_time(unrecorded0, None)  # type: ignore[arg-type]
    dead = device1.create_event()
    dead.destroy()
    with pytest.raises(ahg.InvalidHandle, match="destroyed"):
        ahg.elapsed_time(unrecorded0, dead)
    with pytest.raises(TypeError):
        ahg.elapsed_time(unrecorded0, 3)  # type: ignore[arg-type]
    destroy(unrecorded0, untimed1)
