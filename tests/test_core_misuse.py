"""The core under misuse: each test is a misuse that once broke it.

Cancellation at awaits, calls from other loops and threads, user code that raises anything,
bad arguments and handles destroyed or forgotten while work is in flight. Each test proves with
``statistics()`` that everything is back at its baseline and that the device keeps working.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import threading
import weakref
from typing import Any

import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.runtime.event import EVENTS
from ahipgraph.runtime.stream import STREAMS
from cleanup import destroy


@ahg.kernel
def add_one(t: ahg.Threads, out: ahg.Ptr[ahg.int64]) -> None:
    out[0] += 1


def raising(error: BaseException) -> Any:
    def body(*args: Any) -> None:
        raise error

    return body


# -- user code that raises a BaseException which is not an interrupt ----------------------------


@pytest.mark.asyncio
@pytest.mark.parametrize("error", [asyncio.CancelledError, GeneratorExit])
async def test_a_destructor_raising_a_base_exception_at_the_last_completion_is_contained(
    device: ahg.Device, error: type[BaseException]
) -> None:
    """A destructor the runtime runs when a destroyed executable's last launch completes may
    raise CancelledError or GeneratorExit: it is reported to the loop's exception handler,
    the other destructors run, and the work queued behind the launch still runs."""
    reported: list[BaseException] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda loop, context: reported.append(context["exception"])
    )
    ran: list[int] = []

    def first(_: object) -> None:
        ran.append(1)
        raise error

    out = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph.retain_user_object(ahg.UserObject(first), move=True)
    graph.retain_user_object(ahg.UserObject(lambda _: ran.append(2)), move=True)
    graph_exec = graph.instantiate()
    graph.destroy()
    launched = await graph_exec.launch(stream)
    behind = await stream.launch_kernel(add_one, 1, 1, (out,))
    graph_exec.destroy()  # freed, destructors and all, by the launch's completion
    await asyncio.wait_for(behind.wait(), 5)  # the queue did not wedge behind the destructor
    await launched
    await stream.synchronize()
    assert sorted(ran) == [1, 2]
    assert [type(e) for e in reported] == [error]
    assert device.view(out, "int64", 1)[0] == 2
    assert device.statistics().in_flight == 0
    destroy(out, stream)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_from_a_destructor_at_the_last_completion_leaves_the_queue_running(
    device: ahg.Device, interrupt: type[BaseException]
) -> None:
    """The interrupt propagates out of the loop, and the work queued behind still runs."""
    out = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph.retain_user_object(ahg.UserObject(raising(interrupt())), move=True)
    graph_exec = graph.instantiate()
    graph.destroy()

    async def first_run() -> ahg.Completion:
        await graph_exec.launch(stream)
        behind = await stream.launch_kernel(add_one, 1, 1, (out,))
        graph_exec.destroy()
        for _ in range(5):
            await asyncio.sleep(0)
        return behind

    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(interrupt):
            loop.run_until_complete(first_run())
        loop.run_until_complete(stream.synchronize())  # the rest ran on a later turn
    finally:
        loop.close()
    assert device.statistics().in_flight == 0
    assert device.view(out, "int64", 1)[0] == 2
    destroy(out, stream)


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["host", "kernel", "graph"])
async def test_generator_exit_from_user_code_fails_that_op_and_does_not_escape(
    device: ahg.Device, where: str
) -> None:
    """GeneratorExit is not an interrupt (asyncio lets only KeyboardInterrupt and SystemExit
    escape): it is the op's LaunchFailure, and nothing reaches the loop's exception handler."""
    reported: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: reported.append(ctx))

    @ahg.kernel
    def exits(t: ahg.Threads) -> None:
        raise GeneratorExit

    out = device.malloc(8)
    stream = device.create_stream()
    graph = ahg.Graph()
    graph_exec = None
    if where == "host":
        failed = await stream.launch_host_func(raising(GeneratorExit()))
    elif where == "kernel":
        failed = await stream.launch_kernel(exits, 1, 1, ())
    else:
        graph.add_host_node(raising(GeneratorExit()))
        graph_exec = graph.instantiate()
        failed = await graph_exec.launch(stream)
    behind = await stream.launch_kernel(add_one, 1, 1, (out,))
    with pytest.raises(ahg.LaunchFailure) as caught:
        await failed
    assert isinstance(caught.value.__cause__, GeneratorExit)
    await behind
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert reported == []
    assert device.view(out, "int64", 1)[0] == 1
    destroy(*([graph_exec] if graph_exec else []), graph, out, stream)


# -- handles forgotten while work is in flight -----------------------------------------------


@pytest.mark.asyncio
async def test_a_completion_kept_after_its_work_ran_does_not_pin_the_executable_or_stream(
    device: ahg.Device,
) -> None:
    """Users keep completions (a list of launches); forgetting the executable and the stream
    must still free them: a finished program drops its completion callback, which held the
    launch and through it the executable (arena, signal sets), or the stream."""
    out = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    kept = [await graph_exec.launch(stream), await stream.launch_kernel(add_one, 1, 1, (out,))]
    for completion in kept:
        await completion
    graph_exec_ref, stream_ref = weakref.ref(graph_exec), weakref.ref(stream)
    del graph_exec, stream
    with pytest.warns(ahg.ForgottenHandleWarning) as warned:
        ahg.collect_forgotten()
    assert graph_exec_ref() is None
    assert stream_ref() is None
    assert sorted(str(w.message).split()[1] for w in warned) == ["graph", "stream"]
    assert all(c.done() and c.exception() is None for c in kept)
    destroy(graph, out)


# -- another thread's loop takes a device while a launch waits for a signal set --------------


class OtherLoop:
    """A thread whose own event loop keeps ``device`` busy until :meth:`stop`."""

    def __init__(self, device: ahg.Device) -> None:
        self.device = device
        self.bound = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()))

    async def _main(self) -> None:
        loop = asyncio.get_running_loop()
        gate = loop.create_future()

        async def hold() -> None:
            await gate

        stream = self.device.create_stream()
        await stream.launch_host_func(hold)
        self.bound.set()
        await loop.run_in_executor(None, self.release.wait)
        gate.set_result(None)
        await stream.synchronize()
        stream.destroy()

    def start(self) -> None:
        """Start, and block the caller (and its loop) until the device is taken."""
        self.thread.start()
        assert self.bound.wait(10)

    def stop(self) -> None:
        self.release.set()
        self.thread.join(10)


async def _launch_refused_after_waiting(
    graph_exec: ahg.GraphExec, stream: ahg.Stream, taken: ahg.Device, pending: bool
) -> None:
    """Park a launch for the only signal set; let the set come back and, before the parked
    launch resumes, let another thread's loop take ``taken``. The launch must be refused with
    nothing submitted and the set back in the pool."""
    loop = asyncio.get_running_loop()
    gate, later = loop.create_future(), loop.create_future()
    GATES[:] = [gate]
    first = await graph_exec.launch(stream)  # holds the only set until the gate opens
    parked = asyncio.ensure_future(graph_exec.launch(stream))
    for _ in range(3):
        await asyncio.sleep(0)
    assert not parked.done()
    gate.set_result(None)
    await first  # the set is handed to `parked`, which has not resumed yet
    if pending:  # work on the user's stream: the launch needs a marker on its home stream
        GATES[:] = [later]
        await stream.launch_host_func(wait_gate)
    before, stream_before = graph_exec.statistics(), stream.statistics()
    other = OtherLoop(taken)
    other.start()
    try:
        with pytest.raises(ahg.IllegalState):
            await parked
        after = graph_exec.statistics()
        assert (after.launches, after.in_flight) == (before.launches, before.in_flight)
        assert after.signal_pool == dataclasses.replace(before.signal_pool, free=1, in_use=0)
        assert stream.statistics() == stream_before
    finally:
        other.stop()
    later.set_result(None)
    await (await graph_exec.launch(stream))  # the executable still works


GATES: list[asyncio.Future[None]] = []


async def wait_gate() -> None:
    if GATES:
        await GATES.pop()


@pytest.mark.asyncio
@pytest.mark.parametrize(("taken", "pending"), [(0, False), (0, True), (1, False)])
async def test_a_cross_device_launch_refused_after_waiting_submits_nothing_and_returns_its_set(
    taken: int, pending: bool
) -> None:
    """Device ``taken`` (the executable's, 0, or the stream's, 1) is taken by another thread's
    loop between the launch's first check and its submission. Before, a home-stream marker
    could be submitted and the signal set kept for good (every later launch hung), or the graph
    was launched and IllegalState raised anyway."""
    devices = ahg.configure_devices(2)
    out = devices[0].malloc(8)
    graph = ahg.Graph()
    host = graph.add_host_node(wait_gate)
    graph.add_kernel_node(add_one, 1, 1, (out,), deps=[host])
    graph_exec = graph.instantiate(device=devices[0], signal_sets=1)
    stream = devices[1].create_stream()
    await _launch_refused_after_waiting(graph_exec, stream, devices[taken], pending)
    assert devices[0].view(out, "int64", 1)[0] == 2
    destroy(graph_exec, graph, stream, out)


@pytest.mark.asyncio
async def test_a_launch_refused_after_waiting_for_a_set_leaves_the_pool_counts_unchanged(
    device: ahg.Device,
) -> None:
    """The same on one device: the refused launch gives its set back without counting it."""
    out = device.malloc(8)
    graph = ahg.Graph()
    host = graph.add_host_node(wait_gate)
    graph.add_kernel_node(add_one, 1, 1, (out,), deps=[host])
    graph_exec = graph.instantiate(signal_sets=1)
    stream = device.create_stream()
    await _launch_refused_after_waiting(graph_exec, stream, device, False)
    destroy(graph_exec, graph, stream, out)


# -- a device replaced by configure_devices --------------------------------------------------


@pytest.mark.asyncio
async def test_a_replaced_device_makes_nothing_new_and_its_old_work_still_completes() -> None:
    """After ``configure_devices`` the old Device object refused graph-pool calls with
    InvalidDevice but still made streams, events, allocations and executables, which then
    kept the dropped device (and its memory) alive. Every factory now says InvalidDevice;
    what was already made on it still completes and can be given back."""
    old = ahg.get_device(0)
    out = old.malloc(8)
    stream = old.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph_exec = graph.instantiate(device=old)
    launched = await graph_exec.launch(stream)
    ahg.configure_devices(1)
    registries = [r.statistics().live for r in (EXECS, STREAMS, EVENTS)]
    memory = old.statistics().memory
    for make in (
        lambda: old.malloc(8),
        old.create_stream,
        old.create_event,
        lambda: graph.instantiate(device=old),
    ):
        with pytest.raises(ahg.InvalidDevice):
            make()
    assert [r.statistics().live for r in (EXECS, STREAMS, EVENTS)] == registries
    assert old.statistics().memory == memory
    await launched  # work already on the old device completes
    await stream.synchronize()
    assert old.view(out, "int64", 1)[0] == 1
    destroy(graph_exec, graph, stream)
    old.free(out)  # the old device's own memory (destroy() would ask the new device 0)


# -- an event loop closed just after it handed a waiter a signal set or ring room ------------


@pytest.mark.parametrize("collected", [False, True])
def test_a_signal_set_handed_to_a_launch_whose_loop_then_closed_is_not_lost(
    device: ahg.Device, collected: bool
) -> None:
    """The only set is handed to a parked launch in the same loop turn that stops the loop;
    the loop is closed before the launch resumes. The set used to be lost for good (every
    later launch of the executable hung); the next loop's launch now gets it back, also when
    the collector has closed the dead launch's coroutine meanwhile (``collected``)."""
    loop = asyncio.new_event_loop()
    gates: list[asyncio.Future[None]] = []

    async def gate() -> None:
        if gates:
            await gates.pop()

    def stop() -> None:
        if loop.is_running():
            loop.stop()

    graph = ahg.Graph()
    graph.add_host_node(stop, deps=[graph.add_host_node(gate)])
    graph_exec = graph.instantiate(signal_sets=1)
    stream = device.create_stream()

    async def first() -> None:
        opened = loop.create_future()
        gates.append(opened)
        await graph_exec.launch(stream)
        parked = asyncio.ensure_future(graph_exec.launch(stream))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not parked.done()
        opened.set_result(None)  # the launch completes, hands its set, stops the loop
        await loop.create_future()

    with pytest.raises(RuntimeError, match="stopped"):
        loop.run_until_complete(first())
    loop.close()
    if collected:
        gc.collect()  # the parked launch's task and coroutine go: GeneratorExit at its await
    assert graph_exec.statistics().signal_pool.in_use == 1  # held by a task that is gone

    async def second() -> None:
        await asyncio.wait_for((await asyncio.wait_for(graph_exec.launch(stream), 5)).wait(), 5)

    asyncio.run(second())
    pool = graph_exec.statistics().signal_pool
    assert (pool.in_use, pool.free, pool.waiters) == (0, 1, 0)
    destroy(graph_exec, graph, stream)


def test_ring_room_handed_to_a_task_whose_loop_then_closed_is_not_lost() -> None:
    """The same for a hardware queue's ring: the room given to a woken enqueue that never
    resumed used to stay taken, so the ring had one slot less for good."""
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(hardware_queue_capacity=2))
    out = device.malloc(8)
    stream = device.create_stream()
    loop = asyncio.new_event_loop()

    async def first() -> None:
        gate = loop.create_future()

        async def hold() -> None:
            await gate

        await stream.launch_host_func(hold)
        await stream.launch_host_func(loop.stop)  # the ring is full
        parked = asyncio.ensure_future(stream.launch_kernel(add_one, 1, 1, (out,)))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not parked.done()
        gate.set_result(None)  # room is handed to `parked`, then the loop stops
        await loop.create_future()

    with pytest.raises(RuntimeError, match="stopped"):
        loop.run_until_complete(first())
    loop.close()

    async def second() -> int:
        gate = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            await gate

        await stream.launch_host_func(hold)
        stream.launch_kernel_nowait(add_one, 1, 1, (out,))  # the ring's second slot is free
        gate.set_result(None)
        await stream.synchronize()
        return device.statistics().queues[stream.queue.index].waiting_for_room

    assert asyncio.run(second()) == 0
    assert device.view(out, "int64", 1)[0] == 1
    destroy(stream)
    device.free(out)


# -- huge numbers -----------------------------------------------------------------------------


def test_an_allocation_the_host_cannot_back_is_out_of_memory_and_changes_nothing() -> None:
    """A device may claim more memory than the host has: one allocation the size of the whole
    device range (1 TiB) passed every device check and raised Python's MemoryError from the
    backing store. It is the device's OutOfMemory, and the device is as it was."""
    (device,) = ahg.configure_devices(1, ahg.DeviceProperties(memory_bytes=1 << 50))
    before = device.statistics().memory
    with pytest.raises(ahg.OutOfMemory, match="host cannot back"):
        device.malloc(1 << 40)
    assert device.statistics().memory == before
    destroy(device.malloc(8))  # and it still allocates


# -- destroy from a plain thread while a launch waits on the device's loop -------------------


def test_destroying_an_executable_from_a_thread_wakes_a_parked_launch_on_its_own_loop(
    device: ahg.Device,
) -> None:
    """The parked launch's future belongs to the device's loop; destroy() on another thread
    resolved it from that thread (asyncio's debug mode: "Non-thread-safe operation invoked on
    an event loop other than the current one", raised out of destroy(); without debug mode a
    loop asleep in its selector was not woken). It is now resolved on its own loop."""
    out = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 1, (out,))
    graph_exec = graph.instantiate(signal_sets=1)

    async def main() -> None:
        stream = device.create_stream()
        gate = asyncio.get_running_loop().create_future()

        async def hold() -> None:
            await gate

        await stream.launch_host_func(hold)
        first = await graph_exec.launch(stream)
        parked = asyncio.ensure_future(graph_exec.launch(stream))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not parked.done()
        await asyncio.get_running_loop().run_in_executor(None, graph_exec.destroy)
        with pytest.raises(ahg.InvalidValue, match="destroyed while a launch waited"):
            await asyncio.wait_for(parked, 5)
        gate.set_result(None)
        await first
        await stream.synchronize()
        stream.destroy()

    with asyncio.Runner(debug=True) as runner:
        runner.run(main())
    stats = graph_exec.statistics()
    assert (stats.state, stats.in_flight, stats.launches) == ("closed", 0, 1)
    destroy(graph, out)


@pytest.mark.asyncio
async def test_a_hand_made_pointer_with_a_float_address_gets_the_call_s_own_error(
    device: ahg.Device,
) -> None:
    """A DevicePtr is not checked when it is made; every use checks it. With a float address,
    formatting it for the error message raised "Unknown format code 'x'" instead of the
    call's own HipError."""
    forged = ahg.DevicePtr(0, 1.5)  # type: ignore[arg-type]
    stream = device.create_stream()
    graph = ahg.Graph()
    assert "1.5" in repr(forged)
    with pytest.raises(ahg.InvalidValue, match=r"address=1\.5"):
        device.free(forged)
    with pytest.raises(ahg.InvalidDevicePointer, match=r"address=1\.5"):
        device.view(forged, "uint8", 1)
    with pytest.raises(ahg.InvalidDevicePointer, match=r"address=1\.5"):
        await stream.memset(forged, 0, 8)
    with pytest.raises(ahg.InvalidDevicePointer, match=r"address=1\.5"):
        graph.add_memset_node(forged, 0, 8)
    assert stream.statistics().submitted == 0
    assert graph.statistics().nodes == 0
    destroy(graph, stream)


# -- lock order -------------------------------------------------------------------------------


class _WatchedLock:
    """A lock that tells when another thread starts waiting for it."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.waiting = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        if not blocking:
            return False
        self.waiting.set()
        return bool(self._lock.acquire(timeout=timeout))

    def release(self) -> None:
        self._lock.release()

    def _is_owned(self) -> bool:  # as the engine's (see Engine.submitting)
        return bool(self._lock._is_owned())

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_making_the_home_stream_never_holds_the_executable_lock_while_waiting_for_the_engine() -> (
    None
):
    """A launch takes the engine's lock, then the executable's. The first cross-device launch
    made the executable's home stream under the executable's lock, and making a stream takes
    the engine's lock: two threads launching one executable could deadlock. (Internals: the
    engine's lock is watched so the test knows the other thread is waiting for it.)"""
    devices = ahg.configure_devices(2)
    graph = ahg.Graph()
    graph.add_empty_node()
    graph_exec = graph.instantiate(device=devices[0])
    engine = devices[0].engine
    watched = _WatchedLock(engine.lock)
    engine._lock = watched
    launcher = graph_exec._launcher
    try:
        with watched:  # as a launch holding the engine's lock
            maker = threading.Thread(target=launcher.home_stream)
            maker.start()
            assert watched.waiting.wait(10)  # the maker waits for the engine's lock
            free = launcher.lock.acquire(blocking=False)  # the launch's next step
            if free:
                launcher.lock.release()
        maker.join(10)
        assert free, "the home stream was being made under the executable's lock"
    finally:
        engine._lock = watched._lock
    destroy(graph_exec, graph)
