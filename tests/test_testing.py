"""ahipgraph.testing: fault injection, leak reports and deterministic interleaving.

Every fault test ends with the fault's block closed and checks that the device, pools and
registries are back at their baseline (the ``ahg_device`` fixture also fails the test at
teardown if anything is left).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import ahipgraph as ahg
from ahipgraph import testing
from ahipgraph.device import hooks


@ahg.kernel
def add(t: ahg.Threads, value: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += value


@ahg.kernel(name="victim")
def victim(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] += 100


def value(device: ahg.Device, x: ahg.DevicePtr) -> int:
    return int(device.view(x, "int32", 1)[0])


@pytest.mark.asyncio
async def test_fail_kernels_fails_the_next_dispatch_only(ahg_device: ahg.Device) -> None:
    x = ahg_device.malloc(4)
    stream = ahg_device.create_stream()
    with testing.fail_kernels(1) as fault:
        first = await stream.launch_kernel(add, 1, 1, (1, x))
        second = await stream.launch_kernel(add, 1, 1, (2, x))
        with pytest.raises(ahg.LaunchFailure, match="injected failure of kernel 'add'"):
            await first
        await second
    assert fault.hits == 1
    assert hooks.observers is None
    assert value(ahg_device, x) == 2  # the failed dispatch did not run; the next one did
    with pytest.raises(ahg.LaunchFailure):  # sticky for the stream until observed, once
        await stream.synchronize()
    await stream.synchronize()
    stream.destroy()
    ahg_device.free(x)


@pytest.mark.asyncio
async def test_fail_kernels_by_name_inside_a_graph(ahg_device: ahg.Device) -> None:
    x = ahg_device.malloc(4)
    stream = ahg_device.create_stream()
    graph = ahg.Graph()
    first = graph.add_kernel_node(add, 1, 1, (1, x))
    graph.add_kernel_node(victim, 1, 1, (x,), deps=[first])
    graph_exec = graph.instantiate()
    with testing.fail_kernels(None, name="victim") as fault:
        with pytest.raises(ahg.LaunchFailure, match="victim"):
            await (await graph_exec.launch(stream))
        with pytest.raises(ahg.LaunchFailure, match="victim"):
            await (await graph_exec.launch(stream))
    assert fault.hits == 2
    await (await graph_exec.launch(stream))  # the block is over: the graph runs whole again
    assert value(ahg_device, x) == 1 + 1 + 101
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    ahg_device.free(x)


def test_fail_allocations_refuses_malloc_and_instantiate_without_changing_anything(
    ahg_device: ahg.Device,
) -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(add, 1, 1, (1, ahg.NULL))
    before = testing.snapshot()
    with testing.fail_allocations(2, device=0) as fault:
        with pytest.raises(ahg.OutOfMemory, match="injected fault refused an allocation of 64"):
            ahg_device.malloc(64)
        with pytest.raises(ahg.OutOfMemory):  # the executable's argument arena
            graph.instantiate()
        assert testing.snapshot() == before  # a failed call changes nothing
    assert fault.hits == 2
    ptr = ahg_device.malloc(64)  # the block is over
    ahg_device.free(ptr)
    graph.destroy()


def test_fail_allocations_by_size_leaves_other_sizes_alone(ahg_device: ahg.Device) -> None:
    with testing.fail_allocations(None, nbytes=128) as fault:
        ptr = ahg_device.malloc(64)
        with pytest.raises(ahg.OutOfMemory):
            ahg_device.malloc(128)
    assert fault.hits == 1
    ahg_device.free(ptr)


@pytest.mark.asyncio
async def test_a_hung_kernel_holds_its_queue_until_cancelled(ahg_device: ahg.Device) -> None:
    x = ahg_device.malloc(4)
    stream = ahg_device.create_stream()
    with testing.hang_kernels(1, name="victim") as hang:
        stuck = await stream.launch_kernel(victim, 1, 1, (x,))
        after = await stream.launch_kernel(add, 1, 1, (1, x))
        await hang.started.wait()
        await testing.loop_turns()  # the queue stays held: the next kernel cannot start
        assert (stuck.done(), after.done(), hang.hanging) == (False, False, 1)
        assert hang.cancel() == 1
        with pytest.raises(ahg.LaunchFailure, match="hung kernel cancelled"):
            await stuck
        await after
    assert value(ahg_device, x) == 1
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    stream.destroy()
    ahg_device.free(x)


@pytest.mark.asyncio
async def test_leaving_a_hang_block_cancels_what_still_hangs(ahg_device: ahg.Device) -> None:
    stream = ahg_device.create_stream()
    with testing.hang_kernels(None) as hang:
        stuck = await stream.launch_kernel(victim, 1, 1, (ahg.NULL,))
        await hang.started.wait()
    with pytest.raises(ahg.LaunchFailure):
        await stuck
    assert hang.hanging == 0
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    stream.destroy()


@pytest.mark.asyncio
async def test_exhausted_signal_sets_park_launches_until_given_back(
    ahg_device: ahg.Device,
) -> None:
    x = ahg_device.malloc(4)
    stream = ahg_device.create_stream()
    graph = ahg.Graph()
    graph.add_kernel_node(add, 1, 1, (1, x))
    graph_exec = graph.instantiate(signal_sets=2, wait_for_signal_sets=True)
    with testing.exhaust_signal_sets(graph_exec) as held:
        assert held.held == 2
        assert graph_exec.statistics().signal_pool.free == 0
        with pytest.raises(ahg.NotReady):
            graph_exec.launch_nowait(stream)
        parked = asyncio.ensure_future(graph_exec.launch(stream))
        await testing.loop_turns()
        assert not parked.done()  # waiting for a set
        assert graph_exec.statistics().signal_pool.waiters == 1
    await (await parked)  # the block gave the sets back: the launch got one
    pool = graph_exec.statistics().signal_pool
    assert (pool.sets, pool.free, pool.in_use, pool.misses) == (2, 2, 0, 0)
    assert value(ahg_device, x) == 1
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    ahg_device.free(x)


def test_leak_report_names_what_is_left() -> None:
    left: list[ahg.Stream] = []

    def leak() -> None:
        with testing.fresh_devices(1) as (device,):
            device.malloc(100)
            left.append(device.create_stream())

    with pytest.raises(testing.LeakError) as caught:
        leak()
    report = str(caught.value)
    assert "device 0: 1 allocation still allocated, 100 bytes in use" in report
    assert "live handles: 1 stream" in report
    left[0].destroy()  # the handle outlives its device: only its owner ends it
    assert testing.leak_report(testing.snapshot()) is None


def test_device_factory_properties() -> None:
    props = [ahg.DeviceProperties(hardware_queues=2), ahg.DeviceProperties(memory_bytes=1 << 20)]
    with testing.fresh_devices(2, props) as devices:
        assert [len(d.queues) for d in devices] == [2, 4]
        assert devices[1].memory_info() == (1 << 20, 1 << 20)
    assert ahg.device_count() == 1  # replaced on exit


@pytest.mark.asyncio
async def test_interleave_runs_tasks_in_the_written_order() -> None:
    log: list[str] = []
    turns = testing.Interleave("a", "b", "b", "a")

    async def task(name: str, steps: int) -> None:
        for step in range(steps):
            await turns.turn(name)
            log.append(f"{name}{step}")
        turns.done(name)

    await asyncio.gather(task("a", 2), task("b", 2))
    assert log == ["a0", "b0", "b1", "a1"]


@pytest.mark.asyncio
async def test_interleave_refuses_a_turn_that_never_comes() -> None:
    turns = testing.Interleave("a")
    with pytest.raises(ValueError, match="'b' has no turn left"):
        await turns.turn("b")


@pytest.mark.asyncio
async def test_interleave_refuses_a_second_waiter_under_one_name() -> None:
    turns = testing.Interleave("a", "b")
    first = asyncio.create_task(turns.turn("b"))
    await asyncio.sleep(0)  # first now waits for b's turn
    with pytest.raises(ValueError, match="already waits for 'b'"):
        await turns.turn("b")
    await turns.turn("a")
    turns.done("a")
    await first  # the first waiter still gets b's turn
    assert turns.position == 1


@pytest.mark.asyncio
async def test_a_waiter_cancelled_before_its_turn_leaves_and_the_others_go_on() -> None:
    log: list[str] = []
    turns = testing.Interleave("a", "b", "c", "b", "c")

    async def task(name: str, steps: int) -> None:
        for step in range(steps):
            await turns.turn(name)
            log.append(f"{name}{step}")
        turns.done(name)

    b = asyncio.create_task(task("b", 2))
    c = asyncio.create_task(task("c", 2))
    await asyncio.sleep(0)  # b and c wait
    b.cancel()
    await asyncio.sleep(0)
    await task("a", 1)
    await asyncio.wait_for(c, timeout=5)  # without the leave, c would wait for b for ever
    assert log == ["a0", "c0", "c1"]
    assert b.cancelled()


@pytest.mark.asyncio
async def test_a_waiter_cancelled_as_its_turn_came_passes_the_turn_on() -> None:
    turns = testing.Interleave("a", "b", "c")
    b = asyncio.create_task(turns.turn("b"))
    c = asyncio.create_task(turns.turn("c"))
    await asyncio.sleep(0)
    await turns.turn("a")
    turns.done("a")  # b's future is resolved, but b has not run yet
    b.cancel()
    await asyncio.wait_for(c, timeout=5)
    assert b.cancelled()
    assert turns.order == ["a", "c"]
    await testing.loop_turns(2)  # c's task ended holding its turn, which ends the turn
    assert turns.position == 2


@pytest.mark.asyncio
async def test_a_task_that_ends_holding_its_turn_passes_the_turn_on() -> None:
    log: list[str] = []
    turns = testing.Interleave("a", "b", "a")

    async def forgetful() -> None:  # takes its turn and returns without done()
        await turns.turn("a")
        log.append("a")

    async def failing() -> None:
        await turns.turn("b")
        log.append("b")
        raise RuntimeError("step failed")

    b = asyncio.create_task(failing())
    await asyncio.create_task(forgetful())
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(b, timeout=5)  # without the release, b would wait for ever
    await asyncio.wait_for(forgetful(), timeout=5)
    assert log == ["a", "b", "a"]


@pytest.mark.asyncio
async def test_a_task_cancelled_while_holding_its_turn_passes_the_turn_on() -> None:
    turns = testing.Interleave("a", "b")

    async def holder() -> None:
        await turns.turn("a")
        await asyncio.Event().wait()  # cancelled here, holding a's turn

    a = asyncio.create_task(holder())
    await testing.loop_turns(2)
    a.cancel()
    await asyncio.wait_for(turns.turn("b"), timeout=5)  # b's turn came: a's turn ended
    assert a.cancelled()
    assert turns.position == 2  # and wait_for's task ended holding b's


@pytest.mark.asyncio
async def test_interleave_refuses_a_turn_held_by_another_task() -> None:
    turns = testing.Interleave("a", "b")
    await turns.turn("a")  # this task holds a's turn
    with pytest.raises(ValueError, match="the turn of 'a' is held by another task"):
        await asyncio.create_task(turns.turn("a"))
    assert turns.position == 0
    turns.done("a")
    assert turns.position == 1


def test_interleave_hands_turns_between_loops_on_two_threads() -> None:
    turns = testing.Interleave("a", "b", "a", "b")
    log: list[str] = []

    async def steps(name: str) -> None:
        for step in range(2):
            await turns.turn(name)
            log.append(f"{name}{step}")
        turns.done(name)

    def run(name: str) -> None:
        asyncio.run(asyncio.wait_for(steps(name), timeout=10))

    threads = [threading.Thread(target=run, args=(name,)) for name in ("b", "a")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not any(thread.is_alive() for thread in threads)
    assert log == ["a0", "b0", "a1", "b1"]


# -- fresh_devices nests -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_nested_fresh_devices_block_gives_the_outer_block_its_devices_back() -> None:
    with testing.fresh_devices(1) as (outer,):
        x = outer.malloc(64)
        with testing.fresh_devices(3) as inner:
            assert ahg.device_count() == 3
            assert outer not in inner
            assert ahg.get_device(0) is inner[0]
        assert ahg.device_count() == 1
        assert ahg.get_device(0) is outer  # the same object, still usable
        stream = outer.create_stream()
        await stream.memset(x, 7, 64)
        await stream.synchronize()
        stream.destroy()
        outer.free(x)
    assert ahg.get_device(0) is not outer


def test_a_fresh_devices_block_that_cannot_configure_leaves_the_table_alone() -> None:
    with testing.fresh_devices(2) as devices:
        with pytest.raises(ValueError, match="at least one device"), testing.fresh_devices(0):
            pass  # pragma: no cover - never entered
        assert [ahg.get_device(i) for i in range(2)] == devices


def test_the_block_s_devices_are_retired_when_it_ends() -> None:
    with testing.fresh_devices(1), testing.fresh_devices(1) as (inner,):
        held = inner
    with pytest.raises(ahg.HipError):
        held.malloc(64)
