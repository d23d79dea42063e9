"""Configuring devices: what ``configure_devices`` and the properties it takes accept, and how
they store what they accept."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg


@pytest.mark.parametrize("properties", [{}, [], 0, "", b"", False])
def test_properties_that_are_not_device_properties_are_refused(properties: Any) -> None:
    """Only None means "the defaults": an empty or false value is a mistake, not a request for
    the default device (an empty list is a list of the wrong length)."""
    before = ahg.get_device(0)
    with pytest.raises((TypeError, ValueError)):
        ahg.configure_devices(1, properties)
    assert ahg.get_device(0) is before  # nothing was replaced
    assert ahg.device_count() == 1


def test_none_properties_are_the_defaults() -> None:
    (device,) = ahg.configure_devices(1, None)
    assert device.properties == ahg.DeviceProperties()


@pytest.mark.parametrize(
    "rate", [np.float32(2.5), np.float64(2.5), np.int64(2), 2, np.longdouble(2.5)]
)
def test_a_cost_model_rate_is_stored_as_a_plain_float(rate: Any) -> None:
    cost = ahg.CostModel(host_bytes_per_ns=rate, device_bytes_per_ns=rate, peer_bytes_per_ns=rate)
    for value in (cost.host_bytes_per_ns, cost.device_bytes_per_ns, cost.peer_bytes_per_ns):
        assert type(value) is float
        assert value == float(rate)


@pytest.mark.parametrize("rate", [10**400, np.longdouble("1e4000"), 0, -1.0, float("nan")])
def test_a_rate_too_large_for_a_float_or_not_positive_is_refused(rate: Any) -> None:
    with pytest.raises(ValueError, match="positive finite rate"):
        ahg.CostModel(peer_bytes_per_ns=rate)


@pytest.mark.parametrize("rate", [True, np.True_, "2", None, 1j])
def test_a_rate_that_is_not_a_real_number_is_a_type_error(rate: Any) -> None:
    with pytest.raises(TypeError, match="must be a number"):
        ahg.CostModel(host_bytes_per_ns=rate)


@pytest.mark.asyncio
async def test_a_numpy_rate_times_copies_as_the_same_float_does() -> None:
    """A copy's duration comes from the rate: a numpy rate gives the same simulated times."""
    timings = []
    for rate in (np.float32(0.5), 0.5):
        props = ahg.DeviceProperties(cost=ahg.CostModel(device_bytes_per_ns=rate))
        (device,) = ahg.configure_devices(1, props)
        stream = device.create_stream()
        src, dst = device.malloc(4096), device.malloc(4096)
        start, end = device.create_event(), device.create_event()
        await stream.record_event(start)
        await stream.memcpy(dst, src, 4096)
        await stream.record_event(end)
        await stream.synchronize()
        timings.append(ahg.elapsed_time(start, end))
        for handle in (start, end, stream):
            handle.destroy()
        device.free(src)
        device.free(dst)
    assert timings[0] == timings[1]
    assert timings[0] > 0


def test_a_mistyped_hardware_queue_count_is_refused_before_any_queue_is_built() -> None:
    """A million queues took seconds per device to build when configured."""
    before = ahg.get_device(0)
    with pytest.raises(ValueError, match="hardware_queues=1000000: at most 1024"):
        ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=10**6))
    assert ahg.get_device(0) is before
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=1024))
    assert len(device.statistics().queues) == 1024
