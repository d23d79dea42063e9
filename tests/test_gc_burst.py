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
import threading
import weakref
from collections.abc import Iterator

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
    yield
    assert gc.isenabled(), "a test left the collector off"


def _build(size: int) -> ahg.Graph:
    graph = ahg.Graph()
    for i in range(size):
        graph.add_kernel_node(noop, 1, 1, (i,))
    return graph


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_bulk_build_pauses_the_collector_until_the_task_yields() -> None:
    graph = _build(SMALL_BULK - 1)
    assert gc.isenabled()  # below the bulk size: no pause
    graph.add_kernel_node(noop, 1, 1, (0,))
    assert not gc.isenabled()
    graph.add_kernel_node(noop, 1, 1, (0,))  # one pause, not one per node
    assert not gc.isenabled()
    await asyncio.sleep(0)  # one loop iteration: the pause ends
    assert gc.isenabled()
    graph.add_kernel_node(noop, 1, 1, (0,))  # the next burst pauses again
    assert not gc.isenabled()
    await asyncio.sleep(0)
    assert gc.isenabled()
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_capture_is_a_bulk_build_too(device: ahg.Device) -> None:
    stream = device.create_stream()
    stream.begin_capture()
    for i in range(SMALL_BULK):
        await stream.launch_kernel(noop, 1, 1, (i,))
    assert not gc.isenabled()  # captured launches do not suspend
    graph = stream.end_capture()
    assert len(graph.nodes()) == SMALL_BULK
    await asyncio.sleep(0)
    assert gc.isenabled()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_collector_the_program_switched_off_stays_off() -> None:
    gc.disable()
    try:
        graph = _build(SMALL_BULK + 5)
        await asyncio.sleep(0)
        assert not gc.isenabled()
    finally:
        gc.enable()
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_pause_inside_a_burst_keeps_the_collector_off_until_both_end() -> None:
    graph = _build(SMALL_BULK)
    assert not gc.isenabled()
    with gcpause.paused():
        copy = graph.clone()
    assert not gc.isenabled()  # the burst still runs
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
    assert not gc.isenabled()
    release.set()
    worker.join(10)
    assert gc.isenabled()
    copy.destroy()
    graph.destroy()


@pytest.mark.usefixtures("small_bulk")
def test_a_thread_without_an_event_loop_is_never_paused() -> None:
    seen: list[bool] = []

    def build_in_thread() -> None:
        graph = _build(SMALL_BULK * 2)
        seen.append(gc.isenabled())
        graph.destroy()

    worker = threading.Thread(target=build_in_thread)
    worker.start()
    worker.join(10)
    assert seen == [True]


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
    assert gc.isenabled() is (loop_name == "uvloop")
    loop.close()  # drops a waiting callback, which ends the pause
    assert gc.isenabled()
    graphs[0].destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_failed_add_past_the_bulk_size_changes_nothing() -> None:
    graph = _build(SMALL_BULK)
    await asyncio.sleep(0)
    with pytest.raises(TypeError, match="must be a GraphNode"):
        graph.add_kernel_node(noop, 1, 1, (0,), deps=[object()])  # type: ignore[list-item]
    assert gc.isenabled()  # the add failed before the node was attached
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
    assert gc.isenabled()
    assert garbage_ref() is None  # the pass freed it, as the young passes would have
    assert any(obj is last for obj in gc.get_objects(generation=2))  # the survivors moved up
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk", "small_young")
async def test_objects_frozen_by_the_program_stay_frozen() -> None:
    marker: list[int] = []  # a tracked object, frozen with everything else
    gc.freeze()
    assert not any(obj is marker for obj in gc.get_objects())  # frozen: in no generation
    graph = _build(SMALL_BULK + 200)
    await asyncio.sleep(0)
    assert gc.isenabled()
    assert not any(obj is marker for obj in gc.get_objects())  # still frozen
    graph.destroy()


@pytest.mark.asyncio
@pytest.mark.usefixtures("small_bulk")
async def test_a_build_on_a_second_loop_in_another_thread_pauses_and_ends_on_its_own() -> None:
    """Two loops in two threads: each burst ends at its own loop's next iteration, and the
    collector comes back on only when neither builds."""
    graph = _build(SMALL_BULK)
    assert not gc.isenabled()  # this loop's burst
    built = threading.Event()
    resume = threading.Event()
    seen: dict[str, bool] = {}

    async def other_loop() -> None:
        other = _build(SMALL_BULK)  # the collector is off already: no burst of its own
        built.set()
        resume.wait(10)  # meanwhile this thread's loop does not iterate
        other.add_kernel_node(noop, 1, 1, (0,))  # now a burst of its own
        seen["paused after a new add"] = not gc.isenabled()
        await asyncio.sleep(0)
        seen["on after its own yield"] = gc.isenabled()
        other.destroy()

    worker = threading.Thread(target=asyncio.run, args=(other_loop(),))
    worker.start()
    assert built.wait(10)
    await asyncio.sleep(0)  # this loop's burst ends; the other thread is not mid-burst
    assert gc.isenabled()
    resume.set()
    worker.join(10)
    assert seen == {"paused after a new add": True, "on after its own yield": True}
    assert gc.isenabled()
    graph.destroy()
