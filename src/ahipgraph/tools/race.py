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

Check, then commit: every call is planned as a :class:`_Txn` first; in raise mode a racing
call raises RaceError before anything is enqueued, launched, freed or viewed, and the
checker's clocks are unchanged.

What an eager op costs (the check's budget: eager programs at most 3x slower):

* the common op (a non-blocking stream the checker knows, no race) is planned in one pass
  without a transaction (:meth:`_Checker._quick_plan`), the same plan a transaction would
  make; anything else, a race included, is planned the general way, which words the report;
* the user's source line is kept as (code, instruction offset) and the "why" of a join as a
  tuple of parts, made text only for a report (:mod:`ahipgraph.tools.race_sites`);
* a one-range footprint on the stream's device is kept per (kernel pointer fields, pointer)
  or (kind, address, size) until the device's memory frees anything (:func:`_located`);
* pending completions the host already knows are forgotten when it synchronises
  (:meth:`_Checker.forget_known`), so their clocks do not pile up between awaits.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from array import array
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.scoped import Scoped
from ..device import hooks
from ..device.host_function import running_host_function
from ..device.ops import CopyOp, host_bytes
from ..device.pointer import DevicePtr
from ..exec.races import (
    ALLOCATIONS,
    SITES,
    Access,
    ExecRaces,
    RaceError,
    RaceReport,
    RaceSite,
    RaceWarning,
    describe_allocation,
    footprint,
    kind_of,
    user_site,
)
from ..runtime import observe
from ..runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from ..runtime.stream_memory import FreeOp
from .race_sites import Site, Why, capture, site_text, text

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
_ENV_ON = ("1", "on", "true", "yes")  # mean "warn"
_ENV_OFF = ("0", "off", "false", "no")


class RaceModeTypeError(TypeError, ValueError):
    """``on_race`` is not a str at all: a TypeError, and a ValueError as well because that is
    what a bad mode raised before (``numpy.exceptions.AxisError`` is both in the same way)."""


_MAX_PENDING = 4096


class _Lane:
    """A vector clock with, per entry, how that knowledge arrived (for the "why").

    A committed lane's ``vc`` and ``via`` are never changed in place (a transaction changes
    copies and commit swaps them in; a host synchronisation joins into fresh dicts), so a
    snapshot of one (an awaited completion's clock) may share them, and ``seen`` (the host
    clock a stream lane last joined) tells by identity whether the host learnt anything since.
    """

    __slots__ = ("lane", "name", "ops", "seen", "vc", "via")

    def __init__(self, lane: int, name: str, ops: array[int] | None = None) -> None:
        self.lane = lane
        self.name = name
        self.vc: dict[int, int] = {}
        self.via: dict[int, Why] = {}
        self.seen: dict[int, int] | None = None
        # global op number of each tick of this lane (8 bytes each)
        self.ops: array[int] = array("q") if ops is None else ops

    def join(self, vc: dict[int, int], via: dict[int, Why], how: Why | None) -> None:
        mine, reasons = self.vc, self.via
        for lane, count in vc.items():
            if count > mine.get(lane, 0):
                mine[lane] = count
                reasons[lane] = how if how is not None else via.get(lane, "")

    def join_fresh(self, vc: dict[int, int], via: dict[int, Why], how: Why | None) -> None:
        """:meth:`join` into new dicts (the host lane: its old clock may be shared)."""
        self.vc, self.via = dict(self.vc), dict(self.via)
        self.join(vc, via, how)


@dataclass(slots=True)
class _Op:
    number: int
    label: str
    lane: _Lane
    tick: int
    site: Site | None  # the user's line, made text only for a report
    graph: ExecRaces | None = None  # a launch: which nodes touched a range, for reports
    batch: int = 0  # ops of one launch share it (its node groups): never checked together


# An access in shadow memory, and the op that made it: a plain (Access, _Op) pair (one per
# range of every op; building a tuple is one interpreter step, a named one a call).
_Rec = tuple[Access, _Op]


@dataclass(slots=True)
class _EventClock:
    vc: dict[int, int]
    via: dict[int, Why]
    where: Why  # "event #2 recorded on stream #3 at x.py:10"


# what _Checker._quick_plan planned: the lane and its new clock, reasons and host clock
# seen, the op, and the shadow lists to install: (memory, allocation base, list, its table)
_Quick = tuple[
    "_Lane",
    dict[int, int],
    dict[int, Why],
    "dict[int, int] | None",
    _Op,
    list[tuple["DeviceMemory", int, list[_Rec], Any]],
]


class _Table:
    """Values by handle (stream, event, executable), without keeping the handle alive.

    What ``weakref.WeakKeyDictionary`` does, at the cost of one dict lookup and one
    dereference per ``get`` (the checker looks a stream's lane up on every op): entries are
    keyed by ``id`` and hold a plain weak reference that must still be the key (an id is
    reused once its object is gone). Dead entries are dropped when the table has doubled
    since the last sweep, never from a weak-reference callback, so iteration is safe.
    """

    __slots__ = ("_entries", "_sweep_at")

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Any], Any]] = {}
        self._sweep_at = 64

    def get(self, key: Any) -> Any:
        entry = self._entries.get(id(key))
        if entry is not None and entry[0]() is key:
            return entry[1]
        return None

    def __setitem__(self, key: Any, value: Any) -> None:
        entries = self._entries
        entry = entries.get(id(key))
        ref = entry[0] if entry is not None and entry[0]() is key else weakref.ref(key)
        entries[id(key)] = (ref, value)
        if len(entries) >= self._sweep_at:
            for k, (r, _) in list(entries.items()):
                if r() is None:
                    del entries[k]
            self._sweep_at = max(64, 2 * len(entries))

    def items(self) -> list[tuple[Any, Any]]:
        """The live (key, value) pairs, as a list."""
        out = []
        for ref, value in list(self._entries.values()):
            key = ref()
            if key is not None:
                out.append((key, value))
        return out

    def __len__(self) -> int:
        return sum(1 for ref, _ in list(self._entries.values()) if ref() is not None)

    def __repr__(self) -> str:
        return f"<_Table entries={len(self._entries)}>"


class _State:
    """Clocks and shadow memory, shared by nested checks; dropped with the last one."""

    def __init__(self) -> None:
        self.host = _Lane(0, "host")
        self.lanes = _Table()  # Stream -> _Lane
        self.events = _Table()  # Event -> _EventClock
        # per awaitable signal: (it, the clock and reasons the host learns by awaiting it,
        # the op's number, the op's lane); entries the host already knows are dropped when
        # it synchronises (see _Checker.forget_known), so they do not pile up between awaits
        self.done: dict[int, tuple[Signal, dict[int, int], dict[int, Why], int, int]] = {}
        self.done_kept = 0  # len(done) after the last forget_known
        # per device memory (a reconfigured device reuses addresses), per allocation base
        self.shadow = _Table()  # DeviceMemory -> {allocation base: [_Rec]}
        # host-source copies in flight, per copy op: (op, bytes at enqueue, the API op, the
        # completion of the launch or enqueue), oldest first (a graph's copy op runs per launch)
        self.copies: dict[int, list[tuple[CopyOp, bytes, _Op, Signal]]] = {}
        # per executable: (version, summary, its host-source copy ops)
        self.host_copies = _Table()  # GraphExec -> (version, summary, host-source copy ops)
        # per executable: its last launch's clock, and the lanes of its node groups
        self.launches = _Table()  # GraphExec -> _EventClock
        self.group_lanes = _Table()  # GraphExec -> list[_Lane]
        self.next_lane = 1
        self.ops = 0
        self.seen: set[tuple[int, int]] = set()
        self.stamp = 0  # bumped by every change: a plan made before a change is made again
        # per device ordinal: (its memory, weakly; that memory's free count; single-range
        # eager footprints by what decides them -> (what the key's ids name, range, base);
        # that memory's shadow table)
        self.located: dict[int, tuple[weakref.ref[Any], int, dict[Any, Any], Any]] = {}


class _Txn:
    """What one API call would change, worked out before anything is committed.

    Lanes are copied on first touch, new lanes are not registered yet, shadow lists are
    rebuilt aside and op numbers are provisional. :meth:`_Checker.commit` installs it all and
    cannot fail; dropping a transaction leaves the checker exactly as it was. That is how
    ``on_race="raise"`` refuses a racing call before anything is enqueued.
    """

    __slots__ = (
        "copies",
        "created",
        "events",
        "groups",
        "keys",
        "launch",
        "next_lane",
        "number",
        "ops",
        "reports",
        "scratch",
        "st",
        "stamp",
        "tables",
    )

    def __init__(self, st: _State) -> None:
        self.st = st
        self.stamp = st.stamp
        self.number = st.ops
        self.next_lane = st.next_lane
        self.scratch: dict[int, tuple[_Lane, _Lane]] = {}  # id(working copy) -> (real, copy)
        self.copies: dict[int, _Lane] = {}  # id(real) -> working copy
        self.created: list[tuple[Stream, _Lane]] = []
        self.groups: tuple[Any, list[_Lane]] | None = None
        self.ops: list[_Op] = []
        # (id(memory), base) -> (memory, base, new records, the memory's shadow table if any)
        self.tables: dict[
            tuple[int, int], tuple[DeviceMemory, int, list[_Rec], dict[int, list[_Rec]] | None]
        ] = {}
        self.keys: set[tuple[int, int]] = set()
        self.reports: list[RaceReport] = []
        self.events: list[tuple[Event, _EventClock]] = []
        self.launch: tuple[Any, _EventClock] | None = None

    def work(self, real: _Lane) -> _Lane:
        """The copy of ``real`` this transaction changes (its op list stays shared)."""
        copy = self.copies.get(id(real))  # real lanes outlive the transaction: ids are stable
        if copy is not None:
            return copy
        copy = _Lane.__new__(_Lane)
        copy.lane, copy.name, copy.ops, copy.seen = real.lane, real.name, real.ops, real.seen
        copy.vc, copy.via = real.vc.copy(), real.via.copy()
        self.scratch[id(copy)] = (real, copy)
        self.copies[id(real)] = copy
        return copy

    def peek(self, real: _Lane) -> _Lane:
        """``real`` as this transaction sees it, without copying it."""
        return self.copies.get(id(real), real)

    def new_lane(self, name: str) -> _Lane:
        lane = _Lane(self.next_lane, name)
        self.next_lane += 1
        return lane

    def current(self) -> bool:
        """True while nothing changed the checker since this transaction was planned."""
        return self.st is _CHECKER.state and self.stamp == self.st.stamp


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


class RaceCheck:
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
        if on_race not in _MODES:
            raise ValueError(f"on_race must be one of {', '.join(_MODES)}, got {on_race!r}")
        self.on_race = str(on_race)
        self.reports: list[RaceReport] = []
        self.active = False

    def statistics(self) -> RaceCheckStatistics:
        """Counts of the checker's state: lanes, events, shadow ranges, eager footprints
        kept for reuse, reports (a record, as every ``statistics()`` returns)."""
        return RaceCheckStatistics(**_CHECKER.statistics(), reports=len(self.reports))

    def __repr__(self) -> str:
        return f"<RaceCheck on_race={self.on_race} reports={len(self.reports)}>"


class _Checker(observe.RuntimeObserver, hooks.Observer):
    """The single runtime observer; nested checks share its clocks.

    Each API call is planned as a :class:`_Txn` under the lock, refused in raise mode when
    it races, then committed after the runtime enqueued it (planned again if another thread
    changed the clocks meanwhile: the lock is never held across the runtime's own work).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.stack: list[RaceCheck] = []
        self.state = _State()
        self.device_hooked = False

    # -- activation ----------------------------------------------------------------------

    def push(self, check: RaceCheck) -> None:
        with self.lock:
            if not self.stack:
                self.state = _State()
                SITES.allocations.clear()  # a reconfigured device hands out old addresses again
                observe.install(self)
            self.stack.append(check)
            check.active = True

    def pop(self, check: RaceCheck) -> None:
        with self.lock:
            check.active = False
            if check in self.stack:
                self.stack.remove(check)
            if not self.stack:
                observe.uninstall(self)
                if self.device_hooked:
                    hooks.uninstall(self)
                    self.device_hooked = False
                self.state = _State()

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

    def lane_of(self, txn: _Txn, stream: Stream) -> _Lane:
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

    def _seen_lane(self, txn: _Txn, stream: Stream) -> _Lane | None:
        real = self.state.lanes.get(stream)
        if real is not None:
            return txn.peek(real)
        for known, lane in txn.created:
            if known is stream:
                return lane
        return None

    def prepare(self, txn: _Txn, stream: Stream) -> _Lane:
        """``stream``'s lane, joined with host order and the legacy default-stream rules."""
        st = self.state
        entry = st.lanes._entries.get(id(stream))  # st.lanes.get(stream), inlined: every op
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

    def advance(self, txn: _Txn, lane: _Lane, label: str, batch: int = 0) -> _Op:
        """The next op of ``lane``: its epoch, a provisional number."""
        txn.number += 1
        count = lane.vc.get(lane.lane, 0) + 1
        lane.vc[lane.lane] = count
        if count == 1:  # only this lane ticks its own entry: the reason never changes
            lane.via[lane.lane] = f"program order of {lane.name}"
        # capture(2): the frame above advance's caller; every caller is a checker method
        # that the runtime calls, so the user's frame is never nearer (two frames skipped)
        op = _Op(txn.number, label, lane, count, capture(2), batch=batch)
        txn.ops.append(op)
        return op

    def commit(self, txn: _Txn) -> None:
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
        st.ops = txn.number
        st.next_lane = txn.next_lane
        st.stamp += 1

    def refuse(self, txn: _Txn) -> None:
        """In raise mode, RaceError for a planned call that races (nothing was committed)."""
        check = self.target() if txn.reports else None
        if check is not None and check.on_race == "raise":
            check.reports.extend(txn.reports)
            raise RaceError(txn.reports)

    # -- shadow memory -------------------------------------------------------------------

    def access(
        self, txn: _Txn, op: _Op, accesses: list[Access], device: Device | None = None
    ) -> None:
        """Check ``accesses`` of ``op`` against shadow memory (``device``: the op's stream's,
        whose memory is then known current: no device-table lookup)."""
        st = self.state
        vc = op.lane.vc
        batch = op.batch
        lookup, lookup_in = ALLOCATIONS.lookup, ALLOCATIONS.lookup_in
        here, memory_here = (device.ordinal, device.memory) if device is not None else (-1, None)
        shadow_entries = st.shadow._entries
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
            recs: Sequence[_Rec]
            if held is not None:
                recs, table = held[2], held[3]
            else:
                entry = shadow_entries.get(id(memory))  # st.shadow.get(memory), inlined
                table = entry[1] if entry is not None and entry[0]() is memory else None
                recs = table.get(base, ()) if table is not None else ()
            keep: list[_Rec] = []
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

    def report(self, txn: _Txn, rec: _Rec, access: Access, op: _Op) -> None:
        old, first = rec
        key = (first.number, op.number)
        if key in self.state.seen or key in txn.keys:
            return
        txn.keys.add(key)
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
        txn.reports.append(
            RaceReport(
                kind_of(old.write, access.write),
                _site(first, old, lo, hi),
                _site(second, access, lo, hi),
                describe_allocation(access.device, lo if lo < hi else access.start),
                why,
                fix,
            )
        )

    def why(self, first: _Op, second: _Op) -> str:
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
            if check.active:
                return check
        return self.stack[-1] if self.stack else None

    def emit(self, made: RaceReport, *, may_raise: bool = True) -> None:
        check = self.target()
        if check is None:
            return
        check.reports.append(made)
        if check.on_race == "warn" or (check.on_race == "raise" and not may_raise):
            warnings.warn(str(made), RaceWarning, stacklevel=_caller_level())
        elif check.on_race == "raise":
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
                    if len(done) < _MAX_PENDING:
                        signal = completion._signal
                        done[id(signal)] = (signal, vc, via, number, lane.lane)
                    else:
                        self._remember_done(completion, lane, number)
                    if (
                        type(work) is not KernelParams  # the commonest op: one test
                        and isinstance(work, MemcpyParams)
                        and isinstance(work.src, np.ndarray)
                    ):
                        self._watch_copy(completion._program, work.src, work.nbytes, op)
                    return completion
                txn = self._plan_enqueue(stream, work)
            elif txn.st is not self.state or txn.stamp != txn.st.stamp:  # not txn.current()
                txn = self._plan_enqueue(stream, work)
            op = txn.ops[-1]
            self.commit(txn)
            self._remember_done(completion, op.lane, op.number)
            if isinstance(work, MemcpyParams) and isinstance(work.src, np.ndarray):
                self._watch_copy(completion._program, work.src, work.nbytes, op)
        if txn.reports:
            self.emit_all(txn.reports)
        return completion

    def _quick_plan(self, st: _State, stream: Stream, work: Any) -> _Quick | None:
        """The common eager op planned without a :class:`_Txn`: a non-blocking stream the
        checker knows, and no access that races. What :meth:`_plan_enqueue` then
        :meth:`commit` would do, in one pass and without copying what it does not change;
        nothing is changed here. None: plan it the general way (a report, a new stream, the
        legacy default-stream rules)."""
        if not stream.non_blocking:
            return None
        entry = st.lanes._entries.get(id(stream))  # st.lanes.get(stream), inlined
        if entry is None or entry[0]() is not stream:
            return None
        lane: _Lane = entry[1]
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
        label = _LABELS.get(
            work.kernel if kind is KernelParams else work.kind if kind is MemcpyParams else kind
        )
        if label is None:
            label = _work_label(work)
        # capture(5): the user's frame is never nearer. Skipped: this method, enqueue, the
        # stream's _observed (which alone calls enqueue), the private body calling it and
        # that body's caller (its public wrapper, see runtime.enqueue, or other runtime code)
        op = _Op(number, label, lane, tick, capture(5))
        shadow_entries = st.shadow._entries
        tables: list[tuple[DeviceMemory, int, list[_Rec], Any]] = []
        for access, memory, base, table in _located(work, stream.device, st):
            recs: Sequence[_Rec] = ()
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
            keep: list[_Rec] = []
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

    def _event_lane(self, st: _State, stream: Stream) -> _Lane | None:
        """``stream``'s lane joined with the host's clock, for a record or a wait on a
        non-blocking stream the checker knows (what :meth:`prepare` then :meth:`commit` do,
        installed at once: a lane's committed dicts are replaced, never changed); None: the
        general way."""
        if not stream.non_blocking:
            return None
        entry = st.lanes._entries.get(id(stream))  # st.lanes.get(stream), inlined
        if entry is None or entry[0]() is not stream:
            return None
        lane: _Lane = entry[1]
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

    def _plan_enqueue(self, stream: Stream, work: Any) -> _Txn:
        txn = _Txn(self.state)
        op = self.advance(txn, self.prepare(txn, stream), _work_label(work))
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
            txn = plan if isinstance(plan, _Txn) and plan.current() else None
            if txn is None:
                txn = self._plan_launch(graph_exec, stream, user)
            op = txn.ops[-1]
            self.commit(txn)
            self._remember_done(completion, op.lane, op.number)
            self._watch_graph_copies(graph_exec, op)
        self.emit_all(txn.reports)

    def _plan_launch(self, graph_exec: Any, stream: Stream, user: Stream | None) -> _Txn:
        st = self.state
        txn = _Txn(st)
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
        recorded, waited = races.events()
        if not recorded and not waited:
            op = self.advance(txn, lane, f"launch of {name}")
            op.graph = races
            self.access(txn, op, races.summary)
        else:
            self._launch_groups(txn, graph_exec, races, lane, name)
        txn.launch = (graph_exec, _EventClock(dict(lane.vc), dict(lane.via), name))
        if theirs is not None:  # later work on the user's stream follows the launch
            theirs.join(lane.vc, lane.via, f"{theirs.name} waits for the launch of {name}")
        return txn

    def _launch_groups(
        self, txn: _Txn, graph_exec: Any, races: ExecRaces, lane: _Lane, name: str
    ) -> _Op:
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
            txn.events.append((event, _EventClock(vc, via, where)))
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
        found = _allocation(Access(ptr.device, ptr.address, ptr.address + 1, True))
        if site is not None and found is not None:
            SITES.remember(SITES.allocations, (id(found[0]), ptr.address), site)
        if stream is not None:  # malloc_async: the memory is usable in stream order
            with self.lock:
                txn = _Txn(self.state)
                op = self.advance(txn, self.prepare(txn, stream), "malloc_async")
                self.access(txn, op, [Access(ptr.device, ptr.address, ptr.address + nbytes, True)])
                self.commit(txn)
            self.emit_all(txn.reports)

    def freeing(self, ptr: DevicePtr) -> None:
        with self.lock:
            st = self.state
            found = _allocation(Access(ptr.device, ptr.address, ptr.address + 1, True))
            if found is None:
                return
            memory, base, nbytes = found
            if base != ptr.address:
                return  # not an allocation's start: free() refuses it and changes nothing
            txn = _Txn(st)
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
            txn = _Txn(st)
            op = self.advance(txn, txn.work(st.host), what)
            self.access(txn, op, [Access(ptr.device, ptr.address, ptr.address + nbytes, write)])
            self.refuse(txn)  # raise mode: no view is handed out
            self.commit(txn)
        self.emit_all(txn.reports)

    def event_recorded(self, stream: Stream, event: Event) -> None:
        with self.lock:
            st = self.state
            known = self._event_lane(st, stream)
            if known is not None:  # the lane's committed dicts become the event's: shared
                # capture(3): called by the stream's private _record_event only, itself called
                # by its public wrapper (see runtime.enqueue) or other runtime code
                where = ("event #", event.hid.slot, " recorded on ", known.name, " at ", capture(3))
                st.events[event] = _EventClock(known.vc, known.via, where)
                st.stamp += 1
                return
            txn = _Txn(self.state)
            lane = self.prepare(txn, stream)  # a record is stream work: host order, legacy rules
            where = ("event #", event.hid.slot, " recorded on ", lane.name, " at ", capture())
            # the lane's dicts become the committed clock, never changed in place: shared
            txn.events.append((event, _EventClock(lane.vc, lane.via, where)))
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
            txn = _Txn(self.state)
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

    def event_synchronized(self, event: Event) -> None:
        with self.lock:
            st = self.state
            clock = st.events.get(event)
            if clock is not None:
                st.stamp += 1
                how = (clock.where, ", synchronised by the host at ", capture())
                st.host.join_fresh(clock.vc, clock.via, how)
                self.forget_known(st)

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

    def completion_awaited(self, signal: Signal) -> None:
        with self.lock:
            st = self.state
            entry = st.done.pop(id(signal), None)
            if entry is not None and entry[0] is signal:
                st.stamp += 1
                how = ("op #", entry[3], " awaited by the host at ", capture())
                st.host.join_fresh(entry[1], entry[2], how)

    def node_added(self, node: Any) -> None:
        site = user_site()
        if site is not None:
            SITES.remember(SITES.nodes, node.hid, site)

    # -- device hooks: host arrays changed while their copy is in flight -----------------

    def op_starting(self, program: Program, op: Any) -> Any:
        copies = self.state.copies
        entries = copies.get(id(op))
        entry = None
        if entries is not None:
            while entries and entries[0][3].value <= 0:
                del entries[0]  # its launch ended without running it (a failure before it)
            if entries and entries[0][0] is op:
                entry = entries.pop(0)
            if not entries:
                copies.pop(id(op), None)
        if not copies:  # nothing in flight to watch: give the device its plain loop back
            with self.lock:
                if self.device_hooked and not self.state.copies:
                    hooks.uninstall(self)
                    self.device_hooked = False
        if entry is not None and isinstance(op.src, np.ndarray):
            now = host_bytes(op.src, op.nbytes).tobytes()
            if now != entry[1]:
                with self.lock:
                    self._host_changed(entry[2], op)
        return None

    def _host_changed(self, op: _Op, copy: CopyOp) -> None:
        dst = copy.dst
        assert isinstance(dst, DevicePtr)
        access = Access(dst.device, dst.address, dst.address + copy.nbytes, True)
        host = RaceSite("a host write", "host", None, 0, copy.nbytes, "exact", True)
        made = RaceReport(
            "host-write-during-copy",
            _site(op, access),
            host,
            f"host source array of op #{op.number} ({copy.nbytes} B)",
            f"the host changed the source array after op #{op.number} was enqueued on "
            f"{op.lane.name} and before the copy ran",
            f"await the copy's completion (or {op.lane.name}.synchronize()) before writing "
            f"the source array again, or copy from a private buffer",
        )
        self.emit(made, may_raise=False)  # on the device's loop: raising would fail the copy

    def _watch_copy(self, program: Program | None, src: Any, nbytes: int, op: _Op) -> None:
        """An eager copy from a host array: its one-op program gets a :class:`_WatchedCopy`
        in place of the copy, which compares the source as it runs (no device hook)."""
        if program is None or program.started or len(program.ops) != 1 or not nbytes:
            return  # already ran: nothing can change under it any more
        copy = program.ops[0]
        if type(copy) is CopyOp and isinstance(copy.src, np.ndarray) and copy.nbytes:
            program.ops = (_WatchedCopy.watching(copy, op, self),)

    def _fingerprint(self, copy: CopyOp, src: Any, nbytes: int, op: _Op, done: Signal) -> None:
        st = self.state
        if len(st.copies) >= _MAX_PENDING:
            st.copies.clear()
        entry = (copy, host_bytes(src, nbytes).tobytes(), op, done)
        st.copies.setdefault(id(copy), []).append(entry)
        if not self.device_hooked:
            hooks.install(self)
            self.device_hooked = True

    def _watch_graph_copies(self, graph_exec: Any, op: _Op) -> None:
        """Fingerprint the host source arrays of a launch's memcpy nodes (compared when each
        copy runs). The executable's host-source copy ops are found once per version."""
        st = self.state
        version, races = graph_exec._version, graph_exec._races
        summary = races.summary if races is not None else None
        cached = st.host_copies.get(graph_exec)
        if cached is None or cached[0] is not version or cached[1] is not summary:
            found = [
                o
                for ops in version.strand_ops
                for o in ops
                if isinstance(o, CopyOp) and isinstance(o.src, np.ndarray) and o.nbytes
            ]
            cached = st.host_copies[graph_exec] = (version, summary, found)
        if cached[2]:
            done = graph_exec._last_done
            for copy in cached[2]:
                self._fingerprint(copy, copy.src, copy.nbytes, op, done)

    # -- completions ---------------------------------------------------------------------

    def _remember_done(self, completion: Completion, lane: _Lane, what: int) -> None:
        """The clock the host learns when it awaits ``completion`` (of op number ``what``)."""
        st = self.state
        done = st.done
        if len(done) >= _MAX_PENDING:  # drop what the host already knows
            host = st.host.vc
            for key, (_sig, vc, _, _, _) in list(done.items()):
                if all(host.get(k, 0) >= v for k, v in vc.items()):
                    del done[key]
            if len(done) >= _MAX_PENDING:
                for key in list(done)[: _MAX_PENDING // 2]:
                    del done[key]
        signal = completion._signal
        if lane.lane:  # committed, never changed in place (see _Lane): share, do not copy
            done[id(signal)] = (signal, lane.vc, lane.via, what, lane.lane)
        else:
            done[id(signal)] = (signal, dict(lane.vc), dict(lane.via), what, lane.lane)

    def forget_known(self, st: _State) -> None:
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


class _WatchedCopy(CopyOp):
    """An eager host-to-device copy that checks, as it runs, that its host source still
    holds the bytes it held when the copy was enqueued (a host write in between is a race).

    Swapped into the copy's own program before it starts, so no device hook (and none of
    its cost on every other program) is needed; it is a :class:`CopyOp` to everything else.
    """

    __slots__ = ("before", "checker", "origin")

    before: bytes
    checker: _Checker
    origin: _Op

    @classmethod
    def watching(cls, copy: CopyOp, origin: _Op, checker: _Checker) -> _WatchedCopy:
        """``copy`` (from a host array), with its source's bytes now."""
        watched = cls.__new__(cls)  # the copy's fields as they are: no re-validation
        watched.dst, watched.src, watched.nbytes = copy.dst, copy.src, copy.nbytes
        watched.kind, watched.resolve, watched.cost_ns = copy.kind, copy.resolve, copy.cost_ns
        watched.before, watched.origin, watched.checker = _source(copy), origin, checker
        return watched

    def run(self, program: Program) -> None:
        if _source(self) != self.before:
            with self.checker.lock:
                self.checker._host_changed(self.origin, self)
        CopyOp.run(self, program)


def _source(copy: CopyOp) -> bytes:
    """The bytes ``copy`` reads from its host array (all of it, the common case, is faster)."""
    src = copy.src
    assert isinstance(src, np.ndarray)
    if src.nbytes == copy.nbytes and src.flags.c_contiguous:
        return src.tobytes()
    return host_bytes(src, copy.nbytes).tobytes()


def stream_name(lane: _Lane | None) -> str:
    return lane.name if lane is not None else "a stream"


def _allocation(access: Access) -> tuple[DeviceMemory, int, int] | None:
    """(memory, base, nbytes) of the allocation holding ``access.start`` now, or None."""
    return ALLOCATIONS.lookup(access.device, access.start)


_new_access = tuple.__new__  # an Access from its six fields, skipping the generated __new__


def _located(work: Any, device: Device, st: _State) -> list[tuple[Access, DeviceMemory, int, Any]]:
    """An eager op's footprint, each range with the (memory, base) of the allocation under its
    start, and that memory's shadow table when it is the device's (else None: look it up);
    ranges outside every allocation are left out (shadow memory has nothing for them).

    What :func:`footprint` and one allocation lookup per range give. The common ops (a kernel
    with one pointer parameter reaching the end of its allocation, a copy between the host and
    the device, a one-row fill) touch one range of the stream's own device, decided by the
    kernel's pointer fields and the pointer, or by the kind, address and size: those are
    kept in ``st.located`` (per device) and found again by a dict lookup. An entry
    holds only while the device's memory is the same object and has freed nothing since
    (an allocation's extent changes only by a free; addresses are never handed out twice by
    one memory), and only ranges found inside an allocation are kept (a later allocation
    may cover a miss). The key's objects are kept in the entry and compared by identity, so
    a re-declared kernel never reuses a dead one's entry."""
    kind = type(work)
    here, memory_here = device.ordinal, device.memory
    entry = st.located.get(here)
    if entry is None or entry[0]() is not memory_here or entry[1] != memory_here.frees:
        table = st.shadow.get(memory_here)  # made now (empty) if new: one per memory, kept
        if table is None:
            table = st.shadow[memory_here] = {}
        entry = st.located[here] = (weakref.ref(memory_here), memory_here.frees, {}, table)
    memo: dict[Any, Any] = entry[2]
    table_here = entry[3]
    owner: Any
    if kind is KernelParams:
        reaches = owner = work.kernel.layout.pointer_reaches
        if reaches is not None and len(reaches) == 1:
            index, write, atomic = reaches[0]
            ptr = work.args[index]
            if type(ptr) is DevicePtr and ptr.device == here:
                key: Any = (id(reaches), ptr.address)
                known = memo.get(key)
                if known is not None and known[0] is owner:
                    return [(known[1], memory_here, known[2], table_here)]
                if not ptr.address:
                    return []
                found = ALLOCATIONS.lookup_in(here, memory_here, ptr.address)
                if found is None:
                    return []
                address = ptr.address
                access = _new_access(
                    Access, (here, address, found[1] + found[2], write, atomic, "conservative")
                )
                if len(memo) >= _MAX_PENDING:
                    memo.clear()
                memo[key] = (owner, access, found[1])
                return [(access, memory_here, found[1], table_here)]
    elif kind is MemcpyParams or kind is MemsetParams:
        owner = kind
        if kind is MemcpyParams:
            dst, src, nbytes = work.dst, work.src, work.nbytes
            if type(dst) is DevicePtr and type(src) is not DevicePtr:
                ptr, write = dst, True  # to the device
            elif type(src) is DevicePtr and type(dst) is not DevicePtr:
                ptr, write = src, False  # from the device
            else:
                ptr = None
        else:
            ptr, write = work.dst, True
            nbytes = work.width * work.element_size if work.height == 1 else 0
        if ptr is not None and nbytes and ptr.device == here:
            key = (id(kind), ptr.address, nbytes, write)
            known = memo.get(key)
            if known is not None and known[0] is owner:
                return [(known[1], memory_here, known[2], table_here)]
            accesses = footprint(work, device)
            if len(accesses) == 1 and accesses[0].start == ptr.address:
                found = ALLOCATIONS.lookup_in(here, memory_here, ptr.address)
                if found is None:
                    return []
                if len(memo) >= _MAX_PENDING:
                    memo.clear()
                memo[key] = (owner, accesses[0], found[1])
                return [(accesses[0], memory_here, found[1], table_here)]
    out: list[tuple[Access, DeviceMemory, int, Any]] = []
    for access in footprint(work, device):
        if access.device == here:
            found = ALLOCATIONS.lookup_in(here, memory_here, access.start)
            if found is not None:
                out.append((access, memory_here, found[1], table_here))
        else:
            found = ALLOCATIONS.lookup(access.device, access.start)
            if found is not None:
                out.append((access, found[0], found[1], None))
    return out


def _site(op: _Op, access: Access, lo: int = 0, hi: int = 0) -> RaceSite:
    label = f"op #{op.number} {op.label}"
    if op.graph is not None:
        part = Access(access.device, lo, hi, access.write) if lo < hi else access
        nodes = op.graph.nodes_touching(part)
        if nodes:
            more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
            label += f" ({', '.join(nodes[:3])}{more})"
    return RaceSite(
        label,
        op.lane.name,
        site_text(op.site),
        access.start,
        access.end,
        access.precision,
        access.write,
    )


# label by kernel, copy kind or params type (an enum's .name alone costs half a microsecond)
_LABELS: dict[Any, str] = {}


def _work_label(work: Any) -> str:
    kind = type(work)
    key = work.kernel if kind is KernelParams else work.kind if kind is MemcpyParams else kind
    label = _LABELS.get(key)
    if label is None:
        if isinstance(work, KernelParams):
            label = f"Kernel {work.kernel.name!r}"
        elif isinstance(work, MemcpyParams):
            label = f"Memcpy {work.kind.name}"
        elif isinstance(work, FreeOp):
            label = "free_async"
        elif isinstance(work, HostParams):
            label = "host function"
        else:
            label = kind.__name__.replace("Params", "")
        specific = isinstance(work, KernelParams | MemcpyParams)  # a subclass: not by type
        if kind in (KernelParams, MemcpyParams) or not specific:
            if len(_LABELS) >= _MAX_PENDING:
                _LABELS.clear()
            _LABELS[key] = label
    return label


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


def race_check(on_race: str = "raise") -> AbstractContextManager[RaceCheck]:
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


def active() -> bool:
    """True while any race check (a ``with`` block or the environment switch) is on."""
    return bool(_CHECKER.stack)
