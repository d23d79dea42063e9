"""The ``ahg_devices`` fixture: a refused second call.

The factory closes the devices of its previous call before it makes the new ones, so a call
refused for its arguments (no devices, a count that is not an int, properties of the wrong
kind) had already thrown the first call's devices away: the test went on with the devices
configured before the fixture (one device, default properties) and the devices it held were
retired. A call that fails changes nothing; the arguments are checked first now.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import ahipgraph as ahg


@pytest.mark.parametrize(
    ("count", "properties", "error"),
    [
        (0, None, ValueError),
        (True, None, TypeError),
        ("2", None, TypeError),
        (2, "small", TypeError),
        (2, [ahg.DeviceProperties()], ValueError),
    ],
)
def test_a_refused_call_of_the_factory_keeps_the_devices_of_the_last_call(
    ahg_devices: Callable[..., list[ahg.Device]],
    count: object,
    properties: object,
    error: type[Exception],
) -> None:
    small = ahg.DeviceProperties(hardware_queues=2)
    first, second, _third = ahg_devices(3, properties=small)
    with pytest.raises(error):
        ahg_devices(count, properties)
    assert ahg.device_count() == 3
    assert ahg.get_device(0) is first
    assert ahg.get_device(1) is second
    assert len(first.statistics().queues) == 2


def test_configure_devices_refuses_a_string_of_properties_as_a_type_error() -> None:
    """A string is a sequence: ``configure_devices(2, "small")`` said "2 devices but 5
    property sets", as if the count were the mistake."""
    before = ahg.get_device(0)
    with pytest.raises(TypeError, match="properties must be DeviceProperties"):
        ahg.configure_devices(2, "small")  # type: ignore[arg-type]
    assert ahg.device_count() == 1
    assert ahg.get_device(0) is before
