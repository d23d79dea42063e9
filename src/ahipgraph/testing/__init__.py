"""``ahipgraph.testing``: test with the simulated device instead of mocks.

Every run of the simulated device has a deterministic timeline and every race can be provoked
on purpose; this package gives users the tools the project's own tests use:

* fresh devices and leak reports (:func:`fresh_devices`, :func:`snapshot`,
  :func:`leak_report`, and the statistics behind them: :func:`registry_statistics`,
  :func:`thread_ids_statistics`), also as pytest fixtures (``ahg_device``, ``ahg_devices``)
  through the plugin in :mod:`ahipgraph.testing.plugin` (:class:`DeviceFactory` is the
  type of ``ahg_devices``, for tests that annotate their fixtures);
* fakes with awkward timings (:class:`HeldKernel`, :class:`GatedHost`), deterministic
  interleaving (:class:`Interleave`), thread races (:func:`run_together`);
* scoped fault injection (:func:`fail_kernels`, :func:`fail_allocations`,
  :func:`hang_kernels`, :func:`exhaust_signal_sets`);
* the stress harness (:func:`stress`), which the ``ahipgraph stress`` command runs, and what
  a builder of your own needs (:data:`Builder`, the ``CELLS`` of its buffer).
"""

from __future__ import annotations

from .device_factory import DeviceFactory
from .faults import (
    AllocationFault,
    InjectedFault,
    KernelFault,
    KernelHang,
    SignalSetsHeld,
    exhaust_signal_sets,
    fail_allocations,
    fail_kernels,
    hang_kernels,
)
from .helpers import GatedHost, HeldKernel, Interleave, loop_turns, run_together
from .leaks import (
    LeakError,
    Snapshot,
    fresh_devices,
    leak_report,
    registry_statistics,
    snapshot,
    thread_ids_statistics,
)
from .stress import (
    CELLS,
    MAX_TASKS,
    MAX_THREADS,
    STALL_TIMEOUT_S,
    Builder,
    StressReport,
    StressViolation,
    random_graph,
    stress,
)

__all__ = [
    "CELLS",
    "MAX_TASKS",
    "MAX_THREADS",
    "STALL_TIMEOUT_S",
    "AllocationFault",
    "Builder",
    "DeviceFactory",
    "GatedHost",
    "HeldKernel",
    "InjectedFault",
    "Interleave",
    "KernelFault",
    "KernelHang",
    "LeakError",
    "SignalSetsHeld",
    "Snapshot",
    "StressReport",
    "StressViolation",
    "exhaust_signal_sets",
    "fail_allocations",
    "fail_kernels",
    "fresh_devices",
    "hang_kernels",
    "leak_report",
    "loop_turns",
    "random_graph",
    "registry_statistics",
    "run_together",
    "snapshot",
    "stress",
    "thread_ids_statistics",
]
