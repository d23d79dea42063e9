"""The launcher of an executable: signal sets, the one acquire policy, enqueue and completion.

A :class:`~ahipgraph.GraphExec` owns one :class:`Launcher`; its ``launch`` and
``launch_nowait`` delegate here. The launcher owns:

* the **signal-set pool** and the one acquire policy (``signal_set_policy``): ``"wait"`` (the
  default) parks a launch until a completion returns a set, so a host launching in a tight loop
  yields once per pool's worth of launches, and device work that only its own end could give
  a set back to is refused instead of parking; ``"grow"`` adds a set (HIP's counted miss);
* the **internal streams** that run strands 1.. of a launch, and the *home* stream of cross-device
  launches (:mod:`.cross_device`);
* the **launch counts** (enqueued, completed) and the previous launch's completion signal,
  which orders the launches of one executable;
* the **enqueue**: bind the per-launch signals (previous launch, event nodes) into the borrowed
  set and submit one prepared program per strand, in plain synchronous code (atomic for the event
  loop);
* the **completion** (strand 0's ``on_done``): report an error to the stream, return the set, let
  the updater free argument slots no launch reads any more, drop the launch's reference.

Which op lists a launch runs is the updater's business (:mod:`.updater`): a launch holds the
version current when it was enqueued. The reference count and the state stay the executable's;
the launcher reads them under the executable's lock, the one lock for launches and updates.

Words: a *strand* is one of the plan's parallel op lists (strand 0 is the launch stream); a *signal
index* is a position in a launch's signal set; an *argument slot* is a range of the arena.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import TYPE_CHECKING, Any

from ..core.errors import HipError, IllegalState, InvalidValue, NotReady
from ..core.lifecycle import destroyed
from ..device.engine import park_refusable
from ..device.program import Program
from ..device.signal import Signal
from ..device.work_waits import each_waits_for_head
from ..runtime import observe
from ..runtime.completion import Completion, make_completion
from ..runtime.stream import Stream, StreamState, launch_stream
from .cross_device import enqueue_cross_device
from .exec_state import ExecState
from .flags import InstantiateFlags
from .signal_pool import REACHED, SignalSet, SignalSetPool

if TYPE_CHECKING:
    from ..device.hwqueue import HardwareQueue
    from ..device.pointer import DevicePtr
    from ..runtime.device import Device
    from ..runtime.per_thread import PerThreadStream
    from .compile import Compiled, EventBinding
    from .graph_exec import GraphExec, _ExecRecord
    from .snapshot import ExecGraph
    from .updater import Updater, Version

__all__ = ["Launch", "Launcher"]


class Launch:
    """Book-keeping of one launch in flight, released by its completion."""

    __slots__ = ("done", "exec", "launcher", "signal_set", "stream", "version")

    def __init__(
        self, launcher: Launcher, version: Version, signal_set: SignalSet, stream: Stream
    ) -> None:
        self.launcher = launcher
        self.exec = launcher.owner
        self.version = version
        self.signal_set = signal_set
        self.stream = stream
        self.done = Signal(1)

    def strand_finished(self, program: Program) -> None:
        if program.error is not None and self.done._error is None:
            self.done._error = program.error

    def finished(self, program: Program) -> None:
        self.launcher.finished(self)


class Launcher:
    """Enqueues the launches of one executable and completes them. See the module notes."""

    __slots__ = (
        "__weakref__",  # the updater's reference once the executable is freed
        "compiled",
        "completed",
        "device",
        "empty",
        "flags",
        "frees_counted",
        "graph",
        "home",
        "internal_streams",
        "last_done",
        "last_stream",
        "launches",
        "lock",
        "owner",
        "pool",
        "record",
        "updater",
    )

    updater: Updater  # attached by the executable once the updater exists (it reads our counts)

    def __init__(
        self,
        owner: GraphExec,
        lock: threading.RLock,
        *,
        device: Device,
        flags: InstantiateFlags,
        graph: ExecGraph,
        compiled: Compiled,
        pool: SignalSetPool,
        internal_streams: list[Stream],
    ) -> None:
        self.owner = owner
        self.lock = lock  # the executable's: launches and updates are one critical section
        self.device = device
        self.flags = flags
        self.graph = graph
        self.empty = not len(graph)  # an update never changes how many nodes there are
        self.compiled = compiled
        self.pool = pool
        self.internal_streams = internal_streams
        self.home: Stream | None = None  # for launches on other devices' streams
        # The executable's finalizer record, told of the home stream when it is made.
        self.record: _ExecRecord | None = None
        self.launches = 0
        self.completed = 0
        # Per unfreed graph allocation, the number of the last stream-ordered free a launch
        # was taken on (see _free_pending).
        self.frees_counted: dict[DevicePtr, int] = {}
        self.last_stream: weakref.ref[Stream] | None = None  # the last launch's (see above)
        self.last_done: Signal = REACHED

    @property
    def in_flight(self) -> int:
        return self.launches - self.completed

    # -- launch ---------------------------------------------------------------------------------

    def target(self, stream: Stream | PerThreadStream | None) -> Stream | None:
        """The checks every launch makes, in HIP's order; None when the graph is empty (a
        launch that is complete at once, counted as taken and completed)."""
        owner = self.owner
        if owner._state is not ExecState.OPEN:
            owner._check_alive()  # raises
        stream = launch_stream(stream, self.device, any_device=True)
        part = stream._capture  # read once: another thread may end the capture meanwhile
        if part is not None:  # capturing a launch is not supported: HIP's rule
            raise part.unsupported("a graph launch")
        if self.empty:
            # Nothing to submit, but a device configure_devices replaced (the executable's or
            # the stream's) takes no launch, as for a graph with nodes (its engine's claim).
            for device in (self.device, stream._device):
                if device._engine._retired:
                    device._engine._refuse_retired()  # raises
            # Still a launch the caller took, complete at once: statistics() counts it as one.
            with self.lock:
                self.launches += 1
                self.completed += 1
            return None
        if self.compiled.unfreed_ptrs:
            self._check_allocations(stream)
        # The loop, before anything is taken: no loop, or another loop that owns a busy
        # device, fails here with the executable and its pool untouched.
        self.device._engine.claim()
        if stream._device is not self.device:
            stream._device._engine.claim()
        return stream

    def acquire_nowait(self) -> SignalSet | None:
        """A signal set without parking, by the pool's policy; never runs device work.

        ``"wait"`` (the default): None when every set is in use, and the launch parks until
        a completion returns one, so a host launching in a tight loop yields to the event loop
        once per pool's worth of launches. ``"grow"``: a new set, counted as a miss (HIP's
        behaviour).
        """
        return self.pool.acquire_nowait()

    async def acquire(self, target: Stream) -> SignalSet:
        """A signal set for a launch on ``target``, parking until a completion releases one
        (the ``"wait"`` policy).

        Raises:
            IllegalState: the caller is device work that every set's return waits for (see
                :meth:`_refuse_waiting_for_itself`); nothing is taken.
            ContextIsDestroyed / InvalidDevice: ``target`` was destroyed, or its device
                replaced, while the launch waited. That wakes the launch at once (the set it
                waits for may never come back: a kernel of the launch holding it may never
                end) and nothing is taken, as for a launch made afterwards.
        """
        pool = self.pool
        target._parked_elsewhere(pool)
        try:
            # Refused first if the caller is such work, and again if a host function hands a
            # task parked here to its queue (see park_refusable).
            signal_set = await park_refusable(
                functools.partial(pool.acquire, target._gone),
                self._refuse_waiting_for_itself,
            )
        finally:
            target._unparked_elsewhere(pool)
        if signal_set is None:  # the stream was destroyed, or its device replaced, meanwhile
            target._check_open()
            for engine in (target._device._engine, self.device._engine):
                if engine._retired:
                    engine._refuse_retired()  # InvalidDevice
            raise AssertionError(f"a launch on {target!r} was woken without a signal set")
        return signal_set

    def _refuse_waiting_for_itself(self, work: HardwareQueue) -> None:
        """Refuse device work's wait for a set that can only come back after the work ends.

        A set comes back when the launch holding it completes. An async body of a node is
        device work of its launch, which completes only after the body ends, and every later
        launch of the executable waits for the launch before it: a body launching its own
        executable with every set in use would wait for good, as it would for any work queued
        behind it (``device/work_waits.py``). So the wait is refused when each set is held by
        a launch whose completion needs the packet running ``work`` (a launch's strand-0
        program carries its set's signals and completes it). A set whose holder is not on the
        device (handed to a parked launch not yet resumed, or given back by a refused one)
        may still come back: the wait then parks, as it would have. Run only when device work
        must park for a set, never on a launch that gets one at once.
        """
        engine = self.device._engine
        if work._engine is not engine:  # another device's work: its waits are not seen here
            return
        borrowed = self.pool.all_borrowed()
        if not borrowed:
            return
        heads = {
            id(program.signals): program.completion
            for queue in engine._queues
            for program in queue.packets()
            if program.completion is not None and program.signals
        }
        completions = [heads.get(id(signal_set.signals)) for signal_set in borrowed]
        if None in completions:
            return
        if each_waits_for_head(work, [done for done in completions if done is not None]):
            raise IllegalState(
                f"device {self.device.ordinal}: device work (an async kernel body or host "
                f"function) waited for a signal set of {self.owner!r}, and every set is held "
                "by a launch that completes only after that work ends (signal_set_policy="
                '"grow" adds a set instead)'
            )

    def submit(self, target: Stream, signal_set: SignalSet) -> Completion:
        """Enqueue on ``target``, of this executable's device or another's."""
        if target._device is not self.device:
            return enqueue_cross_device(self, target, signal_set)
        return self.enqueue(target, signal_set)

    def submit_nowait(self, stream: Stream | PerThreadStream | None) -> Completion:
        """A whole launch without ever parking (``launch_nowait``).

        Raises:
            NotReady: the pool waits when empty and no signal set is free.
        """
        target = self.target(stream)
        if target is None:
            return make_completion(Signal(0), self.device)
        signal_set = self.acquire_nowait()
        if signal_set is None:
            self.check_events()  # refused as such rather than as NotReady
            raise NotReady("no signal set is free")
        return self.submit(target, signal_set)

    def check_events(self) -> None:
        """Refuse a launch whose event node names a destroyed event (see :func:`_check_events`).

        The enqueue checks this (under the executable's lock) as it commits; a launch that
        must first wait for a signal set checks it before parking too, as HIP checks a call's
        arguments when it is made: refused at once, holding nothing, counting nothing.
        """
        if self.compiled.bindings:
            _check_events(self.compiled.bindings, self.updater.graph)

    def _check_allocations(self, stream: Stream) -> None:
        """Graph memory the previous launch allocated must be free before the next launch.

        Decided from the calls made, never from timing: a free made since the last launch was
        taken, on that launch's stream and this ``stream`` (a ``free_async``, or the launch of
        a graph whose free node frees it), frees that launch's memory before this one commits,
        in stream order, whether or not the stream has reached it yet (see
        :meth:`_free_pending`); otherwise, with the previous launch still in flight its blocks
        cannot have been freed yet, so the launch is refused. Checked before
        a launch parks for a signal set and again under the executable's lock as it commits,
        so of two launches that parked together only the first is taken.
        """
        compiled = self.compiled
        if not self.launches or self.flags is InstantiateFlags.AUTO_FREE_ON_LAUNCH:
            return
        unfreed = [ptr for ptr in compiled.unfreed_ptrs if not self._free_pending(ptr, stream)]
        if unfreed and (self.in_flight or any(self._committed(ptr) for ptr in unfreed)):
            raise InvalidValue(
                "the previous launch's graph allocations were never freed; free them or "
                "instantiate with AUTO_FREE_ON_LAUNCH"
            )

    def _free_pending(self, ptr: Any, stream: Stream) -> bool:
        """A free of ``ptr`` was made on ``stream`` (a ``free_async``, or a launch of a graph
        freeing it) after the last launch was taken, on that stream too: in stream order
        that launch's memory is freed before a launch on ``stream`` commits, whether or not
        the stream has reached the free, as HIP and CUDA count a free from the call. A free
        already counted for an earlier launch (its number noted by :meth:`note_frees`)
        frees nothing more; a free on another stream orders nothing here, unless the legacy
        null stream orders ``stream`` after it (one of the two is the null stream, the other
        a blocking stream), as it orders a free after the last launch.

        After a last launch on another stream, a ``free_async`` on ``stream`` counts once
        that launch is done and while the free is still to run: it frees that launch's
        memory when it runs (one that ran before the launch committed memory there failed,
        and holds nothing). A free node's free, which holds no claim, is not known to be
        still to run, so it does not count there.
        """
        memory = self.compiled.alloc_memory[ptr]
        number, by = memory.latest_free(ptr)
        if number <= self.frees_counted.get(ptr, 0):
            return False
        if by is not stream and not _legacy_ordered(by, stream):
            return False
        last = self.last_stream
        last_stream = None if last is None else last()
        if last_stream is not None and (last_stream is by or _legacy_ordered(last_stream, by)):
            return True
        return not self.in_flight and memory.claim_pending(ptr)

    def note_frees(self, relaunch: bool, stream: Stream) -> None:
        """A launch on ``stream`` was taken: the pending frees it counted are spent (see
        :meth:`_free_pending`).

        A relaunch taken on a pending free commits the memory again behind it, so the memory
        may then take one more pending free (for this launch's memory): launch, use,
        ``free_async``, in a loop with no host wait. With ``AUTO_FREE_ON_LAUNCH`` the relaunch
        is taken whatever is pending: a free it is ordered behind (made on its stream since
        the last launch was taken, wherever that launch ran, or on a stream the legacy null
        stream orders it after) gives that room as without the flag; otherwise, while the last
        launch's memory is still to be freed, the relaunch's own auto-free will free it, and
        that gives the room (launch, launch, ``free_async``),
        unless a free on another stream (a ``free_async`` or a free node), not ordered with
        the relaunch, is still to free it too: of those two frees the second must find the
        memory gone rather than free the relaunch's, so no room is made until that free ran.
        Called under the executable's lock, after every check passed.
        """
        compiled = self.compiled
        auto_free = self.flags is InstantiateFlags.AUTO_FREE_ON_LAUNCH
        for ptr in compiled.unfreed_ptrs:
            memory = compiled.alloc_memory[ptr]
            memory.launch_taken(ptr)  # its memory is the user's (or a free node's) to free
            number, by = memory.latest_free(ptr)
            counted = number > self.frees_counted.get(ptr, 0)
            if relaunch and (counted or auto_free):
                # The last launch in flight or its memory still there: the free ahead of
                # this launch (a free node's, or this launch's auto-free) has not run yet.
                not_run = self.in_flight > 1 or self._committed(ptr)
                if counted and (not auto_free or by is stream or _legacy_ordered(by, stream)):
                    memory.allow_another_free(ptr, not_run=not_run)
                elif counted and memory.contest_latest_free(ptr):
                    # A free on another stream (a free_async or a free node), unordered with
                    # this launch, and the auto-free both free the last launch's memory:
                    # whichever runs second must find it gone, never free the memory this
                    # launch commits there, so no room is made (a free of this launch's
                    # memory waits until that one ran).
                    pass
                elif auto_free and not_run:
                    memory.allow_another_free(ptr, not_run=True, decommit=True)
            if counted:
                self.frees_counted[ptr] = number

    def _committed(self, ptr: Any) -> bool:
        try:
            self.compiled.alloc_memory[ptr].resolve(ptr, 0)  # the node's own device's memory
        except HipError:
            return False
        return True

    def home_stream(self) -> Stream:
        """This executable's own stream on its device, for cross-device launches.

        Made outside the executable's lock: making a stream takes the engine's lock, and a
        launch holds the engine's lock while it takes the executable's (one order for both).
        """
        home = self.home
        if home is not None:
            return home
        made = Stream._create(self.device, non_blocking=True, owned=True)
        with self.lock:
            home = self.home
            if home is None and not self.pool._closed:
                self.home = made
                if self.record is not None:
                    self.record.home = made
                return made
        made.destroy()  # another thread made it first, or freed the executable meanwhile
        if home is None:  # freed: its close() has run and would never destroy this stream
            raise destroyed("graph exec", self.owner)
        return home

    def enqueue(
        self, stream: Stream, signal_set: SignalSet, report_to: Stream | None = None
    ) -> Completion:
        """Submit one launch: synchronous from here on, so it is atomic for the event loop.

        ``report_to``: the stream a failure is reported to, if not ``stream``. A refused launch
        (destroyed executable or stream, or the race checker's raise mode) gives ``signal_set``
        back and changes nothing.
        """
        engine = self.device._engine
        try:
            lock = engine.submitting()
        except BaseException:
            self.pool.give_back(signal_set)
            raise
        with lock:  # no other loop can take the device between the check and the submit
            try:
                engine.claim_locked()  # taken by another thread's loop meanwhile, and busy
            except BaseException:
                self.pool.give_back(signal_set)
                raise
            return self._enqueue_claimed(stream, signal_set, report_to)

    def _enqueue_claimed(
        self,
        stream: Stream,
        signal_set: SignalSet,
        report_to: Stream | None,
        prelude: Program | None = None,
    ) -> Completion:
        """Check, then submit one launch on ``stream``; the caller holds the engine's lock.

        ``prelude``: a program submitted on ``stream`` just ahead of the launch, once every
        check passed (a cross-device launch's wait for the user's stream), so a refused launch
        submits nothing.
        """
        owner = self.owner
        plan = None
        if observe.observer is not None:  # the race checker decides before anything commits
            try:
                plan = observe.observer.launching(owner, stream, report_to)
            except BaseException:
                self.pool.give_back(signal_set)
                raise
        with self.lock:
            part = stream._capture  # read once: another thread may end the capture meanwhile
            compiled = self.compiled
            try:
                if (
                    owner._state is not ExecState.OPEN
                    or stream._state is not StreamState.OPEN
                    or part is not None
                ):
                    # Destroyed, or began capturing, while we waited for a set.
                    owner._check_alive()
                    stream._check_open()
                    assert part is not None
                    raise part.unsupported("a graph launch")
                if compiled.bindings:  # event nodes: one whose event was destroyed refuses it
                    _check_events(compiled.bindings, self.updater.graph)
                if compiled.unfreed_ptrs:  # again, as it commits: another launch that also
                    self._check_allocations(report_to or stream)  # parked may have gone first
            except BaseException:  # refused: the set goes back, nothing else was taken
                self.pool.give_back(signal_set)
                raise
            owner._refcount += 1
            version = self.updater.version
            version.in_flight += 1
            self.launches += 1
            if compiled.unfreed_ptrs:
                self.note_frees(self.launches > 1, report_to or stream)
                self.last_stream = weakref.ref(report_to or stream)
            if compiled.foreign_frees:  # one list test: graphs that free others' memory
                for memory, ptr in compiled.foreign_frees:
                    memory.announce_free(ptr, report_to or stream)
            signals = signal_set.signals
            signals[compiled.prev_index] = self.last_done
            if compiled.bindings:  # event nodes: none in most graphs
                _bind_events(compiled.bindings, signals, self.device)
            launch = Launch(self, version, signal_set, report_to or stream)
            self.last_done = launch.done
        strand_ops = version.strand_ops
        head = Program(strand_ops[0], launch.done, signals=signals, on_done=launch.finished)
        if prelude is not None:
            stream._submit_locked(prelude)
        stream._submit_locked(head)
        if len(strand_ops) > 1:
            queues = self.device._queues
            base = stream._queue._index
            for k in range(1, len(strand_ops)):
                internal = self.internal_streams[k - 1]
                internal._queue = queues[(base + k) % len(queues)]  # never the launch queue
                internal._submit_locked(
                    Program(strand_ops[k], None, signals=signals, on_done=launch.strand_finished)
                )
        completion = make_completion(launch.done, self.device, head)
        if observe.observer is not None:  # the race checker: a launch is one op on the stream
            observe.observer.launched(owner, stream, completion, plan, report_to)
        return completion

    # -- completion -----------------------------------------------------------------------------

    def finished(self, launch: Launch) -> None:
        """Completion of a launch (on the device's loop): return everything it borrowed."""
        error = launch.done._error
        if error is not None:
            launch.stream._report_error(error)
        self.pool.release(launch.signal_set)
        owner = self.owner
        with self.lock:
            launch.version.in_flight -= 1
            self.completed += 1
            updater = self.updater
            if updater.retired:
                updater.free_retired(self.completed)
            owner._refcount -= 1  # the launch's reference
            last = not owner._refcount
        if last:
            owner._free_from_completion()

    # -- teardown -------------------------------------------------------------------------------

    def fail_waiters(self, error: BaseException) -> None:
        """Wake every launch parked for a signal set with ``error`` (the executable is gone)."""
        self.pool.fail_waiters(error)

    def close(self) -> None:
        """Drop the signal sets and the internal and home streams (nothing is in flight)."""
        self.pool.close()
        for stream in self.internal_streams:
            stream.destroy()
        self.internal_streams = []
        home, self.home = self.home, None
        if home is not None:
            home.destroy()


def _check_events(bindings: list[EventBinding], graph: ExecGraph) -> None:
    """Refuse a launch whose event-record or event-wait node names a destroyed event.

    HIP's event nodes keep the raw ``hipEvent_t``, so a launch after ``hipEventDestroy`` uses
    freed memory. Here the launch is refused before anything is taken or recorded
    (InvalidValue, a destroyed event's code for graph event nodes); giving the node a live
    event (``exec.set_event_record_node_event`` / ``set_event_wait_node_event``) makes the
    executable launchable again. A node inside a child graph has no setter of its own: the
    child-graph node gets a graph with a live event (``set_child_graph_node_params``), or the
    executable an update.
    """
    for binding in bindings:
        event = binding.node.params.event
        if not event.alive:
            kind = "record" if binding.is_record else "wait"
            if any(node is binding.node for node in graph.nodes):
                hint = f"give it a live one with set_event_{kind}_node_event"
            else:
                hint = (
                    "it is inside a child graph: give the child-graph node a graph with a live "
                    "event (set_child_graph_node_params), or update the executable"
                )
            raise InvalidValue(
                f"event-{kind} node id={binding.node.id} names a destroyed event ({event!r}); "
                f"{hint}"
            )


def _bind_events(bindings: Any, signals: list[Any], device: Device) -> None:
    """Give a launch's event nodes their signals in ``signals``; ``device`` runs the launch
    and stamps the records with its clock.

    Every wait node takes its event's record from before this launch, and only
    then do the record nodes re-record: in the compiled (strand) order a record
    node can come before a wait node it depends on, and that wait must not take
    the record it precedes (the launch would wait for itself and never end).
    """
    for binding in bindings:
        if not binding.is_record:
            signals[binding.index] = binding.node.params.event._signal or REACHED
    for binding in bindings:
        if binding.is_record:
            record = Signal(1)
            signals[binding.index] = record
            binding.node.params.event._recorded(record, device)


def _legacy_ordered(by: object, stream: object) -> bool:
    """Whether work enqueued on ``stream`` now is ordered after the work made on ``by`` before
    it by the legacy default-stream rules: both are streams of one device, one of them its
    null stream and the other a blocking stream (see Stream._implicit_waits)."""
    if not isinstance(by, Stream) or not isinstance(stream, Stream):
        return False
    if by._device is not stream._device:
        return False
    if by._non_blocking or stream._non_blocking:
        return False
    return by._is_null or stream._is_null
