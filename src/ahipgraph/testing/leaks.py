"""Leak reports from ``statistics()``: what is still alive, in flight or allocated.

:func:`snapshot` reads the public ``statistics()`` of every device (packets in flight, queues,
memory) and of every handle registry (live graphs, nodes, executables, streams, events, user
objects). :func:`leak_report` compares a snapshot with a baseline and words the difference for
a human, or returns ``None`` when nothing leaked. :func:`fresh_devices` is the context manager
behind the pytest fixtures: fresh simulated devices in, a report out.

Why fresh devices per test: a test that leaves an async kernel running must not make the *next*
test's ``device.synchronize()`` fail with the first test's error. New device objects share
nothing with the old ones, so left-over work can only ever be reported, never inherited.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ..core.ints import is_bool
from ..core.lifecycle import collect_forgotten
from ..core.registry import RegistryStatistics
from ..core.scoped import checked_scoped
from ..device import hooks
from ..device.current import current_ordinal, set_current_ordinal
from ..device.properties import DeviceProperties
from ..device.table import checked_configuration, restore_devices, take_devices
from ..device.thread_ids import THREAD_IDS, ThreadIdsStatistics
from ..exec.graph_exec import EXECS
from ..graph.graph import GRAPHS
from ..graph.node import NODES
from ..lifetime.user_object import USER_OBJECTS
from ..runtime.device import Device, DeviceStatistics, configure_devices, device_count, get_device
from ..runtime.event import EVENTS
from ..runtime.per_thread import settle_finished
from ..runtime.stream import STREAMS
from ..tools.race import end_race_check, race_checks_on
from ..tools.trace import _Recorder as TraceRecorder
from .faults import AllocationFault, KernelFault, KernelHang

__all__ = ["LeakError", "Snapshot", "fresh_devices", "leak_report", "snapshot"]

_REGISTRIES = (GRAPHS, NODES, EXECS, STREAMS, EVENTS, USER_OBJECTS)


class LeakError(AssertionError):
    """Something was still alive, in flight or allocated when it should not have been."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The statistics of every device and the live count of every kind of handle."""

    devices: tuple[DeviceStatistics, ...]
    handles: dict[str, int]
    # Each device's owner-loop number, by ordinal: whose abandoned work ``devices`` counts (a
    # loop that takes a device over starts its count again). Not part of equality.
    owners: dict[int, int] = field(default_factory=dict, compare=False)


def snapshot(*, collect: bool = True) -> Snapshot:
    """Statistics of every configured device and live-handle counts.

    Args:
        collect: run the garbage collector first, so handles that were only dropped (and are
            freed by their finalizers) do not count as alive.

    Raises:
        TypeError: ``collect`` is not a bool (``"no"`` is truthy: refused, not guessed at).
    """
    _check_flag("collect", collect)
    if collect:
        collect_forgotten()  # collect, and wait until forgotten handles are freed
    settle_finished()  # before the streams are counted: a finished task's are not alive
    table = [get_device(i) for i in range(device_count())]
    handles = {r.statistics().kind: r.statistics().live for r in _REGISTRIES}
    return _of_devices(table, handles)


def _of_devices(table: Sequence[Device], handles: dict[str, int]) -> Snapshot:
    devices = tuple(device.statistics() for device in table)
    owners = {device.ordinal: device.engine._owner_number for device in table}
    return Snapshot(devices, handles, owners)


def registry_statistics() -> dict[str, RegistryStatistics]:
    """Each handle registry's statistics, by kind ("graph", "graph node", "stream", ...).

    What :func:`snapshot` counts live handles with, whole: the live count, the slots the
    registry has grown to and how many handles it registered in all. A finished task's
    per-task streams are settled first, as :func:`snapshot` does.
    """
    settle_finished()
    return {stats.kind: stats for stats in (r.statistics() for r in _REGISTRIES)}


def thread_ids_statistics() -> ThreadIdsStatistics:
    """The statistics of the bounded cache behind ``Threads.ids`` (one for the process)."""
    return THREAD_IDS.statistics()


def leak_report(baseline: Snapshot | None = None, current: Snapshot | None = None) -> str | None:
    """What ``current`` (default: now) holds beyond ``baseline`` (default: nothing), or None.

    The report has one line per finding, e.g. ``device 0: 1 packet in flight (queue 1: 1
    pending)`` or ``live handles: 1 stream, 2 graph nodes``.

    Raises:
        TypeError: ``baseline`` or ``current`` is neither a :class:`Snapshot` nor None (checked
            before a snapshot is taken).
    """
    for name, given in (("baseline", baseline), ("current", current)):
        if given is not None and not isinstance(given, Snapshot):
            raise TypeError(f"leak_report's {name} must be a Snapshot or None, got {given!r}")
    now = current if current is not None else snapshot()
    lines = _device_lines(now, baseline)
    extra = {
        kind: live - (baseline.handles.get(kind, 0) if baseline else 0)
        for kind, live in now.handles.items()
    }
    # A device's null and per-thread streams are the device's own, not a leak of the user's.
    implicit = sum(d.implicit_streams for d in now.devices)
    implicit -= sum(d.implicit_streams for d in baseline.devices) if baseline else 0
    if "stream" in extra:
        extra["stream"] -= implicit
    alive = [_plural(n, kind) for kind, n in extra.items() if n > 0]
    if alive:
        lines.append("live handles: " + ", ".join(alive))
    return "\n".join(lines) or None


def _device_lines(
    now: Snapshot, baseline: Snapshot | None, name: Callable[[int], str] = "device {}".format
) -> list[str]:
    """The findings of ``leak_report`` about the devices of ``now``, each named by ``name``."""
    lines: list[str] = []
    before = {d.ordinal: d for d in baseline.devices} if baseline is not None else {}
    for stats in now.devices:
        base = before.get(stats.ordinal)
        if stats.in_flight > (base.in_flight if base else 0):
            pending = ", ".join(
                f"queue {q.index}: {q.pending} pending" for q in stats.queues if q.pending
            )
            packets = _plural(stats.in_flight, "packet")
            lines.append(f"{name(stats.ordinal)}: {packets} in flight ({pending})")
        # A count that started again since the baseline (another loop took the device over)
        # is all new: the baseline's count was the old loop's.
        owner = now.owners.get(stats.ordinal)
        base_owner = baseline.owners.get(stats.ordinal) if baseline is not None else None
        same_owner = owner is None or base_owner is None or owner == base_owner
        abandoned = stats.abandoned - (base.abandoned if base and same_owner else 0)
        if abandoned > 0:
            # In flight when the test's event loop shut down (pytest-asyncio closes it before
            # sync fixtures tear down), so ``in_flight`` is zero again by now.
            packets = _plural(abandoned, "packet")
            lines.append(
                f"{name(stats.ordinal)}: {packets} still in flight when the event loop "
                "shut down (abandoned)"
            )
        # Counted by streams, which still hold the failures: no baseline owner to compare.
        earlier = stats.abandoned_earlier - (base.abandoned_earlier if base else 0)
        if earlier > 0:
            # Another loop took the device over, so ``abandoned`` started again, but nothing
            # reported the failure of what the earlier loop left behind.
            streams = _plural(earlier, "stream")
            verb = "holds" if earlier == 1 else "hold"
            lines.append(
                f"{name(stats.ordinal)}: {streams} {verb} the unreported failure of work an "
                "earlier event loop abandoned (synchronize to report it)"
            )
        memory, base_memory = stats.memory, base.memory if base else None
        # Symbol storage is the device's own, and bytes the graph memory pool keeps for reuse
        # are not leaked either (a trim returns them).
        allocations = memory.allocations - memory.static_allocations
        in_use = memory.bytes_in_use - memory.graph_pool_cached - memory.static_bytes
        if base_memory:
            allocations -= base_memory.allocations - base_memory.static_allocations
            in_use -= (
                base_memory.bytes_in_use - base_memory.graph_pool_cached - base_memory.static_bytes
            )
        reservations = memory.reservations - (base_memory.reservations if base_memory else 0)
        if allocations > 0 or in_use > 0:
            lines.append(
                f"{name(stats.ordinal)}: {_plural(allocations, 'allocation')} still allocated, "
                f"{in_use} bytes in use"
            )
        if reservations > 0:
            lines.append(f"{name(stats.ordinal)}: {_plural(reservations, 'reservation')} held")
    return lines


def armed_observers() -> tuple[object, ...]:
    """The device observers installed and the race checks on now: the baseline of
    :func:`disarm_faults`."""
    return (*(hooks.observers or ()), *race_checks_on())


def disarm_faults(armed_before: Sequence[object]) -> list[str]:
    """Remove the faults armed, and end the race checks and tracing blocks begun, since
    ``armed_before`` (see :func:`armed_observers`) and still on, as at the end of a
    ``fresh_devices`` block or a test; one report line each.

    A fault's block that was entered and never left (``__enter__`` without ``__exit__``, an
    ``ExitStack`` never closed) kept failing kernels or allocations for every later test of
    the process, which then failed far from the cause; a race check's kept checking every
    later test's calls (in raise mode, failing them with its ``RaceError``), and a tracing
    block's kept recording all they ran. The block's devices are retired, so what it left on
    goes with them; what was on before the block (a ``with`` around it) stays.
    """
    lines = []
    for observer in hooks.observers or ():
        if any(observer is before for before in armed_before):
            continue
        if isinstance(observer, KernelFault | AllocationFault):
            hooks.uninstall(observer)
            if isinstance(observer, KernelHang):
                observer.cancel()
            lines.append(f"fault injection still armed (its block was never left): {observer!r}")
        elif isinstance(observer, TraceRecorder):
            hooks.uninstall(observer)
            observer.finish()
            lines.append(f"tracing still on (its block was never left): {observer.trace!r}")
    for check in race_checks_on():
        if not any(check is before for before in armed_before):
            end_race_check(check)
            lines.append(f"race check still on (its block was never left): {check!r}")
    return lines


def _check_flag(name: str, value: object) -> None:
    if not is_bool(value):
        raise TypeError(f"{name} must be a bool, got {value!r}")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _settled(collect: bool) -> Snapshot:
    """A snapshot, collecting garbage only when a handle is alive and only then.

    A full ``gc.collect()`` costs milliseconds on a large heap; a clean test has no live
    handle, so the common case reads ``statistics()`` and nothing more. When something new is
    alive, garbage (a handle dropped in a reference cycle, freed by its finalizer) is collected
    and the snapshot taken again, so only what is really held is counted.
    """
    global _last_collected
    now = snapshot(collect=False)
    # Handles left by an earlier block that were counted, collected and are still alive need
    # no second collection: only a change in the counts can be new garbage.
    if collect and any(now.handles.values()) and now.handles != _last_collected:
        now = snapshot(collect=True)
        _last_collected = now.handles
    return now


_last_collected: dict[str, int] | None = None


def _block_report(
    baseline: Snapshot, mine: Sequence[weakref.ref[Device]], *, collect: bool
) -> str | None:
    """:func:`leak_report` of a ``fresh_devices`` block, with the block's own devices that a
    ``configure_devices`` in the block replaced: memory allocated or work left running on them
    is the block's leak too, which the devices table no longer shows."""
    now = snapshot(collect=collect)
    report = leak_report(baseline, now)
    table = [get_device(i) for i in range(device_count())]
    replaced = [
        device
        for device in (ref() for ref in mine)
        if device is not None and all(device is not current for current in table)
    ]
    lines = _device_lines(
        _of_devices(replaced, {}), baseline, "device {} (replaced in the block)".format
    )
    return "\n".join([report, *lines] if report is not None else lines) or None


def _fresh_devices_arguments(
    count: int = 1,
    properties: DeviceProperties | Sequence[DeviceProperties] | None = None,
    *,
    check: bool = True,
) -> None:
    """What :func:`fresh_devices` refuses, checked when it is called: a block made ahead, or
    a decorator, with a bad value fails there rather than at its first ``with``."""
    _check_flag("check", check)
    checked_configuration(count, properties)


@checked_scoped(_fresh_devices_arguments)
def fresh_devices(
    count: int = 1,
    properties: DeviceProperties | Sequence[DeviceProperties] | None = None,
    *,
    check: bool = True,
) -> Iterator[list[Device]]:
    """Fresh simulated devices for the block; on exit, report leaks and replace the devices.

    Args:
        count, properties: as :func:`ahipgraph.configure_devices`.
        check: raise :class:`LeakError` on exit if anything is still alive, in flight or
            allocated beyond what existed when the block began.

    The block's devices are retired on exit whatever happened, so left-over work never reaches
    the next user of the devices table, and the devices configured before the block come back:
    a block nested in another (a test that uses the ``ahg_device`` fixture) leaves the outer
    one its own device objects. The current device (``ahg.set_device``) starts the block at
    device 0, as a fresh runtime does, and the choice made before the block comes back with
    its devices: a test that ends on device 1 does not start the next test (whose fixture runs
    in the same thread) on device 1.
    Fault injection armed in the block (:func:`~ahipgraph.testing.fail_kernels` and the
    others) and still armed at its end, because its own block was never left, is disarmed
    then and reported as a leak: it must not fail the next test's kernels. A race check or a
    tracing block begun in the block and still on is ended and reported the same way.

    Raises:
        TypeError: ``check`` is not a bool (``check="no"`` checked); as
            :func:`ahipgraph.configure_devices` for ``count`` and ``properties``. Raised
            when ``fresh_devices(...)`` is called, before any ``with``; nothing is replaced.
    """
    return devices_block(count, properties, check=check, disarm=True)


def devices_block(
    count: int,
    properties: DeviceProperties | Sequence[DeviceProperties] | None,
    *,
    check: bool,
    disarm: bool,
) -> Iterator[list[Device]]:
    """The generator of a :func:`fresh_devices` block, its arguments checked.

    ``disarm=False`` leaves faults armed in the block to the caller: the plugin's
    ``ahg_devices`` replaces the devices of a first call with those of a second, mid-test,
    where a fault whose ``with`` is open around that call is the test's own; the fixture
    disarms what is left armed once the test is over (see :func:`disarm_faults`).
    """
    _check_flag("check", check)
    outer_ordinal = current_ordinal()
    outer = take_devices()
    try:
        set_current_ordinal(0)
        configure_devices(count, properties)
        # Inside the guard: its collection runs finalizers, and a Ctrl-C landing there must
        # still give the outer block its devices back.
        baseline = _settled(collect=check)
    except BaseException:
        set_current_ordinal(outer_ordinal)
        restore_devices(outer)
        raise
    failed = True
    # Held weakly, and yielded without a local: a test that drops these devices (by
    # reconfiguring) must be able to see them collected; one still alive at the end is
    # checked even though the table no longer has it.
    mine = [weakref.ref(get_device(i)) for i in range(count)]
    armed_before = armed_observers()
    try:
        yield [get_device(i) for i in range(count)]
        failed = False
    finally:
        report = None
        try:
            armed = disarm_faults(armed_before) if disarm else []
            if check and not failed:
                report = _block_report(baseline, mine, collect=False)
                if report is not None:  # collect only to confirm: most blocks leak nothing
                    report = _block_report(baseline, mine, collect=True)
                if armed:
                    report = "\n".join([*([report] if report else []), *armed])
        finally:  # a Ctrl-C in that collection still gives the outer block its devices
            set_current_ordinal(outer_ordinal)
            restore_devices(outer)
    if report is not None:
        raise LeakError(
            f"ahipgraph: still alive, in flight or allocated at teardown:\n{report}\n"
            "(destroy() or free() what the block created, or use `with`; await "
            "synchronize() for work still in flight)"
        )
