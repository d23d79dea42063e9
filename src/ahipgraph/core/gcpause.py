"""Pausing Python's cyclic garbage collector while a bulk build allocates.

Instantiating or cloning a graph allocates several container objects per node, all of which stay
reachable (nothing built there becomes garbage unless the call fails). The collector counts
those allocations and runs young-generation passes every few hundred, plus a full pass over
every live object each time the survivors grow by a quarter: for a million-node graph that is
thousands of passes that can free nothing, about half the cost of the build. :func:`paused`
pauses the collector's automatic passes for the duration of such a build.

A pause raises the collector's first threshold (``gc.set_threshold``) to
:data:`PAUSED_YOUNG` allocations and puts the program's thresholds back afterwards; it never
calls ``gc.disable()`` or ``gc.enable()``. So ``gc.isenabled()`` always answers what the
program chose, a program that switches the collector off (before or during a pause) keeps it
off, and a program that sets its own thresholds during a pause keeps them. The raised
threshold is also a bound: however a pause goes wrong, a young pass still comes every
:data:`PAUSED_YOUNG` allocations, and that pass ends any pause whose event loop has stopped
(below).

What is saved is the repeated full passes over everything alive; the young objects the build
made are still counted, so the first allocation after the pause runs one young-generation pass
over them. Objects a paused build makes and drops (an update's snapshot) cost the collector
nothing at all.

Building a large graph node by node is the same bulk build, spread over the user's own loop of
``add_*_node`` calls (or captured operations), with no ``with`` block around it. There
:func:`pause_until_yield` pauses the collector from inside the build, and the event loop
ends the pause at its next iteration, which comes when the building task awaits something that
suspends or ends. A build in a task is one synchronous burst, so its pause lasts exactly as
long as the build. A loop closed before that iteration drops the callback, which ends the
pause as it is freed; a loop stopped in the very iteration that built (``loop.stop()`` called
by the build) and kept open ends it at the collector's next young pass.

A thread without a running event loop (a script that builds its graphs before ``asyncio.run``,
a worker thread) has no iteration to end its pause. There the pause is watched instead: young
passes still come, and each one asks the build's ``progress`` (the graph's node count) whether
it grew since the one before. The first pass that finds it unchanged or smaller (the graph
destroyed), or the graph gone, ends the pause. The passes back off as the build goes on: the
first comes after :data:`WATCHED_YOUNG` allocations, and each pass that finds the build grown
lets the next come after :data:`WATCHED_YOUNG` more allocations than the pause has lasted so
far, at most :data:`PAUSED_YOUNG` (allocations of container objects as the collector counts
them: by every thread, less those freed). For a build alone that doubles the interval at every
pass, so a build of N allocations makes about log2(N / WATCHED_YOUNG) young passes rather than
one per :data:`WATCHED_YOUNG`, each over what the build made since the one before. At CPython's
default thresholds every twelfth pass is a first-generation one, over everything the build made
since the last such pass: a build of up to about 13 million allocations (four million kernel
nodes) makes at most seven passes, none of them a first-generation one unless the collector had
already made more than four young passes since its last first-generation one
(``gc.get_count()[1]``) when the pause began.

The price is an overshoot that grows with the build, as the collector's own full passes wait
for the long-lived objects to grow by a quarter. A pause outlives its build by at most two
intervals (the pass that sees the build's last growth, then the one that finds none), and an
interval is at most :data:`WATCHED_YOUNG` more than the allocations the pause had counted at
the pass that set it. So if the pause has counted B allocations when the build makes its last,
fewer than 3 * (B + :data:`WATCHED_YOUNG`) allocations follow before the pause ends, and never
more than twice :data:`PAUSED_YOUNG`. (A program whose own first threshold is larger than the
interval keeps it, as before: the passes then come at the program's threshold.) Intervals are
counted in allocations, not in passes: passes that come more often (another watched build's,
the program's own ``gc.collect``) ask a build more often without making its interval grow any
faster. A build that begins while a pause is in force (another thread's) starts none of its
own and goes on under that one; several watched builds are in force together only when their
threads all found none in force as they began (a thread switch between the check and the
start). Each then keeps its own interval, and the threshold is the smallest of them, so none
overshoots more than its own bound; once the last watched build ends, any other pause still in
force holds the passes back to :data:`PAUSED_YOUNG` again, and the last pause to end puts the
program's thresholds back.

The thread's next bulk operation (:func:`paused`: the graph's instantiate, a clone) ends its
watched pause at once, and so does the graph's freeing (a pause that only the passes could
end would outlive a graph dropped by a program that removed the collector's callback from
``gc.callbacks``; such a program's pause over a graph it keeps ends at that thread's next
bulk operation).

When such a pause ends a large build (:func:`_settle`), one pass does what the collector's
accounting would make it do next: a full pass if the build's young objects are so many that
CPython's next second-generation pass would bring one (more than a quarter of every object
the process holds), and one pass over both young generations otherwise. Either way the pass
comes at the end of the build, at the task's first yield, rather than in whatever the program
does next (a first replay). Older objects the program frees during the build (the graph a
rebuilt one replaces) lower the collector's count of young objects as if they were young: when
the count has fallen below the program's first threshold, the young objects are counted
themselves, so such a build still ends with its pass.

Only the collector's automatic passes are affected: reference counting frees everything as
usual, and an explicit ``gc.collect()`` still works. Nested and concurrent pauses (several
threads instantiating at once) are counted, and the thresholds go back only when the last one
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["PAUSED_YOUNG", "WATCHED_YOUNG", "is_paused", "pause_until_yield", "paused", "pauses"]

# While paused, a young pass comes only after this many allocations of tracked objects (about
# 2.5 million kernel nodes): rare enough that a bulk build makes few or none, and a bound on
# how long a pause that nothing ends can last.
PAUSED_YOUNG = 10_000_000
# A watched pause (a build in a thread without a running loop) lets its first young pass come
# after this many allocations (about 30,000 kernel nodes), to see whether its build goes on:
# often enough that a small build's pause ends soon after it. Each pass that finds the build
# grown lets the next come after this many more allocations than the pause has counted so far
# (at most PAUSED_YOUNG): twice the interval before, for a build alone, so a build of N
# allocations makes about log2(N / WATCHED_YOUNG) young passes (see _WatchedBurst).
WATCHED_YOUNG = 100_000

_lock = threading.RLock()  # re-entrant: a pause freed by the collector ends inside its own lock
pauses = 0  # pauses in force; read without the lock as a hint (``Graph._attach``)
_saved: tuple[int, ...] = ()  # the program's thresholds, while paused
_applied: tuple[int, ...] = ()  # the thresholds the pause set
_bursts: weakref.WeakSet[_Burst] = weakref.WeakSet()  # pauses an event loop ends
_watched: set[_WatchedBurst] = set()  # pauses the collector's passes end (held here)
_in_callback = False  # ending a pause from the collector's callback (see _on_collect)
# Young allocations the collector counted before each pass it made while the module's callback
# was in place (gc.get_count()[0] at the pass's start, which the pass then sets back to 0):
# with the count since the last pass, how many it has counted in all. A watched pause reads it
# at its start and at each pass to know how many allocations it has lasted (_WatchedBurst).
_counted = 0
_settling = False  # making a burst's closing pass (see _leave)


def is_paused() -> bool:
    """Whether a pause is in force (the collector's automatic passes are held back)."""
    return pauses > 0


def _enter() -> None:
    """Start one pause; the first saves the program's thresholds and sets the pause's."""
    global pauses, _saved, _applied
    with _lock:
        # Counted first: the allocations below may run a young pass in this thread, whose
        # callback may end other pauses (the lock is re-entrant), but never the last one.
        pauses += 1
        try:
            if pauses == 1:
                _saved = gc.get_threshold()
                _applied = ()
                if _on_collect not in gc.callbacks:
                    gc.callbacks.append(_on_collect)
            _apply_pause_thresholds()
        except BaseException:  # a Ctrl-C as the thresholds were set: no pause began
            _end_one()  # the caller never ends it: end it here, and put them back
            raise


def _apply_pause_thresholds() -> None:
    """Set the thresholds a pause holds (caller holds the lock): the program's, with the first
    raised to :data:`PAUSED_YOUNG`, or while watched pauses need passes to see their builds
    end, only to the smallest of their intervals (each its own, :class:`_WatchedBurst`), so no
    build's pass comes later than its own interval allows. Thresholds the program set during
    the pause stay."""
    # Read before anything allocates: a young pass run by an allocation here may end pauses
    # (the last one too, putting the program's thresholds back) or set them again itself.
    saved, before = _saved, _applied
    current = gc.get_threshold()
    if not pauses or _applied is not before:  # that pass ended or set them: nothing left
        return
    if before and current != before:
        return
    first = saved[0]
    young = min([burst.interval for burst in _watched], default=PAUSED_YOUNG)
    applied = (max(first, young) if first else 0, *saved[1:])
    if applied != before and pauses and _applied is before:
        _set_pause_thresholds(applied)


def _set_pause_thresholds(applied: tuple[int, ...]) -> None:
    """Set ``applied`` as the pause's thresholds (caller holds the lock), recorded first.

    ``_applied`` is how the end of the pause tells the pause's thresholds from ones the
    program set meanwhile, which it keeps. A Ctrl-C (``KeyboardInterrupt``) may land as
    ``gc.set_threshold`` returns: recorded only after the call, the thresholds in force would
    then pass for the program's own, and stay for good. Recorded before it, and put back if
    the call did not apply them, the record names the thresholds in force either way.
    """
    global _applied
    before = _applied
    _applied = applied
    try:
        gc.set_threshold(*applied)
    except BaseException:
        if gc.get_threshold() != applied:  # interrupted before it applied them
            _applied = before
        raise


def _leave(settle: bool = False) -> None:
    """End one pause; the last one puts the program's thresholds back.

    With ``settle`` (a burst's end), the last pause first makes the pass the burst's objects
    call for (:func:`_settle`), while the thresholds still hold back the automatic passes: the
    first allocation after they go back would otherwise start a young pass of its own. The
    pass runs outside the lock: the finalizers it calls may take other locks, whose holders
    may be waiting to pause.
    """
    global _settling
    if settle:
        with _lock:
            settle = pauses == 1 and gc.get_threshold() == _applied and not _settling
            _settling = _settling or settle
            young_threshold = _saved[0] if settle else 0
        if settle:
            try:
                _settle(young_threshold)
            finally:  # a Ctrl-C that lands in the pass still ends the pause
                _settling = False
                _end_one()
            return
    _end_one()


def _end_one() -> None:
    """The count-down half of :func:`_leave`, which must run whatever the settle pass raised:
    a pause it skipped would hold the collector back for the rest of the process.

    For the same reason a Ctrl-C (``KeyboardInterrupt``) that lands as one of the collector
    calls here returns must not cut the end short (see :func:`_set_pause_thresholds`): before
    the pause was counted down, it would stay in force for good; after, its thresholds
    would, or the callback. The pause is counted down first, and the rest, which comes to the
    same however often it runs, is finished before the interrupt is raised.
    """
    global pauses
    with _lock:
        pauses -= 1
        interrupted: BaseException | None = None
        while True:
            try:
                _after_one_ended()
            except Exception:
                raise
            except BaseException as error:  # a Ctrl-C as a call returned: finish, then raise
                interrupted = error
                continue
            break
        if interrupted is not None:
            raise interrupted


def _after_one_ended() -> None:
    """What follows one pause's count-down (caller holds the lock): the pauses left hold
    their thresholds, or the last one puts the program's back. The same however often it
    runs (see :func:`_end_one`)."""
    global _saved, _applied
    if pauses:
        _apply_pause_thresholds()  # the last watched pause may have ended
        return
    if gc.get_threshold() == _applied:  # else the program set its own: they stay
        gc.set_threshold(*_saved)
    _saved = _applied = ()
    if not _in_callback:  # removing it while the collector runs its callbacks skips one
        with contextlib.suppress(ValueError):  # the program may have removed it
            gc.callbacks.remove(_on_collect)


@contextmanager
def paused() -> Iterator[None]:
    """Hold the collector's automatic passes back inside the ``with`` block.

    The block is this thread's next bulk operation (an instantiate, a clone): a watched build
    of this thread is over, and its pause ends here rather than at a later pass.
    """
    _enter()
    try:
        if _watched:
            _end_watched(threading.get_ident())
        yield
    finally:
        _leave()


def _end_watched(thread: int) -> None:
    """End the watched pauses of builds in ``thread``."""
    with _lock:
        ended = [burst for burst in _watched if burst.thread == thread]
    for burst in ended:
        burst()


# A burst that left at least this many young tracked objects ends with one pass over them.
_BULK_YOUNG = 100_000


def _settle(young_threshold: int) -> None:
    """The pass the collector's accounting would make next, made at the end of a large burst.

    What a bulk build made lives as long as its graph. Left to the collector, each of its
    objects would be walked by a first-generation pass, again by a second-generation pass, and
    then by the full pass their promotion brings once they are more than a quarter of the
    long-lived objects. If they are (the young objects are more than a quarter of every memory
    block the process holds, which bounds its tracked objects), one full pass now does all
    three; otherwise one pass over both young generations does the first two. The collector
    keeps its own accounting, so later full passes come as they always do. A program that
    switched the automatic passes off (``gc.disable()``, or a first threshold of 0) gets none.

    How many young objects there are is read from the collector's count
    (``gc.get_count()[0]``), which is cheap but is allocations less deallocations: CPython
    lowers it for every container object freed, an old one too, and never below zero. So a
    burst in which the program also freed older objects (the graph a rebuilt one replaces, a
    cache trimmed) counts fewer young objects than it left, down to none, and nothing would
    walk them until the program had allocated ``young_threshold`` (its own first threshold)
    more: the young pass would land in what it does next. Below that threshold the young
    generation itself is counted (a list of its objects; when nothing was freed it is as
    short as the count). A count at or above it is taken as it reads: the collector's own
    young pass over them comes at the first allocation after the pause anyway.
    """
    if not gc.isenabled() or young_threshold == 0:  # automatic passes off, either way
        return
    young = gc.get_count()[0]
    if young < young_threshold:
        young = len(gc.get_objects(generation=0))
    if young < _BULK_YOUNG:
        return
    if young * 4 > sys.getallocatedblocks():
        gc.collect()
    else:
        gc.collect(1)


class _Burst:
    """One pause that the running event loop ends: called at its next iteration.

    If the loop is closed first, its queue drops the callback, and the pause ends when this is
    freed. If the loop stops without running it and stays open, the collector's next young
    pass ends it (:func:`_on_collect`).
    """

    __slots__ = ("__weakref__", "ended", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        # Ended until its pause is counted (pause_until_yield arms it): one freed or asked
        # before then, say by a pass that starting the pause runs, must not end another pause.
        self.ended = True
        self.loop: asyncio.AbstractEventLoop | None = loop

    def __call__(self) -> None:
        # Inside a pass (the collector's callback) no other pass can run, and the one starting
        # walks the young objects anyway: the settle pass is for an end the loop brings.
        self.end(settle=not _in_callback)

    def end(self, settle: bool, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        """End this pause (once; any later call does nothing).

        Nothing while the interpreter shuts down: a pause still in force at exit ends as its
        graph is freed, by then perhaps after this module's globals were cleared, and there
        is no program left for the collector's passes to slow. (``_finalizing`` is bound
        here, as ``sys`` may be one of those globals.)
        """
        if _finalizing():
            return
        with _lock:
            if self.ended:
                return
            self.ended = True
            self.loop = None
            _bursts.discard(self)
            _watched.discard(self)
        _leave(settle=settle)

    __del__ = __call__

    def stalled(self) -> bool:
        """Whether the loop that should end this has stopped (or is gone)."""
        loop = self.loop
        return loop is None or not loop.is_running()


class _WatchedBurst(_Burst):
    """A pause the collector's passes end: a build in a thread without a running loop.

    ``progress(owner)`` says how far the build has got (a graph's node count); the owner is
    held weakly, so a pause never keeps a dropped graph alive, and its freeing ends the pause
    at once: a program that removed the collector's callback (``gc.callbacks``) has no pass
    to see the graph gone. Held in ``_watched`` until it ends.

    ``interval`` is how many allocations this build lets pass before the next young pass asks
    it again: :data:`WATCHED_YOUNG` at first, then, at each pass that finds it grown,
    :data:`WATCHED_YOUNG` more than the allocations the collector has counted since the pause
    began (``start``, on the scale of ``_counted``), at most :data:`PAUSED_YOUNG`. For a build
    alone, whose passes come at that interval, this doubles it at every pass. Counted in
    allocations rather than passes, it does not grow faster when passes come more often (a
    smaller interval of another thread's build, the program's own ``gc.collect``), so it stays
    within what this build has lasted, whatever else makes passes.
    """

    __slots__ = ("interval", "owner", "progress", "seen", "start", "thread")

    def __init__(self, owner: object, progress: Callable[[Any], int]) -> None:
        super().__init__(None)
        self.thread = threading.get_ident()
        this = weakref.ref(self)  # the owner's reference must not keep the pause alive

        def owner_gone(_: object) -> None:
            burst = this()
            if burst is not None:  # no settle pass: this may run inside a pass, or the lock
                burst.end(settle=False)

        self.owner = weakref.ref(owner, owner_gone)
        self.progress = progress
        self.seen = progress(owner)
        self.interval = WATCHED_YOUNG
        self.start = _counted + gc.get_count()[0]  # the allocations counted before it began

    def stalled(self) -> bool:
        """Whether the build made no progress since the last pass asked (or its owner is gone).

        Called by a pass (the collector's callback, with the lock): one that finds the build
        grown also sets the interval before its next pass (see the class notes)."""
        owner = self.owner()
        if owner is None:
            return True
        seen = self.progress(owner)
        if seen <= self.seen:  # unchanged, or fewer (its graph destroyed): the build is over
            return True
        self.seen = seen
        lasted = max(_counted - self.start, 0)  # (the count falls as the program frees)
        self.interval = min(WATCHED_YOUNG + lasted, PAUSED_YOUNG)
        return False


def _on_collect(phase: str, info: dict[str, Any]) -> None:
    """The collector's callback while paused: ends the pauses whose loop stopped, and the
    watched pauses whose build stopped growing; the watched builds still growing back off.

    Called at the start of every pass. A pass during a pause means :data:`PAUSED_YOUNG`
    allocations since the last (fewer while a pause is watched: the smallest interval of the
    watched builds): a burst whose loop is no longer running will not be ended by it, so it
    ends here, and so does a watched build that made no progress since the pass before. Each
    watched build still growing sets its next interval, and the pause's threshold follows.
    """
    global _in_callback, _counted
    if phase != "start":
        return
    # Counted at every pass, before anything that may skip the rest: a skipped pass's
    # allocations still count towards every watched build's interval at the next.
    _counted += gc.get_count()[0]
    if not _bursts or _settling:
        return
    if not _lock.acquire(blocking=False):  # another thread is pausing: its next pass will do
        return
    try:
        # Flagged before asking: the question may free a watched build's graph (the reference
        # ``stalled`` took was the last), and that ends its pause at once, which must not
        # remove this callback from the list the collector is walking. Asked over a copy of
        # the set, which that end changes.
        _in_callback = True
        try:
            for burst in [burst for burst in tuple(_bursts) if burst.stalled()]:
                burst()
            if _watched:  # the builds still growing have new intervals (an end applied them too)
                _apply_pause_thresholds()
        finally:
            _in_callback = False
    finally:
        _lock.release()


def pause_until_yield(
    owner: object | None = None, progress: Callable[[Any], int] | None = None
) -> None:
    """Pause the collector until the running event loop's next iteration (a bulk build).

    Without a running loop in this thread, the pause is watched instead (see the module
    notes): ``progress(owner)`` tells the collector's passes whether the build goes on, and
    without them there is no pause. Does nothing with a pause already in force, or with the
    collector switched off by the program.
    """
    if pauses or not gc.isenabled():
        return
    loop = asyncio._get_running_loop()
    if loop is None:
        # (A first threshold of 0 makes no passes: none to hold back, and none to end it.)
        if owner is not None and progress is not None and gc.get_threshold()[0]:
            watched = _WatchedBurst(owner, progress)
            with _lock:
                _watched.add(watched)  # first: the pause's threshold is a watched one
                try:
                    _enter()
                except BaseException:
                    _watched.discard(watched)
                    raise
                watched.ended = False
                _bursts.add(watched)  # only now may a pass end it (see _on_collect)
        return
    burst = _Burst(loop)
    with _lock:
        _enter()
        burst.ended = False
        _bursts.add(burst)
    try:
        loop.call_soon(burst)
    except RuntimeError:  # a closed loop: no pause, and the build goes on
        burst()
    except BaseException:
        burst()
        raise
