"""The dynamic race checker: missing dependencies between streams, events, launches and host.

``with ahg.race_check(on_race="raise" | "warn" | "collect") as rc:`` watches every eager op,
event record and wait, graph launch, allocation, free and host synchronisation made inside it
(through :mod:`ahipgraph.runtime.observe`), and reports two accesses to the same device bytes,
one writing, that nothing the API promises orders. ``AHIPGRAPH_RACE_CHECK=1`` (or ``raise``,
``warn``, ``collect``; ``1`` means ``warn``) turns it on for a whole run.

Happens-before is built from API facts only, never from the simulator's schedule:

* vector clocks run over *lanes*: the host (lane 0) and each stream;
* an op enqueued on a stream ticks that stream's lane after joining the host's clock (host
  program order) and, for blocking streams, the legacy default stream's rules;
* an event snapshots its stream's clock when recorded and joins it where it is waited on,
  whether or not the simulator already finished the recorded work (an early finish is luck,
  not ordering);
* host synchronisation (stream/event/device ``synchronize``, a ``query`` that says done, an
  awaited :class:`Completion`) joins into the host lane;
* a graph launch is one op on its stream whose footprint is the executable's precomputed
  summary (O(ranges), not O(nodes)); its event-wait nodes join before it and its
  event-record nodes snapshot after it (conservative: a record node in the middle of a graph
  is taken as covering the whole launch).

Shadow memory is an interval list per allocation holding the accesses not yet superseded: an
access covered by a later ordered write (or a read by a later ordered read) is dropped, which
keeps memory bounded without losing a race (the newer access races whenever the older would).

Host source arrays of asynchronous host-to-device copies, eager or a launched graph's memcpy
nodes, are fingerprinted at enqueue/launch and compared when the copy runs (a device hook),
so a host write during the flight is reported.

Host access: each ``device.view()`` call is a host op at that point of host program order (a
write, or a read with ``readonly=True``). A host function's footprint is what
``ahg.host_function(fn, reads=, writes=)`` declares, at its place in stream order (graph
host nodes too, statically); its views are its own, refused outside the declaration.
Not modelled: accesses through a view array kept and used later (take a new view after
synchronising), undeclared host functions' accesses, and host arrays that are a copy's
destination.

Stream memory operations: a ``write_value_*`` writes its word like any op. A ``wait_value_*``
touches nothing (any write may release it) and is *pending* until the device releases it
(:meth:`_Checker.memop_done`); it then takes the clock of the write it read (the word's last
``write_value_*`` that ran, if the word still holds its value, or a later host write through a
view; a kernel's or copy's write gives none), as does every clock already after it. A race one of
whose ops comes after a pending wait is parked until the wait is released: dropped if the
releasing write follows the other op, else reported at the host's next synchronisation.

Check, then commit: every call is planned as a :class:`Transaction` first; in raise mode a racing
call raises RaceError before anything is enqueued, launched, freed or viewed, and the
checker's clocks are unchanged.

What an eager op costs (the check's budget: eager programs at most 3x slower):

* the common op (a non-blocking stream the checker knows, no race) is planned in one pass
  without a transaction (:meth:`_Checker._quick_plan`), the same plan a transaction would
  make; anything else, a race included, is planned the general way, which words the report;
* the user's source line is kept as (code, instruction offset) and the "why" of a join as a
  tuple of parts, made text only for a report (:mod:`ahipgraph.tools.race_sites`);
* a one-range footprint on the stream's device is kept per (kernel pointer fields, pointer)
  or (kind, address, size) until the device's memory frees anything (:func:`located_footprint`);
* pending completions the host already knows are forgotten when it synchronises
  (:meth:`_Checker.forget_known`), so their clocks do not pile up between awaits.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ..core.errors import HipError
from ..core.lifecycle import NoCopy, safe_repr
from ..core.scoped import Scoped
from ..device import hooks
from ..device.host_function import running_host_function
from ..device.ops import CopyOp, HostOp, host_bytes
from ..device.pointer import DevicePtr
from ..device.table import resolve_pointer
from ..exec.conditional import ConditionalOp
from ..exec.footprints import ALLOCATIONS, Access, footprint, node_footprint
from ..exec.race_reports import (
    SITES,
    RaceError,
    RaceReport,
    RaceSite,
    RaceWarning,
    describe_allocation,
    kind_of,
    user_site,
)
from ..exec.races import ExecRaces
from ..graph.node_type import NodeType
from ..runtime import observe
from ..runtime.params import KernelParams, MemcpyParams
from ..runtime.stream_memops import StreamMemOp, condition_met
from .race_clocks import (
    MAX_PENDING,
    AccessRecord,
    CheckerState,
    EventClock,
    HostOps,
    Lane,
    OpRecord,
    ParkedRace,
    PendingWait,
    QuickPlan,
    Released,
    Transaction,
)
from .race_footprints import (
    WORK_LABELS,
    allocation_at,
    host_source,
    located_footprint,
    race_site,
    stream_name,
    work_label,
)
from .race_sites import Why, capture, site_text, text

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..device.program import Program
    from ..device.signal import Signal
    from ..runtime.completion import Completion
    from ..runtime.device import Device
    from ..runtime.event import Event
    from ..runtime.stream import Stream

__all__ = ["ENV_VAR", "RaceCheck", "RaceCheckStatistics", "race_check"]

ENV_VAR = "AHIPGRAPH_RACE_CHECK"
_MODES = ("raise", "warn", "collect")
_HOST_WRITES_KEPT = 64  # host writes through views kept while a wait is pending
_ENV_ON = ("1", "on", "true", "yes")  # mean "warn"
_ENV_OFF = ("0", "off", "false", "no")


class RaceModeTypeError(TypeError, ValueError):
    """``on_race`` is not a str at all: a TypeError, and a ValueError as well because that is
    what a bad mode raised before (``numpy.exceptions.AxisError`` is both in the same way)."""


@dataclass(frozen=True, slots=True)
class RaceCheckStatistics:
    """What :meth:`RaceCheck.statistics` counts.

    The clocks are shared by every check, so all fields but ``reports`` describe the one
    checker behind all active checks, not this check alone.

    Attributes:
        lanes: vector-clock lanes (one per stream seen, and the host's).
        events: events whose recorded clocks are kept.
        pending_completions: awaitable completions whose clocks the host has not yet
            learnt by waiting.
        shadow_ranges: byte ranges with an access record.
        ops: operations checked so far.
        cached_footprints: eager kernel footprints kept for reuse.
        reports: the reports this check holds.
    """

    lanes: int
    events: int
    pending_completions: int
    shadow_ranges: int
    ops: int
    cached_footprints: int
    reports: int


class RaceCheck(NoCopy):
    """What ``ahg.race_check()`` yields: the reports found inside its block.

    Attributes:
        on_race: "raise" (RaceError at the racing call, before anything is enqueued, freed
            or viewed), "warn" (a :class:`RaceWarning` each) or "collect" (only
            :attr:`reports`).
        reports: every :class:`RaceReport` found while this check was the innermost.
        active: True between entering and leaving the block.

    Which check a report goes to: the innermost active check entered in the context that
    made the racing call (the task, or the thread, as :mod:`contextvars` sees it), so two
    threads, loops or tasks with checks of their own each get their own reports and modes;
    a call made where no check was entered (another thread, a device callback) reports to
    the check entered last. All checks share one set of clocks.
    """

    def __init__(self, on_race: str) -> None:
        if not isinstance(on_race, str):
            raise RaceModeTypeError(
                f"on_race must be one of {', '.join(_MODES)}, got {type(on_race).__name__} "
                f"{on_race!r}"
            )
        # A str subclass is checked and kept as the plain str it holds: its own ``__eq__``
        # or ``__str__`` could pass the check and then stand for another mode, or none.
        mode = str.__str__(on_race)
        if mode not in _MODES:
            raise ValueError(f"on_race must be one of {', '.join(_MODES)}, got {mode!r}")
        self._on_race = mode
        self._reports: list[RaceReport] = []
        self._active = False

    # Read-only: the mode is checked above, once, and the block's entry and exit set
    # ``active``. An ``on_race`` assigned afterwards skipped that check: a misspelt "raise"
    # made every race of the block pass its racing call silently, only collected.

    @property
    def on_race(self) -> str:
        """What a race does: "raise", "warn" or "collect"."""
        return self._on_race

    @property
    def reports(self) -> list[RaceReport]:
        """Every :class:`RaceReport` found while this check was the innermost, so far: a new
        list at each read (the check's own record is the checker's to append to, and a caller
        clearing it would hide reports from ``statistics()`` and from later reads)."""
        return list(self._reports)

    @property
    def active(self) -> bool:
        """True between entering and leaving the block."""
        return self._active

    def statistics(self) -> RaceCheckStatistics:
        """Counts of the checker's state: lanes, events, shadow ranges, eager footprints
        kept for reuse, reports (a record, as every ``statistics()`` returns)."""
        return RaceCheckStatistics(**_CHECKER.statistics(), reports=len(self._reports))

    @safe_repr
    def __repr__(self) -> str:
        return f"<RaceCheck on_race={self._on_race} reports={len(self._reports)}>"


class _Checker(observe.RuntimeObserver, hooks.Observer):
    """The single runtime observer; nested checks share its clocks.

    Each API call is planned as a :class:`Transaction` under the lock, refused in raise mode when
    it races, then committed after the runtime enqueued it (planned again if another thread
    changed the clocks meanwhile: the lock is never held across the runtime's own work).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.stack: list[RaceCheck] = []
        self.state = CheckerState()
        self.device_hooked = False

    # -- activation ----------------------------------------------------------------------

    def push(self, check: RaceCheck) -> None:
        with self.lock:
            if not self.stack:
                self.state = CheckerState()
                SITES.allocations.clear()  # a reconfigured device hands out old addresses again
                observe.install(self)
            self.stack.append(check)
            check._active = True

    def pop(self, check: RaceCheck) -> None:
        late: list[RaceReport] = []
        with self.lock:
            if check in self.stack:
                self.stack.remove(check)
            # one check object may be entered again while open (a nested ``with`` of the same
            # block, a function it decorates called inside it): it stays on until its last
            # block is left, or its task's races would go to another task's check
            check._active = check in self.stack
            if not self.stack:
                observe.uninstall(self)
                if self.device_hooked:
                    hooks.uninstall(self)
                    self.device_hooked = False
                self._settle_waits_at_end(self.state)
                late = self.state.late  # found as waits were released, not yet emitted
                self.state = CheckerState()
        for made in late:  # to the check ending: the last one on
            check._reports.append(made)
            if check._on_race != "collect":
                warnings.warn(str(made), RaceWarning, stacklevel=_caller_level())

    def statistics(self) -> dict[str, int]:
        with self.lock:
            st = self.state
            return {
                "lanes": len(st.lanes) + 1,
                "events": len(st.events),
                "pending_completions": len(st.done),
                "shadow_ranges": sum(
                    len(r) for _, table in st.shadow.items() for r in table.values()
                ),
                "ops": st.ops,
                "cached_footprints": sum(len(entry[2]) for entry in st.located.values()),
            }

    # -- lanes ---------------------------------------------------------------------------

    def lane_of(self, txn: Transaction, stream: Stream) -> Lane:
        """``stream``'s lane as ``txn`` changes it (new and unregistered for a new stream)."""
        real = self.state.lanes.get(stream)
        if real is not None:
            return txn.work(real)
        for known, lane in txn.created:
            if known is stream:
                return lane
        name = "null stream" if stream.is_null else f"stream #{stream.hid.slot}"
        if stream.device.ordinal:
            name += f" (device {stream.device.ordinal})"
        lane = txn.new_lane(name)
        txn.created.append((stream, lane))
        return lane

    def _seen_lane(self, txn: Transaction, stream: Stream) -> Lane | None:
        real = self.state.lanes.get(stream)
        if real is not None:
            return txn.peek(real)
        for known, lane in txn.created:
            if known is stream:
                return lane
        return None

    def prepare(self, txn: Transaction, stream: Stream) -> Lane:
        """``stream``'s lane, joined with host order and the legacy default-stream rules."""
        st = self.state
        entry = st.lanes.entries.get(id(stream))  # st.lanes.get(stream), inlined: every op
        if entry is not None and entry[0]() is stream:
            lane = txn.work(entry[1])
        else:
            lane = self.lane_of(txn, stream)
        host = txn.copies.get(id(st.host), st.host)  # txn.peek(st.host)
        if lane.seen is not host.vc:  # the host learnt something since this lane last joined
            lane.join(host.vc, host.via, None)
            lane.seen = host.vc
        if not stream.non_blocking:  # legacy default-stream rules
            device = stream.device
            if stream.is_null:  # destroyed streams still running included, as the runtime does
                for other in device._legacy_streams():
                    if other is not stream and not other.non_blocking:
                        o = self._seen_lane(txn, other)
                        if o is not None:
                            lane.join(o.vc, o.via, f"the null stream waits for {o.name}")
            else:
                null = device._null_stream
                n = self._seen_lane(txn, null) if null is not None else None
                if n is not None:
                    lane.join(n.vc, n.via, f"{lane.name} (blocking) waits for the null stream")
        return lane

    def advance(self, txn: Transaction, lane: Lane, label: str, batch: int = 0) -> OpRecord:
        """The next op of ``lane``: its epoch, a provisional number."""
        txn.number += 1
        count = lane.vc.get(lane.lane, 0) + 1
        lane.vc[lane.lane] = count
        if count == 1:  # only this lane ticks its own entry: the reason never changes
            lane.via[lane.lane] = f"program order of {lane.name}"
        # capture(2): the frame above advance's caller; every caller is a checker method
        # that the runtime calls, so the user's frame is never nearer (two frames skipped)
        op = OpRecord(txn.number, label, lane, count, capture(2), batch=batch)
        if self.state.waits:
            op.waits = self._waits_before(lane.vc)
        if txn.graph_waits:  # a launch: all of it is after these captured waits of its graph
            made = (PendingWait(memop, op, lane.lane, count, None) for memop in txn.graph_waits)
            op.waits = (*op.waits, *made)
        txn.ops.append(op)
        return op

    def commit(self, txn: Transaction) -> None:
        """Install a planned transaction (plain assignments: it cannot fail half-way)."""
        st = self.state
        for real, copy in txn.scratch.values():
            real.vc, real.via, real.seen = copy.vc, copy.via, copy.seen
        for stream, lane in txn.created:
            st.lanes[stream] = lane
        if txn.groups is not None:
            st.group_lanes[txn.groups[0]] = txn.groups[1]
        scratch = txn.scratch
        for op in txn.ops:
            held = scratch.get(id(op.lane))
            if held is not None:
                op.lane = held[0]
            op.lane.ops.append(op.number)
        shadow = st.shadow
        for memory, base, keep, table in txn.tables.values():
            if table is None:
                table = shadow.get(memory)  # another call of this transaction made it
                if table is None:
                    table = shadow[memory] = {}
            table[base] = keep
        if txn.keys:
            st.seen |= txn.keys
        for event, clock in txn.events:
            st.events[event] = clock
        if txn.launch is not None:
            st.launches[txn.launch[0]] = txn.launch[1]
        if txn.parked:
            if len(st.parked) >= MAX_PENDING:  # bounded, as every table of the checker
                del st.parked[: MAX_PENDING // 2]
            st.parked += txn.parked
        st.ops = txn.number
        st.next_lane = txn.next_lane
        st.stamp += 1

    def refuse(self, txn: Transaction) -> None:
        """In raise mode, RaceError for a planned call that races (nothing was committed)."""
        check = self.target() if txn.reports else None
        if check is not None and check._on_race == "raise":
            check._reports.extend(txn.reports)
            raise RaceError(txn.reports)

    # -- shadow memory -------------------------------------------------------------------

    def access(
        self, txn: Transaction, op: OpRecord, accesses: list[Access], device: Device | None = None
    ) -> None:
        """Check ``accesses`` of ``op`` against shadow memory (``device``: the op's stream's,
        whose memory is then known current: no device-table lookup)."""
        st = self.state
        vc = op.lane.vc
        batch = op.batch
        lookup, lookup_in = ALLOCATIONS.lookup, ALLOCATIONS.lookup_in
        here, memory_here = (device.ordinal, device.memory) if device is not None else (-1, None)
        shadow_entries = st.shadow.entries
        for access in accesses:
            if access.device == here:
                found = lookup_in(here, memory_here, access.start)
            else:
                found = lookup(access.device, access.start)
            if found is None:
                continue
            memory, base = found[0], found[1]
            key = (id(memory), base)
            held = txn.tables.get(key)
            recs: Sequence[AccessRecord]
            if held is not None:
                recs, table = held[2], held[3]
            else:
                entry = shadow_entries.get(id(memory))  # st.shadow.get(memory), inlined
                table = entry[1] if entry is not None and entry[0]() is memory else None
                recs = table.get(base, ()) if table is not None else ()
            keep: list[AccessRecord] = []
            for rec in recs:
                old, first = rec
                ordered = vc.get(first.lane.lane, 0) >= first.tick
                if (
                    not ordered
                    and old.start < access.end
                    and access.start < old.end
                    and old.conflicts(access)
                    and not (batch and first.batch == batch)  # one launch: the static check's
                ):
                    self.report(txn, rec, access, op)
                covered = access.start <= old.start and old.end <= access.end
                if covered and ordered and (access.write or not old.write):
                    continue  # superseded: anything racing it races the new access too
                keep.append(rec)
            keep.append((access, op))
            txn.tables[key] = (memory, base, keep, table)

    def report(self, txn: Transaction, rec: AccessRecord, access: Access, op: OpRecord) -> None:
        old, first = rec
        key = (first.number, op.number)
        if key in self.state.seen or key in txn.keys:
            return
        txn.keys.add(key)
        if first.waits or op.waits:
            guards = self._guards(first, op)
            if guards:  # after a wait not yet released: decided when it is
                if txn.parked is None:
                    txn.parked = []
                txn.parked.append(ParkedRace(old, first, access, op, guards))
                return
        txn.reports.append(self.make_report(rec, access, op))

    def _guards(self, first: OpRecord, second: OpRecord) -> list[tuple[PendingWait, OpRecord]]:
        """The unreleased waits that one of two unordered ops comes after (as their clocks
        said when they were planned) and the other does not, each with the other op (a wait
        both come after orders neither before the other)."""
        guards = [
            (wait, first) for wait in second.waits if wait not in first.waits and wait.pending()
        ]
        guards += [
            (wait, second) for wait in first.waits if wait not in second.waits and wait.pending()
        ]
        return guards

    def _waits_before(self, vc: dict[int, int]) -> tuple[PendingWait, ...]:
        """The unreleased waits a clock comes after."""
        return tuple(wait for wait in self.state.waits if vc.get(wait.lane, 0) >= wait.tick)

    def make_report(self, rec: AccessRecord, access: Access, op: OpRecord) -> RaceReport:
        """The report of ``rec`` and ``op``'s ``access``, which nothing orders."""
        old, first = rec
        second = op
        lo, hi = max(old.start, access.start), min(old.end, access.end)
        why = self.why(first, second)
        if second.lane.lane == 0:  # the host
            fix = (
                f"await the first op's completion, or {first.lane.name}.synchronize(), before "
                f"{second.label} at {site_text(second.site)}"
            )
        else:
            fix = (
                f"e = device.create_event(); await <{first.lane.name}>.record_event(e) after "
                f"op #{first.number} ({site_text(first.site)}); await "
                f"<{second.lane.name}>.wait_event(e) before op #{second.number} "
                f"({site_text(second.site)})"
            )
        return RaceReport(
            kind_of(old.write, access.write),
            race_site(first, old, lo, hi),
            race_site(second, access, lo, hi),
            describe_allocation(access.device, lo if lo < hi else access.start),
            why,
            fix,
        )

    def why(self, first: OpRecord, second: OpRecord) -> str:
        knows = second.lane.vc.get(first.lane.lane, 0)
        a, b = first.lane.name, second.lane.name
        if knows == 0:
            # Not "nothing links them": an event recorded on ``a`` before any of its ops, then
            # waited on by ``b``, links the lanes but orders ``b`` after none of ``a``'s ops.
            return (
                f"{b} has no ordering with {a}'s ops (no event wait, host synchronisation or "
                f"legacy default-stream rule orders {b} after one of them); op #{first.number} "
                f"is on {a}"
            )
        upto = first.lane.ops[knows - 1]
        via = text(second.lane.via.get(first.lane.lane) or "an earlier join")
        return f"{b} knows {a} only up to op #{upto} ({via}); op #{first.number} is later"

    def target(self) -> RaceCheck | None:
        """The check a report made now goes to (see :class:`RaceCheck`)."""
        for check in reversed(_ENTERED.get()):
            if check._active:
                return check
        return self.stack[-1] if self.stack else None

    def emit(self, made: RaceReport, *, may_raise: bool = True) -> None:
        check = self.target()
        if check is None:
            return
        check._reports.append(made)
        if check._on_race == "warn" or (check._on_race == "raise" and not may_raise):
            warnings.warn(str(made), RaceWarning, stacklevel=_caller_level())
        elif check._on_race == "raise":
            raise RaceError([made])

    def emit_all(self, reports: list[RaceReport]) -> None:
        """Reports of a committed call: the call happened, so even raise mode only warns
        (it gets here only when another thread changed the clocks between plan and commit)."""
        for made in reports:
            self.emit(made, may_raise=False)

    # -- observer callbacks (the runtime calls these in API order) -----------------------

    def enqueue(self, stream: Stream, work: Any, submit: Callable[[], Completion]) -> Completion:
        with self.lock:
            st = self.state
            quick = self._quick_plan(st, stream, work)
            if quick is None:
                txn = self._plan_enqueue(stream, work)
                if txn.reports:
                    self.refuse(txn)
            stamp = st.stamp
        completion = submit()
        with self.lock:
            if not self.stack:
                return completion  # the check ended meanwhile (another thread)
            if quick is not None:
                if st is self.state and stamp == st.stamp:
                    # install the quick plan (what commit does; nothing here can fail)
                    lane, vc, via, seen, op, tables = quick
                    lane.vc, lane.via, lane.seen = vc, via, seen
                    number = op.number
                    lane.ops.append(number)
                    for memory, base, keep, table in tables:
                        if table is None:
                            table = st.shadow.get(memory)
                            if table is None:
                                table = st.shadow[memory] = {}
                        table[base] = keep
                    st.ops = number
                    st.stamp += 1
                    done = st.done  # _remember_done, inlined below its bound
                    if len(done) < MAX_PENDING:
                        signal = completion._signal
                        done[id(signal)] = (signal, vc, via, number, lane.lane)
                    else:
                        self._remember_done(completion, lane, number)
                    if type(work) is not KernelParams:  # the commonest op: one test
                        if isinstance(work, MemcpyParams):
                            self._watch_host_array(completion._program, work, op)
                        elif type(work) is StreamMemOp:
                            self._memop_enqueued(work, op, lane, completion._signal)
                    return completion
                txn = self._plan_enqueue(stream, work)
            elif txn.st is not self.state or txn.stamp != txn.st.stamp:  # not txn.current()
                txn = self._plan_enqueue(stream, work)
            op = txn.ops[-1]
            self.commit(txn)
            self._remember_done(completion, op.lane, op.number)
            if isinstance(work, MemcpyParams):
                self._watch_host_array(completion._program, work, op)
            elif type(work) is StreamMemOp:
                self._memop_enqueued(work, op, op.lane, completion._signal)
        if txn.reports:
            self.emit_all(txn.reports)
        return completion

    def _quick_plan(self, st: CheckerState, stream: Stream, work: Any) -> QuickPlan | None:
        """The common eager op planned without a :class:`Transaction`: a non-blocking stream the
        checker knows, and no access that races. What :meth:`_plan_enqueue` then
        :meth:`commit` would do, in one pass and without copying what it does not change;
        nothing is changed here. None: plan it the general way (a report, a new stream, the
        legacy default-stream rules)."""
        if not stream.non_blocking:
            return None
        entry = st.lanes.entries.get(id(stream))  # st.lanes.get(stream), inlined
        if entry is None or entry[0]() is not stream:
            return None
        lane: Lane = entry[1]
        vc = lane.vc.copy()  # the committed clock is shared by snapshots: a new one
        via = lane.via  # shared until an entry changes
        seen = lane.seen
        host = st.host
        if seen is not host.vc:  # the host learnt something since this lane last joined
            host_via = host.via
            for index, count in host.vc.items():
                if count > vc.get(index, 0):
                    if via is lane.via:
                        via = via.copy()
                    vc[index] = count
                    via[index] = host_via.get(index, "")
            seen = host.vc
        me = lane.lane
        tick = vc.get(me, 0) + 1
        vc[me] = tick
        if tick == 1:
            return None  # a lane's first op: the general way names its program order
        number = st.ops + 1
        kind = type(work)
        label = WORK_LABELS.get(
            work.kernel if kind is KernelParams else work.kind if kind is MemcpyParams else kind
        )
        if label is None:
            label = work_label(work)
        # capture(5): the user's frame is never nearer. Skipped: this method, enqueue, the
        # stream's _observed (which alone calls enqueue), the private body calling it and
        # that body's caller (its public wrapper, see runtime.enqueue, or other runtime code)
        op = OpRecord(number, label, lane, tick, capture(5))
        if st.waits:
            op.waits = self._waits_before(vc)
        shadow_entries = st.shadow.entries
        tables: list[tuple[DeviceMemory, int, list[AccessRecord], Any]] = []
        for access, memory, base, table in located_footprint(work, stream.device, st):
            recs: Sequence[AccessRecord] = ()
            for index, held in enumerate(tables):  # an earlier range of this op's, same bytes
                if held[0] is memory and held[1] == base:
                    recs, table = held[2], held[3]
                    del tables[index]
                    break
            else:
                if table is None:
                    shadow = shadow_entries.get(id(memory))  # st.shadow.get(memory), inlined
                    table = shadow[1] if shadow is not None and shadow[0]() is memory else None
                recs = table.get(base, ()) if table is not None else ()
            start, end, write = access.start, access.end, access.write
            keep: list[AccessRecord] = []
            for rec in recs:
                old, first = rec
                if vc.get(first.lane.lane, 0) >= first.tick:  # ordered: cannot race
                    if start <= old.start and old.end <= end and (write or not old.write):
                        continue  # superseded: anything racing it races the new access too
                elif old.start < end and start < old.end and old.conflicts(access):
                    return None  # a race (no batch here): the general way reports it
                keep.append(rec)
            keep.append((access, op))
            tables.append((memory, base, keep, table))
        return (lane, vc, via, seen, op, tables)

    def _event_lane(self, st: CheckerState, stream: Stream) -> Lane | None:
        """``stream``'s lane joined with the host's clock, for a record or a wait on a
        non-blocking stream the checker knows (what :meth:`prepare` then :meth:`commit` do,
        installed at once: a lane's committed dicts are replaced, never changed); None: the
        general way."""
        if not stream.non_blocking:
            return None
        entry = st.lanes.entries.get(id(stream))  # st.lanes.get(stream), inlined
        if entry is None or entry[0]() is not stream:
            return None
        lane: Lane = entry[1]
        host = st.host
        if lane.seen is not host.vc:  # the host learnt something since this lane last joined
            vc, via = lane.vc, lane.via
            host_via = host.via
            for index, count in host.vc.items():
                if count > vc.get(index, 0):
                    if vc is lane.vc:
                        vc, via = vc.copy(), via.copy()
                    vc[index] = count
                    via[index] = host_via.get(index, "")
            lane.vc, lane.via, lane.seen = vc, via, host.vc
        return lane

    def _plan_enqueue(self, stream: Stream, work: Any) -> Transaction:
        txn = Transaction(self.state)
        op = self.advance(txn, self.prepare(txn, stream), work_label(work))
        device = stream.device
        self.access(txn, op, footprint(work, device), device)
        return txn

    def launching(self, graph_exec: Any, stream: Stream, user: Stream | None) -> Any:
        with self.lock:
            txn = self._plan_launch(graph_exec, stream, user)
            self.refuse(txn)
            return txn

    def launched(
        self,
        graph_exec: Any,
        stream: Stream,
        completion: Completion,
        plan: Any = None,
        user: Stream | None = None,
    ) -> None:
        with self.lock:
            if not self.stack:
                return
            txn = plan if isinstance(plan, Transaction) and plan.current(self.state) else None
            if txn is None:
                txn = self._plan_launch(graph_exec, stream, user)
            op = txn.ops[-1]
            self.commit(txn)
            self._remember_done(completion, op.lane, op.number)
            self._watch_graph_copies(graph_exec, op, txn, completion._signal)
        self.emit_all(txn.reports)

    def _plan_launch(self, graph_exec: Any, stream: Stream, user: Stream | None) -> Transaction:
        st = self.state
        txn = Transaction(st)
        races = graph_exec._races
        if races is None:
            bodies = graph_exec._conditionals.bodies if graph_exec._conditionals else None
            races = graph_exec._races = ExecRaces(
                graph_exec._graph, None, None, check=False, bodies=bodies
            )
        name = f"graph exec #{graph_exec.hid.slot}"
        lane = self.prepare(txn, stream)
        theirs = None
        if user is not None and user is not stream:  # launched for another device's stream
            theirs = self.prepare(txn, user)
            how = f"{name}, launched on {lane.name} for {theirs.name}, follows its earlier work"
            lane.join(theirs.vc, theirs.via, how)
        previous = st.launches.get(graph_exec)
        if previous is not None:  # a launch starts after the executable's previous one
            lane.join(previous.vc, previous.via, f"the previous launch of {name}")
        txn.host_ops = host_ops = self._host_ops(graph_exec)
        txn.graph_waits = host_ops[3]
        recorded, waited = races.events()
        if not recorded and not waited:
            op = self.advance(txn, lane, f"launch of {name}")
            op.graph = races
            self.access(txn, op, races.summary)
        else:
            self._launch_groups(txn, graph_exec, races, lane, name)
        txn.launch = (graph_exec, EventClock(dict(lane.vc), dict(lane.via), name))
        if theirs is not None:  # later work on the user's stream follows the launch
            theirs.join(lane.vc, lane.via, f"{theirs.name} waits for the launch of {name}")
        return txn

    def _launch_groups(
        self, txn: Transaction, graph_exec: Any, races: ExecRaces, lane: Lane, name: str
    ) -> OpRecord:
        """A launch with event nodes: each group of nodes (same records after them, same
        waits before them) runs on a lane of its own, so an event recorded mid-graph covers
        only the nodes before it, and a wait orders only the nodes after it.

        The groups of one launch are not checked against each other: inside a graph only
        its edges order nodes, and ``graph.check_races()`` checks those."""
        st = self.state
        groups, records = races.groups()
        known = st.group_lanes.get(graph_exec)
        if known is None or len(known) != len(groups):  # new, or its nodes changed
            lanes = [txn.new_lane(f"{lane.name} ({name}, a node group)") for _ in groups]
            txn.groups = (graph_exec, lanes)
        else:
            lanes = [txn.work(group) for group in known]
        site = capture()
        batch = txn.number + 1
        for group, (waits, summary) in zip(lanes, groups, strict=True):
            group.join(lane.vc, lane.via, None)
            for event in waits:
                clock = st.events.get(event)
                if clock is not None:
                    group.join(clock.vc, clock.via, ("graph wait node on ", clock.where))
            op = self.advance(txn, group, f"launch of {name}", batch)
            op.site = site
            op.graph = races
            self.access(txn, op, summary)
        pre_vc, pre_via = dict(lane.vc), dict(lane.via)
        # the waits' clocks as the launch found them (a record node of this launch may
        # record one of the same events: that happens later)
        waited = {id(event): st.events.get(event) for event in races.events()[1]}
        for event, covering, waits in records:
            vc, via = dict(pre_vc), dict(pre_via)
            clocks = [lanes[index] for index in covering]
            clocks += [c for c in (waited[id(e)] for e in waits) if c is not None]
            for held in clocks:
                for k, v in held.vc.items():
                    if v > vc.get(k, 0):
                        vc[k], via[k] = v, held.via.get(k, "")
            where = (
                "event #",
                event.hid.slot,
                " recorded by ",
                name,
                " on ",
                lane.name,
                " at ",
                site,
            )
            txn.events.append((event, EventClock(vc, via, where)))
        for group in lanes:  # later work on the stream follows the whole launch
            lane.join(group.vc, group.via, f"the end of a launch of {name}")
        for clock in waited.values():  # its wait nodes included, whatever follows them
            if clock is not None:
                lane.join(clock.vc, clock.via, ("graph wait node on ", clock.where))
        op = self.advance(txn, lane, f"launch of {name}", batch)
        op.site = site
        return op

    def allocated(self, ptr: DevicePtr, nbytes: int, stream: Stream | None) -> None:
        if not ptr:
            return
        site = user_site()
        found = allocation_at(Access(ptr.device, ptr.address, ptr.address + 1, True))
        if site is not None and found is not None:
            SITES.remember(SITES.allocations, (id(found[0]), ptr.address), site)
        if stream is not None:  # malloc_async: the memory is usable in stream order
            with self.lock:
                txn = Transaction(self.state)
                op = self.advance(txn, self.prepare(txn, stream), "malloc_async")
                self.access(txn, op, [Access(ptr.device, ptr.address, ptr.address + nbytes, True)])
                self.commit(txn)
            self.emit_all(txn.reports)

    def freeing(self, ptr: DevicePtr) -> None:
        with self.lock:
            st = self.state
            found = allocation_at(Access(ptr.device, ptr.address, ptr.address + 1, True))
            if found is None:
                return
            memory, base, nbytes = found
            if base != ptr.address:
                return  # not an allocation's start: free() refuses it and changes nothing
            txn = Transaction(st)
            op = self.advance(txn, txn.work(st.host), "free()")
            self.access(txn, op, [Access(ptr.device, base, base + nbytes, True)])
            self.refuse(txn)  # raise mode: the memory is not freed
            self.commit(txn)
            (st.shadow.get(memory) or {}).pop(base, None)
            SITES.allocations.pop((id(memory), base), None)
        self.emit_all(txn.reports)

    def host_accessed(self, ptr: DevicePtr, nbytes: int, write: bool, what: str) -> None:
        """The host reads or writes device memory (``device.view``) at its place in host
        program order; a host function's own views are its declared footprint instead."""
        if running_host_function() is not None:
            return
        with self.lock:
            st = self.state
            txn = Transaction(st)
            op = self.advance(txn, txn.work(st.host), what)
            self.access(txn, op, [Access(ptr.device, ptr.address, ptr.address + nbytes, write)])
            self.refuse(txn)  # raise mode: no view is handed out
            self.commit(txn)
            if write and st.waits:  # it may be what releases a pending wait
                host = st.host
                st.word_sequence += 1
                writes = st.host_writes
                if len(writes) >= _HOST_WRITES_KEPT:
                    del writes[: _HOST_WRITES_KEPT // 2]
                writes.append(
                    (
                        st.word_sequence,
                        ptr.device,
                        ptr.address,
                        ptr.address + nbytes,
                        host.vc,
                        host.via,
                        f"the host's write through a view (op #{op.number}) at "
                        f"{site_text(op.site)}",
                    )
                )
        self.emit_all(txn.reports)

    def event_recorded(self, stream: Stream, event: Event) -> None:
        with self.lock:
            st = self.state
            known = self._event_lane(st, stream)
            if known is not None:  # the lane's committed dicts become the event's: shared
                # capture(3): called by the stream's private _record_event only, itself called
                # by its public wrapper (see runtime.enqueue) or other runtime code
                where = ("event #", event.hid.slot, " recorded on ", known.name, " at ", capture(3))
                st.events[event] = EventClock(known.vc, known.via, where)
                st.stamp += 1
                return
            txn = Transaction(self.state)
            lane = self.prepare(txn, stream)  # a record is stream work: host order, legacy rules
            where = ("event #", event.hid.slot, " recorded on ", lane.name, " at ", capture())
            # the lane's dicts become the committed clock, never changed in place: shared
            txn.events.append((event, EventClock(lane.vc, lane.via, where)))
            self.commit(txn)

    def event_waited(self, stream: Stream, event: Event) -> None:
        with self.lock:
            clock = self.state.events.get(event)
            if clock is None:
                return  # never recorded: the wait is a no-op, as in HIP
            st = self.state
            known = self._event_lane(st, stream)
            if known is not None:
                vc, via = known.vc, known.via
                how: Why | None = None
                for index, count in clock.vc.items():
                    if count > vc.get(index, 0):
                        if how is None:  # the first entry this wait teaches the lane
                            # capture(3): as in event_recorded, from _wait_event
                            how = (clock.where, ", waited at ", capture(3))
                            vc, via = vc.copy(), via.copy()
                        vc[index] = count
                        via[index] = how
                known.vc, known.via = vc, via
                st.stamp += 1
                return
            txn = Transaction(self.state)
            lane = self.prepare(txn, stream)  # a wait is stream work: host order, legacy rules
            lane.join(clock.vc, clock.via, (clock.where, ", waited at ", capture()))
            self.commit(txn)

    def stream_synchronized(self, stream: Stream) -> None:
        with self.lock:
            st = self.state
            st.stamp += 1
            lane = st.lanes.get(stream)
            how = (stream_name(lane), " synchronised by the host at ", capture())
            host = st.host
            host.join_fresh({}, {}, None)  # new dicts once, then joined in place
            if lane is not None:
                host.join(lane.vc, lane.via, how)
            if stream.is_null:  # the null stream's sync covers blocking streams' earlier work
                for other in stream.device._legacy_streams():
                    o = st.lanes.get(other)
                    if o is not None and not other.non_blocking:
                        host.join(o.vc, o.via, how)
            self.forget_known(st)
        if self.state.late or self.state.waits:
            self._emit_late()

    def event_synchronized(self, event: Event) -> None:
        with self.lock:
            st = self.state
            clock = st.events.get(event)
            if clock is not None:
                st.stamp += 1
                how = (clock.where, ", synchronised by the host at ", capture())
                st.host.join_fresh(clock.vc, clock.via, how)
                self.forget_known(st)
        if self.state.late or self.state.waits:
            self._emit_late()

    def device_synchronized(self, device: Device) -> None:
        with self.lock:
            st = self.state
            st.stamp += 1
            how = ("device ", device.ordinal, " synchronised at ", capture())
            host = st.host
            host.join_fresh({}, {}, None)  # new dicts once, then joined in place
            for stream, lane in st.lanes.items():
                if stream.device is device:
                    host.join(lane.vc, lane.via, how)
            self.forget_known(st)
        if self.state.late or self.state.waits:
            self._emit_late()

    def completion_awaited(self, signal: Signal) -> None:
        with self.lock:
            st = self.state
            entry = st.done.pop(id(signal), None)
            if entry is not None and entry[0] is signal:
                st.stamp += 1
                how = ("op #", entry[3], " awaited by the host at ", capture())
                st.host.join_fresh(entry[1], entry[2], how)
        if self.state.late or self.state.waits:
            self._emit_late()

    def node_added(self, node: Any) -> None:
        site = user_site()
        if site is not None:
            SITES.remember(SITES.nodes, node.hid, site)

    # -- stream memory operations: a wait takes the order of the write that releases it --

    def _memop_enqueued(self, memop: StreamMemOp, op: OpRecord, lane: Lane, done: Signal) -> None:
        """After an eager memory operation was committed (``lane``: its stream's, committed;
        ``done``: its completion's signal), or a launch of a captured one: a write keeps its
        clock until it runs (one per launch, oldest first); a wait is pending until it is
        released."""
        st = self.state
        if memop.flag is None:
            what = work_label(memop)
            label = (
                f"{what} op #{op.number}"
                if op.label == what
                else f"{what} of op #{op.number} ({op.label} on {lane.name})"
            )
            writes = st.memop_writes
            if len(writes) >= MAX_PENDING:
                writes.clear()
            entry = writes.get(id(memop))
            if entry is None or entry[0] is not memop:
                entry = writes[id(memop)] = (memop, [])
            if len(entry[1]) < MAX_PENDING:
                entry[1].append((lane.vc, lane.via, label))
            return
        wait = PendingWait(memop, op, lane.lane, op.tick, done)
        early = st.released_early.pop(id(memop), None)
        if early is not None and early[0] is memop:  # it ran before it was registered here
            self._resolve(st, wait, early[1])
            return
        self._pending(st, wait)

    def _pending(self, st: CheckerState, wait: PendingWait) -> None:
        if len(st.waits) >= MAX_PENDING:  # the oldest are taken as released by no known write
            oldest, st.waits = st.waits[: MAX_PENDING // 2], st.waits[MAX_PENDING // 2 :]
            for old in oldest:
                self._resolve(st, old, None)
        st.waits.append(wait)

    def memop_done(self, memop: Any) -> None:
        """A memory operation ran (on the device's loop): a write becomes its word's last
        write; a wait is released, and takes the clock of the write it read (see
        :meth:`_releasing_write`). Races parked on the wait are decided now; their reports
        are emitted when the host next synchronises (raising here would fail the wait)."""
        with self.lock:
            if not self.stack:
                return
            st = self.state
            if memop.flag is None:
                entry = st.memop_writes.get(id(memop))
                if entry is None or entry[0] is not memop:
                    return  # enqueued before the check began
                clocks = entry[1]
                vc, via, label = clocks.pop(0)
                if not clocks:
                    del st.memop_writes[id(memop)]
                ptr = memop.ptr
                try:  # the allocation written: a word freed and allocated again is another
                    buffer = weakref.ref(resolve_pointer(ptr, memop.bits // 8)[0])
                except HipError:
                    return
                st.word_sequence += 1
                words = st.words
                if len(words) >= MAX_PENDING:
                    words.clear()
                written = (st.word_sequence, memop, buffer, vc, via, label)
                words[(ptr.device, ptr.address)] = written
                return
            released = self._releasing_write(st, memop)
            found = [wait for wait in st.waits if wait.memop is memop]
            if not found:
                early = st.released_early
                if len(early) >= MAX_PENDING:
                    early.clear()
                early[id(memop)] = (memop, released)  # registered after it ran (another thread)
                return
            launch = found[0].done  # a graph's wait: pending once per op of its oldest launch
            for wait in found:
                if wait.done is launch:
                    st.waits.remove(wait)
                    self._resolve(st, wait, released)

    def _settle_waits_at_end(self, st: CheckerState) -> None:
        """The last check ends with waits not yet released: nothing will decide the races
        parked on them once it is off, so each is decided now, as if released by the writes
        already enqueued that could release it (a pair one of them follows is ordered; a
        wait no such write follows, one a host write releases later, gives no order): the
        race is reported once, to the check ending, never lost."""
        for wait in st.waits:
            if wait.resolved:
                continue
            released: Released | None = None
            if wait.pending():
                vc: dict[int, int] = {}
                for write, clocks in st.memop_writes.values():
                    if not _may_release(write, wait.memop):
                        continue
                    for clock, _, _ in clocks:
                        for index, count in clock.items():
                            if count > vc.get(index, 0):
                                vc[index] = count
                if vc:
                    released = (vc, {}, "a write enqueued before the check ended")
            self._resolve(st, wait, released)
        st.waits = []

    def _releasing_write(self, st: CheckerState, wait: StreamMemOp) -> Released | None:
        """The clock of the write a satisfied wait read: the last ``write_value`` that ran on
        its word (or on a half of it, or on the 64-bit word it is half of) if the word still
        holds its value, or a later host write through a view over it; None when neither (a
        kernel's or a copy's write: which one is not known)."""
        ptr = wait.ptr
        end = ptr.address + wait.bits // 8
        best: tuple[int, Released] | None = None
        for address in (ptr.address - 4, ptr.address, ptr.address + 4):
            entry = st.words.get((ptr.device, address))
            if entry is None:
                continue
            sequence, write, buffer, vc, via, label = entry
            if not (address < end and ptr.address < address + write.bits // 8):
                continue  # a neighbour, not a part of the word
            try:
                holds = (
                    resolve_pointer(write.ptr, write.bits // 8)[0] is buffer()
                    and write._read() == write.value
                )
            except HipError:  # freed since
                holds = False
            if holds and (best is None or sequence > best[0]):
                best = (sequence, (vc, via, label))
        for sequence, device, start, stop, vc, via, label in reversed(st.host_writes):
            if device == ptr.device and start < end and ptr.address < stop:
                if best is None or sequence > best[0]:
                    best = (sequence, (vc, via, label))
                break
        return best[1] if best is not None else None

    def _resolve(self, st: CheckerState, wait: PendingWait, released: Released | None) -> None:
        """``wait`` was released by the write whose clock is ``released`` (None: no known
        write, no order). Every clock at or after the wait (its stream's lane, lanes and
        events that learnt of it, the host, the completions the host may await) takes the
        write's; each race parked on the wait is dropped if that write follows its other op,
        and reported (late) once no wait it is parked on is left."""
        st.stamp += 1  # a plan made before this is made again
        wait.resolved = True
        rvc: dict[int, int] = {}
        if released is not None:
            rvc, _, label = released
            op = wait.op
            how: Why = (
                op.label,
                " (op #",
                op.number,
                ") on ",
                op.lane.name,
                " released by ",
                label,
            )
            lane_index, tick = wait.lane, wait.tick

            def joined(
                vc: dict[int, int], via: dict[int, Why]
            ) -> tuple[dict[int, int], dict[int, Why]] | None:
                if vc.get(lane_index, 0) < tick:
                    return None
                new: tuple[dict[int, int], dict[int, Why]] | None = None
                for index, count in rvc.items():
                    if count > vc.get(index, 0):
                        if new is None:  # committed clocks are shared: new dicts
                            new = (dict(vc), dict(via))
                        new[0][index] = count
                        new[1][index] = how
                return new

            lanes = [lane for _, lane in st.lanes.items()]
            lanes += [group for _, groups in st.group_lanes.items() for group in groups]
            lanes.append(st.host)
            for lane in lanes:
                made = joined(lane.vc, lane.via)
                if made is not None:
                    lane.vc, lane.via = made
            for _, clock in st.events.items() + st.launches.items():
                made = joined(clock.vc, clock.via)
                if made is not None:
                    clock.vc, clock.via = made
            for key, done in list(st.done.items()):
                made = joined(done[1], done[2])
                if made is not None:
                    st.done[key] = (done[0], made[0], made[1], done[3], done[4])
        keep: list[ParkedRace] = []
        for parked in st.parked:
            other = next((o for w, o in parked.guards if w is wait), None)
            if other is None:
                keep.append(parked)
            elif rvc.get(other.lane.lane, 0) >= other.tick:
                continue  # the releasing write follows the other op: ordered
            else:
                parked.guards = [(w, o) for w, o in parked.guards if w is not wait]
                if parked.guards:
                    keep.append(parked)
                else:
                    made_report = self.make_report(
                        (parked.old, parked.first), parked.access, parked.second
                    )
                    if len(st.late) < MAX_PENDING:
                        st.late.append(made_report)
        st.parked = keep

    def _emit_late(self) -> None:
        """Emit the reports found as waits were released (on the device's loop), now that the
        host synchronised: the racing calls were made long ago, so even raise mode warns.
        Waits that ended unreleased (failed) are let go first: their parked races had no
        order from them."""
        with self.lock:
            st = self.state
            for wait in [wait for wait in st.waits if not wait.pending()]:
                st.waits.remove(wait)
                self._resolve(st, wait, None)
            late, st.late = st.late, []
        self.emit_all(late)

    # -- device hooks: host arrays changed while their copy is in flight -----------------

    def op_starting(self, program: Program, op: Any) -> Any:
        if (
            isinstance(op, CopyOp)
            and isinstance(op.dst, np.ndarray)
            and program.ops[program.pc] is not op
        ):
            # A conditional node runs its body's ops itself and reports only their start (its
            # slice holds them), never their end: a copy into a host array there writes it as
            # it runs, so the copies in flight that read those bytes are told now. Were it to
            # fail after all, a host write in its window would go unseen, no false report.
            self._device_writes_host(op.dst, op.nbytes)
        copies = self.state.copies
        entries = copies.get(id(op))
        entry = None
        if entries is not None:
            while entries and entries[0][3]._value <= 0:
                del entries[0]  # its launch ended without running it (a failure before it)
            if entries and entries[0][0] is op and type(op) is not ConditionalOp:
                entry = entries.pop(0)  # a conditional node's stays until its launch ends
            if not entries:
                copies.pop(id(op), None)
        if not copies:  # nothing in flight to watch: give the device its plain loop back
            with self.lock:
                if self.device_hooked and not self.state.copies:
                    hooks.uninstall(self)
                    self.device_hooked = False
        if entry is not None and entry[1] is not None and isinstance(op.src, np.ndarray):
            now = host_bytes(op.src, op.nbytes).tobytes()
            if now != entry[1]:
                with self.lock:
                    self._host_changed(entry[2], op)
        return None

    def op_finished(self, program: Program, op: Any, start_ns: int, error: Any) -> None:
        if error is None and isinstance(op, CopyOp) and isinstance(op.dst, np.ndarray):
            self._device_writes_host(op.dst, op.nbytes)  # once it ran: a failed one wrote nothing

    def _device_writes_host(self, array: np.ndarray[Any, Any], nbytes: int) -> None:
        """A device-to-host copy wrote the first ``nbytes`` of ``array``: the copies in flight
        that read them were fingerprinted before, so their bytes will differ when they run
        without any host write. Their check is dropped (a host write in that window goes
        unseen: the fingerprint cannot tell it from the device's write)."""
        written = host_bytes(array, nbytes)
        with self.lock:
            st = self.state
            for watched in list(st.watched):
                if np.may_share_memory(host_bytes(watched.src, watched.nbytes), written):
                    watched.before = None
            for entries in st.copies.values():
                for index, (copy, before, op, done) in enumerate(entries):
                    if before is None or not isinstance(copy, CopyOp):  # into host, or a node
                        continue
                    src = copy.src  # an array when ``before`` was taken
                    if isinstance(src, np.ndarray) and np.may_share_memory(
                        host_bytes(src, copy.nbytes), written
                    ):
                        entries[index] = (copy, None, op, done)

    def _host_changed(self, op: OpRecord, copy: CopyOp) -> None:
        dst = copy.dst
        assert isinstance(dst, DevicePtr)
        access = Access(dst.device, dst.address, dst.address + copy.nbytes, True)
        host = RaceSite("a host write", "host", None, 0, copy.nbytes, "exact", True)
        made = RaceReport(
            "host-write-during-copy",
            race_site(op, access),
            host,
            f"host source array of op #{op.number} ({copy.nbytes} B)",
            f"the host changed the source array after op #{op.number} was enqueued on "
            f"{op.lane.name} and before the copy ran",
            f"await the copy's completion (or {op.lane.name}.synchronize()) before writing "
            f"the source array again, or copy from a private buffer",
        )
        self.emit(made, may_raise=False)  # on the device's loop: raising would fail the copy

    def _watch_host_array(self, program: Program | None, work: MemcpyParams, op: OpRecord) -> None:
        """An eager copy from a host array is watched (:meth:`_watch_copy`); one into a host
        array tells the copies watched as it runs (:class:`_HostWritingCopy`)."""
        if isinstance(work.src, np.ndarray):
            self._watch_copy(program, work.src, work.nbytes, op)
        elif (
            isinstance(work.dst, np.ndarray)
            and program is not None
            and not program.started
            and len(program.ops) == 1
            and type(program.ops[0]) is CopyOp
        ):
            program.ops = (_HostWritingCopy.writing(program.ops[0], self),)

    def _watch_copy(self, program: Program | None, src: Any, nbytes: int, op: OpRecord) -> None:
        """An eager copy from a host array: its one-op program gets a :class:`_WatchedCopy`
        in place of the copy, which compares the source as it runs (no device hook)."""
        if program is None or program.started or len(program.ops) != 1 or not nbytes:
            return  # already ran: nothing can change under it any more
        copy = program.ops[0]
        if type(copy) is CopyOp and isinstance(copy.src, np.ndarray) and copy.nbytes:
            watched = _WatchedCopy.watching(copy, op, self)
            program.ops = (watched,)
            st = self.state
            if len(st.watched) >= MAX_PENDING:
                st.watched.clear()
            st.watched.add(watched)

    def _fingerprint(self, copy: CopyOp, op: OpRecord, done: Signal) -> None:
        """Watch a launch's copy as it runs: one from a host array is compared with its bytes
        now; one into a host array (no bytes kept) tells the copies it feeds, as
        :meth:`op_starting` sees it start, that the device, not the host, changes their source."""
        st = self.state
        if len(st.copies) >= MAX_PENDING:
            st.copies.clear()
        src = copy.src
        before = host_bytes(src, copy.nbytes).tobytes() if isinstance(src, np.ndarray) else None
        entry = (copy, before, op, done)
        st.copies.setdefault(id(copy), []).append(entry)
        if not self.device_hooked:
            hooks.install(self)
            self.device_hooked = True

    def _watch_graph_copies(
        self, graph_exec: Any, op: OpRecord, txn: Transaction, done: Signal
    ) -> None:
        """Fingerprint the host source arrays of a launch's memcpy nodes (compared when each
        copy runs), and watch its copies into host arrays (see :meth:`_fingerprint`); its
        captured memory operations (host nodes running a :class:`StreamMemOp`) are
        registered as eager ones are (:meth:`_memop_enqueued`). The executable's host copy and
        memory operation ops are found once per version (``done``: the launch's signal)."""
        host_ops = txn.host_ops if txn.host_ops is not None else self._host_ops(graph_exec)
        found = host_ops[2]
        if found:
            last_done = graph_exec._last_done
            for copy in found:
                if isinstance(copy, ConditionalOp):
                    self._watch_conditional(copy, op, last_done)
                elif isinstance(copy, HostOp):
                    if isinstance(copy.fn, StreamMemOp) and copy.fn.flag is None:
                        self._memop_enqueued(copy.fn, op, op.lane, done)
                else:
                    self._fingerprint(copy, op, last_done)
        if txn.graph_waits:
            for launched in txn.ops:  # the launch's own waits, made when it was planned
                for wait in launched.waits:
                    if wait.done is None:
                        wait.done = done
                        self._pending(self.state, wait)

    def _host_ops(self, graph_exec: Any) -> HostOps:
        """The executable's copy ops from or into host arrays, conditional nodes whose bodies
        copy into host arrays, and host ops of captured memory operations (the entry's third
        item), and its captured waits (the fourth): found once per version."""
        st = self.state
        version, races = graph_exec._version, graph_exec._races
        summary = races.summary if races is not None else None
        cached = st.host_copies.get(graph_exec)
        if cached is None or cached[0] is not version or cached[1] is not summary:
            found = [
                o
                for ops in version.strand_ops
                for o in ops
                if (
                    isinstance(o, CopyOp)
                    and (isinstance(o.src, np.ndarray) or isinstance(o.dst, np.ndarray))
                    and o.nbytes
                )
                or (isinstance(o, ConditionalOp) and _writes_host_arrays(o))
                or (type(o) is HostOp and type(o.fn) is StreamMemOp)
            ]
            waits: tuple[StreamMemOp, ...] = ()
            if any(
                isinstance(o, HostOp) and isinstance(o.fn, StreamMemOp) and o.fn.flag is not None
                for o in found
            ):
                waits = _gating_waits(graph_exec._graph)
            cached = (version, summary, found, waits)
            # Kept for a live executable; a closed one's launcher has only a weak proxy of it
            # (no weak reference of its own to key on), and refuses the launch once planned.
            if type(graph_exec) not in weakref.ProxyTypes:
                st.host_copies[graph_exec] = cached
        return cached  # type: ignore[no-any-return]

    def _watch_conditional(self, node: ConditionalOp, op: OpRecord, done: Signal) -> None:
        """A conditional node whose bodies copy into host arrays keeps the device watched
        until its launch ends (``done``), however many times its bodies run: :meth:`op_starting`
        sees each of those copies start, and the copies they feed are told of the write."""
        st = self.state
        if len(st.copies) >= MAX_PENDING:
            st.copies.clear()
        entry = (node, None, op, done)
        st.copies.setdefault(id(node), []).append(entry)
        if not self.device_hooked:
            hooks.install(self)
            self.device_hooked = True
        done.when_reached(0, lambda: self._conditional_ended(st, entry))

    def _conditional_ended(self, st: CheckerState, entry: Any) -> None:
        """The launch of a watched conditional node ended: its entry goes, and the device gets
        its plain loop back when nothing else is watched (an entry left behind kept every
        later op of every device observed)."""
        with self.lock:
            entries = st.copies.get(id(entry[0]))
            if entries is not None:
                entries[:] = [e for e in entries if e is not entry]
                if not entries:
                    del st.copies[id(entry[0])]
            if st is self.state and not st.copies and self.device_hooked:
                hooks.uninstall(self)
                self.device_hooked = False

    # -- completions ---------------------------------------------------------------------

    def _remember_done(self, completion: Completion, lane: Lane, what: int) -> None:
        """The clock the host learns when it awaits ``completion`` (of op number ``what``)."""
        st = self.state
        done = st.done
        if len(done) >= MAX_PENDING:  # drop what the host already knows
            host = st.host.vc
            for key, (_sig, vc, _, _, _) in list(done.items()):
                if all(host.get(k, 0) >= v for k, v in vc.items()):
                    del done[key]
            if len(done) >= MAX_PENDING:
                for key in list(done)[: MAX_PENDING // 2]:
                    del done[key]
        signal = completion._signal
        if lane.lane:  # committed, never changed in place (see Lane): share, do not copy
            done[id(signal)] = (signal, lane.vc, lane.via, what, lane.lane)
        else:
            done[id(signal)] = (signal, dict(lane.vc), dict(lane.via), what, lane.lane)

    def forget_known(self, st: CheckerState) -> None:
        """After the host synchronised: drop the pending completions it already knows (awaiting
        one would change neither its clock nor a reason), so the clocks they hold can go.

        An entry of lane L at tick t is known when the host's clock has L >= t: every clock
        holding L >= t joined L's whole clock at a tick >= t, which covers the entry's
        (lanes' clocks only grow). Amortised O(1) per entry: a scan runs only once the table
        has doubled since the last one (and holds at least 64 entries)."""
        done = st.done
        if len(done) < 64 or len(done) < 2 * st.done_kept:
            return
        host = st.host.vc
        st.done = done = {
            key: entry
            for key, entry in done.items()
            if host.get(entry[4], 0) < entry[1].get(entry[4], 0)
        }
        st.done_kept = len(done)

    def __repr__(self) -> str:
        return f"<RaceChecker active={len(self.stack)}>"


def _may_release(write: StreamMemOp, wait: StreamMemOp) -> bool:
    """Whether ``write``, once stored, may be what releases ``wait``: it writes a part of the
    waited word and, when it writes the whole word, a value that meets the condition."""
    if write.ptr.device != wait.ptr.device:
        return False
    start, end = write.ptr.address, write.ptr.address + write.bits // 8
    if not (start < wait.ptr.address + wait.bits // 8 and wait.ptr.address < end):
        return False
    if start == wait.ptr.address and write.bits == wait.bits and wait.flag is not None:
        return condition_met(write.value, wait.value, wait.flag, wait.mask, wait.bits)
    return True


def _captured_wait(node: Any) -> StreamMemOp | None:
    """The wait a node runs, if it is an enabled host node of a captured ``wait_value_*``."""
    if node.type is not NodeType.Host or not node.enabled:
        return None
    fn = getattr(node.params, "fn", None)
    return fn if isinstance(fn, StreamMemOp) and fn.flag is not None else None


def _gating_waits(graph: Any) -> tuple[StreamMemOp, ...]:
    """The captured waits of an executable's graph (its top level) that every node touching
    memory comes after: a launch is taken as after those all through (one op, or one per node
    group), so each must come before all of its work; a wait with work beside or before it
    is left out (that work would be taken as after it, an order invented), as are waits in
    child graphs."""
    nodes = graph.nodes
    before: list[int] = [0] * len(nodes)  # per node, a bitset of the waits before it
    waits: list[StreamMemOp] = []
    bit_of: dict[int, int] = {}
    common = -1  # the waits before every node that touches memory (all, to begin with)
    for index, node in enumerate(nodes):
        mask = 0
        for dep in node.deps:
            mask |= before[dep] | bit_of.get(dep, 0)
        before[index] = mask
        wait = _captured_wait(node)
        if wait is not None:
            bit_of[index] = 1 << len(waits)
            waits.append(wait)
        elif node.enabled and (
            node.type is NodeType.Conditional  # its bodies may touch anything
            or any(node_footprint(each) for each in (node.child.walk() if node.child else [node]))
        ):
            common &= mask
    return tuple(wait for bit, wait in enumerate(waits) if common >> bit & 1)


def _writes_host_arrays(node: ConditionalOp) -> bool:
    """Whether a body of ``node`` (or of a conditional node nested in one) copies into a host
    array."""
    return any(
        (isinstance(o, CopyOp) and isinstance(o.dst, np.ndarray) and o.nbytes)
        or (isinstance(o, ConditionalOp) and _writes_host_arrays(o))
        for body in node.bodies
        for o in body
    )


class _WatchedCopy(CopyOp):
    """An eager host-to-device copy that checks, as it runs, that its host source still
    holds the bytes it held when the copy was enqueued (a host write in between is a race).

    Swapped into the copy's own program before it starts, so no device hook (and none of
    its cost on every other program) is needed; it is a :class:`CopyOp` to everything else.
    A device-to-host copy into its source that runs while it waits (:class:`_HostWritingCopy`,
    or a graph's, which the device hook sees) changes the bytes with no host write: ``before``
    is then None, and nothing is compared.
    """

    __slots__ = ("before", "checker", "origin")

    before: bytes | None
    checker: _Checker
    origin: OpRecord

    @classmethod
    def watching(cls, copy: CopyOp, origin: OpRecord, checker: _Checker) -> _WatchedCopy:
        """``copy`` (from a host array), with its source's bytes now."""
        watched = cls.__new__(cls)  # the copy's fields as they are: no re-validation
        watched.dst, watched.src, watched.nbytes = copy.dst, copy.src, copy.nbytes
        watched.kind, watched.resolve, watched.cost_ns = copy.kind, copy.resolve, copy.cost_ns
        watched.before, watched.origin, watched.checker = host_source(copy), origin, checker
        return watched

    def run(self, program: Program) -> None:
        checker = self.checker
        with checker.lock:
            # Not watched any more (its check ended, or the table was cleared): nothing tells
            # it of device writes into its source, and no report of a past check is due.
            watched = checker.state.watched
            current = self in watched
            watched.discard(self)
        if current and self.before is not None and host_source(self) != self.before:
            with checker.lock:
                checker._host_changed(self.origin, self)
        CopyOp.run(self, program)


class _HostWritingCopy(CopyOp):
    """An eager device-to-host copy that, as it runs, tells the copies in flight reading its
    destination that their source changes by the device's hand, not the host's (see
    :meth:`_Checker._device_writes_host`). Swapped into its own program, as
    :class:`_WatchedCopy` is."""

    __slots__ = ("checker",)

    checker: _Checker

    @classmethod
    def writing(cls, copy: CopyOp, checker: _Checker) -> _HostWritingCopy:
        made = cls.__new__(cls)  # the copy's fields as they are: no re-validation
        made.dst, made.src, made.nbytes = copy.dst, copy.src, copy.nbytes
        made.kind, made.resolve, made.cost_ns = copy.kind, copy.resolve, copy.cost_ns
        made.checker = checker
        return made

    def run(self, program: Program) -> None:
        assert isinstance(self.dst, np.ndarray)
        CopyOp.run(self, program)  # first: a copy that fails writes nothing
        self.checker._device_writes_host(self.dst, self.nbytes)


_CHECKER = _Checker()


# The checks entered in this context (task or thread), innermost last.
_ENTERED: ContextVar[tuple[RaceCheck, ...]] = ContextVar("ahipgraph_race_checks", default=())


# ".../ahipgraph/" (with the separator, so that ".../ahipgraph_app.py" is not inside it)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside ahipgraph: a warning names the user's
    line (the racing call), however deep in the runtime the report was made."""
    frame = sys._getframe(1)
    level = 1  # as seen from ``warnings.warn`` called in the caller of this function
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def race_check(on_race: Literal["raise", "warn", "collect"] = "raise") -> Scoped[RaceCheck]:
    """Check every stream, event, launch and host synchronisation inside the block for races.

    Args:
        on_race: "raise" (default: RaceError at the call that completed the race),
            "warn" (a RaceWarning each) or "collect" (only ``rc.reports``).

    Raises:
        TypeError: ``on_race`` is not a str (also a ValueError, as it was before).
        ValueError: ``on_race`` is not one of those (at the call, before anything is on).

    Nested checks share one set of clocks; reports go to the innermost check of the task or
    thread that made the racing call (see :class:`RaceCheck`). Work enqueued before the
    outermost check began is not known to it. Leaving the block by an exception or a
    cancellation turns the check off like a normal exit. As a decorator it checks each call,
    an ``async def`` function's whole coroutine included.
    """
    check = RaceCheck(on_race)  # a bad mode fails here, before anything is on
    return Scoped(lambda: _checking(check))


@contextmanager
def _checking(check: RaceCheck) -> Iterator[RaceCheck]:
    _CHECKER.push(check)
    token = _ENTERED.set((*_ENTERED.get(), check))
    try:
        yield check
    finally:
        with suppress(ValueError):  # left in another context than it was entered in
            _ENTERED.reset(token)
        _CHECKER.pop(check)


_ENVIRONMENT_CHECK: RaceCheck | None = None


def install_from_environment() -> RaceCheck | None:
    """Turn the checker on for the whole run if ``AHIPGRAPH_RACE_CHECK`` asks for it."""
    global _ENVIRONMENT_CHECK
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if not value or value in _ENV_OFF:
        return None
    if _ENVIRONMENT_CHECK is None:
        mode = "warn" if value in _ENV_ON else value
        if mode not in _MODES:
            raise ValueError(
                f"{ENV_VAR}={value!r}: expected one of {', '.join(_MODES)}; "
                f"{', '.join(_ENV_ON)} (meaning warn); or empty, {', '.join(_ENV_OFF)} (off)"
            )
        _ENVIRONMENT_CHECK = RaceCheck(mode)
        _CHECKER.push(_ENVIRONMENT_CHECK)
    return _ENVIRONMENT_CHECK


def race_checks_on() -> tuple[RaceCheck, ...]:
    """The race checks on now, those of ``with`` blocks (not the environment switch's), each
    once however many of its blocks are open."""
    with _CHECKER.lock:
        on = [check for check in _CHECKER.stack if check is not _ENVIRONMENT_CHECK]
    return tuple({id(check): check for check in on}.values())


def end_race_check(check: RaceCheck) -> None:
    """Turn ``check`` off as leaving all its open blocks would: for blocks entered and never
    left (the test kit ends them with the devices they were entered among)."""
    with _CHECKER.lock:
        blocks = sum(1 for entered in _CHECKER.stack if entered is check)
    for _ in range(max(blocks, 1)):
        _CHECKER.pop(check)


def active() -> bool:
    """True while any race check (a ``with`` block or the environment switch) is on."""
    return bool(_CHECKER.stack)
