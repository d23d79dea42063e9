"""The race checker's state: vector-clock lanes, op records, event clocks, shadow memory and
the transaction each API call is planned in.

Plain records with no behaviour of the checker's own: :mod:`ahipgraph.tools.race` decides what
each call does to them. They live apart so that what the checker *knows* (this module) reads
separately from what it *does* (the observer), and from where accesses are
(:mod:`ahipgraph.tools.race_footprints`).
"""

from __future__ import annotations

import weakref
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exec.footprints import Access
from ..exec.race_reports import RaceReport
from ..exec.races import ExecRaces
from .race_sites import Site, Why

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..device.ops import CopyOp
    from ..device.signal import Signal
    from ..exec.conditional import ConditionalOp
    from ..runtime.event import Event
    from ..runtime.stream import Stream

__all__ = [
    "MAX_PENDING",
    "AccessRecord",
    "CheckerState",
    "EventClock",
    "HandleTable",
    "HostOps",
    "Lane",
    "OpRecord",
    "ParkedRace",
    "PendingWait",
    "QuickPlan",
    "Released",
    "Transaction",
]

MAX_PENDING = 4096


class Lane:
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
class OpRecord:
    number: int
    label: str
    lane: Lane
    tick: int
    site: Site | None  # the user's line, made text only for a report
    graph: ExecRaces | None = None  # a launch: which nodes touched a range, for reports
    batch: int = 0  # ops of one launch share it (its node groups): never checked together
    # the unreleased waits (race_clocks.PendingWait) this op comes after, when it was planned
    waits: tuple[Any, ...] = ()


# An access in shadow memory, and the op that made it: a plain (Access, OpRecord) pair (one per
# range of every op; building a tuple is one interpreter step, a named one a call).
AccessRecord = tuple[Access, OpRecord]


@dataclass(slots=True)
class EventClock:
    vc: dict[int, int]
    via: dict[int, Why]
    where: Why  # "event #2 recorded on stream #3 at x.py:10"


@dataclass(slots=True, eq=False)
class PendingWait:
    """A ``wait_value_*`` enqueued and not yet released: every op whose clock holds
    ``tick`` or more of lane ``lane`` comes after it, in an order the checker learns only
    when the wait is released (by which write: see ``race._Checker.memop_done``)."""

    memop: Any  # the StreamMemOp, by identity
    op: OpRecord
    lane: int
    tick: int
    # the wait's completion (a launch's, for a captured wait; None while the launch is being
    # planned): reached with no release, the wait failed
    done: Signal | None
    resolved: bool = False

    def pending(self) -> bool:
        """Not released yet, and not ended (failed: its word freed, its loop closed)."""
        return not self.resolved and (self.done is None or self.done._value > 0)


@dataclass(slots=True, eq=False)
class ParkedRace:
    """Two unordered accesses, one of them by an op after an unreleased wait: decided when
    the waits are released. ``guards`` pairs each such wait with the op of the pair that is
    not after it: the pair is ordered if the write that releases the wait follows that op."""

    old: Access
    first: OpRecord
    access: Access
    second: OpRecord
    guards: list[tuple[PendingWait, OpRecord]]


# what the checker's one-pass plan (race._Checker._quick_plan) made: the lane and its new
# clock, reasons and host clock seen, the op, and the shadow lists to install: (memory,
# allocation base, list, its table)
QuickPlan = tuple[
    "Lane",
    dict[int, int],
    dict[int, Why],
    "dict[int, int] | None",
    OpRecord,
    list[tuple["DeviceMemory", int, list[AccessRecord], Any]],
]


# per executable, what the checker watches in it (race._Checker._host_ops): its version and
# race summary then, its copies from or into host arrays, conditional nodes copying into host
# arrays and captured memory operations' host ops, and its captured waits (StreamMemOp)
HostOps = tuple[Any, Any, list[Any], tuple[Any, ...]]

# the clock a released wait takes: (clock, reasons, label of the write that released it)
Released = tuple[dict[int, int], dict[int, Why], str]


class HandleTable:
    """Values by handle (stream, event, executable), without keeping the handle alive.

    What ``weakref.WeakKeyDictionary`` does, at the cost of one dict lookup and one
    dereference per ``get`` (the checker looks a stream's lane up on every op): entries are
    keyed by ``id`` and hold a plain weak reference that must still be the key (an id is
    reused once its object is gone). Dead entries are dropped when the table has doubled
    since the last sweep, never from a weak-reference callback, so iteration is safe.

    ``entries`` (id -> (weak reference, value)) is read directly where the checker inlines
    :meth:`get` on its per-op paths.
    """

    __slots__ = ("_sweep_at", "entries")

    def __init__(self) -> None:
        self.entries: dict[int, tuple[weakref.ref[Any], Any]] = {}
        self._sweep_at = 64

    def get(self, key: Any) -> Any:
        entry = self.entries.get(id(key))
        if entry is not None and entry[0]() is key:
            return entry[1]
        return None

    def __setitem__(self, key: Any, value: Any) -> None:
        entries = self.entries
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
        for ref, value in list(self.entries.values()):
            key = ref()
            if key is not None:
                out.append((key, value))
        return out

    def __len__(self) -> int:
        return sum(1 for ref, _ in list(self.entries.values()) if ref() is not None)

    def __repr__(self) -> str:
        return f"<HandleTable entries={len(self.entries)}>"


class CheckerState:
    """Clocks and shadow memory, shared by nested checks; dropped with the last one."""

    def __init__(self) -> None:
        self.host = Lane(0, "host")
        self.lanes = HandleTable()  # Stream -> Lane
        self.events = HandleTable()  # Event -> EventClock
        # per awaitable signal: (it, the clock and reasons the host learns by awaiting it,
        # the op's number, the op's lane); entries the host already knows are dropped when
        # it synchronises (see race._Checker.forget_known), so they do not pile up between awaits
        self.done: dict[int, tuple[Signal, dict[int, int], dict[int, Why], int, int]] = {}
        self.done_kept = 0  # len(done) after the last forget_known
        # per device memory (a reconfigured device reuses addresses), per allocation base
        self.shadow = HandleTable()  # DeviceMemory -> {allocation base: [AccessRecord]}
        # host-source copies in flight, per copy op: (op, bytes at enqueue, the API op, the
        # completion of the launch or enqueue), oldest first (a graph's copy op runs per launch)
        # (the bytes are None once a device-to-host copy wrote the array: see race.py); a
        # conditional node whose bodies copy into host arrays has entries too, bytes None
        self.copies: dict[
            int, list[tuple[CopyOp | ConditionalOp, bytes | None, OpRecord, Signal]]
        ] = {}
        # eager host-source copies in flight (race._WatchedCopy), until each runs
        self.watched: set[Any] = set()
        # per executable: (version, summary, its copy ops from or into host arrays)
        self.host_copies = HandleTable()  # GraphExec -> HostOps
        # per executable: its last launch's clock, and the lanes of its node groups
        self.launches = HandleTable()  # GraphExec -> EventClock
        self.group_lanes = HandleTable()  # GraphExec -> list[Lane]
        self.next_lane = 1
        self.ops = 0
        self.seen: set[tuple[int, int]] = set()
        self.stamp = 0  # bumped by every change: a plan made before a change is made again
        # per device ordinal: (its memory, weakly; that memory's free count; single-range
        # eager footprints by what decides them -> (what the key's ids name, range, base);
        # that memory's shadow table)
        self.located: dict[int, tuple[weakref.ref[Any], int, dict[Any, Any], Any]] = {}
        # stream memory operations (see race._Checker.memop_done): the waits not yet released,
        # in enqueue order; the races parked on them; each write_value's clock at enqueue
        # until it runs (id(memop) -> (memop, [(clock, reasons, label)]): a captured one's, per
        # launch); per word (device, address), the last write_value that ran there:
        # (sequence, memop, its allocation's buffer, weakly, clock, reasons, label); recent
        # host writes through views while a wait is pending: (sequence, device, start, end,
        # clock, reasons, label); waits released before the checker registered them
        # (id(memop) -> (memop, what released it)); reports of races found as a wait was
        # released, made on the device's loop, emitted when the host next synchronises
        self.waits: list[PendingWait] = []
        self.parked: list[ParkedRace] = []
        self.memop_writes: dict[int, tuple[Any, list[Released]]] = {}
        self.words: dict[
            tuple[int, int], tuple[int, Any, weakref.ref[Any], dict[int, int], dict[int, Why], str]
        ] = {}
        self.host_writes: list[tuple[int, int, int, int, dict[int, int], dict[int, Why], str]] = []
        self.released_early: dict[int, tuple[Any, Released | None]] = {}
        self.word_sequence = 0
        self.late: list[RaceReport] = []


class Transaction:
    """What one API call would change, worked out before anything is committed.

    Lanes are copied on first touch, new lanes are not registered yet, shadow lists are
    rebuilt aside and op numbers are provisional. The checker's ``commit`` installs it all and
    cannot fail; dropping a transaction leaves the checker exactly as it was. That is how
    ``on_race="raise"`` refuses a racing call before anything is enqueued.
    """

    __slots__ = (
        "copies",
        "created",
        "events",
        "graph_waits",
        "groups",
        "host_ops",
        "keys",
        "launch",
        "next_lane",
        "number",
        "ops",
        "parked",
        "reports",
        "scratch",
        "st",
        "stamp",
        "tables",
    )

    def __init__(self, st: CheckerState) -> None:
        self.st = st
        self.stamp = st.stamp
        self.number = st.ops
        self.next_lane = st.next_lane
        self.scratch: dict[int, tuple[Lane, Lane]] = {}  # id(working copy) -> (real, copy)
        self.copies: dict[int, Lane] = {}  # id(real) -> working copy
        self.created: list[tuple[Stream, Lane]] = []
        self.groups: tuple[Any, list[Lane]] | None = None
        self.ops: list[OpRecord] = []
        # (id(memory), base) -> (memory, base, new records, the memory's shadow table if any)
        self.tables: dict[
            tuple[int, int],
            tuple[DeviceMemory, int, list[AccessRecord], dict[int, list[AccessRecord]] | None],
        ] = {}
        self.keys: set[tuple[int, int]] = set()
        self.reports: list[RaceReport] = []
        self.events: list[tuple[Event, EventClock]] = []
        self.launch: tuple[Any, EventClock] | None = None
        self.parked: list[ParkedRace] | None = None  # races left to decide (see ParkedRace)
        self.graph_waits: Sequence[Any] = ()  # a launch's captured waits (StreamMemOp)
        self.host_ops: HostOps | None = None  # a launch's executable's (see race._host_ops)

    def work(self, real: Lane) -> Lane:
        """The copy of ``real`` this transaction changes (its op list stays shared)."""
        copy = self.copies.get(id(real))  # real lanes outlive the transaction: ids are stable
        if copy is not None:
            return copy
        copy = Lane.__new__(Lane)
        copy.lane, copy.name, copy.ops, copy.seen = real.lane, real.name, real.ops, real.seen
        copy.vc, copy.via = real.vc.copy(), real.via.copy()
        self.scratch[id(copy)] = (real, copy)
        self.copies[id(real)] = copy
        return copy

    def peek(self, real: Lane) -> Lane:
        """``real`` as this transaction sees it, without copying it."""
        return self.copies.get(id(real), real)

    def new_lane(self, name: str) -> Lane:
        lane = Lane(self.next_lane, name)
        self.next_lane += 1
        return lane

    def current(self, state: CheckerState | None) -> bool:
        """True while nothing changed the checker (whose state is now ``state``) since this
        transaction was planned."""
        return self.st is state and self.stamp == self.st.stamp
