"""The device engine's event-loop hand-over.

* A loop closed (plain ``loop.close()``) while tasks are parked on a launch's completion and on
  the signal-set pool: the abandoned work fails with IllegalState, everything it borrowed comes
  back, and the device works on the next loop.
* Two loops on two threads sharing one device: binding, submission and running are atomic
  under the engine's lock; work runs only on the loop that owns the device.
* The legacy null stream's view of the device's streams while other threads create and destroy
  streams.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.runtime import observe
from ahipgraph.runtime.stream import STREAMS
from ahipgraph.testing import fresh_devices
from fakes import GatedHost, HeldKernel


@ahg.kernel
def add_one(t: ahg.Threads, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] += 1


def _baseline(device: ahg.Device) -> tuple[int, int, int, int]:
    return len(EXECS), len(GRAPHS), len(STREAMS), device.memory.bytes_in_use


# -- a loop closed under parked tasks --------------------------------------------------------


@pytest.mark.parametrize("parked_on", ["completion", "pool", "both"])
def test_a_loop_closed_under_parked_tasks_hands_the_device_to_the_next_loop(
    parked_on: str,
) -> None:
    device = ahg.get_device(0)
    before = _baseline(device)
    out = device.malloc(16)
    gates = GatedHost()
    graph = ahg.Graph()
    root = graph.add_host_node(gates)
    graph.add_kernel_node(add_one, 1, 1, (0, out), deps=[root])
    graph_exec = graph.instantiate(signal_sets=1)  # the second launch parks on the pool
    stream = device.create_stream()
    state: dict[str, Any] = {}

    async def first_loop() -> None:
        state["first"] = await graph_exec.launch(stream)
        await gates.started(0)  # the launch is held in its host node
        if parked_on in ("completion", "both"):
            state["waiter"] = asyncio.ensure_future(state["first"].wait())
        if parked_on in ("pool", "both"):
            state["launcher"] = asyncio.ensure_future(graph_exec.launch(stream))
            for _ in range(100):  # one turn each, until the launching task parks on the pool
                if graph_exec.statistics().signal_pool.waiters:
                    break
                await asyncio.sleep(0)
        await asyncio.sleep(0)  # one turn: the completion waiter parks

    loop = asyncio.new_event_loop()
    loop.run_until_complete(first_loop())
    loop.close()  # plain close: the parked tasks are never resumed or cancelled
    assert graph_exec.statistics().signal_pool.in_use == 1

    async def second_loop() -> None:
        # Work of the closed loop says why it failed, not a kernel's fault.
        with pytest.raises(ahg.IllegalState, match="event loop running this work closed"):
            await state["first"]
        with pytest.raises(ahg.IllegalState, match="closed"):
            await stream.synchronize()
        stats = graph_exec.statistics()
        assert (stats.in_flight, stats.signal_pool.free, stats.signal_pool.waiters) == (0, 1, 0)
        # The device and the executable work on this loop: the set came back.
        gates.open(1)
        await (await graph_exec.launch(stream))
        await device.synchronize()

    ahg.run(second_loop)
    assert device.view(out, np.int64, 1).tolist() == [1]  # only the second launch ran
    stats = graph_exec.statistics()
    assert (stats.in_flight, stats.completed) == (0, 2)
    assert stats.signal_pool.free == stats.signal_pool.sets == 1
    assert device.statistics().in_flight == 0
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(out)
    assert _baseline(device) == before


# -- two loops on two threads share one device ----------------------------------------------

_RAN: list[tuple[int, int]] = []  # (which thread submitted, which thread ran it)


@ahg.kernel
def record_thread(t: ahg.Threads, which: ahg.int32) -> None:
    _RAN.append((int(which), threading.get_ident()))


@pytest.mark.parametrize(
    "rounds", [60, pytest.param(2000, marks=pytest.mark.slow, id="soak")], ids=str
)
def test_two_loops_on_two_threads_share_a_device_one_owner_at_a_time(
    fast_switching: None, rounds: int
) -> None:
    """Two loops racing for one device by luck (the forced interleaving is the next test)."""
    device = ahg.get_device(0)
    graphs = []
    for which in (0, 1):
        graph = ahg.Graph()
        first = graph.add_kernel_node(record_thread, 1, 1, (which,))
        graph.add_kernel_node(record_thread, 1, 1, (which,), deps=[first])
        graphs.append(graph)
    execs = [graph.instantiate(signal_sets=2) for graph in graphs]
    streams = [device.create_stream(), device.create_stream()]
    idents = [0, 0]
    launched = [0, 0]
    refused = [0, 0]
    errors: list[BaseException] = []
    start = threading.Barrier(2)
    messages: set[str] = set()
    _RAN.clear()

    async def work(which: int) -> None:
        stream, graph_exec = streams[which], execs[which]
        for _ in range(rounds):
            try:
                eager = await stream.launch_kernel(record_thread, 1, 1, (which,))
            except ahg.IllegalState as error:  # the other loop owns the busy device
                messages.add(str(error))
                refused[which] += 1
                await asyncio.sleep(0)
                continue
            replay = await graph_exec.launch(stream)  # the device is this loop's while busy
            launched[which] += 1
            await replay
            await eager
            await stream.synchronize()

    def thread(which: int) -> None:
        idents[which] = threading.get_ident()
        start.wait()
        try:
            asyncio.run(work(which))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=thread, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a loop hung"
    assert errors == []
    assert sum(launched) + sum(refused) == 2 * rounds
    assert all("busy on another event loop" in message for message in messages)
    # Every kernel ran on the thread of the loop that submitted it.
    by_thread = {idents[0]: 0, idents[1]: 1}
    assert len(_RAN) == 3 * sum(launched)
    for which, ran_on in _RAN:
        if by_thread[ran_on] != which:
            pytest.fail(f"work of thread {which} ran on thread {by_thread[ran_on]}")
    for which, graph_exec in enumerate(execs):
        stats = graph_exec.statistics()
        # A refused call took nothing: launches and completions match what was accepted.
        assert (stats.launches, stats.completed, stats.in_flight) == (launched[which],) * 2 + (0,)
        assert stats.signal_pool.free == stats.signal_pool.sets
        graph_exec.destroy()
    assert device.statistics().in_flight == 0
    assert all(queue.pending == 0 for queue in device.queues)
    for graph in graphs:
        graph.destroy()
    for stream in streams:
        stream.destroy()


class _TellingLock:
    """The engine's lock, telling when ``thread`` finds it held and has to wait for it."""

    def __init__(self, thread_name: str) -> None:
        self._lock = threading.RLock()  # as the engine's (see Engine.submitting)
        self.thread_name = thread_name
        self.contended = threading.Event()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()  # type: ignore[attr-defined,no-any-return]

    def __enter__(self) -> _TellingLock:
        if not self._lock.acquire(blocking=False):
            if threading.current_thread().name == self.thread_name:
                self.contended.set()
            self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _Pause(observe.RuntimeObserver):
    """At the first launch on ``thread``: let the other loop act, and wait until it has acted
    or is held off by the engine's lock. This is the window between the launch's loop check and
    its submission."""

    def __init__(self, thread: int, go: threading.Event, acted: threading.Event) -> None:
        self.thread = thread
        self.go = go
        self.acted = acted
        self.contended: threading.Event | None = None

    def launching(self, graph_exec: Any, stream: ahg.Stream, user: ahg.Stream | None) -> Any:
        if threading.get_ident() == self.thread and not self.go.is_set():
            self.go.set()
            assert self.contended is not None
            for _ in range(10_000):  # a hang guard only: the other thread answers at once
                if self.acted.wait(0.001) or self.contended.is_set():
                    break
        return None


def test_a_second_loop_cannot_take_the_device_between_a_launchs_check_and_its_submit() -> None:
    """The interleaving that once let two loops share the device, forced: loop A's launch has
    checked that its loop owns the (idle) device; loop B, on another thread, now tries to bind the
    device and submit held work. B must wait for A's submission, and is then refused while A's
    launch is in flight; A's launch must run on A's thread and take exactly what it accounts for.
    Without one lock over check and submit, B binds the idle device, and A's launch is refused late,
    after it counted a launch and used a signal set (or its work runs on B's thread)."""
    if observe.observer is not None:
        pytest.skip("another runtime observer (the race checker) is installed")
    device = ahg.get_device(0)
    before = _baseline(device)
    _RAN.clear()
    graph = ahg.Graph()
    graph.add_kernel_node(record_thread, 1, 1, (0,))
    graph_exec = graph.instantiate(signal_sets=1)
    stream_a, stream_b = device.create_stream(), device.create_stream()
    go, acted, finish = threading.Event(), threading.Event(), threading.Event()
    lock = _TellingLock("loop-b")
    device.engine._lock = lock
    pause = _Pause(threading.get_ident(), go, acted)
    pause.contended = lock.contended
    outcome: dict[str, Any] = {}

    async def loop_b() -> None:
        go.wait()
        gate = GatedHost()
        done = None
        try:
            done = await stream_b.launch_host_func(gate)
            outcome["b"] = "accepted"  # only once A's work was done: the device was idle
        except ahg.IllegalState as error:
            outcome["b"] = error
        acted.set()
        finish.wait()
        if done is not None:
            gate.open(0)
            await done
        # Once A's work is done the device is free again, and B gets it.
        await (await stream_b.launch_kernel(record_thread, 1, 1, (1,)))

    def thread_b() -> None:
        try:
            asyncio.run(loop_b())
        except BaseException as error:
            outcome["b_crash"] = error

    b = threading.Thread(target=thread_b, name="loop-b")
    b.start()
    observe.install(pause)
    try:

        async def loop_a() -> None:
            try:
                done = await graph_exec.launch(stream_a)
            except ahg.IllegalState as error:
                outcome["a"] = error
                return
            outcome["a"] = "accepted"
            await done

        try:
            ahg.run(loop_a)
        finally:
            finish.set()
            b.join(timeout=30)
    finally:
        observe.uninstall(pause)
    assert not b.is_alive(), "loop B hung"
    assert "b_crash" not in outcome, outcome
    assert outcome["a"] == "accepted", outcome  # A checked first: the device is A's
    # B waited for A's submission, then was refused while A's launch was in flight (or, if
    # A's launch had finished by the time B got the lock, took the idle device).
    assert outcome["b"] == "accepted" or "busy on another event loop" in str(outcome["b"])
    assert lock.contended.is_set()  # B really tried inside A's window
    # A's kernel ran on A's thread, B's later kernel on B's.
    assert [(which, ident == threading.get_ident()) for which, ident in _RAN] == [
        (0, True),
        (1, False),
    ]
    stats = graph_exec.statistics()
    assert (stats.launches, stats.completed, stats.in_flight) == (1, 1, 0)
    assert stats.signal_pool.free == stats.signal_pool.sets == 1
    assert device.statistics().in_flight == 0
    device.engine._lock = threading.RLock()
    graph_exec.destroy()
    graph.destroy()
    stream_a.destroy()
    stream_b.destroy()
    assert _baseline(device) == before


# -- the null stream reads the device's streams while another thread destroys some -----------


def test_null_stream_ordering_while_another_thread_destroys_streams(fast_switching: None) -> None:
    """The legacy null stream walks the device's streams to order after blocking ones with
    pending work. Another thread creating and destroying streams meanwhile must neither break
    the walk (the weak set used to raise "dictionary changed size during iteration") nor make
    it skip the stream that has pending work: the walk reads a snapshot taken under the
    device's stream lock."""
    device = ahg.get_device(0)
    assert device.null_stream is not None  # the device's own stream, made before the baseline
    before = _baseline(device)
    churns = 3000

    async def main() -> None:
        gate = GatedHost()
        held = device.create_stream()
        await held.launch_host_func(gate)  # a blocking stream with pending work
        await gate.started(0)
        null = device.null_stream
        bystanders = [device.create_stream() for _ in range(200)]  # a long walk
        errors: list[BaseException] = []

        def churn() -> None:
            try:
                for _ in range(churns):
                    made = [device.create_stream() for _ in range(3)]
                    for stream in made:
                        stream.destroy()
            except BaseException as error:
                errors.append(error)

        thread = threading.Thread(target=churn)
        thread.start()
        walks = missed = 0
        try:
            while thread.is_alive():
                walks += 1
                if held.tail not in null._implicit_waits():
                    missed += 1
        finally:
            thread.join()
        assert errors == []
        assert walks > 0
        assert missed == 0
        # The null stream's own work still orders after the held stream.
        log: list[str] = []
        after = await null.launch_host_func(log.append, "null")
        await asyncio.sleep(0)
        assert log == []
        assert not after.done()
        gate.open(0)
        await after
        assert log == ["null"]
        held.destroy()
        for stream in bystanders:
            stream.destroy()

    ahg.run(main)
    assert _baseline(device) == before


# -- awaiting work of another loop ------------------------------------------------------------


def test_awaiting_a_completion_of_a_closed_loop_says_the_loop_closed() -> None:
    """A Completion of work abandoned by a closed loop, awaited first thing on a new loop,
    raises IllegalState that names the closed loop: it is not a kernel's failure."""
    device = ahg.get_device(0)
    gate = GatedHost()
    stream = device.create_stream()
    box: dict[str, Any] = {}

    async def first() -> None:
        box["done"] = await stream.launch_host_func(gate)
        box["kernel"] = await stream.launch_kernel(record_thread, 1, 1, (0,))
        await gate.started(0)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(first())
    loop.close()

    async def second() -> None:
        for key in ("kernel", "done"):
            with pytest.raises(ahg.IllegalState, match="event loop running this work closed"):
                await box[key]
            error = box[key].exception()
            assert isinstance(error, ahg.IllegalState)
            assert not isinstance(error, ahg.LaunchFailure)
        with pytest.raises(ahg.IllegalState):
            await stream.synchronize()  # the stream reports its failure once
        await stream.synchronize()
        await (await stream.launch_kernel(record_thread, 1, 1, (0,)))

    _RAN.clear()
    ahg.run(second)
    assert len(_RAN) == 1  # only the new loop's kernel ran
    assert device.statistics().in_flight == 0
    stream.destroy()


def test_awaiting_work_of_a_live_loop_from_another_thread_is_refused() -> None:
    """A Completion of work in flight on a loop that is still running, awaited from a loop on
    another thread, is IllegalState (the device is busy there), and the owner's work is
    unharmed."""
    device = ahg.get_device(0)
    stream = device.create_stream()
    started, answered = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    async def other() -> None:
        try:
            await box["done"]
        except BaseException as error:
            box["error"] = error

    def thread() -> None:
        started.wait()
        asyncio.run(other())
        answered.set()

    t = threading.Thread(target=thread)
    t.start()

    async def owner() -> None:
        gate = GatedHost()
        box["done"] = await stream.launch_host_func(gate)
        await gate.started(0)
        started.set()
        while not answered.is_set():  # the other loop answers without waiting for us
            await asyncio.to_thread(answered.wait, 0.01)
        gate.open(0)
        await box["done"]

    try:
        ahg.run(owner)
    finally:
        started.set()
        t.join(timeout=30)
    assert not t.is_alive()
    assert isinstance(box["error"], ahg.IllegalState)
    assert "busy on another event loop" in str(box["error"])
    assert box["done"].exception() is None
    assert device.statistics().in_flight == 0
    stream.destroy()


def test_a_loop_closed_under_a_task_waiting_for_ring_room_leaves_the_whole_ring() -> None:
    """A task parked for room in a full hardware queue when its loop closes: the next loop
    finds no waiter left, the abandoned packets fail, and the whole ring is usable again."""
    capacity = 4
    properties = ahg.DeviceProperties(hardware_queues=1, hardware_queue_capacity=capacity)
    with fresh_devices(1, properties) as devices:
        device = devices[0]
        stream = device.create_stream()
        box: dict[str, Any] = {}

        async def first() -> None:
            held = HeldKernel()
            box["head"] = await held.launch(stream)
            while device.statistics().queues[0].pending < capacity:
                await stream.launch_host_func(int)
            await held.started.wait()
            box["parked"] = asyncio.ensure_future(stream.launch_host_func(int))
            await asyncio.sleep(0)  # one turn: it parks for room
            assert device.statistics().queues[0].waiting_for_room == 1

        loop = asyncio.new_event_loop()
        loop.run_until_complete(first())
        loop.close()

        async def second() -> None:
            with pytest.raises(ahg.IllegalState, match="closed"):
                await stream.synchronize()
            queue = device.statistics().queues[0]
            assert (queue.pending, queue.waiting_for_room) == (0, 0)
            for _ in range(capacity):  # a whole ring's worth goes in without waiting
                stream.launch_host_func_nowait(int)
            await stream.synchronize()

        ahg.run(second)
        assert device.statistics().in_flight == 0
        stream.destroy()


@pytest.mark.parametrize(
    ("owner", "hook"),
    [
        (ahg.Device, "bind_loop"),
        (ahg.Device, "run_ready"),
        (ahg.Device, "schedule"),
        (ahg.Device, "next_queue"),
        (ahg.Stream, "submit"),
        (ahg.Stream, "take_error"),
        (ahg.Event, "recorded"),
    ],
)
def test_the_engine_hooks_are_not_public(owner: type, hook: str) -> None:
    """The loop hooks are the engine's (``device.engine``); the runtime's submission and error
    hooks are private, so none of them shows in the public classes."""
    assert not hasattr(owner, hook)


# -- the pump lets the loop turn ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_device_work_that_feeds_itself_lets_other_tasks_run(device: ahg.Device) -> None:
    """A host function that launches the next one, thousands of times: the pump runs at most
    PUMP_BUDGET packets per loop turn, so another task keeps turning meanwhile (it got three
    turns for 2,000 calls when the pump ran everything in one turn)."""
    from ahipgraph.device.engine import PUMP_BUDGET

    stream = device.create_stream()
    calls = PUMP_BUDGET * 8
    turns = 0
    seen: list[int] = []
    done = asyncio.Event()

    def host(_arg: object) -> None:
        seen.append(turns)
        if len(seen) < calls:
            stream.launch_host_func_nowait(host, None)
        else:
            done.set()

    async def ticker() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0)

    ticking = asyncio.ensure_future(ticker())
    await stream.launch_host_func(host, None)
    await done.wait()
    await ticking
    await stream.synchronize()
    assert len(seen) == calls
    assert seen[-1] - seen[0] >= 7  # a turn between each budget's worth of calls
    stream.destroy()


@pytest.mark.asyncio
async def test_a_timeout_fires_while_device_work_feeds_itself(device: ahg.Device) -> None:
    """``asyncio.wait_for`` around a wait on self-feeding work times out: its timer gets a
    turn. The chain is then stopped and drains."""
    stream = device.create_stream()
    event = asyncio.Event()
    stop = False
    count = 0

    def host(_arg: object) -> None:
        nonlocal count
        count += 1
        if not stop:
            stream.launch_host_func_nowait(host, None)

    await stream.launch_host_func(host, None)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(event.wait(), 0.05)
    stop = True
    while not stream.query():  # what the last call launched before it saw the stop
        await stream.synchronize()
    assert count > 1
    stream.destroy()
