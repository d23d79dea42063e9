"""A block's leak check sees its own devices after the block replaced them.

``configure_devices`` inside a ``fresh_devices`` block (or a test using ``ahg_device``) drops
the block's devices from the table, but memory allocated on them and work left running there
stay, as long as the test holds the device. The report read only the devices in the table at
the end, so reconfiguring hid a leak: a test that allocated on ``ahg_device``, or left a kernel
running on it, and then called ``configure_devices`` passed.
"""

from __future__ import annotations

import gc
import textwrap
import weakref

import pytest

import ahipgraph as ahg
from ahipgraph import testing

pytest_plugins = ["pytester"]


def _allocate_then_reconfigure() -> None:
    with testing.fresh_devices(1) as (device,):
        device.malloc(64)
        ahg.configure_devices(2)


def test_memory_left_on_a_replaced_device_is_reported() -> None:
    with pytest.raises(testing.LeakError) as caught:
        _allocate_then_reconfigure()
    assert "device 0 (replaced in the block): 1 allocation still allocated, 64 bytes in use" in str(
        caught.value
    )


@pytest.mark.asyncio
async def test_work_left_running_on_a_replaced_device_is_reported() -> None:
    held = testing.HeldKernel("left_running")
    block = testing.fresh_devices(1)
    (device,) = block.__enter__()
    await held.launch(device.null_stream)
    await held.started.wait()
    ahg.configure_devices(1)
    with pytest.raises(testing.LeakError) as caught:
        block.__exit__(None, None, None)
    held.release()
    await device.synchronize()
    assert "device 0 (replaced in the block): 1 packet in flight" in str(caught.value)


def test_a_replaced_device_left_clean_is_not_reported() -> None:
    with testing.fresh_devices(1) as (device,):
        device.free(device.malloc(64))
        ahg.configure_devices(2)
        ahg.get_device(1).free(ahg.get_device(1).malloc(16))


def test_a_replaced_device_the_block_dropped_can_still_be_collected() -> None:
    with testing.fresh_devices(1) as devices:
        gone = weakref.ref(devices[0])
        del devices
        ahg.configure_devices(1)
        gc.collect()
        assert gone() is None


SUITE = textwrap.dedent(
    """
    import pytest
    import ahipgraph as ahg
    from ahipgraph import testing

    KEPT = []


    def test_allocates_then_reconfigures(ahg_device):
        KEPT.append(ahg_device.malloc(64))
        ahg.configure_devices(2)


    @pytest.mark.asyncio
    async def test_leaves_work_running_then_reconfigures(ahg_device):
        held = testing.HeldKernel("left_running")
        await held.launch(ahg_device.null_stream)
        await held.started.wait()
        ahg.configure_devices(2)


    def test_reconfigures_cleanly(ahg_device):
        ahg.configure_devices(3)
        assert ahg.device_count() == 3
    """
)


@pytest.mark.leaks_allowed("the user suite it runs in this process leaks on purpose")
def test_the_fixture_fails_a_test_that_hides_a_leak_by_reconfiguring(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(test_user_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_allocates_then_reconfigures*",
            "device 0 (replaced in the block): 1 allocation still allocated, 64 bytes in use",
            "*ERROR at teardown of test_leaves_work_running_then_reconfigures*",
            "device 0 (replaced in the block): 1 packet still in flight when the event loop "
            "shut down (abandoned)",
        ]
    )
