"""The type of the ``ahg_devices`` fixture, for tests that annotate their fixtures.

``def test_x(ahg_devices: testing.DeviceFactory) -> None`` then type-checks each call as the
fixture takes it: ``ahg_devices(2, properties=...)`` gives the fresh devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..device.properties import DeviceProperties
    from ..runtime.device import Device

__all__ = ["DeviceFactory"]


class DeviceFactory(Protocol):
    """What the ``ahg_devices`` fixture gives: a call that replaces the devices with fresh
    ones (``count`` of them, with ``properties``) and returns them."""

    def __call__(
        self,
        count: int = 1,
        properties: DeviceProperties | Sequence[DeviceProperties] | None = None,
    ) -> list[Device]: ...
