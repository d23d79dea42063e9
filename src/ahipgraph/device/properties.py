"""Device properties and the cost model that gives every packet its simulated duration."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np

from ..core.ints import as_int, int_or_none, is_bool

__all__ = [
    "MAX_HARDWARE_QUEUES",
    "CopyKind",
    "CostModel",
    "DeviceProperties",
    "copy_kind_or_none",
]

MAX_HARDWARE_QUEUES = 1024
"""The most hardware queues a device may have. A GPU schedules a few dozen (ROCm uses 4 by
default); the bound catches a mistyped count, whose queues would all be built when the device
is configured (a million took seconds per device)."""


class CopyKind(enum.IntEnum):
    """``hipMemcpyKind``."""

    HostToHost = 0
    HostToDevice = 1
    DeviceToHost = 2
    DeviceToDevice = 3
    Default = 4


def copy_kind_or_none(value: object) -> CopyKind | None:
    """``value`` as a :class:`CopyKind`, or None when it is not one.

    The integer rule of ``core.ints``: ``kind=True`` or ``kind=1.0`` is a bug, never
    ``HostToDevice``, although ``CopyKind(True)`` and ``CopyKind(1.0)`` would accept them.
    Each caller raises its own error (HIP's direction error or ``InvalidValue``).
    """
    checked = int_or_none(value)
    if checked is None:
        return None
    try:
        return CopyKind(checked)
    except ValueError:
        return None


def _plain_ints(record: object, names: tuple[str, ...]) -> list[int]:
    """Check the named fields of a frozen record as ints and store them as plain ints (a
    numpy integer is accepted and converted); returns their values in order."""
    values = []
    for name in names:
        value = as_int(getattr(record, name), f"{type(record).__name__}.{name}")
        object.__setattr__(record, name, value)
        values.append(value)
    return values


def _rate(value: object, name: str) -> float:
    """A cost model's rate as a plain positive finite float.

    Any real number is taken (Python's or numpy's, ints too, as a computed rate often is one)
    and stored as a ``float``, so every copy's cost is computed in one arithmetic whatever the
    configuration passed; a bool is not a rate. An int too large for a float is out of range.

    Raises:
        TypeError: not a real number. ValueError: zero, negative, infinite, NaN or too large.
    """
    if is_bool(value) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"CostModel.{name} must be a number, got {value!r}")
    try:
        rate = float(value)
    except OverflowError:
        rate = math.inf
    if not 0 < rate < math.inf:
        raise ValueError(f"invalid cost model: {name}={value!r} (a positive finite rate)")
    return rate


@dataclass(frozen=True, slots=True)
class CostModel:
    """How long packets take on the simulated device, in nanoseconds.

    A kernel costs ``kernel_launch_ns`` plus one ``wave_ns`` per wave of threads (a wave being
    ``compute_units * lanes_per_cu`` threads), unless the kernel declares its own duration.
    A copy costs ``copy_latency_ns`` plus its bytes over the bandwidth of its path (host links
    for host-to-device and device-to-host, device memory otherwise); a fill is a device-memory
    write. A copy between two devices (a peer transfer) goes over the link between them at
    ``peer_bytes_per_ns``. Host callbacks cost ``host_callback_ns``; barriers and markers cost
    nothing; a stream memory operation (write or satisfied wait of a value) costs
    ``stream_memop_ns``.
    """

    kernel_launch_ns: int = 2_000
    wave_ns: int = 1_000
    lanes_per_cu: int = 64
    copy_latency_ns: int = 1_000
    host_bytes_per_ns: float = 25.0  # 25 GB/s
    device_bytes_per_ns: float = 1_000.0  # 1 TB/s
    peer_bytes_per_ns: float = 64.0  # 64 GB/s, an Infinity Fabric link
    host_callback_ns: int = 5_000
    stream_memop_ns: int = 500

    def __post_init__(self) -> None:
        # A cost is read on every packet the device runs: a bad one would fail there, far from
        # the configuration that made it (a zero rate divides by zero, None has no arithmetic).
        ints = (
            "kernel_launch_ns",
            "wave_ns",
            "lanes_per_cu",
            "copy_latency_ns",
            "host_callback_ns",
            "stream_memop_ns",
        )
        for name, value in zip(ints, _plain_ints(self, ints), strict=True):
            if value < (1 if name == "lanes_per_cu" else 0):
                raise ValueError(f"invalid cost model: {name}={value!r}")
        for name in ("host_bytes_per_ns", "device_bytes_per_ns", "peer_bytes_per_ns"):
            object.__setattr__(self, name, _rate(getattr(self, name), name))

    def kernel_ns(self, threads: int, compute_units: int, duration_ns: int | None) -> int:
        if duration_ns is not None:
            return self.kernel_launch_ns + duration_ns
        lanes = compute_units * self.lanes_per_cu
        waves = -(-threads // lanes)
        return self.kernel_launch_ns + waves * self.wave_ns

    def copy_ns(self, nbytes: int, kind: CopyKind, *, peer: bool = False) -> int:
        """``peer``: a device-to-device copy whose endpoints are on two different devices."""
        if peer:
            rate = self.peer_bytes_per_ns
        elif kind in (CopyKind.HostToDevice, CopyKind.DeviceToHost):
            rate = self.host_bytes_per_ns
        else:
            rate = self.device_bytes_per_ns
        return self.copy_latency_ns + round(nbytes / rate)

    def fill_ns(self, nbytes: int) -> int:
        return self.copy_latency_ns + round(nbytes / self.device_bytes_per_ns)


@dataclass(frozen=True, slots=True)
class DeviceProperties:
    """What a simulated device is: ``hipDeviceProp_t``'s essentials plus its cost model."""

    name: str = "ahipgraph simulated gfx942"
    compute_units: int = 304
    memory_bytes: int = 1 << 30
    hardware_queues: int = 4
    #: Packets each hardware queue's ring holds (ROCm's ``ROC_AQL_QUEUE_SIZE`` default).
    hardware_queue_capacity: int = 16384
    max_threads_per_block: int = 1024
    max_grid: tuple[int, int, int] = (2**31 - 1, 65536, 65536)
    max_shared_memory_per_block: int = 65536
    warp_size: int = 64
    max_pitch: int = 2**31 - 1  # hipDeviceProp_t.memPitch: the widest pitch a copy may use
    cost: CostModel = field(default_factory=CostModel)

    def __post_init__(self) -> None:
        # Every limit is read when work is validated or run: refuse a bad one here, where the
        # device is configured, not as an AttributeError or a zero division in some later call.
        if not isinstance(self.name, str):
            raise TypeError(f"DeviceProperties.name must be a str, got {self.name!r}")
        if not isinstance(self.cost, CostModel):
            raise TypeError(f"DeviceProperties.cost must be a CostModel, got {self.cost!r}")
        _plain_ints(
            self,
            (
                "compute_units",
                "hardware_queues",
                "hardware_queue_capacity",
                "memory_bytes",
                "max_threads_per_block",
                "max_shared_memory_per_block",
                "warp_size",
                "max_pitch",
            ),
        )
        grid = self.max_grid
        parts = [int_or_none(n) for n in grid] if isinstance(grid, tuple) else []
        if len(parts) != 3 or None in parts:
            raise TypeError(f"DeviceProperties.max_grid must be a tuple of 3 ints, got {grid!r}")
        object.__setattr__(self, "max_grid", tuple(parts))
        if (
            self.compute_units < 1
            or self.hardware_queues < 1
            or self.hardware_queue_capacity < 1
            or self.memory_bytes < 0
            or self.max_threads_per_block < 1
            or self.max_shared_memory_per_block < 0
            or self.warp_size < 1
            or self.max_pitch < 1
            or min(grid) < 1
        ):
            raise ValueError(f"invalid device properties: {self}")
        if self.hardware_queues > MAX_HARDWARE_QUEUES:
            raise ValueError(
                f"DeviceProperties.hardware_queues={self.hardware_queues}: at most "
                f"{MAX_HARDWARE_QUEUES}"
            )
