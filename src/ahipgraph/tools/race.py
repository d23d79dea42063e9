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

Host source arrays of asynchronous host-to-device copies are fingerprinted at enqueue and
compared when the copy runs (a device hook), so a host write during the flight is reported.
Not modelled: host reads of ``device.view`` arrays, and host callbacks' own accesses.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device import hooks
from ..device.ops import CopyOp, host_bytes
from ..device.pointer import DevicePtr
from ..exec.races import (
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
from ..runtime.device import get_device
from ..runtime.params import HostParams, KernelParams, MemcpyParams
from ..runtime.stream_memory import FreeOp

if TYPE_CHECKING:
    from ..device.memory import DeviceMemory
    from ..device.program import Program
    from ..device.signal import Signal
    from ..runtime.completion import Completion
    from ..runtime.device import Device
    from ..runtime.event import Event
    from ..runtime.stream import Stream

__all__ = ["ENV_VAR", "RaceCheck", "race_check"]

ENV_VAR = "AHIPGRAPH_RACE_CHECK"
_MODES = ("raise", "warn", "collect")
_MAX_PENDING = 4096


class _Lane:
    """A vector clock with, per entry, how that knowledge arrived (for the "why")."""

    __slots__ = ("lane", "name", "ops", "vc", "via")

    def __init__(self, lane: int, name: str) -> None:
        self.lane = lane
        self.name = name
        self.vc: dict[int, int] = {}
        self.via: dict[int, str] = {}
        self.ops = array("q")  # global op number of each tick of this lane (8 bytes each)

    def join(self, vc: dict[int, int], via: dict[int, str], how: str | None) -> None:
        mine, reasons = self.vc, self.via
        for lane, count in vc.items():
            if count > mine.get(lane, 0):
                mine[lane] = count
                reasons[lane] = how if how is not None else via.get(lane, "")


@dataclass(slots=True)
class _Op:
    number: int
    label: str
    lane: _Lane
    tick: int
    site: str | None
    graph: ExecRaces | None = None  # a launch: which nodes touched a range, for reports


@dataclass(slots=True)
class _Rec:
    access: Access
    op: _Op


@dataclass(slots=True)
class _EventClock:
    vc: dict[int, int]
    via: dict[int, str]
    where: str  # "event #2 recorded on stream #3 at x.py:10"


class _State:
    """Clocks and shadow memory, shared by nested checks; dropped with the last one."""

    def __init__(self) -> None:
        self.host = _Lane(0, "host")
        self.lanes: weakref.WeakKeyDictionary[Stream, _Lane] = weakref.WeakKeyDictionary()
        self.events: weakref.WeakKeyDictionary[Event, _EventClock] = weakref.WeakKeyDictionary()
        self.done: dict[int, tuple[Signal, dict[int, int], dict[int, str], str]] = {}
        # per device memory (a reconfigured device reuses addresses), per allocation base
        self.shadow: weakref.WeakKeyDictionary[DeviceMemory, dict[int, list[_Rec]]] = (
            weakref.WeakKeyDictionary()
        )
        self.copies: dict[int, tuple[CopyOp, bytes, _Op]] = {}
        # per executable: its last launch's clock, and the lanes of its node groups
        self.launches: weakref.WeakKeyDictionary[Any, _EventClock] = weakref.WeakKeyDictionary()
        self.group_lanes: weakref.WeakKeyDictionary[Any, list[_Lane]] = weakref.WeakKeyDictionary()
        self.next_lane = 1
        self.ops = 0
        self.seen: set[tuple[int, int]] = set()


class RaceCheck:
    """What ``ahg.race_check()`` yields: the reports found inside its block.

    Attributes:
        on_race: "raise" (RaceError at the racing call, after it was enqueued), "warn"
            (a :class:`RaceWarning` each) or "collect" (only :attr:`reports`).
        reports: every :class:`RaceReport` found while this check was the innermost.
    """

    def __init__(self, on_race: str) -> None:
        if on_race not in _MODES:
            raise ValueError(f"on_race must be one of {', '.join(_MODES)}, got {on_race!r}")
        self.on_race = on_race
        self.reports: list[RaceReport] = []

    def statistics(self) -> dict[str, int]:
        """Counts of the checker's state: lanes, events, shadow ranges, reports."""
        return _CHECKER.statistics() | {"reports": len(self.reports)}

    def __repr__(self) -> str:
        return f"<RaceCheck on_race={self.on_race} reports={len(self.reports)}>"


class _Checker(observe.RuntimeObserver, hooks.Observer):
    """The single runtime observer; nested checks share its clocks."""

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

    def pop(self, check: RaceCheck) -> None:
        with self.lock:
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
                    len(r) for table in st.shadow.values() for r in table.values()
                ),
                "ops": st.ops,
            }

    # -- lanes ---------------------------------------------------------------------------

    def lane(self, stream: Stream) -> _Lane:
        st = self.state
        lane = st.lanes.get(stream)
        if lane is None:
            name = "null stream" if stream.is_null else f"stream #{stream.hid.slot}"
            if stream.device.ordinal:
                name += f" (device {stream.device.ordinal})"
            lane = _Lane(st.next_lane, name)
            st.next_lane += 1
            st.lanes[stream] = lane
        return lane

    def tick(self, stream: Stream, label: str) -> _Op:
        """Order the next op of ``stream`` after what the API promises; give it its epoch."""
        return self._advance(self.prepare(stream), label)

    def prepare(self, stream: Stream) -> _Lane:
        """``stream``'s lane, joined with host order and the legacy default-stream rules."""
        st = self.state
        lane = self.lane(stream)
        lane.join(st.host.vc, st.host.via, None)
        if not stream.non_blocking:  # legacy default-stream rules
            device = stream.device
            if stream.is_null:
                for other in list(device.streams):
                    if other is not stream and not other.non_blocking:
                        o = st.lanes.get(other)
                        if o is not None:
                            lane.join(o.vc, o.via, f"the null stream waits for {o.name}")
            else:
                null = device._null_stream
                n = st.lanes.get(null) if null is not None else None
                if n is not None:
                    lane.join(n.vc, n.via, f"{lane.name} (blocking) waits for the null stream")
        return lane

    def _advance(self, lane: _Lane, label: str) -> _Op:
        st = self.state
        st.ops += 1
        count = lane.vc.get(lane.lane, 0) + 1
        lane.vc[lane.lane] = count
        lane.via[lane.lane] = f"program order of {lane.name}"
        lane.ops.append(st.ops)
        return _Op(st.ops, label, lane, count, user_site())

    # -- shadow memory -------------------------------------------------------------------

    def access(self, op: _Op, accesses: list[Access]) -> None:
        st = self.state
        vc = op.lane.vc
        for access in accesses:
            found = _allocation(access)
            if found is None:
                continue
            table = st.shadow.get(found[0])
            if table is None:
                table = st.shadow[found[0]] = {}
            recs = table.get(found[1], [])
            keep: list[_Rec] = []
            for rec in recs:
                old = rec.access
                overlap = old.start < access.end and access.start < old.end
                ordered = vc.get(rec.op.lane.lane, 0) >= rec.op.tick
                if overlap and not ordered and old.conflicts(access):
                    self.report(rec, access, op)
                covered = access.start <= old.start and old.end <= access.end
                if covered and ordered and (access.write or not old.write):
                    continue  # superseded: anything racing it races the new access too
                keep.append(rec)
            keep.append(_Rec(access, op))
            table[found[1]] = keep

    def report(self, rec: _Rec, access: Access, op: _Op) -> None:
        st = self.state
        key = (rec.op.number, op.number)
        if key in st.seen:
            return
        st.seen.add(key)
        first, second = rec.op, op
        lo, hi = max(rec.access.start, access.start), min(rec.access.end, access.end)
        why = self.why(first, second)
        if second.lane is st.host:
            fix = (
                f"await the first op's completion, or {first.lane.name}.synchronize(), before "
                f"{second.label} at {second.site}"
            )
        else:
            fix = (
                f"e = device.create_event(); await <{first.lane.name}>.record_event(e) after "
                f"op #{first.number} ({first.site}); await <{second.lane.name}>.wait_event(e) "
                f"before op #{second.number} ({second.site})"
            )
        made = RaceReport(
            kind_of(rec.access.write, access.write),
            _site(first, rec.access, lo, hi),
            _site(second, access, lo, hi),
            describe_allocation(access.device, lo if lo < hi else access.start),
            why,
            fix,
        )
        self.emit(made)

    def why(self, first: _Op, second: _Op) -> str:
        knows = second.lane.vc.get(first.lane.lane, 0)
        a, b = first.lane.name, second.lane.name
        if knows == 0:
            return (
                f"{b} has no ordering with {a} at all (no event wait, host synchronisation or "
                f"legacy default-stream rule links them); op #{first.number} is on {a}"
            )
        upto = first.lane.ops[knows - 1]
        via = second.lane.via.get(first.lane.lane) or "an earlier join"
        return f"{b} knows {a} only up to op #{upto} ({via}); op #{first.number} is later"

    def emit(self, made: RaceReport, *, may_raise: bool = True) -> None:
        check = self.stack[-1] if self.stack else None
        if check is None:
            return
        check.reports.append(made)
        if check.on_race == "warn" or (check.on_race == "raise" and not may_raise):
            warnings.warn(str(made), RaceWarning, stacklevel=4)
        elif check.on_race == "raise":
            raise RaceError([made])

    # -- observer callbacks (the runtime calls these in API order) -----------------------

    def enqueued(self, stream: Stream, work: Any, completion: Completion) -> None:
        with self.lock:
            op = self.tick(stream, _work_label(work))
            self._remember_done(completion, op.lane, f"op #{op.number}")
            if isinstance(work, HostParams):
                return
            if isinstance(work, MemcpyParams) and isinstance(work.src, np.ndarray):
                self._watch_copy(work, completion, op)
            self.access(op, footprint(work))

    def launched(self, graph_exec: Any, stream: Stream, completion: Completion) -> None:
        with self.lock:
            st = self.state
            races = graph_exec._races
            if races is None:
                races = graph_exec._races = ExecRaces(graph_exec._graph, None, None, check=False)
            name = f"graph exec #{graph_exec.hid.slot}"
            lane = self.prepare(stream)
            previous = st.launches.get(graph_exec)
            if previous is not None:  # a launch starts after the executable's previous one
                lane.join(previous.vc, previous.via, f"the previous launch of {name}")
            recorded, waited = races.events()
            if not recorded and not waited:
                op = self._advance(lane, f"launch of {name}")
                op.graph = races
                self.access(op, races.summary)
            else:
                op = self._launch_groups(graph_exec, races, lane, name)
            self._remember_done(completion, op.lane, f"op #{op.number}")
            st.launches[graph_exec] = _EventClock(dict(lane.vc), dict(lane.via), name)

    def _launch_groups(self, graph_exec: Any, races: ExecRaces, lane: _Lane, name: str) -> _Op:
        """A launch with event nodes: each group of nodes (same records after them, same
        waits before them) runs on a lane of its own, so an event recorded mid-graph covers
        only the nodes before it, and a wait orders only the nodes after it."""
        st = self.state
        groups, records = races.groups()
        lanes = st.group_lanes.get(graph_exec)
        if lanes is None or len(lanes) != len(groups):  # new, or its nodes changed
            lanes = st.group_lanes[graph_exec] = []
            for _ in groups:
                lanes.append(_Lane(st.next_lane, f"{lane.name} ({name}, a node group)"))
                st.next_lane += 1
        site = user_site()
        for group, (waits, summary) in zip(lanes, groups, strict=True):
            group.join(lane.vc, lane.via, None)
            for event in waits:
                clock = st.events.get(event)
                if clock is not None:
                    group.join(clock.vc, clock.via, f"graph wait node on {clock.where}")
            op = self._advance(group, f"launch of {name}")
            op.site = site
            op.graph = races
            self.access(op, summary)
        pre_vc, pre_via = dict(lane.vc), dict(lane.via)
        for event, covering in records:
            vc, via = dict(pre_vc), dict(pre_via)
            for index in covering:
                group = lanes[index]
                for k, v in group.vc.items():
                    if v > vc.get(k, 0):
                        vc[k], via[k] = v, group.via.get(k, "")
            where = f"event #{event.hid.slot} recorded by {name} on {lane.name} at {site}"
            st.events[event] = _EventClock(vc, via, where)
        for group in lanes:  # later work on the stream follows the whole launch
            lane.join(group.vc, group.via, f"the end of a launch of {name}")
        op = self._advance(lane, f"launch of {name}")
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
                op = self.tick(stream, "malloc_async")
                self.access(op, [Access(ptr.device, ptr.address, ptr.address + nbytes, True)])

    def freeing(self, ptr: DevicePtr) -> None:
        with self.lock:
            st = self.state
            op = self._advance(st.host, "free()")
            found = _allocation(Access(ptr.device, ptr.address, ptr.address + 1, True))
            if found is None:
                return
            memory, base, nbytes = found
            if base != ptr.address:
                return  # not an allocation's start: free() refuses it and changes nothing
            self.access(op, [Access(ptr.device, base, base + nbytes, True)])
            st.shadow.get(memory, {}).pop(base, None)
            SITES.allocations.pop((id(memory), base), None)

    def event_recorded(self, stream: Stream, event: Event) -> None:
        with self.lock:
            lane = self.prepare(stream)  # a record is stream work: host order, legacy rules
            where = f"event #{event.hid.slot} recorded on {lane.name} at {user_site()}"
            self.state.events[event] = _EventClock(dict(lane.vc), dict(lane.via), where)

    def event_waited(self, stream: Stream, event: Event) -> None:
        with self.lock:
            clock = self.state.events.get(event)
            if clock is None:
                return  # never recorded: the wait is a no-op, as in HIP
            lane = self.prepare(stream)  # a wait is stream work: host order, legacy rules
            lane.join(clock.vc, clock.via, f"{clock.where}, waited at {user_site()}")

    def stream_synchronized(self, stream: Stream) -> None:
        with self.lock:
            st = self.state
            lane = st.lanes.get(stream)
            how = f"{stream_name(lane)} synchronised by the host at {user_site()}"
            if lane is not None:
                st.host.join(lane.vc, lane.via, how)
            if stream.is_null:  # the null stream's sync covers blocking streams' earlier work
                for other in list(stream.device.streams):
                    o = st.lanes.get(other)
                    if o is not None and not other.non_blocking:
                        st.host.join(o.vc, o.via, how)

    def event_synchronized(self, event: Event) -> None:
        with self.lock:
            clock = self.state.events.get(event)
            if clock is not None:
                how = f"{clock.where}, synchronised by the host at {user_site()}"
                self.state.host.join(clock.vc, clock.via, how)

    def device_synchronized(self, device: Device) -> None:
        with self.lock:
            st = self.state
            how = f"device {device.ordinal} synchronised at {user_site()}"
            for stream, lane in list(st.lanes.items()):
                if stream.device is device:
                    st.host.join(lane.vc, lane.via, how)

    def completion_awaited(self, signal: Signal) -> None:
        with self.lock:
            entry = self.state.done.pop(id(signal), None)
            if entry is not None and entry[0] is signal:
                how = f"{entry[3]} awaited by the host at {user_site()}"
                self.state.host.join(entry[1], entry[2], how)

    def node_added(self, node: Any) -> None:
        site = user_site()
        if site is not None:
            SITES.remember(SITES.nodes, node.hid, site)

    # -- device hooks: host arrays changed while their copy is in flight -----------------

    def op_starting(self, program: Program, op: Any) -> Any:
        copies = self.state.copies
        entry = copies.pop(id(op), None)
        if not copies:  # nothing in flight to watch: give the device its plain loop back
            with self.lock:
                if self.device_hooked and not self.state.copies:
                    hooks.uninstall(self)
                    self.device_hooked = False
        if entry is not None and entry[0] is op and isinstance(op.src, np.ndarray):
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

    def _watch_copy(self, work: MemcpyParams, completion: Completion, op: _Op) -> None:
        program = completion._program
        if program is None or program.started or not program.ops:
            return  # already ran: nothing can change under it any more
        copy = program.ops[0]
        if not isinstance(copy, CopyOp):
            return
        st = self.state
        if len(st.copies) >= _MAX_PENDING:
            st.copies.clear()
        assert isinstance(work.src, np.ndarray)
        st.copies[id(copy)] = (copy, host_bytes(work.src, work.nbytes).tobytes(), op)
        if not self.device_hooked:
            hooks.install(self)
            self.device_hooked = True

    # -- completions ---------------------------------------------------------------------

    def _remember_done(self, completion: Completion, lane: _Lane, what: str) -> None:
        st = self.state
        done = st.done
        if len(done) >= _MAX_PENDING:  # drop what the host already knows
            host = st.host.vc
            for key, (_sig, vc, _, _) in list(done.items()):
                if all(host.get(k, 0) >= v for k, v in vc.items()):
                    del done[key]
            if len(done) >= _MAX_PENDING:
                for key in list(done)[: _MAX_PENDING // 2]:
                    del done[key]
        signal = completion._signal
        done[id(signal)] = (signal, dict(lane.vc), dict(lane.via), what)

    def __repr__(self) -> str:
        return f"<RaceChecker active={len(self.stack)}>"


def stream_name(lane: _Lane | None) -> str:
    return lane.name if lane is not None else "a stream"


def _allocation(access: Access) -> tuple[DeviceMemory, int, int] | None:
    """(memory, base, nbytes) of the allocation holding ``access.start`` now, or None."""
    try:
        memory = get_device(access.device).memory
    except Exception:  # a device ordinal that no longer exists
        return None
    found = memory.allocation_of(access.start)
    return None if found is None else (memory, found[0], found[1])


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
        op.site,
        access.start,
        access.end,
        access.precision,
        access.write,
    )


def _work_label(work: Any) -> str:
    if isinstance(work, KernelParams):
        return f"Kernel {work.kernel.name!r}"
    if isinstance(work, MemcpyParams):
        return f"Memcpy {work.kind.name}"
    if isinstance(work, FreeOp):
        return "free_async"
    if isinstance(work, HostParams):
        return "host function"
    return type(work).__name__.replace("Params", "")


_CHECKER = _Checker()


@contextmanager
def race_check(on_race: str = "raise") -> Iterator[RaceCheck]:
    """Check every stream, event, launch and host synchronisation inside the block for races.

    Args:
        on_race: "raise" (default: RaceError at the call that completed the race),
            "warn" (a RaceWarning each) or "collect" (only ``rc.reports``).

    Nested checks share one set of clocks; reports go to the innermost. Work enqueued before
    the outermost check began is not known to it.
    """
    check = RaceCheck(on_race)
    _CHECKER.push(check)
    try:
        yield check
    finally:
        _CHECKER.pop(check)


_ENVIRONMENT_CHECK: RaceCheck | None = None


def install_from_environment() -> RaceCheck | None:
    """Turn the checker on for the whole run if ``AHIPGRAPH_RACE_CHECK`` asks for it."""
    global _ENVIRONMENT_CHECK
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if not value or value in ("0", "off", "false", "no"):
        return None
    if _ENVIRONMENT_CHECK is None:
        mode = "warn" if value in ("1", "on", "true", "yes") else value
        if mode not in _MODES:
            raise ValueError(f"{ENV_VAR}={value!r}: expected 1, raise, warn or collect")
        _ENVIRONMENT_CHECK = RaceCheck(mode)
        _CHECKER.push(_ENVIRONMENT_CHECK)
    return _ENVIRONMENT_CHECK


def active() -> bool:
    """True while any race check (a ``with`` block or the environment switch) is on."""
    return bool(_CHECKER.stack)
