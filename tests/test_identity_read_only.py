"""What a handle is, and where it stands, can be read and not overwritten.

A stream, an event, a device, a graph, a node and an executable name one runtime object each,
and the runtime acts on what they say they are (a launch reads its stream's state and queue,
an event's synchronize waits on its device's engine): every public attribute of theirs is a
property without a setter, so ``stream.device = other`` or ``del event.device`` raises
``AttributeError`` and changes nothing, and the handle goes on working. The one documented
exception is a node's ``params``, settable as HIP's ``hipGraph*NodeSetParams`` are.

The testing kit's fakes and faults are handles too: a test that assigned a fault's ``name``,
a held kernel's ``kernel`` or an interleaving's ``position`` changed what the fake did, in
ways the test could not see (every kernel faulted, a held kernel that no longer held, a task
that waited for ever). Their attributes are read-only the same way.

(``test_readonly_handles.py`` and ``test_readonly_runtime_objects.py`` show what each write
of the runtime's attributes used to break.)

The rest of the file is the rest of their dunder surface: what copies as itself
(``STREAM_PER_THREAD``, a ``Threads``), what deep-copies (a kernel node's params), what
refuses to be copied (the runtime's parts, the kit's fakes), how records holding host arrays
compare, what a replaced device's handles say in their repr, and weak references to kernels
and completions.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import inspect
import pickle
import weakref
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph import testing
from cleanup import destroy

IDENTITY = {
    ahg.Stream: "alive device hid implicit is_null non_blocking priority queue state "
    "submitted tail",
    ahg.Event: "alive blocking_sync device disable_timing hid signal state time_ns",
    ahg.Device: "clock engine in_flight loop memory name null_stream ordinal properties "
    "queues streams",
    ahg.Graph: "alive destroyed has_mem_nodes hid id instantiated lock original owner_node state",
    ahg.GraphNode: "alive graph hid id state type",
    ahg.GraphExec: "alive arena device flags hid in_flight plan pool state user_objects",
}
SETTABLE = {(ahg.GraphNode, "params")}  # documented: node.params = record is set_params


@ahg.kernel
def increment(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 1


def _public_attributes(cls: type) -> set[str]:
    """The public names of ``cls`` that are not methods: what a user reads as attributes."""
    names = set()
    for name in dir(cls):
        if name.startswith("_"):
            continue
        found = inspect.getattr_static(cls, name)
        if isinstance(found, (staticmethod, classmethod)) or inspect.isfunction(found):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("cls", list(IDENTITY), ids=lambda cls: cls.__name__)
def test_every_public_attribute_of_a_handle_is_a_property_without_a_setter(cls: type) -> None:
    # An inventory: an attribute added later as a plain one, or with a setter, fails here.
    assert _public_attributes(cls) == set(IDENTITY[cls].split()) | {
        name for kind, name in SETTABLE if kind is cls
    }
    for name in _public_attributes(cls):
        found = inspect.getattr_static(cls, name)
        assert isinstance(found, property), name
        assert (found.fset is not None) == ((cls, name) in SETTABLE), name
        assert found.fdel is None, name


class _Handles:
    """One live handle of each kind, and a call that shows each still works."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.x = device.malloc(4)
        self.stream = device.create_stream()
        self.event = device.create_event()
        self.graph = ahg.Graph()
        self.node = self.graph.add_kernel_node(increment, 1, 1, (self.x,))
        self.graph_exec = self.graph.instantiate()

    def of(self, cls: type) -> Any:
        return {
            ahg.Stream: self.stream,
            ahg.Event: self.event,
            ahg.Device: self.device,
            ahg.Graph: self.graph,
            ahg.GraphNode: self.node,
            ahg.GraphExec: self.graph_exec,
        }[cls]

    async def still_work(self) -> None:
        """Each handle does its job: the kernel runs twice, once eagerly and once replayed."""
        stream, device = self.stream, self.device
        await stream.memset(self.x, 0, 4)
        await stream.launch_kernel(increment, 1, 1, (self.x,))
        await (await self.graph_exec.launch(stream))
        await stream.record_event(self.event)
        await self.event.synchronize()
        assert self.event.query()
        await device.synchronize()
        assert device.view(self.x, "int32", 1)[0] == 2
        assert self.node.dependencies() == []
        assert self.graph.nodes() == [self.node]
        assert self.stream.device is device
        assert self.event.device is device
        assert self.graph_exec.device is device

    def destroy(self) -> None:
        destroy(self.graph_exec, self.graph, self.stream, self.event, self.x)


CASES = [(cls, name) for cls, names in IDENTITY.items() for name in names.split()]


@pytest.mark.asyncio
@pytest.mark.parametrize(("cls", "name"), CASES, ids=[f"{c.__name__}.{n}" for c, n in CASES])
async def test_an_identity_attribute_refuses_assignment_and_del_and_the_handle_still_works(
    cls: type, name: str, device: ahg.Device
) -> None:
    handles = _Handles(device)
    handle = handles.of(cls)
    before = getattr(handle, name)
    for value in (before, None, 0, handles.stream):
        with pytest.raises(AttributeError):
            setattr(handle, name, value)
    with pytest.raises(AttributeError):
        delattr(handle, name)
    after = getattr(handle, name)
    assert after is before or (isinstance(before, (list, tuple)) and after == before)
    await handles.still_work()
    handles.destroy()


@pytest.mark.asyncio
async def test_a_null_stream_s_identity_is_read_only_too(device: ahg.Device) -> None:
    null, x = device.null_stream, device.malloc(4)
    for name in IDENTITY[ahg.Stream].split():
        before = getattr(null, name)
        with pytest.raises(AttributeError):
            setattr(null, name, None)
        with pytest.raises(AttributeError):
            delattr(null, name)
        assert getattr(null, name) is before
    await device.memset(x, 5, 4)
    await null.synchronize()
    assert device.view(x, "uint8", 4).tolist() == [5, 5, 5, 5]
    destroy(x)


@pytest.mark.asyncio
async def test_a_node_s_params_stay_settable_and_cannot_be_deleted(device: ahg.Device) -> None:
    x, stream = device.malloc(4), device.create_stream()
    graph = ahg.Graph()
    node = graph.add_memset_node(x, 1, 4)
    params = node.params
    with pytest.raises(AttributeError):
        del node.params
    node.params = ahg.MemsetParams.make(x, 9, 4)
    assert node.params is not params
    assert node.params.value == 9
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert device.view(x, "uint8", 4).tolist() == [9, 9, 9, 9]
    destroy(graph_exec, graph, stream, x)


# -- the testing kit ------------------------------------------------------------------------------


def _refuses(thing: object, names: str) -> None:
    for name in names.split():
        before = getattr(thing, name)
        for value in (before, None):
            with pytest.raises(AttributeError):
                setattr(thing, name, value)
        with pytest.raises(AttributeError):
            delattr(thing, name)
        after = getattr(thing, name)
        assert after is before or (type(after) is list and after == before)  # a list: a copy


@pytest.mark.asyncio
async def test_a_held_kernel_is_the_kernel_it_holds_whatever_is_assigned(
    device: ahg.Device,
) -> None:
    # Its kernel set to another, launch() enqueued that one: it never held its queue, and
    # started never came.
    held, stream = testing.HeldKernel("held"), device.create_stream()
    _refuses(held, "name kernel started runs")
    with pytest.raises(AttributeError):
        held.kernel = increment  # type: ignore[misc]
    done = await held.launch(stream)
    await held.started.wait()
    assert held.runs == 1
    assert not done.done()
    held.release()
    await done
    destroy(stream)


@pytest.mark.asyncio
async def test_a_gated_host_s_runs_count_its_gates(device: ahg.Device) -> None:
    # Its runs set back to 0 after the first run, the second run went through gate 0, which
    # the test had opened for the first: it ran to its end with its own gate still shut.
    log: list[str] = []
    gate, stream = testing.GatedHost("gate", log), device.create_stream()
    _refuses(gate, "name log runs")
    gate.open(0)
    await stream.launch_host_func(gate)
    await stream.synchronize()
    with pytest.raises(AttributeError):
        gate.runs = 0  # type: ignore[misc]
    await stream.launch_host_func(gate)
    await gate.started(1)
    assert log == ["gate start 0", "gate end 0", "gate start 1"]
    gate.open(1)
    await stream.synchronize()
    assert gate.runs == 2
    assert gate.log is log
    destroy(stream)


@pytest.mark.asyncio
async def test_an_interleaving_s_position_moves_only_with_its_turns() -> None:
    # Its position set back to 0 after a's first turn, b waited behind a turn nobody would
    # take again: the test hung. Its order, changed through the list handed out,
    # skipped b's turn.
    turns, log = testing.Interleave("a", "b", "a"), list[str]()
    _refuses(turns, "order position")
    turns.order.remove("b")  # a copy: the turns go by their own order

    async def task(name: str, steps: int) -> None:
        for step in range(steps):
            await turns.turn(name)
            log.append(f"{name}{step}")
        turns.done(name)

    async def first_turn_then_rewind() -> None:
        await turns.turn("a")
        log.append("a0")
        with pytest.raises(AttributeError):
            turns.position = 0  # type: ignore[misc]
        await turns.turn("a")
        log.append("a1")
        turns.done("a")

    async with asyncio.timeout(5):
        await asyncio.gather(first_turn_then_rewind(), task("b", 1))
    assert log == ["a0", "b0", "a1"]
    assert turns.order == ["a", "b", "a"]
    assert turns.position == 3


@pytest.mark.asyncio
async def test_a_kernel_fault_fails_what_it_was_made_to_fail(device: ahg.Device) -> None:
    # Its name set to None, every kernel of the block failed, not only the one named; its
    # remaining set to a str, the next matching kernel failed with the hook's TypeError.
    x, stream, other = device.malloc(4), device.create_stream(), testing.HeldKernel("other")
    other.release()
    await device.memset(x, 0, 4)
    with testing.fail_kernels(1, name="increment") as fault:
        _refuses(fault, "name remaining hits")
        for name, value in (("name", None), ("remaining", "1")):
            with pytest.raises(AttributeError):
                setattr(fault, name, value)
        await (await other.launch(stream))
        with pytest.raises(ahg.LaunchFailure) as failed:
            await (await stream.launch_kernel(increment, 1, 1, (x,)))
        assert isinstance(failed.value.__cause__, testing.InjectedFault)
        await (await stream.launch_kernel(increment, 1, 1, (x,)))
        assert (fault.hits, fault.remaining) == (1, 0)
    assert device.view(x, "int32", 1)[0] == 1
    destroy(stream, x)


@pytest.mark.asyncio
async def test_a_kernel_hang_s_started_is_the_one_its_hang_sets(device: ahg.Device) -> None:
    stream = device.create_stream()
    with testing.hang_kernels(name="increment") as hang:
        _refuses(hang, "name remaining hits started")
        x = device.malloc(4)
        done = await stream.launch_kernel(increment, 1, 1, (x,))
        async with asyncio.timeout(5):
            await hang.started.wait()
        assert hang.hanging == 1
        assert hang.cancel() == 1
        with pytest.raises(ahg.LaunchFailure):
            await done
    destroy(stream, x)


def test_an_allocation_fault_refuses_the_allocations_it_was_made_for(device: ahg.Device) -> None:
    # Its device set to "0" (a str), no ordinal matched it: the allocation the test meant
    # to fail succeeded.
    with testing.fail_allocations(1, device=0, nbytes=64) as fault:
        _refuses(fault, "device nbytes remaining hits")
        with pytest.raises(AttributeError):
            fault.device = "0"  # type: ignore[misc]
        kept = device.malloc(32)
        with pytest.raises(ahg.OutOfMemory):
            device.malloc(64)
        assert (fault.hits, fault.remaining, fault.device, fault.nbytes) == (1, 0, 0, 64)
    destroy(kept)


@pytest.mark.asyncio
async def test_held_signal_sets_go_back_to_the_executable_they_came_from(
    device: ahg.Device,
) -> None:
    # Their graph_exec set to another executable, give_back() put the sets in that one's
    # pool: every launch of the first then waited for a set for good. The list of sets,
    # cleared or replaced, lost them the same way.
    graph, stream = ahg.Graph(), device.create_stream()
    graph.add_empty_node()
    first, second = graph.instantiate(), graph.instantiate()
    with testing.exhaust_signal_sets(first) as held:
        _refuses(held, "graph_exec sets")
        taken = held.held
        assert taken == len(held.sets) > 0
        held.sets.clear()  # a copy
        for name, value in (("graph_exec", second), ("sets", [])):
            with pytest.raises(AttributeError):
                setattr(held, name, value)
        assert first.statistics().signal_pool.free == 0
    assert first.statistics().signal_pool.free == taken
    assert second.statistics().signal_pool.free == second.statistics().signal_pool.sets
    async with asyncio.timeout(5):
        await (await first.launch(stream))
    destroy(first, second, graph, stream)


# -- copies ---------------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_copied_or_unpickled_stream_per_thread_is_still_the_per_thread_stream(
    device: ahg.Device,
) -> None:
    # A copy, an unpickled one or PerThreadStream() was a second sentinel: a launch, an
    # upload or a record given it raised TypeError ("stream must be a Stream or None, got
    # ahg.STREAM_PER_THREAD") while its repr said it was the per-thread stream.
    sentinel = ahg.STREAM_PER_THREAD
    settings = copy.deepcopy({"stream": sentinel})
    others = [
        copy.copy(sentinel),
        settings["stream"],
        *(pickle.loads(pickle.dumps(sentinel, protocol)) for protocol in (0, 2, 5)),
        ahg.PerThreadStream(),
    ]
    assert all(other is sentinel for other in others)
    graph, event, x = ahg.Graph(), device.create_event(), device.malloc(4)
    graph.add_memset_node(x, 3, 4)
    graph_exec = graph.instantiate()
    await graph_exec.upload(settings["stream"])
    await (await graph_exec.launch(settings["stream"]))
    await event.record(settings["stream"])
    await event.synchronize()
    assert device.view(x, "uint8", 4).tolist() == [3, 3, 3, 3]
    assert graph_exec.statistics().launches == 1
    destroy(graph_exec, graph, event, x)


def test_a_threads_copies_as_itself_and_pickles_as_its_launch_shape() -> None:
    # Python's default copy set each slot again, which Threads refuses: copy.copy,
    # copy.deepcopy and pickle raised "Threads is read-only: cannot set 'block'".
    threads = ahg.Threads((2, 2), 3, shared_mem=16)
    assert copy.copy(threads) is threads
    assert copy.deepcopy([threads])[0] is threads
    loaded = pickle.loads(pickle.dumps(threads))
    assert (loaded.grid, loaded.block, loaded.count, loaded.shared_mem) == (
        (2, 2, 1),
        (3, 1, 1),
        12,
        16,
    )
    with pytest.raises(AttributeError, match="read-only"):
        loaded.count = 1  # type: ignore[misc]


@pytest.mark.asyncio
async def test_a_kernel_node_s_params_deep_copy_and_set_back(device: ahg.Device) -> None:
    # deepcopy of a kernel (or of a record holding one) raised "cannot pickle
    # '_struct.Struct' object" from its argument layout, then the Threads error above.
    x, stream, graph = device.malloc(4), device.create_stream(), ahg.Graph()
    node = graph.add_kernel_node(increment, 1, 1, (x,))
    params = node.params
    duplicate = copy.deepcopy(params)
    kernel = duplicate.kernel
    assert kernel is not increment  # a kernel of its own, as copy.copy makes
    assert (kernel.body, kernel.layout, kernel.name) == (
        increment.body,
        increment.layout,
        increment.name,
    )
    assert (duplicate.args, duplicate.arg_bytes) == (params.args, params.arg_bytes)
    assert duplicate.threads is params.threads
    kernel.duration_ns = 5_000  # its own definition: the original keeps its duration
    assert increment.duration_ns is None
    node.params = duplicate
    graph_exec = graph.instantiate()
    await device.memset(x, 0, 4)
    await (await graph_exec.launch(stream))
    assert device.view(x, "int32", 1)[0] == 1
    destroy(graph_exec, graph, stream, x)


# -- equality -------------------------------------------------------------------------------------


def test_parameter_records_with_host_arrays_compare_by_the_buffer_they_name(
    device: ahg.Device,
) -> None:
    # The dataclass == compared the host arrays with numpy's ==, whose answer has no truth
    # value: two memcpy nodes copying from different arrays, compared, raised numpy's
    # "truth value of an array with more than one element is ambiguous".
    x, graph = device.malloc(64), ahg.Graph()
    first, second = np.zeros(16, np.uint8), np.zeros(16, np.uint8)
    plain = [graph.add_memcpy_node(x, host, 16) for host in (first, second, first)]
    pitched = [
        graph.add_memcpy_3d_node(ahg.PitchedPtr(x, 16), ahg.PitchedPtr(host, 16), (16, 1, 1))
        for host in (first, second, first)
    ]
    for one, other, again in (plain, pitched):
        assert one.params != other.params  # same contents, another buffer
        assert one.params == again.params  # the same buffer
        assert one.params == copy.copy(one.params)
        assert copy.deepcopy(one.params) != one.params  # a deep copy copies the buffer
    assert plain[0].params != pitched[0].params
    assert ahg.PitchedPtr(first, 16) != ahg.PitchedPtr(second, 16)
    assert ahg.PitchedPtr(first, 16) == ahg.PitchedPtr(first, 16)
    assert ahg.HostParams.make(print, (first, 1)) != ahg.HostParams.make(print, (second, 1))
    assert ahg.HostParams.make(print, (first, 1)) == ahg.HostParams.make(print, (first, 1))
    assert ahg.HostParams.make(print, (first,)) != ahg.HostParams.make(print, (first, 1))
    with pytest.raises(TypeError, match="unhashable"):
        hash(plain[0].params)  # as a list is: it holds an array
    destroy(graph, x)


# -- what cannot be copied ------------------------------------------------------------------------

COPIES = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": lambda thing: pickle.loads(pickle.dumps(thing)),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("how", list(COPIES))
async def test_the_runtime_s_parts_and_the_kit_s_fakes_refuse_to_be_copied(
    device: ahg.Device, how: str
) -> None:
    # Each is one live object the runtime or the test acts on. A copy shared some of its
    # state and not the rest: a held kernel's copy shared its gate but counted no runs, an
    # interleaving's copy shared its waiters but not its position, a signal's copy was
    # never reached; a deep copy or a pickle failed on a lock inside ("cannot pickle
    # '_thread.lock' object") or succeeded with a check no block would end.
    x, stream, graph = device.malloc(4), device.create_stream(), ahg.Graph()
    graph.add_kernel_node(increment, 1, 1, (x,))
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    held = testing.HeldKernel()
    parts: list[object] = [
        device.engine,
        device.memory,
        stream.queue,
        stream.tail,
        graph_exec.pool,
        graph_exec.arena,
        held,
        testing.GatedHost(),
        testing.Interleave("a"),
    ]
    with testing.fail_kernels(0) as fault, testing.hang_kernels(0) as hang:
        parts += [fault, hang]
    with testing.fail_allocations(0) as allocation:
        parts.append(allocation)
    with testing.exhaust_signal_sets(graph_exec) as sets:
        parts.append(sets)
    with ahg.race_check() as check:
        parts.append(check)
    async with stream.capture() as scope:
        parts.append(scope)
    for part in parts:
        with pytest.raises(TypeError, match="cannot be copied or pickled"):
            COPIES[how](part)
    held.release()
    await (await held.launch(stream))
    await (await graph_exec.launch(stream))
    assert held.runs == 1
    assert device.view(x, "int32", 1)[0] == 2
    assert graph_exec.statistics().launches == 2
    assert scope.graph is not None
    destroy(scope.graph, graph_exec, graph, stream, x)


# -- reprs ----------------------------------------------------------------------------------------


def test_the_handles_of_a_replaced_device_say_so_in_their_repr() -> None:
    # After configure_devices, a kept device, stream, event or executable refused every new
    # call with InvalidDevice, but its repr was that of a live handle ("state=open"): a test
    # failure showing it gave no hint that it belonged to a device no longer configured.
    old = ahg.get_device(0)
    stream, event, graph = old.create_stream(), old.create_event(), ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    kept = (old, stream, event, graph_exec)
    assert not any("replaced" in repr(handle) for handle in kept)
    ahg.configure_devices(1)
    assert all(repr(handle).endswith(" replaced>") for handle in kept)
    successor = ahg.get_device(0)
    with successor.create_stream() as fresh:
        assert "replaced" not in repr(successor)
        assert "replaced" not in repr(fresh)
    destroy(graph_exec, graph, stream, event)
    assert repr(stream).endswith("state=destroyed submitted=0 replaced>")


# -- weak references ------------------------------------------------------------------------------


def test_a_kernel_can_be_weakly_referred_to_like_the_function_it_replaces() -> None:
    # A kernel had no __weakref__ slot: weakref.ref(kernel) and a WeakKeyDictionary keyed by
    # kernels raised "cannot create weak reference to 'Kernel' object".
    def body(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
        x[0] += 1

    kernel = ahg.kernel(body)
    cache: weakref.WeakKeyDictionary[ahg.Kernel, str] = weakref.WeakKeyDictionary()
    cache[kernel] = "compiled"
    ref = weakref.ref(kernel)
    twin = copy.copy(kernel)
    assert ref() is kernel
    assert twin is not kernel
    assert weakref.ref(twin)() is twin
    del kernel
    gc.collect()
    assert ref() is None
    assert len(cache) == 0


def test_held_signal_sets_made_by_hand_refuse_what_is_not_an_executable(
    device: ahg.Device,
) -> None:
    # SignalSetsHeld(device) was made, and its take() and give_back() raised a bare
    # AttributeError ("'Device' object has no attribute 'pool'").
    with pytest.raises(TypeError, match="expected a GraphExec"):
        testing.SignalSetsHeld(device)  # type: ignore[arg-type]
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate()
    held = testing.SignalSetsHeld(graph_exec)
    held.take()
    assert held.held == graph_exec.statistics().signal_pool.sets
    held.give_back()
    assert graph_exec.statistics().signal_pool.free == graph_exec.statistics().signal_pool.sets
    destroy(graph_exec, graph)


@pytest.mark.asyncio
async def test_a_completion_can_be_tracked_weakly_like_an_asyncio_future(
    device: ahg.Device,
) -> None:
    # A Completion had no __weakref__ slot: a WeakSet of launches in flight raised "cannot
    # create weak reference to 'Completion' object".
    stream, held = device.create_stream(), testing.HeldKernel()
    in_flight: weakref.WeakSet[ahg.Completion] = weakref.WeakSet()
    completion = await held.launch(stream)
    in_flight.add(completion)
    assert list(in_flight) == [completion]
    assert copy.copy(completion) is completion
    held.release()
    await completion
    ref = weakref.ref(completion)
    del completion
    gc.collect()
    assert ref() is None
    assert len(in_flight) == 0
    destroy(stream)
