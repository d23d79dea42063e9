"""A large build pauses the collector's automatic passes until the building task yields.

Each full pass during a build of N nodes walks every node made so far and frees none of them;
they come whenever the graph grows by a quarter. From ``BULK_BUILD_NODES`` nodes on, adding a
node pauses the collector (``core.gcpause.pause_until_yield``) and the event loop's next
iteration switches it back on. These tests pin when the pause starts, that it always ends, and
that it never switches on a collector the program switched off.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause
from ahipgraph.graph import graph as graph_module

SMALL_BULK = 50


@ahg.kernel
def noop(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing: only building is exercised."""


@pytest.fixture
def small_bulk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A bulk build from SMALL_BULK nodes, with the collector on at the start and the end."""
    monkeypatch.setattr(graph_module, "BULK_BUILD_NODES", SMALL_BULK)
    assert gc.isenabled()
    assert not gcpause.is_paused()
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    yield
    assert not gcpause.is_paused(), "a test left the collector paused"
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    assert gc.callbacks == callbacks


def _build(size: int) -> ahg.Graph:
    graph = ahg.Graph()
    for i in range(size):
        graph.add_kernel_node(noop, 1, 1, (i,))
    return graph


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_bulk_build_pauses_the_collector_until_the_task_yields() -> None:
    graph = _build(SMALL_BULK - 1)
    assert not gcpause.is_paused()  # below the bulk size: no pause
    graph.add_kernel_node(noop, 1, 1, (0,))
    assert gcpause.is_paused()
    graph.add_kernel_node(noop, 1, 1, (0,))  # one pause, not one per node
    assert gcpause.is_paused()
    await asyncio.sleep(0)  # one loop iteration: the pause ends
    assert not gcpause.is_paused()
    graph.add_kernel_node(noop, 1, 1, (0,))  # the next burst pauses again
    assert gcpause.is_paused()
    await asyncio.sleep(0)
    assert not gcpause.is_paused()
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_capture_is_a_bulk_build_too(device: ahg.Device) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    for i in range(SMALL_BULK):
        await stream.launch_kernel(noop, 1, 1, (i,))
    assert gcpause.is_paused()  # captured launches do not suspend
    graph = stream.end_capture()
    assert len(graph.nodes()) == SMALL_BULK
    await asyncio.sleep(0)
    assert not gcpause.is_paused()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_collector_the_program_switched_off_stays_off() -> None:
    gc.disable()
    try:
        graph = _build(SMALL_BULK + 5)
        assert not gcpause.is_paused()  # nothing to pause
        await asyncio.sleep(0)
        assert not gc.isenabled()
    finally:
        gc.enable()
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_pause_inside_a_burst_keeps_the_collector_off_until_both_end() -> None:
    graph = _build(SMALL_BULK)
    assert gcpause.is_paused()
    with gcpause.paused():
        copy = graph.clone()
    assert gcpause.is_paused()  # the burst still runs
    held = threading.Event()
    release = threading.Event()

    def instantiate_elsewhere() -> None:
        with gcpause.paused():
            held.set()
            release.wait(10)

    worker = threading.Thread(target=instantiate_elsewhere)
    worker.start()
    assert held.wait(10)
    await asyncio.sleep(0)  # the burst ends; the other thread's pause does not
    assert gcpause.is_paused()
    release.set()
    worker.join(10)
    assert not gcpause.is_paused()
    copy.destroy()
    graph.destroy()


def _end_watched_pauses() -> None:
    """Two young passes: the first sees the build's last progress, the second none. The
    collector's callback stays in place after a pause it ended (removing it mid-pass would
    skip another callback); the next pause's end removes it."""
    gc.collect(0)
    gc.collect(0)
    assert not gcpause.is_paused()
    with gcpause.paused():
        pass


def _in_thread(work: Callable[[], None]) -> None:
    worker = threading.Thread(target=work)
    worker.start()
    worker.join(10)
    assert not worker.is_alive()


@pytest.mark.usefixtures("small_bulk")
def test_a_build_in_a_thread_without_an_event_loop_is_paused_until_it_stops_growing() -> None:
    """No loop iteration ends such a pause: the collector's young passes, which still come (the
    first after WATCHED_YOUNG allocations), end it at the first that finds the graph no
    bigger."""
    seen: list[object] = []
    young = gc.get_threshold()[0]

    def build_in_thread() -> None:
        graph = _build(SMALL_BULK * 2)
        seen.append((gcpause.is_paused(), gc.get_threshold()[0]))
        gc.collect(0)  # the build grew since its pause began: it goes on
        seen.append(gcpause.is_paused())
        graph.add_kernel_node(noop, 1, 1, (0,))
        gc.collect(0)  # and grew again
        seen.append(gcpause.is_paused())
        gc.collect(0)  # not since: the build is over
        seen.append(gcpause.is_paused())
        seen.append(gc.get_threshold()[0])
        graph.destroy()

    _in_thread(build_in_thread)
    assert seen == [(True, max(young, gcpause.WATCHED_YOUNG)), True, True, False, young]
    with gcpause.paused():  # removes the callback the pass left (see _end_watched_pauses)
        pass


@pytest.mark.usefixtures("small_bulk")
def test_a_watched_pause_never_keeps_its_graph_alive() -> None:
    graph = _build(SMALL_BULK)
    assert gcpause.is_paused()
    ref = weakref.ref(graph)
    graph.destroy()
    del graph
    gc.collect()
    assert ref() is None
    _end_watched_pauses()


@pytest.mark.usefixtures("small_bulk")
def test_the_building_threads_next_bulk_operation_ends_its_watched_pause() -> None:
    """A watched build, then its instantiate: the build is over, its pause ends there, and the
    instantiate's own pause holds every young pass back until it leaves the collector as the
    program had it."""
    thresholds = gc.get_threshold()
    graph = _build(SMALL_BULK * 2)
    assert gcpause.is_paused()
    with gcpause.paused():
        assert gc.get_threshold()[0] >= gcpause.PAUSED_YOUNG
    assert not gcpause.is_paused()
    assert gc.get_threshold() == thresholds
    graph.instantiate().destroy()
    graph.destroy()


@pytest.mark.usefixtures("small_bulk")
def test_another_threads_bulk_operation_leaves_a_watched_build_paused_and_watched() -> None:
    """Another thread's instantiate says nothing of this thread's build: the passes still come
    at its interval (WATCHED_YOUNG allocations, before any pass backed it off) to see it end."""
    young = gc.get_threshold()[0]
    graph = _build(SMALL_BULK * 2)
    seen: list[object] = []

    def other_thread() -> None:
        with gcpause.paused():
            seen.append(gc.get_threshold()[0])
        seen.append(gcpause.is_paused())

    _in_thread(other_thread)
    assert seen == [max(young, gcpause.WATCHED_YOUNG), True]
    assert gc.get_threshold()[0] == max(young, gcpause.WATCHED_YOUNG)
    graph.destroy()
    _end_watched_pauses()


@pytest.mark.usefixtures("small_bulk")
def test_a_watched_build_stays_off_a_collector_the_program_switched_off() -> None:
    gc.disable()
    try:
        graph = _build(SMALL_BULK * 2)
        assert not gcpause.is_paused()
    finally:
        gc.enable()
    graph.destroy()


@pytest.mark.usefixtures("small_bulk")
def test_no_watched_pause_when_the_first_threshold_is_zero() -> None:
    """Automatic passes off by threshold: there is nothing to hold back, and no pass would
    ever come to end a watched pause."""
    thresholds = gc.get_threshold()
    gc.set_threshold(0, *thresholds[1:])
    try:
        graph = _build(SMALL_BULK * 2)
        assert not gcpause.is_paused()
    finally:
        gc.set_threshold(*thresholds)
    graph.destroy()


@pytest.mark.usefixtures("small_bulk")
@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_loop_closed_before_its_next_iteration_still_ends_the_pause(loop_name: str) -> None:
    if loop_name == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    graphs: list[ahg.Graph] = []

    def build_then_stop() -> None:
        graphs.append(_build(SMALL_BULK))
        loop.stop()  # the loop stops after this iteration: the pause's callback waits in it

    loop.call_soon(build_then_stop)
    loop.run_forever()
    # asyncio leaves the pause's callback queued (callbacks scheduled in the last iteration
    # do not run); uvloop runs it before it stops.
    assert gcpause.is_paused() is (loop_name != "uvloop")
    loop.close()  # drops a waiting callback, which ends the pause
    assert not gcpause.is_paused()
    graphs[0].destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_failed_add_past_the_bulk_size_changes_nothing() -> None:
    graph = _build(SMALL_BULK)
    await asyncio.sleep(0)
    with pytest.raises(TypeError, match="must be a GraphNode"):
        graph.add_kernel_node(noop, 1, 1, (0,), deps=[object()])  # type: ignore[list-item]
    assert not gcpause.is_paused()  # the add failed before the node was attached
    assert len(graph.nodes()) == SMALL_BULK
    graph.destroy()


@pytest.fixture
def small_young(monkeypatch: pytest.MonkeyPatch) -> None:
    """A burst counts as large from a few hundred young objects."""
    monkeypatch.setattr(gcpause, "_BULK_YOUNG", 200)


class _Cyclic:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_a_large_burst_ends_with_one_young_pass() -> None:
    graph = _build(SMALL_BULK + 200)
    last = graph.nodes()[-1]
    garbage = _Cyclic()
    garbage_ref = weakref.ref(garbage)
    del garbage  # young cyclic garbage: only a pass frees it
    assert garbage_ref() is not None
    assert not any(obj is last for obj in gc.get_objects(generation=2))
    await asyncio.sleep(0)
    assert not gcpause.is_paused()
    assert garbage_ref() is None  # the pass freed it, as the young passes would have
    assert any(obj is last for obj in gc.get_objects(generation=2))  # the survivors moved up
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_older_objects_freed_during_a_large_burst_do_not_hide_it() -> None:
    """The collector's count is allocations less deallocations: every container freed lowers
    it, an old one too. A burst that also frees more older objects than it made (the graph a
    rebuilt one replaces; the race checker trimming its table of sites) still ends with its
    pass over the young objects it left."""
    older = [[] for _ in range(5_000)]  # made before the burst
    graph = _build(SMALL_BULK + 200)
    last = graph.nodes()[-1]
    del older  # 5,001 containers freed: the count falls to zero
    garbage = _Cyclic()
    garbage_ref = weakref.ref(garbage)
    del garbage
    await asyncio.sleep(0)
    assert not gcpause.is_paused()
    assert garbage_ref() is None  # the burst's young pass came all the same
    assert any(obj is last for obj in gc.get_objects(generation=2))
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_objects_frozen_by_the_program_stay_frozen() -> None:
    marker: list[int] = []  # a tracked object, frozen with everything else
    gc.freeze()
    assert not any(obj is marker for obj in gc.get_objects())  # frozen: in no generation
    graph = _build(SMALL_BULK + 200)
    await asyncio.sleep(0)
    assert not gcpause.is_paused()
    assert not any(obj is marker for obj in gc.get_objects())  # still frozen
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_build_on_a_second_loop_in_another_thread_pauses_and_ends_on_its_own() -> None:
    """Two loops in two threads: each burst ends at its own loop's next iteration, and the
    collector comes back on only when neither builds."""
    graph = _build(SMALL_BULK)
    assert gcpause.is_paused()  # this loop's burst
    built = threading.Event()
    resume = threading.Event()
    seen: dict[str, bool] = {}

    async def other_loop() -> None:
        other = _build(SMALL_BULK)  # the collector is off already: no burst of its own
        built.set()
        resume.wait(10)  # meanwhile this thread's loop does not iterate
        other.add_kernel_node(noop, 1, 1, (0,))  # now a burst of its own
        seen["paused after a new add"] = gcpause.is_paused()
        await asyncio.sleep(0)
        seen["on after its own yield"] = not gcpause.is_paused()
        other.destroy()

    worker = threading.Thread(target=asyncio.run, args=(other_loop(),))
    worker.start()
    assert built.wait(10)
    await asyncio.sleep(0)  # this loop's burst ends; the other thread is not mid-burst
    assert not gcpause.is_paused()
    resume.set()
    worker.join(10)
    assert seen == {"paused after a new add": True, "on after its own yield": True}
    assert not gcpause.is_paused()
    graph.destroy()


# -- the pause goes through the thresholds, and leaves the program's choices alone ------------


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_thresholds_the_program_sets_during_a_burst_stay() -> None:
    thresholds = gc.get_threshold()
    graph = _build(SMALL_BULK)
    assert gcpause.is_paused()
    assert gc.get_threshold()[0] == gcpause.PAUSED_YOUNG
    gc.set_threshold(1234, *thresholds[1:])  # the program's own choice, mid-burst
    try:
        await asyncio.sleep(0)
        assert not gcpause.is_paused()
        assert gc.get_threshold()[0] == 1234
    finally:
        gc.set_threshold(*thresholds)
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_automatic_passes_the_program_switched_off_by_threshold_stay_off() -> None:
    thresholds = gc.get_threshold()
    gc.set_threshold(0, *thresholds[1:])  # automatic passes off through the first threshold
    try:
        graph = _build(SMALL_BULK + 5)
        with gcpause.paused():
            assert gc.get_threshold()[0] == 0  # nothing to raise
        await asyncio.sleep(0)
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*thresholds)
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_a_large_burst_makes_no_pass_when_the_first_threshold_is_zero() -> None:
    """A first threshold of 0 switches the automatic passes off, as ``gc.disable()`` does: a
    large burst then ends with no pass of its own."""
    thresholds = gc.get_threshold()
    gc.set_threshold(0, *thresholds[1:])
    try:
        graph = _build(SMALL_BULK + 200)
        garbage = _Cyclic()
        garbage_ref = weakref.ref(garbage)
        del garbage
        await asyncio.sleep(0)
        assert not gcpause.is_paused()
        assert garbage_ref() is not None  # no pass ran
        assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*thresholds)
    gc.collect()
    assert garbage_ref() is None
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_pause_survives_the_program_removing_its_callback() -> None:
    graph = _build(SMALL_BULK)
    added = [cb for cb in gc.callbacks if getattr(cb, "__module__", "") == gcpause.__name__]
    assert len(added) == 1
    gc.callbacks.remove(added[0])
    await asyncio.sleep(0)  # the pause ends without its callback, and without an error
    assert not gcpause.is_paused()
    graph.destroy()


def test_an_explicit_collection_ends_a_pause_whose_loop_stopped() -> None:
    """A loop stopped by the build (the pause's callback waits in it) and kept open: any pass
    of the collector, the program's own ``gc.collect()`` too, ends the pause."""
    loop = asyncio.new_event_loop()
    graphs: list[ahg.Graph] = []
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_module, "BULK_BUILD_NODES", SMALL_BULK)

        def build_then_stop() -> None:
            graphs.append(_build(SMALL_BULK))
            loop.stop()

        loop.call_soon(build_then_stop)
        loop.run_forever()
    try:
        assert gcpause.is_paused()
        gc.collect(0)
        assert not gcpause.is_paused()
        assert gc.get_threshold() == thresholds
        loop.run_until_complete(asyncio.sleep(0))  # the queued callback: a no-op now
        assert not gcpause.is_paused()
        assert gc.get_threshold() == thresholds
    finally:
        loop.close()
        graphs[0].destroy()
    gc.collect(0)  # the callback left in place by the pass is removed by the next pause's end
    with gcpause.paused():
        pass
    assert gc.callbacks == callbacks


def test_a_pause_of_a_running_loop_outlives_passes_that_come_meanwhile() -> None:
    """A young pass during a burst (PAUSED_YOUNG allocations) leaves a running loop's pause."""
    seen: list[bool] = []

    async def main() -> None:
        graph = _build(SMALL_BULK)
        gc.collect(0)
        seen.append(gcpause.is_paused())
        await asyncio.sleep(0)
        seen.append(gcpause.is_paused())
        graph.destroy()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_module, "BULK_BUILD_NODES", SMALL_BULK)
        asyncio.run(main())
    assert seen == [True, False]


class _Ring:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_a_burst_larger_than_a_quarter_of_the_heap_ends_with_a_full_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The full pass CPython's accounting would bring next comes at the burst's end."""
    old = _Ring()
    old_ref = weakref.ref(old)
    gc.collect()  # survives: now in the oldest generation
    del old  # old cyclic garbage: only a full pass frees it
    monkeypatch.setattr(gcpause.sys, "getallocatedblocks", lambda: 4)  # a tiny heap
    graph = _build(SMALL_BULK + 200)
    assert old_ref() is not None
    await asyncio.sleep(0)
    assert old_ref() is None
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_a_burst_that_freed_older_objects_is_weighed_by_what_it_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether the pass is a full one is decided by the young objects the burst left, not by
    a count that the objects it freed brought down."""
    old = _Ring()
    old_ref = weakref.ref(old)
    older = [[] for _ in range(5_000)]
    gc.collect()
    del old
    monkeypatch.setattr(gcpause.sys, "getallocatedblocks", lambda: 4)  # a tiny heap
    graph = _build(SMALL_BULK + 200)
    del older  # the count falls to zero
    await asyncio.sleep(0)
    assert old_ref() is None
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_a_burst_small_beside_the_heap_ends_with_a_young_pass_only() -> None:
    old = _Ring()
    old_ref = weakref.ref(old)
    gc.collect()
    del old
    graph = _build(SMALL_BULK + 200)  # a few hundred objects beside a heap of many thousands
    await asyncio.sleep(0)
    assert old_ref() is not None  # the young pass left it to the next full pass
    gc.collect()
    assert old_ref() is None
    graph.destroy()


def test_bursts_pauses_and_collections_from_many_threads_leave_the_collector_as_it_was() -> None:
    """Bursts on three loops (one stopping its loop right after a build), pauses from a thread
    without a loop, and explicit collections, all at once: afterwards no pause is in force and
    the program's thresholds and callbacks are back."""
    thresholds = gc.get_threshold()
    callbacks = list(gc.callbacks)
    barrier = threading.Barrier(5)
    errors: list[BaseException] = []
    graphs: list[ahg.Graph] = []
    graphs_lock = threading.Lock()

    def keep(graph: ahg.Graph) -> None:
        with graphs_lock:
            graphs.append(graph)

    async def bursts() -> None:
        barrier.wait(10)
        for _ in range(10):
            keep(_build(SMALL_BULK + 3))
            await asyncio.sleep(0)

    def on_loop() -> None:
        asyncio.run(bursts())

    def on_stopped_loop() -> None:
        loop = asyncio.new_event_loop()
        try:
            barrier.wait(10)
            for _ in range(5):

                def build_then_stop() -> None:
                    keep(_build(SMALL_BULK + 1))
                    loop.stop()

                loop.call_soon(build_then_stop)
                loop.run_forever()  # stops with the pause's callback still queued
        finally:
            loop.close()

    def pauses() -> None:
        barrier.wait(10)
        for _ in range(50):
            with gcpause.paused():
                keep(_build(3))

    def collections() -> None:
        barrier.wait(10)
        for generation in (0, 1, 2) * 10:
            gc.collect(generation)

    def run(target: Any) -> None:
        try:
            target()
        except BaseException as exc:  # reported below
            errors.append(exc)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_module, "BULK_BUILD_NODES", SMALL_BULK)
        targets = (on_loop, on_loop, on_stopped_loop, pauses, collections)
        threads = [threading.Thread(target=run, args=(target,)) for target in targets]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    for graph in graphs:
        graph.destroy()
    assert not gcpause.is_paused()
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    gc.collect(0)  # a callback left in place by a pass the collector made is dropped by the
    with gcpause.paused():  # next pause's end
        pass
    assert gc.callbacks == callbacks


@pytest.mark.usefixtures("small_bulk")
def test_watched_builds_in_many_threads_leave_the_collector_as_it_was() -> None:
    """Threads without loops building at once, one of them collecting as it goes: every pause
    ends once the builds stop, and the program's thresholds come back."""
    barrier = threading.Barrier(4)
    graphs: list[ahg.Graph] = []
    graphs_lock = threading.Lock()

    def build(collect: bool) -> None:
        barrier.wait(10)
        for _ in range(3):
            graph = _build(SMALL_BULK * 3)
            if collect:
                gc.collect(0)
            with graphs_lock:
                graphs.append(graph)

    threads = [threading.Thread(target=build, args=(n == 0,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert len(graphs) == 12
    assert all(len(graph.nodes()) == SMALL_BULK * 3 for graph in graphs)
    _end_watched_pauses()
    for graph in graphs:
        graph.destroy()


@pytest.mark.usefixtures("small_bulk")
def test_a_watched_pause_ends_when_its_graph_is_freed_even_without_the_callback() -> None:
    """A program that removes the collector's callback leaves no pass to see the graph gone:
    the graph's freeing ends its watched pause, and the thresholds come back at once."""
    thresholds = gc.get_threshold()
    saved = list(gc.callbacks)  # the program's, before the pause added the module's
    graph = _build(SMALL_BULK * 2)
    assert gcpause.is_paused()
    gc.callbacks.clear()
    try:
        gc.collect(0)
        gc.collect(0)
        assert gcpause.is_paused()  # nothing watches it now
        graph.destroy()
        del graph  # freed by reference counting: the pause ends here
        assert not gcpause.is_paused()
        assert gc.get_threshold() == thresholds
    finally:
        gc.callbacks[:] = saved


class _Owner:
    """Stands for a watched build's graph."""


@pytest.mark.usefixtures("small_bulk")
def test_a_watched_graph_freed_while_a_pass_asks_about_it_skips_no_callback() -> None:
    """The pass's question takes a reference to the graph; if the program dropped its own
    meanwhile (another thread), the graph is freed as the question returns, inside the
    collector's callback, and that ends the pause there. The program's own callback after it
    still runs, and nothing is reported as unraisable."""
    held = [_Owner()]
    asked: list[int] = []

    def progress(owner: object) -> int:
        asked.append(1)
        if len(asked) > 1:  # the first ask is the pause's start; then a pass asks
            held.clear()  # the program lets go of the graph in the meantime
        return 1

    passes: list[int] = []

    def program_callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    unraisable: list[BaseException | None] = []

    def build() -> None:
        gcpause.pause_until_yield(held[0], progress)
        assert gcpause.is_paused()
        gc.callbacks.append(program_callback)
        try:
            gc.collect(0)
        finally:
            gc.callbacks.remove(program_callback)

    hook = sys.unraisablehook
    sys.unraisablehook = lambda info: unraisable.append(info.exc_value)
    try:
        _in_thread(build)
    finally:
        sys.unraisablehook = hook
    assert not held
    assert passes == [0]  # the program's callback saw the pass
    assert unraisable == []
    assert not gcpause.is_paused()
    with gcpause.paused():  # removes the callback the pass left (see _end_watched_pauses)
        pass


@pytest.mark.usefixtures("small_bulk")
def test_a_watched_build_started_as_a_pass_comes_ends_its_own_pause_only() -> None:
    """A watched pause ended by passes leaves the collector's callback in place; the next
    build's pause then starts while that callback may run. A pass coming as it started (the
    program's first threshold of 1 makes one at every allocation) found the new build's pause
    not yet counted and "no bigger" since it began, and ended it: the count went below zero
    and the add raised IndexError. A pause can be ended only once it is counted."""
    thresholds = gc.get_threshold()
    seen: list[object] = []

    def build_twice() -> None:
        first = _build(SMALL_BULK * 2)
        gc.collect(0)
        gc.collect(0)  # ended by the passes: the callback stays
        assert not gcpause.is_paused()
        gc.set_threshold(1, *thresholds[1:])  # the program's own: a pass at every allocation
        try:
            second = _build(SMALL_BULK * 2)
            seen.append(gcpause.is_paused())
            gc.collect(0)
            gc.collect(0)
            seen.append(gcpause.is_paused())
            seen.append(gc.get_threshold())
        finally:
            gc.set_threshold(*thresholds)
        with gcpause.paused():  # every later pause still works
            seen.append(gcpause.is_paused())
        first.destroy()
        second.destroy()

    _in_thread(build_twice)
    assert seen == [True, False, (1, *thresholds[1:]), True]
    assert gc.get_threshold() == thresholds


def test_a_pause_that_fails_to_start_changes_no_count() -> None:
    """A watched pause whose owner cannot be watched (no weak reference to it) refuses before
    its pause is counted, and is then freed: that used to end a pause nobody had started,
    leaving the count at -1 and every later pause failing with IndexError."""
    thresholds = gc.get_threshold()
    raised: list[type[BaseException]] = []
    seen: list[bool] = []

    def start() -> None:
        try:
            gcpause.pause_until_yield(1, lambda owner: 0)  # an int has no weak references
        except TypeError as error:
            raised.append(type(error))
        seen.append(gcpause.is_paused())
        try:
            with gcpause.paused():
                seen.append(gcpause.is_paused())
        except Exception as error:
            raised.append(type(error))
        seen.append(gcpause.is_paused())

    _in_thread(start)
    assert raised == [TypeError]
    assert seen == [False, True, False]
    assert gc.get_threshold() == thresholds


class _PassAtNextThresholdRead:
    """The ``gc`` module as core.gcpause sees it, except that its next ``get_threshold``
    call first runs a young pass, as an allocation in this thread may (the tuple it returns
    is one): a pass run inside the module's own bookkeeping."""

    def __init__(self) -> None:
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(gc, name)

    def get_threshold(self) -> tuple[int, ...]:
        if self.armed:
            self.armed = False
            gc.collect(0)
        return gc.get_threshold()


@pytest.mark.usefixtures("small_bulk")
def test_a_pass_inside_a_pause_start_that_ends_another_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread's watched build is over; this thread starts a pause, and a pass comes
    as it does, ending that build's pause. That end used to take the count to zero under the
    starting pause, which was then counted with no saved thresholds: the next pause to start
    raised IndexError."""
    thresholds = gc.get_threshold()
    graphs: list[ahg.Graph] = []
    _in_thread(lambda: graphs.append(_build(SMALL_BULK * 2)))
    gc.collect(0)  # sees the build's last growth: the next pass finds it over
    assert gcpause.is_paused()
    fake = _PassAtNextThresholdRead()
    monkeypatch.setattr(gcpause, "gc", fake)
    fake.armed = True
    with gcpause.paused():
        assert not fake.armed  # the pass came, inside the start of this pause
        assert gc.get_threshold()[0] >= gcpause.PAUSED_YOUNG
        with gcpause.paused():
            assert gcpause.is_paused()
    monkeypatch.undo()
    assert not gcpause.is_paused()
    assert gc.get_threshold() == thresholds
    graphs[0].destroy()
    with gcpause.paused():  # removes the callback the pass left (see _end_watched_pauses)
        pass
