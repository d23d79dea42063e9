"""Misuse of devices: a Device object kept after ``configure_devices``
replaced it, and the testing kit's fixtures and helpers used in ways their docs allow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.runtime.event import EVENTS
from ahipgraph.runtime.stream import STREAMS
from ahipgraph.testing import HeldKernel, fresh_devices, leak_report, snapshot
from cleanup import destroy


def _live_counts() -> list[int]:
    return [registry.statistics().live for registry in (EXECS, STREAMS, EVENTS)]


@pytest.mark.asyncio
async def test_a_replaced_device_makes_no_per_task_stream() -> None:
    """``old.per_thread_stream()`` made a new stream on a device ``configure_devices`` had
    replaced, though every other factory of that device answers ``InvalidDevice``: the stream
    kept the dropped device alive and ran work nobody could see."""
    old = ahg.get_device(0)
    kept = old.per_thread_stream()
    ahg.configure_devices(1)
    assert not kept.alive  # retired with its device
    counts = _live_counts()
    with pytest.raises(ahg.InvalidDevice):
        old.per_thread_stream()
    assert _live_counts() == counts
    fresh = ahg.get_device(0).per_thread_stream()
    assert fresh.alive
    assert fresh.device is ahg.get_device(0)


@pytest.mark.asyncio
async def test_every_factory_and_pool_call_of_a_replaced_device_is_invalid_device() -> None:
    old = ahg.get_device(0)
    ahg.configure_devices(1)
    counts = _live_counts()
    calls: dict[str, Callable[[], object]] = {
        "malloc": lambda: old.malloc(8),
        "create_stream": old.create_stream,
        "create_event": old.create_event,
        "per_thread_stream": old.per_thread_stream,
        "graph_mem_attribute": lambda: old.graph_mem_attribute(ahg.GraphMemAttribute.UsedMemHigh),
        "set_graph_mem_attribute": lambda: old.set_graph_mem_attribute(
            ahg.GraphMemAttribute.UsedMemHigh, 0
        ),
        "graph_mem_trim": old.graph_mem_trim,
        "set_device": lambda: ahg.set_device(old),
    }
    for name, call in calls.items():
        with pytest.raises(ahg.InvalidDevice):
            call()
        assert _live_counts() == counts, name
    # Reading a replaced device still answers: it is inspection, not a new object.
    assert old.memory_info() == (old.properties.memory_bytes, old.properties.memory_bytes)
    assert "Device 0" in repr(old)
    await old.synchronize()  # nothing in flight on it


@pytest.mark.asyncio
async def test_a_pointer_of_a_replaced_device_is_not_a_pointer_of_its_successor() -> None:
    """Addresses are per device ordinal: the new device 0 must not take the old one's
    allocation for its own."""
    old = ahg.get_device(0)
    ptr = old.malloc(64)
    ahg.configure_devices(1)
    new = ahg.get_device(0)
    with pytest.raises(ahg.InvalidValue):
        new.free(ptr)
    with pytest.raises(ahg.InvalidDevicePointer):
        await new.memset(ptr, 0, 8)
    stream = new.create_stream()
    with pytest.raises(ahg.InvalidDevicePointer):
        await stream.memcpy(ptr, np.zeros(8, np.uint8))
    assert stream.statistics().submitted == 0
    old.free(ptr)  # the old device gives back its own memory
    destroy(stream)


# -- the testing kit --------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_held_kernel_released_before_it_runs_does_not_hold() -> None:
    """``release()`` lets every run finish, present and future, as documented."""
    with fresh_devices(1) as (device,):
        held = HeldKernel()
        held.release()
        stream = device.create_stream()
        await (await held.launch(stream))
        await (await held.launch(stream))
        assert held.runs == 2
        destroy(stream)


def test_fresh_devices_reports_each_kind_of_leftover_in_its_block() -> None:
    left: list[Any] = []

    def leave_one_of_each() -> None:
        with fresh_devices(1) as (device,):
            left.extend(
                (
                    device.create_stream(),
                    ahg.Graph(),
                    ahg.UserObject(lambda data: None),
                    device.malloc(64),
                )
            )

    with pytest.raises(ahg.testing.LeakError) as caught:
        leave_one_of_each()
    stream, graph, user_object, ptr = left
    report = str(caught.value)
    for what in ("1 graph", "1 stream", "1 user object", "1 allocation"):
        assert what in report, report
    # The devices were replaced; the handles the block left are the caller's to end.
    assert ptr.device == 0
    destroy(graph, user_object, stream)


def test_a_leak_report_against_the_same_snapshot_is_none() -> None:
    with fresh_devices(1):
        baseline = snapshot()
        assert leak_report(baseline, baseline) is None
        assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_the_testing_kit_snapshot_answers_inside_a_running_loop() -> None:
    with fresh_devices(1) as (device,):
        before = snapshot()
        stream = device.create_stream()
        assert leak_report(before) is not None
        stream.destroy()
        await asyncio.sleep(0)
        assert leak_report(before) is None


@pytest.mark.parametrize("returned", [None, "graph", 42])
def test_stress_names_a_builder_that_returns_no_graph(returned: Any) -> None:
    """A builder returning something else failed with ``AttributeError: 'NoneType' object has
    no attribute 'retain_user_object'`` from inside the harness."""

    def builder(rng: Any, buffer: ahg.DevicePtr) -> Any:
        return returned

    baseline = snapshot()
    with pytest.raises(TypeError, match=r"stress builder .*builder returned .* not an ahg\.Graph"):
        ahg.testing.stress([builder], ops=5, tasks=1, threads=0, faults=False)
    assert leak_report(baseline) is None


@pytest.mark.parametrize("maker", [ahg.testing.fail_kernels, ahg.testing.hang_kernels])
def test_a_kernel_fault_filter_on_the_empty_name_is_refused(maker: Any) -> None:
    """``fail_kernels(name="")`` injected nothing, silently: a kernel's name is never empty
    (``@ahg.kernel(name="")`` falls back to the function's name)."""
    assert ahg.kernel(name="")(_named).name == "_named"
    with pytest.raises(ValueError, match="empty"), maker(name=""):
        pytest.fail("the block must not run")


def _named(t: ahg.Threads) -> None:
    pass


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("turns", "error"), [(-1, ValueError), (True, TypeError), ("4", TypeError)]
)
async def test_loop_turns_refuses_a_count_that_gives_no_turns(turns: Any, error: type) -> None:
    """``loop_turns(-1)`` gave no turn and returned, so a test asserting "still blocked after
    the loop ran" passed without the loop running; ``"4"`` failed inside ``range``."""
    with pytest.raises(error):
        await ahg.testing.loop_turns(turns)
