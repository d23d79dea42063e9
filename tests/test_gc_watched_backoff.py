"""A watched collector pause backs off as its build goes on (``core/gcpause.py``).

A build in a thread without a running event loop is paused with young passes still coming,
each asking the build whether it grew. With a fixed interval between them, a build of a
million kernel nodes made 31 young passes, and every twelfth pass was a first-generation one
over everything built so far. Each pass that finds the build grown now lets the next come
after ``WATCHED_YOUNG`` more allocations than the pause has lasted (at most ``PAUSED_YOUNG``),
so the interval doubles. These tests pin the few passes, the bound on how long a pause outlives
its build, the smallest interval winning between builds in several threads, and that the
program's own thresholds, its ``gc.disable()`` and its own callbacks are left alone.

The tests that drive a stand-in build (a counter, and self-referencing lists that only a pass
frees, so the collector's count grows by exactly one per list) shrink ``WATCHED_YOUNG`` and
``PAUSED_YOUNG`` so that the garbage they make stays small; the graph builds use the real ones.
Every allocation count here is read from the collector itself (:class:`_Passes`).
"""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
import textwrap
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause

WATCHED = 10_000  # the stand-in builds' WATCHED_YOUNG
CAP = 80_000  # and their PAUSED_YOUNG
CHUNK = 500  # allocations between two steps of a stand-in build


@ahg.kernel
def noop(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing: only building is exercised."""


@dataclass(frozen=True)
class _Pass:
    generation: int
    paused: bool
    threshold: int  # the first threshold in force when the pass came
    counted: int  # the collector's count of allocations, in all, when it came


class _Passes:
    """The collector's passes, as a callback first in ``gc.callbacks`` sees them start (so
    before the pause's own callback has asked anything), and every allocation the collector
    counted since it was installed: the count of each pass as it starts, plus the count now."""

    def __init__(self) -> None:
        self.seen: list[_Pass] = []
        self.counted = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.counted += gc.get_count()[0]
            self.seen.append(
                _Pass(info["generation"], gcpause.is_paused(), gc.get_threshold()[0], self.counted)
            )

    def allocations(self) -> int:
        return self.counted + gc.get_count()[0]


@dataclass
class _Collector:
    passes: _Passes
    thresholds: tuple[int, ...]  # the program's

    @property
    def young(self) -> int:
        return self.thresholds[0]


def _drop_left_callback() -> None:
    """A pause ended by a pass leaves the module's callback in place (removing it while the
    collector walks its callbacks would skip one); the next pause's end removes it."""
    with gcpause.paused():
        pass


@pytest.fixture
def collector() -> Iterator[_Collector]:
    """The collector as the program set it, with :class:`_Passes` first among its callbacks
    and no young pass counted towards a first-generation one; checked unchanged after."""
    assert gc.isenabled()
    assert not gcpause.is_paused()
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    passes = _Passes()
    gc.collect()
    gc.callbacks.insert(0, passes)
    try:
        yield _Collector(passes, thresholds)
    finally:
        gc.callbacks.remove(passes)
    left_paused = gcpause.is_paused()
    if left_paused:  # (a failed test's build, stopped: two passes end it for the next tests)
        gc.collect(0)
        gc.collect(0)
    assert not left_paused, "a test left the collector paused"
    _drop_left_callback()
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    assert gc.callbacks == callbacks


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in builds' intervals: WATCHED at first, at most CAP."""
    monkeypatch.setattr(gcpause, "WATCHED_YOUNG", WATCHED)
    monkeypatch.setattr(gcpause, "PAUSED_YOUNG", CAP)


class _Build:
    """Stands for a graph being built: ``steps`` is its node count."""

    def __init__(self) -> None:
        self.steps = 0


def _progress(build: _Build) -> int:
    return build.steps


def _garbage(count: int) -> None:
    """``count`` allocations the collector counts and only a pass frees (so its count is not
    lowered as they go): lists that hold themselves."""
    for _ in range(count):
        cell: list[object] = []
        cell.append(cell)


def _step(build: _Build) -> None:
    _garbage(CHUNK)
    build.steps += 1


def _in_thread(work: Callable[[], None]) -> None:
    """``work`` in a thread without an event loop; what it raised, raised here."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:
            errors.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(60)
    assert not worker.is_alive()
    if errors:
        raise errors[0]


def _in_threads_together(barrier: threading.Barrier, *works: Callable[[], None]) -> None:
    """Each of ``works`` in a thread of its own (no event loop), with ``barrier`` broken if
    one raises, so that it cannot leave another waiting; the first error raised, raised here
    (a broken barrier only if there is no other)."""
    errors: list[BaseException] = []

    def run(work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(work,)) for work in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    errors.sort(key=lambda error: isinstance(error, threading.BrokenBarrierError))
    if errors:
        raise errors[0]


def _watched_passes(passes: _Passes, since: int) -> list[_Pass]:
    return [seen for seen in passes.seen[since:] if seen.paused]


def _grow_until_passes(build: _Build, passes: _Passes, count: int) -> None:
    """Build until ``count`` more passes have come, then one step more (the build's growth
    just after a pass is the one the next pass sees last)."""
    target = len(passes.seen) + count
    while len(passes.seen) < target:
        _step(build)
    _step(build)


def _allocations_until_unpaused(passes: _Passes, limit: int) -> int:
    """Allocate (nothing growing) until no pause is in force; how many allocations came before
    the pass that ended it, or more than ``limit`` if none did by then."""
    start = passes.allocations()
    first = len(passes.seen)
    while gcpause.is_paused():
        if passes.allocations() - start > limit:
            return passes.allocations() - start
        _garbage(CHUNK)
    ending = [one for one in passes.seen[first:] if one.paused]
    assert ending, "the pause ended without a pass"
    return ending[-1].counted - start


@contextmanager
def unraisable_into(into: list[type[BaseException] | None]) -> Iterator[None]:
    """What is reported as unraisable in the block (an exception in a collector callback, a
    finalizer), its type appended to ``into`` rather than failing the test."""
    hook = sys.unraisablehook
    sys.unraisablehook = lambda info: into.append(info.exc_type)
    try:
        yield
    finally:
        sys.unraisablehook = hook


@pytest.mark.usefixtures("small")
def test_each_pass_that_finds_the_build_grown_doubles_the_interval(
    collector: _Collector,
) -> None:
    """Until the interval reaches PAUSED_YOUNG, each pass that finds the build grown lets the
    next come after WATCHED_YOUNG more allocations than the pause has lasted: for a build
    alone, twice the one before. With a fixed interval, every pass came after WATCHED_YOUNG."""
    passes = collector.passes
    seen: list[_Pass] = []
    start: list[int] = []

    def build_in_thread() -> None:
        build = _Build()
        first = len(passes.seen)
        start.append(passes.allocations())
        gcpause.pause_until_yield(build, _progress)
        assert gc.get_threshold()[0] == max(collector.young, WATCHED)
        _grow_until_passes(build, passes, 6)
        seen.extend(_watched_passes(passes, first))
        del build  # its freeing ends the pause

    _in_thread(build_in_thread)
    assert [one.generation for one in seen] == [0] * 6
    thresholds = [one.threshold for one in seen]
    assert thresholds[0] == WATCHED
    for before, now in itertools.pairwise(thresholds[:4]):
        assert 1.9 * before <= now <= 2.1 * before, thresholds
    assert thresholds[4:] == [CAP, CAP]  # 8 * WATCHED: the cap
    # What each pass set: WATCHED more than the allocations since the pause began (counted
    # here from a little before it, and a few allocations earlier in each pass).
    for one, after in itertools.pairwise(seen[:4]):
        assert after.threshold <= WATCHED + one.counted - start[0] + 10
    assert not gcpause.is_paused()


@pytest.mark.parametrize("steps_after", [1, WATCHED // CHUNK // 2])
@pytest.mark.usefixtures("small")
def test_the_pause_ends_within_three_times_what_it_lasted(
    collector: _Collector, steps_after: int
) -> None:
    """The build stops ``steps_after`` steps after its second pass (one: the worst case, a
    stop just after a pass, whose next pass still sees the growth and doubles the interval
    again). Fewer than 3 * (B + WATCHED_YOUNG) allocations follow before the pause ends, B
    being those counted from its start to the build's last; then the program's thresholds
    are back. Nor does it end sooner than the interval the last growth brought."""
    passes = collector.passes
    results: list[int] = []

    def build_in_thread() -> None:
        build = _Build()
        start = passes.allocations()
        gcpause.pause_until_yield(build, _progress)
        _grow_until_passes(build, passes, 2)
        for _ in range(steps_after - 1):
            _step(build)
        lasted = passes.allocations() - start
        assert gcpause.is_paused()
        bound = 3 * (lasted + WATCHED)
        results.extend((lasted, _allocations_until_unpaused(passes, bound), bound))
        assert gc.get_threshold() == collector.thresholds
        assert build.steps  # alive to the end: a pass ended its pause

    _in_thread(build_in_thread)
    lasted, overshoot, bound = results
    assert overshoot < bound
    # The first pass after the stop saw the last growth: the one that ended the pause came
    # at the interval that pass set, WATCHED more than the pause had lasted by then.
    assert overshoot >= lasted + WATCHED


def test_a_watched_graph_build_makes_few_young_passes_and_no_older_one(
    collector: _Collector,
) -> None:
    """300,000 kernel nodes in a thread without a loop (about 930,000 allocations): with a
    fixed interval, seven young passes while paused and then a first-generation one over all
    that was built (the twelfth pass since the collection before); backing off, three (at
    about 1, 3 and 7 times WATCHED_YOUNG)."""
    passes = collector.passes
    graphs: list[ahg.Graph] = []

    def build_in_thread() -> None:
        graph = ahg.Graph()
        graphs.append(graph)
        for i in range(300_000):
            graph.add_kernel_node(noop, 1, 1, (i,))
        assert gcpause.is_paused()
        with gcpause.paused():  # this thread's next bulk operation ends its watched pause
            pass

    before = len(passes.seen)
    _in_thread(build_in_thread)
    during = passes.seen[before:]
    assert [one.generation for one in during if one.generation] == []
    watched = [one for one in during if one.paused]
    assert 2 <= len(watched) <= 4, watched
    assert not gcpause.is_paused()
    graphs[0].destroy()


def test_a_watched_graph_build_ends_its_pause_a_bounded_number_of_allocations_after(
    collector: _Collector,
) -> None:
    """The real intervals, a 40,000-node build: once it stops, the pause ends before
    3 * (B + WATCHED_YOUNG) allocations, and the program's thresholds come back."""
    passes = collector.passes
    graphs: list[ahg.Graph] = []
    results: list[int] = []

    def build_in_thread() -> None:
        graph = ahg.Graph()
        graphs.append(graph)
        start = passes.allocations()  # the pause starts later: B is overstated, if anything
        for i in range(40_000):
            graph.add_kernel_node(noop, 1, 1, (i,))
        assert gcpause.is_paused()
        bound = 3 * (passes.allocations() - start + gcpause.WATCHED_YOUNG)
        results.extend((_allocations_until_unpaused(passes, bound), bound))
        assert gc.get_threshold() == collector.thresholds

    _in_thread(build_in_thread)
    overshoot, bound = results
    assert overshoot < bound
    graphs[0].destroy()


@pytest.mark.usefixtures("small")
def test_two_watched_builds_in_two_threads_each_keep_their_own_bound(
    collector: _Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that starts while a pause is in force builds under it, unwatched: two watched
    builds are in force together only when the later one's thread found no pause in force and
    started its own after the first (a thread switch in between). Here the late thread is held
    there (its build's first progress call) while the early build backs off alone; then the
    threshold drops to the late build's first interval (the smallest wins). The two grow in
    lockstep, passes coming at the late build's intervals: the early build's interval is
    counted in allocations, so those passes do not make it grow faster than the early build
    has lasted (doubled at every pass, it would be four times that). The late build stops;
    its pause ends within its own bound, and the threshold goes up to the early build's
    interval; then the early build stops, and its pause ends within its own bound."""
    monkeypatch.setattr(gcpause, "PAUSED_YOUNG", 100 * WATCHED)  # no cap within reach
    passes = collector.passes
    late_checked = threading.Event()  # the late build's thread found no pause in force
    early_backed_off = threading.Event()
    lockstep = threading.Barrier(2)
    late_steps = 60  # rounds of lockstep (a step of each build) before the late build stops
    rounds: list[tuple[int, frozenset[int], int]] = []  # threshold, builds watched, count
    idents: dict[str, int] = {}
    starts: dict[str, int] = {}
    late_stopped = [0]  # the count when the late build stopped growing
    late_ended: list[int] = []  # the round in which its pause was found ended
    results: list[int] = []
    early, late = _Build(), _Build()

    def note_round() -> None:
        watched = frozenset(burst.thread for burst in gcpause._watched)
        rounds.append((gc.get_threshold()[0], watched, passes.allocations()))

    def end_of_round() -> bool:
        """Whether the late build's pause ended, as both threads see it after this round (read
        between two waits: the late thread notes the end only before the first)."""
        lockstep.wait(30)
        ended = bool(late_ended)
        lockstep.wait(30)
        return ended

    def late_progress(build: _Build) -> int:
        if not late_checked.is_set():  # the first call: as the pause is being made
            late_checked.set()
            assert early_backed_off.wait(30)
        return build.steps

    def run_late() -> None:
        idents["late"] = threading.get_ident()
        gcpause.pause_until_yield(late, late_progress)
        note_round()
        lockstep.wait(30)
        count = 0
        while True:
            if count < late_steps:
                _step(late)
            elif count == late_steps:
                late_stopped[0] = passes.allocations()
            count += 1
            note_round()
            if idents["late"] not in rounds[-1][1]:
                late_ended.append(len(rounds) - 1)
            if end_of_round():
                return

    def run_early() -> None:
        idents["early"] = threading.get_ident()
        assert late_checked.wait(30)
        starts["early"] = passes.allocations()
        gcpause.pause_until_yield(early, _progress)
        _grow_until_passes(early, passes, 2)  # alone: WATCHED, then about 2x: now about 4x
        note_round()
        starts["late"] = passes.allocations()  # the late build's pause begins after this
        early_backed_off.set()
        lockstep.wait(30)
        while True:
            _step(early)
            if end_of_round():
                break
        for _ in range(4):  # a little more alone, then it stops
            _step(early)
        lasted = passes.allocations() - starts["early"]
        bound = 3 * (lasted + WATCHED)
        results.extend((_allocations_until_unpaused(passes, bound), bound))

    _in_threads_together(lockstep, run_late, run_early)
    first, second = idents["early"], idents["late"]
    alone, both = rounds[0], rounds[1]
    assert alone[1] == {first}
    assert alone[0] >= 3.5 * WATCHED  # backed off twice
    assert both[1] == {first, second}
    assert both[0] == max(collector.young, WATCHED)  # the late build's first: the smallest
    (ended,) = late_ended
    assert all(watched == {first, second} for _, watched, _ in rounds[1:ended])
    threshold, watched, counted = rounds[ended]
    late_lasted = late_stopped[0] - starts["late"]
    last = [one for one in passes.seen if one.paused and one.counted < counted][-1]
    assert last.counted - late_stopped[0] < 3 * (late_lasted + WATCHED)  # the pass that ended it
    # The late build gone, the threshold is the early build's interval: WATCHED more than
    # the early build had lasted at the pass that set it, no more.
    assert watched == {first}
    assert WATCHED + 0.9 * (last.counted - starts["early"]) <= threshold
    assert threshold <= WATCHED + last.counted - starts["early"] + 10
    overshoot, bound = results
    assert overshoot < bound
    assert gc.get_threshold() == collector.thresholds


@pytest.mark.usefixtures("small")
def test_the_programs_own_thresholds_set_during_a_watched_build_stay(
    collector: _Collector,
) -> None:
    """The program sets its own thresholds after the build backed off: every later pass finds
    the build grown, and none puts a backed-off interval back over the program's; the pause
    ends with the program's thresholds still there."""
    passes = collector.passes
    own = (3_000, 7, 9)
    seen: list[tuple[int, ...]] = []

    def build_in_thread() -> None:
        build = _Build()
        gcpause.pause_until_yield(build, _progress)
        _grow_until_passes(build, passes, 2)
        gc.set_threshold(*own)
        try:
            for _ in range(5):
                _grow_until_passes(build, passes, 1)
                seen.append(gc.get_threshold())
            assert gcpause.is_paused()
            assert _allocations_until_unpaused(passes, 3 * own[0]) <= 3 * own[0]
            seen.append(gc.get_threshold())
        finally:
            gc.set_threshold(*collector.thresholds)

    _in_thread(build_in_thread)
    assert seen == [own] * 6


@pytest.mark.usefixtures("small")
def test_a_collector_switched_off_during_a_watched_build_stays_off(
    collector: _Collector,
) -> None:
    """``gc.disable()`` after the build backed off: no automatic pass comes, the program's
    own ``gc.collect`` passes still back the build off and end its pause, and the collector
    stays off through all of it."""
    passes = collector.passes
    seen: list[object] = []

    def build_in_thread() -> None:
        build = _Build()
        gcpause.pause_until_yield(build, _progress)
        _grow_until_passes(build, passes, 2)
        gc.disable()
        try:
            count = len(passes.seen)
            for _ in range(CAP * 3 // CHUNK):
                _step(build)
            seen.append(len(passes.seen) - count)  # no automatic pass while off
            threshold = gc.get_threshold()[0]
            gc.collect(0)  # the build grew: it backs off
            seen.append(gc.get_threshold()[0] > threshold)
            seen.append(gcpause.is_paused())
            gc.collect(0)  # no growth since: the pause ends
            seen.append(gcpause.is_paused())
            seen.append(gc.isenabled())
            seen.append(gc.get_threshold() == collector.thresholds)
        finally:
            gc.enable()

    _in_thread(build_in_thread)
    assert seen == [0, True, True, False, False, True]


@pytest.mark.usefixtures("small")
def test_a_build_freed_after_backing_off_ends_its_pause_at_once(
    collector: _Collector,
) -> None:
    """The program drops the build mid-way, after its interval grew: its freeing ends the
    pause there and then, with no pass, and the program's thresholds come back."""
    passes = collector.passes
    seen: list[object] = []

    def build_in_thread() -> None:
        build = _Build()
        gcpause.pause_until_yield(build, _progress)
        _grow_until_passes(build, passes, 3)
        seen.append(gc.get_threshold()[0] > 2 * WATCHED)
        count = len(passes.seen)
        del build
        seen.append(gcpause.is_paused())
        seen.append(gc.get_threshold() == collector.thresholds)
        seen.append(len(passes.seen) - count)

    _in_thread(build_in_thread)
    assert seen == [True, False, True, 0]


@pytest.mark.parametrize("then", ["allocates", "collects"])
def test_a_graph_dropped_mid_build_ends_its_pause(collector: _Collector, then: str) -> None:
    """A graph dropped (not destroyed) mid-build, after backing off, is held by its own
    reference cycles until a pass frees it. If the program goes on allocating, the pass after
    the one that sees the last growth finds it no bigger and ends the pause; if it collects,
    the pass asks it (it grew) and then frees it, which ends the pause inside the pass.
    Either way nothing keeps the graph alive and nothing is reported as unraisable."""
    passes = collector.passes
    refs: list[weakref.ref[ahg.Graph]] = []
    results: list[object] = []
    unraisable: list[type[BaseException] | None] = []

    def build_in_thread() -> None:
        graph = ahg.Graph()
        start = passes.allocations()
        for i in range(40_000):
            graph.add_kernel_node(noop, 1, 1, (i,))
        refs.append(weakref.ref(graph))
        del graph
        assert gcpause.is_paused()
        if then == "collects":
            gc.collect()
            results.append(refs[0]() is None)
        else:
            bound = 3 * (passes.allocations() - start + gcpause.WATCHED_YOUNG)
            results.append(_allocations_until_unpaused(passes, bound) < bound)
        results.append(gcpause.is_paused())
        results.append(gc.get_threshold() == collector.thresholds)

    with unraisable_into(unraisable), warnings.catch_warnings():
        warnings.simplefilter("ignore", ahg.ForgottenHandleWarning)  # dropped on purpose
        _in_thread(build_in_thread)
        assert results == [True, False, True]
        gc.collect()
    assert refs[0]() is None
    assert unraisable == []


def test_a_graph_build_that_raises_mid_way_ends_its_pause_after_a_bounded_overshoot(
    collector: _Collector,
) -> None:
    """The 60,001st add raises (a bad argument): the graph keeps its 60,000 nodes, and the
    pause ends once passes find it no bigger, within 3 * (B + WATCHED_YOUNG) allocations."""
    passes = collector.passes
    graphs: list[ahg.Graph] = []
    results: list[int] = []

    def build_in_thread() -> None:
        graph = ahg.Graph()
        graphs.append(graph)
        start = passes.allocations()

        def add_all(arguments: list[object]) -> None:
            for argument in arguments:
                graph.add_kernel_node(noop, 1, 1, (argument,))

        with pytest.raises(TypeError):
            add_all([*range(60_000), "not an int"])
        assert gcpause.is_paused()
        bound = 3 * (passes.allocations() - start + gcpause.WATCHED_YOUNG)
        results.extend((_allocations_until_unpaused(passes, bound), bound))
        assert gc.get_threshold() == collector.thresholds
        assert len(graph.nodes()) == 60_000  # (a bulk operation: it would end the pause)

    _in_thread(build_in_thread)
    overshoot, bound = results
    assert overshoot < bound
    graphs[0].destroy()


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.usefixtures("small")
def test_a_programs_gc_callback_raising_keyboard_interrupt_changes_nothing(
    collector: _Collector, where: str
) -> None:
    """The program's own collector callback raises KeyboardInterrupt at every pass, before or
    after the pause's callback: CPython reports each as unraisable and calls the rest, so the
    build still backs off, its pause still ends in its bound, and the program's thresholds
    come back."""
    passes = collector.passes

    def interrupting(phase: str, info: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    unraisable: list[type[BaseException] | None] = []
    seen: list[_Pass] = []
    results: list[int] = []

    def build_in_thread() -> None:
        build = _Build()
        start = passes.allocations()
        gcpause.pause_until_yield(build, _progress)  # appends the pause's callback
        if where == "before":
            gc.callbacks.insert(1, interrupting)  # after _Passes, before the pause's
        else:
            gc.callbacks.append(interrupting)
        try:
            count = len(passes.seen)
            _grow_until_passes(build, passes, 4)
            seen.extend(passes.seen[count:])
            assert gcpause.is_paused()
            bound = 3 * (passes.allocations() - start + WATCHED)
            results.extend((_allocations_until_unpaused(passes, bound), bound))
        finally:
            gc.callbacks.remove(interrupting)

    with unraisable_into(unraisable):
        _in_thread(build_in_thread)
    thresholds = [one.threshold for one in seen]
    assert thresholds[0] == WATCHED
    for before, now in itertools.pairwise(thresholds[:4]):
        assert 1.9 * before <= now <= 2.1 * before, thresholds
    overshoot, bound = results
    assert overshoot < bound
    assert unraisable
    assert set(unraisable) == {KeyboardInterrupt}
    assert gc.get_threshold() == collector.thresholds


def test_a_graph_destroyed_after_a_watched_build_ends_its_pause_at_the_next_pass(
    collector: _Collector,
) -> None:
    """A graph built in a thread, then destroyed while still referenced: its node count falls
    to zero, which the next pass used to take for progress (the count had changed), so the
    pause went on, backing off further, into whatever the program built next (a loop's
    build then ran without its own pause, and its deferred pass landed in the first replay).
    The pass after the destroy ends it."""
    kept: list[ahg.Graph] = []

    def build_in_thread() -> None:
        graph = ahg.Graph()
        for i in range(20_000):  # a watched build with a pass or two in it
            graph.add_kernel_node(noop, 1, 1, (i,))
        kept.append(graph)

    _in_thread(build_in_thread)
    assert gcpause.is_paused()  # no pass has seen the build stop yet
    kept[0].destroy()
    gc.collect(0)  # the next pass: it finds the destroyed graph smaller
    assert not gcpause.is_paused()
    assert gc.get_threshold() == collector.thresholds


_EXIT_WHILE_PAUSED = textwrap.dedent(
    """
    import gc, threading
    import ahipgraph as ahg
    from ahipgraph.core import gcpause

    @ahg.kernel
    def noop(t: ahg.Threads, n: ahg.int32) -> None:
        pass

    gc.callbacks.insert(0, lambda phase, info: None)
    kept = {}

    def build():
        graph = ahg.Graph()
        for i in range(5_000):
            graph.add_kernel_node(noop, 1, 1, (i,))
        kept["graph"] = graph

    worker = threading.Thread(target=build)
    worker.start()
    worker.join()
    print("paused at exit:", gcpause.is_paused())
    """
)


def test_a_program_that_exits_during_a_watched_pause_exits_quietly() -> None:
    """The pause ended as its graph was freed at interpreter exit, by then sometimes after the
    module's globals were cleared: "Exception ignored in _Burst.__call__ ... TypeError"."""
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_PAUSED],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "paused at exit: True" in done.stdout
    assert "Exception ignored" not in done.stderr, done.stderr
