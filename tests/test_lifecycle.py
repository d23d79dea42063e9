"""One handle lifecycle: forgotten handles are freed with a warning, destroy() detaches that,
one liveness table gives HIP's code per API, and one guard keeps constructors factory-only."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.core.lifecycle import DESTROYED_CODES, FactoryOnly, HandleState, WeakList
from ahipgraph.core.registry import HandleRegistry
from ahipgraph.exec.graph_exec import EXECS, GraphExec
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.memnodes import RESERVATIONS
from ahipgraph.graph.node import NODES, GraphNode
from ahipgraph.lifetime.user_object import USER_OBJECTS
from ahipgraph.runtime.event import EVENTS
from ahipgraph.runtime.stream import STREAMS

ROOT = Path(__file__).resolve().parent.parent


@ahg.kernel
def add_one(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


@pytest.fixture
def baseline() -> Iterator[testing.Snapshot]:
    """Statistics before the test; at the end everything must be back to them."""
    before = testing.snapshot()
    yield before
    assert testing.leak_report(before) is None


@pytest.fixture
def strict() -> Iterator[None]:
    """Any ForgottenHandleWarning is an error (pyproject filters it for the older tests)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ahg.ForgottenHandleWarning)
        yield


def _in_use(memory: Any) -> tuple[int, int, int]:
    """What a leak would show: live allocations, reservations and bytes."""
    return (memory.allocations, memory.reservations, memory.bytes_in_use)


def _registry_counts() -> dict[str, int]:
    registries = (GRAPHS, NODES, EXECS, STREAMS, EVENTS, USER_OBJECTS)
    return {r.kind: r.statistics().live for r in registries}


def _graph_with_nodes() -> ahg.Graph:
    graph = ahg.Graph()
    first = graph.add_empty_node()
    graph.add_empty_node(deps=[first])
    return graph


def _executable() -> ahg.GraphExec:
    with _graph_with_nodes() as graph:
        return graph.instantiate()


def forget(box: list[Any]) -> None:
    """Drop the handles in ``box`` (the test's only references to them) and collect them."""
    box.clear()
    ahg.collect_forgotten()


MAKERS: dict[str, Callable[[ahg.Device], object]] = {
    "stream": lambda device: device.create_stream(),
    "event": lambda device: device.create_event(),
    "graph": lambda device: _graph_with_nodes(),
    "graph exec": lambda device: _executable(),
    "user object": lambda device: ahg.UserObject(lambda data: None),
}


# -- forgotten handles ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(MAKERS))
def test_a_forgotten_handle_is_freed_with_a_warning_naming_it(
    kind: str, device: ahg.Device, baseline: testing.Snapshot
) -> None:
    box = [MAKERS[kind](device)]
    assert _registry_counts()[kind] == baseline.handles[kind] + 1
    with pytest.warns(ahg.ForgottenHandleWarning, match=f"unclosed {kind} ") as caught:
        forget(box)
    assert all(issubclass(w.category, ResourceWarning) for w in caught)
    assert _registry_counts() == baseline.handles


def test_a_thousand_forgotten_handles_of_each_kind_are_all_freed(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        for _ in range(1000):
            for make in MAKERS.values():
                make(device)  # dropped at once
        ahg.collect_forgotten()
    kinds = [str(w.message).split(" #")[0] for w in caught]
    assert sorted(kinds) == sorted(f"unclosed {kind}" for kind in MAKERS for _ in range(1000))
    assert _registry_counts() == baseline.handles
    assert _in_use(device.statistics().memory) == _in_use(baseline.devices[0].memory)


@pytest.mark.parametrize("kind", list(MAKERS))
def test_destroy_detaches_the_finalizer(
    kind: str, device: ahg.Device, baseline: testing.Snapshot, strict: None
) -> None:
    handle: Any = MAKERS[kind](device)
    if kind == "user object":
        handle.release()  # a user object is "destroyed" by releasing the user's reference
    else:
        handle.destroy()
    assert not handle._life.attached
    del handle
    ahg.collect_forgotten()  # strict: a warning would raise here
    assert _registry_counts() == baseline.handles


@pytest.mark.parametrize("kind", ["stream", "event", "graph", "graph exec"])
def test_with_destroys_and_nothing_warns_later(
    kind: str, device: ahg.Device, baseline: testing.Snapshot, strict: None
) -> None:
    handle: Any = MAKERS[kind](device)
    with handle as entered:
        assert entered is handle
        assert handle.alive
    assert not handle.alive
    del handle, entered
    ahg.collect_forgotten()


def test_every_handle_has_a_state_enum(device: ahg.Device) -> None:
    graph = _graph_with_nodes()
    node = graph.nodes()[0]
    obj = ahg.UserObject(lambda data: None)
    assert (graph.state, node.state, obj.state) == (HandleState.OPEN,) * 3
    exec_ = graph.instantiate()
    stream, event = device.create_stream(), device.create_event()
    assert {exec_.state.value, stream.state.value, event.state.value} == {"open"}
    graph.destroy()
    obj.release()
    assert (graph.state, node.state, obj.state) == (HandleState.DESTROYED,) * 3
    for handle in (exec_, stream, event):
        handle.destroy()
        assert handle.state.value != "open"


def test_a_forgotten_graph_gives_back_its_user_object_references(
    baseline: testing.Snapshot,
) -> None:
    ran: list[str] = []
    obj = ahg.UserObject(lambda data: ran.append(threading.current_thread().name), "data")
    box = [ahg.Graph()]
    box[0].retain_user_object(obj)
    obj.release()  # only the graph holds it now
    assert obj.owners == {box[0]}
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph"):
        forget(box)
    assert ran == ["ahipgraph-releaser"]  # freed off the collecting thread
    assert not obj.alive


def test_a_forgotten_user_object_runs_its_destructor_once_and_a_raise_is_contained(
    baseline: testing.Snapshot,
) -> None:
    ran: list[object] = []
    unraisable: list[Any] = []

    def destructor(data: object) -> None:
        ran.append(data)
        raise KeyboardInterrupt("from a destructor")  # BaseException too

    previous = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        box = [ahg.UserObject(destructor, "payload", initial_refcount=3)]
        with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed user object"):
            forget(box)
    finally:
        sys.unraisablehook = previous
    assert ran == ["payload"]
    assert len(unraisable) == 1
    assert isinstance(unraisable[0].exc_value, KeyboardInterrupt)
    # The releaser survived it, and a destructor may itself wait for forgotten handles.
    box = [ahg.UserObject(lambda data: ahg.collect_forgotten(timeout=1) or ran.append(data), 2)]
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed user object"):
        forget(box)
    assert ran == ["payload", 2]


def test_a_forgotten_executable_owning_user_objects_releases_them(
    baseline: testing.Snapshot,
) -> None:
    ran: list[str] = []
    obj = ahg.UserObject(ran.append, "exec's")
    with _graph_with_nodes() as graph:
        graph.retain_user_object(obj)
        box = [graph.instantiate()]
    obj.release()
    assert obj.owners == {box[0]}
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
        forget(box)
    assert ran == ["exec's"]


@pytest.mark.asyncio
async def test_an_executable_forgotten_with_launches_in_flight_completes_them_first(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    held = testing.HeldKernel("held")
    x = device.malloc(4)
    device.view(x, "int32", 1)[0] = 0
    with ahg.Graph() as graph:
        first = graph.add_kernel_node(held.kernel, 1, 1)
        graph.add_kernel_node(add_one, 1, 1, (x,), deps=[first])
        graph_exec = graph.instantiate()
    with device.create_stream() as stream:
        launches = [await graph_exec.launch(stream) for _ in range(3)]
        exec_ref = graph_exec._life
        del graph_exec
        with warnings.catch_warnings():
            warnings.simplefilter("error", ahg.ForgottenHandleWarning)
            gc.collect()  # the launches hold it: not collected, no warning
        assert exec_ref.attached
        assert EXECS.statistics().live == baseline.handles["graph exec"] + 1
        await held.started.wait()
        held.release()
        for launch in launches:
            await launch
        assert int(device.view(x, "int32", 1)[0]) == 3  # every launch ran to the end
        del launch
        with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
            forget(launches)  # the last references: the launches' completions
    device.free(x)


@pytest.mark.asyncio
async def test_a_forgotten_stream_with_pending_work_finishes_it(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    held = testing.HeldKernel("held")
    x = device.malloc(4)
    device.view(x, "int32", 1)[0] = 0
    stream = device.create_stream()
    await held.launch(stream)
    pending = [await stream.launch_kernel(add_one, 1, 1, (x,))]
    record = stream._life
    del stream
    with warnings.catch_warnings():
        warnings.simplefilter("error", ahg.ForgottenHandleWarning)
        gc.collect()  # its queued work holds it
    assert record.attached
    assert len(device.streams) == 1

    async def finish() -> None:
        held.release()
        await pending[0]  # the queue lets go of the stream here
        forget(pending)  # a completion holds its stream too, as a future would

    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed stream"):
        await finish()
    assert int(device.view(x, "int32", 1)[0]) == 1
    assert len(device.streams) == 0
    device.free(x)


def test_the_finalizer_may_run_on_another_thread(baseline: testing.Snapshot) -> None:
    ran: list[str] = []
    box: list[Any] = [ahg.Graph()]
    obj = ahg.UserObject(lambda data: ran.append(threading.current_thread().name))
    box[0].retain_user_object(obj)
    obj.release()
    del obj

    def drop() -> None:
        box.pop()
        gc.collect()

    def drop_elsewhere() -> None:
        thread = threading.Thread(target=drop, name="dropper")
        thread.start()
        thread.join()
        ahg.collect_forgotten()

    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph"):
        drop_elsewhere()
    assert ran == ["ahipgraph-releaser"]


def test_a_collection_while_a_registry_lock_is_held_does_not_deadlock(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    # An executable with parallel strands owns internal streams; freeing it destroys them,
    # which takes the stream registry's lock. The collector may run while this very thread
    # holds that lock (an allocation inside register): the finalizer must only hand over.
    graph = ahg.Graph()
    root = graph.add_empty_node()
    for _ in range(3):
        graph.add_empty_node(deps=[root])
    box = [graph.instantiate()]
    graph.destroy()
    assert box[0].plan.num_strands > 1

    def collect_under_the_locks() -> None:
        with STREAMS._lock, EXECS._lock:
            box.clear()
            gc.collect()
        ahg.collect_forgotten()

    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
        collect_under_the_locks()


def test_runtime_owned_streams_go_quietly_with_their_device(strict: None) -> None:
    devices = [ahg.get_device()]
    assert devices[0].null_stream.alive
    made: list[ahg.Stream] = []
    thread = threading.Thread(target=lambda: made.append(devices[0].per_thread_stream()))
    thread.start()
    thread.join()
    assert made[0].alive
    made.clear()
    with testing.fresh_devices(1):  # drops the old device, its null stream and thread stream
        forget(devices)


def test_a_device_does_not_keep_a_forgotten_stream_alive(device: ahg.Device) -> None:
    box = [device.create_stream()]
    assert box[0] in device.streams
    with pytest.warns(ahg.ForgottenHandleWarning):
        forget(box)
    assert list(device.streams) == []


def test_finalizers_do_not_run_at_interpreter_exit() -> None:
    code = (
        "import ahipgraph as ahg\n"
        "keep = [ahg.Graph(), ahg.get_device().create_stream(), ahg.UserObject(print, 'ran')]\n"
    )
    result = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "unclosed" not in result.stderr
    assert "Exception ignored" not in result.stderr


def test_the_examples_leak_no_handle() -> None:
    code = "\n".join(
        [
            "import gc, pathlib, runpy, sys, warnings",
            "import ahipgraph as ahg",
            "from ahipgraph.testing import snapshot",
            "unraisable = []",
            "sys.unraisablehook = unraisable.append",
            "warnings.simplefilter('error', ResourceWarning)",
            "for script in sys.argv[1:]:",
            "    if script.endswith('.md'):  # the README's example",
            "        text = pathlib.Path(script).read_text()",
            "        code = text.split('```python\\n', 1)[1].split('```', 1)[0]",
            "        exec(compile(code, script, 'exec'), {'__name__': 'readme'})",
            "    else:",
            "        runpy.run_path(script, run_name='__main__')",
            "    ahg.configure_devices(1)  # the device's own streams go with it, quietly",
            "    ahg.collect_forgotten()",
            "    assert not unraisable, (script, [u.exc_value for u in unraisable])",
            "    live = {k: n for k, n in snapshot().handles.items() if n}",
            "    assert live == {}, (script, live)",
            "print('clean')",
        ]
    )
    scripts = ["saxpy.py", "graph_replay.py", "capture.py", "conditional.py", "two_devices.py"]
    result = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", "-c", code]
        + [str(ROOT / "examples" / s) for s in scripts]
        + [str(ROOT / "README.md")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.endswith("clean\n")


# -- the registry --------------------------------------------------------------------------------


class Thing:
    pass


def test_a_registry_retires_a_collected_objects_slot() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    kept = Thing()
    registry.register(kept)
    dropped = registry.register(Thing())  # collected at once
    assert registry.get(dropped) is None
    assert registry.statistics().live == 1
    again = Thing()
    reused = registry.register(again)
    assert reused.slot == dropped.slot
    assert reused.generation == dropped.generation + 1
    assert registry.get(dropped) is None
    assert registry.unregister(dropped) is None
    assert registry.live_objects() == [kept, again]


def test_a_destroyed_then_collected_object_is_retired_once() -> None:
    registry: HandleRegistry[Thing] = HandleRegistry("thing")
    thing = Thing()
    hid = registry.register(thing)
    assert registry.unregister(hid) is thing
    del thing
    gc.collect()
    stats = registry.statistics()
    assert (stats.live, stats.slots) == (0, 1)
    assert registry.register(Thing()).generation == 1


def test_a_weak_list_keeps_order_and_forgets_the_collected() -> None:
    items = [Thing() for _ in range(4)]
    weak: WeakList[Thing] = WeakList()
    for item in items:
        weak.append(item)
    del items[1]
    gc.collect()
    assert list(weak) == items
    weak.remove(items[0])
    with pytest.raises(ValueError):
        weak.remove(items[0])
    assert len(weak) == 2
    assert items[2] in weak


# -- the liveness table and the factory guard -----------------------------------------------------


async def _destroyed_use(kind: str, use: str, device: ahg.Device) -> None:
    """Make a handle of ``kind``, destroy it, then use it as ``use`` says."""
    if kind == "graph":
        graph = ahg.Graph()
        graph.destroy()
        graph.destroy() if use == "destroy" else graph.add_empty_node()
    elif kind == "graph node":
        with ahg.Graph() as graph:
            node = graph.add_empty_node()
            node.destroy()
            node.destroy() if use == "destroy" else node.dependencies()
    elif kind == "graph exec":
        with ahg.Graph() as graph:
            graph_exec = graph.instantiate()
        graph_exec.destroy()
        graph_exec.destroy() if use == "destroy" else await graph_exec.upload()
    elif kind == "stream":
        stream = device.create_stream()
        stream.destroy()
        stream.destroy() if use == "destroy" else stream.query()
    else:
        event = device.create_event()
        event.destroy()
        if use == "destroy":
            event.destroy()
        elif use == "graph node":
            with ahg.Graph() as graph:
                graph.add_event_record_node(event)
        else:
            event.query()


@pytest.mark.asyncio
@pytest.mark.parametrize(("kind", "use"), list(DESTROYED_CODES))
async def test_each_row_of_the_liveness_table_is_what_the_api_raises(
    kind: str, use: str, device: ahg.Device
) -> None:
    with pytest.raises(ahg.Destroyed) as caught:
        await _destroyed_use(kind, use, device)
    assert isinstance(caught.value, ahg.HipError)
    assert caught.value.code is DESTROYED_CODES[kind, use]


def test_hips_codes_differ_per_api_on_purpose() -> None:
    assert DESTROYED_CODES["graph", "destroy"] is ahg.ErrorCode.IllegalState
    assert DESTROYED_CODES["stream", "use"] is ahg.ErrorCode.ContextIsDestroyed
    assert DESTROYED_CODES["stream", "destroy"] is ahg.ErrorCode.InvalidHandle
    assert DESTROYED_CODES["event", "graph node"] is ahg.ErrorCode.InvalidValue


def test_one_factory_guard_for_every_constructor(device: ahg.Device) -> None:
    graph = ahg.Graph()
    calls: list[tuple[Callable[[], object], str]] = [
        (lambda: ahg.Stream(device), "Device.create_stream"),
        (lambda: ahg.Event(device), "Device.create_event"),
        (lambda: GraphNode(graph, ahg.NodeType.Empty, None), "add_"),
        (lambda: GraphExec(graph, 0, device, {}, None), "instantiate"),
        (lambda: GraphExec(graph, 0, device, {}, FactoryOnly("other")), "instantiate"),
    ]
    before = _registry_counts()
    for call, factory in calls:
        with pytest.raises(TypeError, match=factory):
            call()
    assert _registry_counts() == before
    graph.destroy()


# -- graph memory ---------------------------------------------------------------------------------


def _memory_graph(*, free: bool) -> ahg.Graph:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(4096)
    if free:
        graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    return graph


@pytest.mark.parametrize("free", [True, False])
def test_a_forgotten_memory_graph_gives_back_its_reservation(
    free: bool, device: ahg.Device, baseline: testing.Snapshot
) -> None:
    box = [_memory_graph(free=free)]
    assert len(RESERVATIONS) == 1
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph"):
        forget(box)
    assert len(RESERVATIONS) == 0
    assert _in_use(device.statistics().memory) == _in_use(baseline.devices[0].memory)


@pytest.mark.asyncio
async def test_a_forgotten_memory_executable_gives_back_its_ranges(
    device: ahg.Device, baseline: testing.Snapshot
) -> None:
    with _memory_graph(free=True) as graph:
        box = [graph.instantiate()]
    with device.create_stream() as stream:
        await (await box[0].launch(stream))
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
        forget(box)
    assert len(RESERVATIONS) == 0
    device.graph_mem_trim()
    assert _in_use(device.statistics().memory) == _in_use(baseline.devices[0].memory)


@pytest.mark.asyncio
async def test_a_forgotten_cross_device_executable_destroys_its_home_stream() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    before = _registry_counts()
    with _graph_with_nodes() as graph:
        box = [graph.instantiate(device=d0)]
    with d1.create_stream() as other:
        await (await box[0].launch(other))  # runs on device 0, ordered with device 1's stream
        assert _registry_counts()["stream"] > before["stream"] + 1  # + its home stream
    with pytest.warns(ahg.ForgottenHandleWarning, match="unclosed graph exec"):
        forget(box)
    assert _registry_counts() == before
