"""Timeline traces: ``with ahg.tracing() as trace:`` records what the simulated devices do.

Design: a :class:`_Recorder` is a device :class:`~ahipgraph.device.hooks.Observer`. While it is
installed it sees every packet submitted (a *host enqueue*: a graph launch or a stream call),
every op run with its simulated start and end, every signal an op reached, and every barrier
that waited for signals. From that it builds plain records:

* :class:`OpRecord` — one op on one hardware queue, with its graph node and launch if any;
* :class:`FlowRecord` — "this barrier waited for the signal that op reached";
* :class:`EnqueueRecord` — a host enqueue, at the host's simulated time;
* :class:`CounterRecord` — signal sets in use, kernel-argument arena bytes and device memory in
  use, sampled as each packet is submitted (at the host's time) and completes (at its device
  time), and once more when tracing stops: a host allocation shows at the next of those. A
  device's samples are in time order, none stamped before the one before it, so the newest
  value is always the track's last.

:meth:`Trace.save` writes the Chrome Trace Event format (Perfetto, chrome://tracing): a process
per device, a track per hardware queue, and a host track. Every number in the file is simulated
time or a count local to the trace (launches and executables are numbered in the order the trace
first sees them), never wall-clock time or ``id()``: the same program gives the same bytes.

The file is written for how Perfetto imports it (``ts``/``dur`` in microseconds, as the format
says, whatever ``displayTimeUnit``):

* each track's events are in time order, the metadata first (a packet's completion is
  sampled at its device time, ahead of the host's next calls);
* process and thread ids start at 1 (device ``n`` is pid ``n + 1``, its host track tid 1 and
  queue ``k`` tid ``k + 2``): Perfetto takes pid 0 and tid 0 for the kernel's idle task;
* the host enqueues of one device at one simulated instant are one instant event (``N
  enqueues``, each call in its ``calls``): Perfetto stacks instants that share a timestamp a
  level each, and the host's clock stands still while it enqueues without waiting;
* Perfetto binds a flow to the slices it lands in and draws it from the earlier slice to the
  later, and drops one whose end it reads before its start. A barrier may begin waiting before
  the op that releases it has even started, so a flow starts inside the op that reached the
  signal and ends at the barrier's end, on what the signal let run: the next op of that queue,
  or a zero-length ``released`` slice added there when nothing starts at that instant.

Invariants: records are appended on the device's event loop in the order the work ran; a flow's
source record was appended before its target; records never refer to objects, only to indices.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ..core.scoped import scoped
from ..device import hooks
from ..device.ops import (
    CopyOp,
    FillOp,
    FreeOp,
    HostOp,
    KernelOp,
    Op,
    SignalIndexOp,
    StreamMemOpOp,
    WaitSignalIndicesOp,
    WaitSignalsOp,
    qualname_of,
    user_repr,
)
from ..device.signal import Signal
from ..exec.arena import reserved_on
from ..exec.compile import EventRecordOp, StrictKernelOp
from ..exec.conditional import ConditionalOp
from ..exec.graph_exec import EXECS, GraphExec, _Launch
from ..runtime.device import Device, device_count, get_device
from ..runtime.stream_memops import StreamMemOp

if TYPE_CHECKING:
    from ..device.hwqueue import HardwareQueue
    from ..device.program import Program

__all__ = [
    "CounterRecord",
    "EnqueueRecord",
    "FlowRecord",
    "OpRecord",
    "Trace",
    "tracing",
]


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One op as it ran: ``kind`` is kernel, copy, fill, host, barrier, conditional, marker or
    memory. A conditional node's slice spans all it ran (its bodies run inside it)."""

    index: int
    device: int
    queue: int
    kind: str
    name: str
    start_ns: int
    end_ns: int
    exec: int | None = None  # trace-local executable number
    launch: int | None = None  # trace-local launch number of that executable
    node: str | None = None  # e.g. "node 3 Kernel scale"
    error: str | None = None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """A signal edge: the op at ``source`` reached a signal the barrier at ``target`` waited for."""

    source: int
    target: int


@dataclass(frozen=True, slots=True)
class EnqueueRecord:
    """A host enqueue: a graph launch or a stream call, at the host's simulated time."""

    device: int
    queue: int
    time_ns: int
    name: str
    exec: int | None = None
    launch: int | None = None


@dataclass(frozen=True, slots=True)
class CounterRecord:
    device: int
    time_ns: int
    signal_sets_in_use: int
    arena_bytes: int
    memory_bytes: int


@dataclass(slots=True, eq=False)
class Trace:
    """What a :func:`tracing` block recorded. Complete once the block has exited."""

    ops: list[OpRecord] = field(default_factory=list)
    flows: list[FlowRecord] = field(default_factory=list)
    enqueues: list[EnqueueRecord] = field(default_factory=list)
    counters: list[CounterRecord] = field(default_factory=list)
    devices: dict[int, str] = field(default_factory=dict)  # ordinal -> name
    queues: dict[int, int] = field(default_factory=dict)  # ordinal -> hardware queues

    def to_chrome(self) -> dict[str, Any]:
        """The trace as a Chrome Trace Event document (a JSON-ready dict)."""
        events: list[dict[str, Any]] = []
        for ordinal, name in sorted(self.devices.items()):
            pid = _pid(ordinal)
            events.append(_meta("process_name", pid, HOST_TID, name=f"device {ordinal}: {name}"))
            events.append(_meta("process_sort_index", pid, HOST_TID, sort_index=ordinal))
            events.append(_meta("thread_name", pid, HOST_TID, name="host"))
            events.append(_meta("thread_sort_index", pid, HOST_TID, sort_index=0))
            for queue in range(self.queues.get(ordinal, 0)):
                tid = _tid(queue)
                events.append(_meta("thread_name", pid, tid, name=f"queue {queue}"))
                events.append(_meta("thread_sort_index", pid, tid, sort_index=queue + 1))
        # Perfetto stacks instants of one track that share a timestamp, one level each, and
        # the host's clock stands still while it enqueues without waiting (a loop of 1,000
        # launches is 1,000 enqueues at one instant): the calls of one instant are one event.
        instants: dict[tuple[int, int], list[EnqueueRecord]] = {}
        for enqueue in self.enqueues:
            instants.setdefault((enqueue.device, enqueue.time_ns), []).append(enqueue)
        for (device, time_ns), calls in instants.items():
            if len(calls) == 1:
                (enqueue,) = calls
                name, args = enqueue.name, _enqueue_args(enqueue)
            else:
                name = f"{len(calls)} enqueues"
                args = {"calls": [{"name": e.name, **_enqueue_args(e)} for e in calls]}
            events.append(
                {
                    "name": name,
                    "cat": "enqueue",
                    "ph": "i",
                    "s": "t",
                    "ts": _us(time_ns),
                    "pid": _pid(device),
                    "tid": HOST_TID,
                    "args": args,
                }
            )
        for op in self.ops:
            args = {}
            for key in ("exec", "launch", "node", "error"):
                value = getattr(op, key)
                if value is not None:
                    args[key] = value
            events.append(_slice(op.name, op.kind, op.start_ns, op.duration_ns, op, args))
        # Perfetto binds a flow's end to the newest slice open on its track at that instant,
        # and opens every slice of an instant before it reads flow events there: at a
        # barrier's end that is the op the barrier let start, if one did; else a ``released``
        # slice is added there, so the end never binds to the barrier itself, which may have
        # begun before the flow's source (the flow would then be drawn backwards).
        starts = {(op.device, op.queue, op.start_ns) for op in self.ops}
        released: dict[int, None] = {}
        for flow in self.flows:
            barrier = self.ops[flow.target]
            if (barrier.device, barrier.queue, barrier.end_ns) not in starts:
                released[flow.target] = None
        for index in released:
            barrier = self.ops[index]
            events.append(_slice("released", "signal", barrier.end_ns, 0, barrier, {}))
        for number, flow in enumerate(self.flows):
            source, target = self.ops[flow.source], self.ops[flow.target]
            # Inside the source, past its start when it lasts 2 ns or more: a zero-length
            # slice opened at the same instant would be newer than the source there.
            start = source.start_ns + source.duration_ns // 2
            for phase, op, time_ns in (("s", source, start), ("f", target, target.end_ns)):
                event = {
                    "name": "signal",
                    "cat": "signal",
                    "ph": phase,
                    "id": number,
                    "ts": _us(time_ns),
                    "pid": _pid(op.device),
                    "tid": _tid(op.queue),
                }
                if phase == "f":
                    event["bp"] = "e"
                events.append(event)
        for counter in self.counters:
            for name, value in (
                ("signal sets in use", counter.signal_sets_in_use),
                ("arena bytes", counter.arena_bytes),
                ("device memory in use", counter.memory_bytes),
            ):
                events.append(
                    {
                        "name": name,
                        "ph": "C",
                        "ts": _us(counter.time_ns),
                        "pid": _pid(counter.device),
                        # Perfetto files a counter under its event's thread's process: a
                        # missing tid reads as 0, the idle task's.
                        "tid": HOST_TID,
                        "args": {"value": value},
                    }
                )
        # Events are made kind by kind (flows and ``released`` slices after every op), and a
        # packet's completion is sampled at its device time, which runs ahead of the host's
        # next calls: each track's events are written in time order, the names of processes
        # and tracks first. The sort is stable: events of one instant keep their order.
        events.sort(key=_file_order)
        return {
            "displayTimeUnit": "ns",
            "otherData": {"generator": "ahipgraph", "clock": "simulated"},
            "traceEvents": events,
        }

    def dumps(self) -> str:
        """The Chrome Trace Event JSON text (deterministic: sorted keys, fixed separators)."""
        return json.dumps(self.to_chrome(), sort_keys=True, separators=(",", ":")) + "\n"

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace as Chrome Trace Event JSON; open it in Perfetto or chrome://tracing."""
        target = Path(path)
        target.write_text(self.dumps())
        return target

    def __repr__(self) -> str:
        return (
            f"<Trace ops={len(self.ops)} flows={len(self.flows)} "
            f"enqueues={len(self.enqueues)} counters={len(self.counters)}>"
        )


HOST_TID = 1  # the host track of every device's process


def _pid(ordinal: int) -> int:
    """A device's process id in the file: never 0, which Perfetto takes for the idle task."""
    return ordinal + 1


def _tid(queue: int) -> int:
    """A hardware queue's thread id in the file: after the host track, never 0."""
    return queue + 2


def _enqueue_args(enqueue: EnqueueRecord) -> dict[str, Any]:
    args: dict[str, Any] = {"queue": enqueue.queue}
    if enqueue.exec is not None:
        args.update(exec=enqueue.exec, launch=enqueue.launch)
    return args


def _us(ns: int) -> float:
    """``ns`` in microseconds, as the float Perfetto reads back as exactly ``ns``.

    Perfetto's importer truncates ``value * 1000.0``, and for about one value in a hundred
    and thirty the nearest float to ``ns / 1000`` gives a product just below ``ns``: read a
    nanosecond early, a slice began inside the one before it on its queue. The next float up
    is read as ``ns`` (and still rounds to it, as other readers do).
    """
    value = ns / 1000
    if int(value * 1000.0) < ns:
        value = math.nextafter(value, math.inf)
    return value


def _file_order(event: dict[str, Any]) -> tuple[int, float]:
    """Metadata first, then every other event by its timestamp."""
    return (0, 0.0) if event["ph"] == "M" else (1, event["ts"])


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _slice(
    name: str, cat: str, start_ns: int, duration_ns: int, op: OpRecord, args: dict[str, Any]
) -> dict[str, Any]:
    """A complete ("X") slice on ``op``'s queue track."""
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": _us(start_ns),
        "dur": _us(duration_ns),
        "pid": _pid(op.device),
        "tid": _tid(op.queue),
        "args": args,
    }


class _ProgramInfo:
    """What the recorder knows about a packet: its launch, strand and node labels."""

    __slots__ = ("exec", "last", "launch", "nodes", "owner")

    def __init__(
        self,
        exec_no: int | None = None,
        launch_no: int | None = None,
        nodes: dict[int, str] | None = None,
        owner: _Launch | None = None,
    ) -> None:
        self.exec = exec_no
        self.launch = launch_no
        self.nodes = nodes  # op position -> node label (graph launches)
        self.owner = owner  # the launch whose head packet this is
        self.last: int | None = None  # index of the last op record of this packet


def op_kind(op: Op) -> tuple[str, str] | None:
    """(kind, name) of an op for the trace; ``None`` for signal writes, which are not slices."""
    if isinstance(op, StrictKernelOp):
        op = op.inner
    if isinstance(op, KernelOp):
        return "kernel", op.kernel.name
    if isinstance(op, CopyOp):
        return "copy", f"memcpy {op.kind.name} {op.nbytes}B"
    if isinstance(op, FillOp):
        return "fill", f"memset {op.extent}B"
    if isinstance(op, HostOp):  # a stream memory operation captured into a graph is one
        return "host", _memop_name(op.fn) or qualname_of(op.fn) or "host function"
    if isinstance(op, WaitSignalsOp | WaitSignalIndicesOp):
        return "barrier", "barrier"
    if isinstance(op, SignalIndexOp):
        return None
    if isinstance(op, EventRecordOp):
        return "marker", "event record"
    if isinstance(op, ConditionalOp):  # its bodies run inline, within its slice
        return "conditional", f"{op.kind.name.upper()} conditional"
    # The stream calls that make these ops name them: "streammemop" said neither which
    # call nor whether it waited or wrote.
    if isinstance(op, FreeOp):
        return "memory", "free_async"
    if isinstance(op, StreamMemOpOp):
        return "marker", _memop_name(op.memop) or "stream memory operation"
    name = type(op).__name__.removesuffix("Op")
    return ("memory" if name.startswith("Mem") else "marker"), name.lower()


def _memop_name(memop: object) -> str | None:
    """The stream call a stream memory operation came from (``wait_value_32``...), if it is one."""
    if not isinstance(memop, StreamMemOp):
        return None
    return f"{'write' if memop.flag is None else 'wait'}_value_{memop.bits}"


class _Recorder(hooks.Observer):
    """The observer behind :func:`tracing`."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self._programs: dict[Program, _ProgramInfo] = {}
        self._producer: dict[Signal, int] = {}  # signal -> op record that last reached it
        self._exec_numbers: weakref.WeakKeyDictionary[GraphExec, int] = weakref.WeakKeyDictionary()
        self._launch_counts: dict[int, int] = {}
        self._launches: dict[_Launch, int] = {}
        # The executables whose launches held signal sets as tracing began: with those it
        # numbers (launched since), the only ones whose sets in use can move, so a sample
        # reads a few executables rather than every live one.
        self._busy_before = _busy_executables()
        # executable -> strand -> op position -> node label
        self._node_labels: weakref.WeakKeyDictionary[GraphExec, dict[int, dict[int, str]]] = (
            weakref.WeakKeyDictionary()
        )
        self.closed = False
        # ordinal -> (time, values) of the device's last counter sample
        self._last_counter: dict[int, tuple[int, tuple[int, int, int]]] = {}
        # program -> (position, time) of the op it runs, as it first started (each program's
        # entry is touched only on its own loop's thread)
        self._first_run: dict[Program, tuple[int, int]] = {}
        # Devices on loops of several threads report at once: every record is made under this
        # lock, so indices (``OpRecord.index``, flow ends) stay the positions in the lists.
        self._lock = threading.Lock()

    # -- host enqueues ----------------------------------------------------------------------------

    def submitted(self, queue: HardwareQueue, program: Program) -> None:
        device = cast("Device", queue._device)  # every configured device is a public Device
        original = program.on_done
        launch = _launch_of(original)
        with self._lock:
            if self.closed:
                return
            self._see_device(device)
            if launch is not None:
                info = self._launch_info(launch, program)
            else:
                info = _ProgramInfo()
                self.trace.enqueues.append(
                    EnqueueRecord(
                        device.ordinal, queue._index, device.clock.now, _stream_call(program)
                    )
                )
            self._programs[program] = info
        program.on_done = _Sampling(self, device, original)
        self._sample(device, device.clock.now)

    def _launch_info(self, launch: _Launch, program: Program) -> _ProgramInfo:
        graph_exec = launch.exec
        exec_no = self._exec_numbers.get(graph_exec)
        if exec_no is None:
            exec_no = self._exec_numbers[graph_exec] = len(self._launch_counts)
            self._launch_counts[exec_no] = 0
        strand_ops = launch.version.strand_ops
        strand = next((k for k, ops in enumerate(strand_ops) if ops is program.ops), 0)
        launch_no = self._launches.get(launch)
        if launch_no is None:  # the head (strand 0) is submitted first
            launch_no = self._launch_counts[exec_no]
            self._launch_counts[exec_no] = launch_no + 1
            self._launches[launch] = launch_no
            device = graph_exec.device
            self.trace.enqueues.append(
                EnqueueRecord(
                    device.ordinal,
                    launch.stream.queue._index,
                    device.clock.now,
                    f"launch exec {exec_no}",
                    exec_no,
                    launch_no,
                )
            )
        nodes = self._labels(graph_exec).get(strand, {})
        return _ProgramInfo(exec_no, launch_no, nodes, launch if strand == 0 else None)

    def _labels(self, graph_exec: GraphExec) -> dict[int, dict[int, str]]:
        """Node labels by strand and op position ("node <k> <type>", k in walk order)."""
        labels = self._node_labels.get(graph_exec)
        if labels is None:
            locations = graph_exec._compiled.locations
            labels = {}
            for number, node in enumerate(graph_exec._graph.walk()):
                where = locations.get(node)
                if where is not None:
                    strand, position = where
                    labels.setdefault(strand, {})[position] = f"node {number} {node.type.name}"
            self._node_labels[graph_exec] = labels
        return labels

    # -- ops --------------------------------------------------------------------------------------

    def op_starting(self, program: Program, op: Op) -> Any:
        # An op that parks on a signal is run again from its start when the signal comes (a
        # barrier; a WHILE node between iterations, its time moving on), and op_finished sees
        # the last run's start only: the op's slice begins where it first ran.
        first = self._first_run.get(program)
        if first is None or first[0] != program.pc:
            self._first_run[program] = (program.pc, program.time)
        return None

    def op_finished(
        self, program: Program, op: Op, start_ns: int, error: BaseException | None
    ) -> None:
        first = self._first_run.pop(program, None)
        if first is not None and first[0] == program.pc:
            start_ns = min(start_ns, first[1])
        with self._lock:
            if self.closed:  # the block exited while this packet ran (from a host function)
                return
            info = self._programs.get(program)
            if info is None:  # submitted before tracing began
                info = self._programs[program] = _ProgramInfo()
            if isinstance(op, SignalIndexOp):
                self._reached(program.signals[op.index], program, info)
                return
            described = op_kind(op)
            assert described is not None
            record = self._record(program, info, described, start_ns, program.time, error)
            if isinstance(op, EventRecordOp):
                self._producer[program.signals[op.binding]] = record
            elif isinstance(op, WaitSignalIndicesOp | WaitSignalsOp):
                waited = (
                    [program.signals[index] for index in op.indices]
                    if isinstance(op, WaitSignalIndicesOp)
                    else list(op.signals)
                )
                self._flows_into(record, waited)

    def barrier_passed(self, program: Program, signals: tuple[Signal, ...], start_ns: int) -> None:
        """A packet's barrier (a legacy null-stream wait) is a barrier slice of its own, with
        the flows from the work it waited for."""
        with self._lock:
            if self.closed:
                return
            info = self._programs.get(program)
            if info is None:
                info = self._programs[program] = _ProgramInfo()
            record = self._record(
                program, info, ("barrier", "barrier"), start_ns, program.time, None, at_op=False
            )
            self._flows_into(record, signals)

    def _flows_into(self, record: int, waited: Sequence[Signal]) -> None:
        """A flow into barrier ``record`` from the op that reached each of ``waited``."""
        for signal in waited:
            source = self._producer.get(signal)
            if source is not None:
                self.trace.flows.append(FlowRecord(source, record))

    def _record(
        self,
        program: Program,
        info: _ProgramInfo,
        described: tuple[str, str],
        start_ns: int,
        end_ns: int,
        error: BaseException | None,
        at_op: bool = True,
    ) -> int:
        """Append an op record of ``program``, labelled with the graph node of the op at the
        program's counter (``at_op``; a barrier before the first op has no node)."""
        queue = program.queue
        assert queue is not None
        # A packet submitted before the block began was not seen then: name its device now,
        # or the file has slices in a process and on tracks nobody named.
        self._see_device(cast("Device", queue._device))
        kind, name = described
        index = len(self.trace.ops)
        node = info.nodes.get(program.pc) if at_op and info.nodes is not None else None
        if node is not None and kind == "kernel":
            node = f"{node} {name}"
        self.trace.ops.append(
            OpRecord(
                index,
                queue._device.ordinal,
                queue._index,
                kind,
                name,
                start_ns,
                end_ns,
                info.exec,
                info.launch,
                node,
                None if error is None else user_repr(error),
            )
        )
        info.last = index
        return index

    def _reached(self, signal: Signal, program: Program, info: _ProgramInfo) -> None:
        """``program`` reached ``signal``: its last op is the source of flows out of it."""
        if info.last is None:  # nothing ran yet (an event record): a marker stands for it
            self._record(program, info, ("marker", "signal"), program.time, program.time, None)
        assert info.last is not None
        self._producer[signal] = info.last

    def op_failed(self, program: Program, op: Op, error: BaseException) -> None:
        """An async body failed after its op was recorded: the record takes the error."""
        with self._lock:
            info = self._programs.get(program)
            if self.closed or info is None or info.last is None:
                return
            record = self.trace.ops[info.last]  # the op whose body ran: the program waited
            if record.error is None:
                self.trace.ops[info.last] = dataclasses.replace(record, error=user_repr(error))

    def program_finished(self, program: Program) -> None:
        with self._lock:
            if self.closed:
                return
            self._first_run.pop(program, None)
            info = self._programs.pop(program, None) or _ProgramInfo()
            if program.completion is not None:
                self._reached(program.completion, program, info)
            if info.owner is not None:  # the launch is complete: forget it
                self._launches.pop(info.owner, None)

    # -- counters ---------------------------------------------------------------------------------

    def _see_device(self, device: Device) -> None:
        if device.ordinal not in self.trace.devices:
            self.trace.devices[device.ordinal] = device.name
        # A device reconfigured in the block may have more queues than the one first seen
        # under its ordinal: every queue that has slices gets its named track.
        queues = len(device.queues)
        if queues > self.trace.queues.get(device.ordinal, 0):
            self.trace.queues[device.ordinal] = queues

    def _sample(self, device: Device, time_ns: int) -> None:
        if self.closed:
            return
        with self._lock:
            known = {*self._exec_numbers.keys(), *self._busy_before}
        # Read outside the recorder's lock, so no lock of the runtime is taken while it is held.
        sets = sum(e.pool.in_use for e in known if e.device is device)
        values = (sets, reserved_on(device), device.memory.bytes_in_use)
        with self._lock:
            last = self._last_counter.get(device.ordinal)
            if self.closed or (last is not None and last[1] == values):
                return  # the block ended meanwhile (on another thread), or nothing moved
            if last is not None:
                # A packet's completion is sampled at its device time, ahead of the host's
                # clock; a host change seen after it (a malloc, then a call sampled at the
                # host's earlier time) is the newest value: stamped before that sample, it
                # came first in the file's time order and the older value stood after it.
                time_ns = max(time_ns, last[0])
            self._last_counter[device.ordinal] = (time_ns, values)
            self.trace.counters.append(CounterRecord(device.ordinal, time_ns, *values))

    def finish(self) -> None:
        """Tracing stops: a last sample of every device the trace saw."""
        with self._lock:
            seen = sorted(self.trace.devices)
        for ordinal in seen:
            if ordinal < device_count():
                device = get_device(ordinal)
                busy = max(queue._busy_until for queue in device.queues)
                self._sample(device, max(device.clock.now, busy))
        with self._lock:
            self.closed = True
            self._first_run.clear()
            self._programs.clear()
            self._producer.clear()
            self._launches.clear()


class _Sampling:
    """A traced packet's ``on_done``: the packet's own callback, then a counter sample.

    ``__wrapped__`` is that callback, so a second recorder (a nested ``tracing()`` block, which
    wraps the packet again) still finds the graph launch a packet belongs to.
    """

    __slots__ = ("__wrapped__", "device", "recorder")

    def __init__(
        self, recorder: _Recorder, device: Device, original: Callable[[Program], None] | None
    ) -> None:
        self.recorder = recorder
        self.device = device
        self.__wrapped__ = original

    def __call__(self, done: Program) -> None:
        try:
            if self.__wrapped__ is not None:
                self.__wrapped__(done)
        finally:
            self.recorder._sample(self.device, done.time)


def _busy_executables() -> weakref.WeakSet[GraphExec]:
    """The executables whose launches hold signal sets now: the live ones whose pool lends
    sets, and those destroyed while their launches run, which the registry no longer lists
    (their sets are in use until those launches complete): found by their queued packets."""
    busy: weakref.WeakSet[GraphExec] = weakref.WeakSet(
        graph_exec for graph_exec in EXECS.live_objects() if graph_exec.pool.in_use
    )
    for ordinal in range(device_count()):
        for queue in get_device(ordinal).queues:
            for program in queue.packets():
                launch = _launch_of(program.on_done)
                if launch is not None:
                    busy.add(launch.exec)
    return busy


def _launch_of(callback: object) -> _Launch | None:
    """The graph launch whose packet has ``callback`` as its ``on_done``, if any."""
    while isinstance(callback, _Sampling):
        callback = callback.__wrapped__
    owner = getattr(callback, "__self__", None)
    return owner if isinstance(owner, _Launch) else None


def _stream_call(program: Program) -> str:
    """The name of the stream call that submitted ``program`` (a packet of at most one op)."""
    if not program.ops:
        return "record_event"
    op = program.ops[0]
    if isinstance(op, WaitSignalsOp):
        return "wait_event" if program.completion is not None else "implicit wait"
    described = op_kind(op)
    kind, name = described if described is not None else ("op", "op")
    calls = {"kernel": "launch_kernel", "copy": "memcpy", "fill": "memset", "host": "host_func"}
    call = calls.get(kind)
    return name if call is None else f"{call} {name}"  # the others are named by their call


@scoped
def tracing() -> Iterator[Trace]:
    """Record the simulated devices' timeline while the block runs.

    Returns (as the ``with`` target): the :class:`Trace`, filled as work runs and completed
    when the block exits (a last counter sample per device). Work still running when the
    block exits is not recorded past that point: synchronize inside the block.

    Tracing is process-wide (every device, every thread, every event loop) and may be nested:
    each open block records the work that runs while it is open, graph launches as launches.
    As a decorator it traces each call (an ``async def`` function's whole coroutine), though
    the trace is then only the ``with`` form's to keep.
    """
    trace = Trace()
    recorder = _Recorder(trace)
    hooks.install(recorder)
    try:
        yield trace
    finally:
        hooks.uninstall(recorder)
        recorder.finish()
