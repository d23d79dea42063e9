"""Several devices: the current device, peer access, cross-device launches, peer copy costs and
per-task default streams. Scenarios follow HIP's tests (DependencyGraphDeviceCtxtChg,
hipDeviceEnablePeerAccess negatives, hipStreamPerThread)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.runtime.per_thread import per_thread_statistics
from ahipgraph.testing import leak_report, snapshot
from cleanup import destroy


@ahg.kernel
def add_one(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.int32]) -> None:
    i = t.ids[t.ids < n]
    x[i] = x[i] + 1


@ahg.kernel
def copy_in(t: ahg.Threads, n: ahg.int32, dst: ahg.Ptr[ahg.int32], src: ahg.Ptr[ahg.int32]) -> None:
    i = t.ids[t.ids < n]
    dst[i] = src[i]


async def faults_on_a_pointer(completion: ahg.Completion) -> None:
    """A kernel fault is a LaunchFailure whose cause says why (the project's fault model)."""
    with pytest.raises(ahg.LaunchFailure) as info:
        await completion
    assert isinstance(info.value.__cause__, ahg.InvalidDevicePointer)


# -- the current device ------------------------------------------------------------------------


def test_set_device_and_current_device() -> None:
    ahg.configure_devices(3)
    assert ahg.current_device() is ahg.get_device(0)
    ahg.set_device(2)
    try:
        assert ahg.current_device() is ahg.get_device(2)
        assert ahg.get_device() is ahg.get_device(2)
        ahg.set_device(ahg.get_device(1))
        assert ahg.current_device().ordinal == 1
        for bad in (3, -1):
            with pytest.raises(ahg.InvalidDevice):
                ahg.set_device(bad)
        for wrong in (None, "1", 1.0, True):
            with pytest.raises(TypeError):
                ahg.set_device(wrong)  # type: ignore[arg-type]
        assert ahg.current_device().ordinal == 1  # failed calls changed nothing
        old = ahg.get_device(1)
        ahg.configure_devices(3)
        with pytest.raises(ahg.InvalidDevice, match="no longer"):
            ahg.set_device(old)
        ahg.configure_devices(1)  # the table shrank under the choice: device 0 again
        assert ahg.current_device() is ahg.get_device(0)
    finally:
        ahg.set_device(0)


@pytest.mark.asyncio
async def test_the_current_device_is_per_task() -> None:
    ahg.configure_devices(2)
    seen: dict[str, int] = {}
    step = asyncio.Event()

    async def on(name: str, ordinal: int) -> None:
        ahg.set_device(ordinal)
        await step.wait()  # both tasks have chosen before either looks
        seen[name] = ahg.current_device().ordinal

    tasks = [asyncio.create_task(on("a", 1)), asyncio.create_task(on("b", 0))]
    await asyncio.sleep(0)  # each task runs up to its wait
    step.set()
    await asyncio.gather(*tasks)
    assert seen == {"a": 1, "b": 0}
    assert ahg.current_device().ordinal == 0  # the parent never saw the children's choice


def test_the_current_device_is_per_thread_outside_tasks() -> None:
    ahg.configure_devices(2)
    seen: list[int] = []
    ahg.set_device(1)
    try:
        thread = threading.Thread(target=lambda: seen.append(ahg.current_device().ordinal))
        thread.start()
        thread.join()
        assert seen == [0]  # a new thread starts on device 0, as in HIP
    finally:
        ahg.set_device(0)


@pytest.mark.asyncio
async def test_apis_that_default_a_device_use_the_current_one() -> None:
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=64)]
    )

    async def body() -> None:
        ahg.set_device(1)
        d1 = ahg.get_device(1)
        x = d1.malloc(4 * 64)
        graph = ahg.Graph()
        # Kernel nodes are validated against the current device: 128 threads is too many.
        with pytest.raises(ahg.InvalidConfiguration):
            graph.add_kernel_node(add_one, 1, 128, (64, x))
        graph.add_kernel_node(add_one, 1, 64, (64, x))
        alloc = graph.add_mem_alloc_node(64)
        assert alloc.params.device == 1
        assert alloc.params.ptr.device == 1
        graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
        graph_exec = graph.instantiate()
        assert graph_exec.device is d1
        await (await graph_exec.launch())  # the current device's null stream
        assert (d1.view(x, np.int32, 64) == 1).all()
        graph_exec.destroy()
        graph.destroy()
        d1.free(x)

    await asyncio.create_task(body())


# -- peer access ---------------------------------------------------------------------------------


def test_peer_access_errors_follow_hip() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    assert d0.can_access_peer(1)
    assert d1.can_access_peer(d0)
    assert not d0.can_access_peer(d0)
    with pytest.raises(ahg.InvalidDevice):
        d0.can_access_peer(7)
    for bad in (d0, 0, 2, -1):
        with pytest.raises(ahg.InvalidDevice):
            d0.enable_peer_access(bad)
        with pytest.raises(ahg.InvalidDevice):
            d0.disable_peer_access(bad)
    for wrong in (None, "1", 1.5):
        with pytest.raises(TypeError):
            d0.enable_peer_access(wrong)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="flags"):
        d0.enable_peer_access(1, flags=1)
    with pytest.raises(ahg.PeerAccessNotEnabled):
        d0.disable_peer_access(1)
    d0.enable_peer_access(d1)
    with pytest.raises(ahg.PeerAccessAlreadyEnabled):
        d0.enable_peer_access(1)
    d0.disable_peer_access(1)
    with pytest.raises(ahg.PeerAccessNotEnabled):
        d0.disable_peer_access(d1)
    old = d1
    ahg.configure_devices(2)
    with pytest.raises(ahg.InvalidDevice, match="no longer"):
        ahg.get_device(0).enable_peer_access(old)


@pytest.mark.asyncio
async def test_a_kernel_reads_and_writes_peer_memory_only_with_access() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    remote = d1.malloc(4 * 32)
    local = d0.malloc(4 * 32)
    stream = d0.create_stream()
    baseline = snapshot()
    # Without access: the dispatch faults with InvalidDevicePointer, reported by the stream.
    await faults_on_a_pointer(await stream.launch_kernel(add_one, 1, 32, (32, remote)))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    assert not d1.view(remote, np.int32, 32).any()
    assert leak_report(baseline) is None
    d0.enable_peer_access(d1)
    await stream.launch_kernel(add_one, 1, 32, (32, remote))  # write the peer's memory
    await stream.launch_kernel(copy_in, 1, 32, (32, local, remote))  # read it
    await stream.synchronize()
    assert (d1.view(remote, np.int32, 32) == 1).all()
    assert (d0.view(local, np.int32, 32) == 1).all()
    # Access is one-way: device 1 may not touch device 0's memory.
    other = d1.create_stream()
    await faults_on_a_pointer(await other.launch_kernel(add_one, 1, 32, (32, local)))
    # Disabled again: a later kernel faults again.
    d0.disable_peer_access(d1)
    await faults_on_a_pointer(await stream.launch_kernel(add_one, 1, 32, (32, remote)))
    # A peer allocation freed under an enabled mapping is still caught.
    d0.enable_peer_access(1)
    d1.free(remote)
    await faults_on_a_pointer(await stream.launch_kernel(add_one, 1, 32, (32, remote)))
    destroy(local, stream, other)


@pytest.mark.asyncio
async def test_a_graph_kernel_with_a_peer_pointer_needs_access() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    remote = d1.malloc(4 * 8)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 8, (8, remote))
    graph_exec = graph.instantiate(device=d0)
    await faults_on_a_pointer(await graph_exec.launch())
    with pytest.raises(ahg.LaunchFailure):
        await d0.null_stream.synchronize()
    d0.enable_peer_access(d1)
    await (await graph_exec.launch())
    assert (d1.view(remote, np.int32, 8) == 1).all()
    destroy(remote, graph, graph_exec)


@pytest.mark.asyncio
async def test_copies_between_devices_cost_a_peer_transfer() -> None:
    cost = ahg.CostModel(peer_bytes_per_ns=10.0)
    ahg.configure_devices(2, ahg.DeviceProperties(cost=cost))
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    a, b, c = d0.malloc(1 << 16), d1.malloc(1 << 16), d0.malloc(1 << 16)
    d1.view(b, np.uint8)[:] = 7
    stream = d0.create_stream()
    peer = await stream.memcpy(a, b, 1 << 16)  # no peer access needed for a copy, as HIP
    await peer
    local = await stream.memcpy(c, a, 1 << 16)
    await local
    assert peer.end_ns - peer.start_ns == cost.copy_ns(
        1 << 16, ahg.CopyKind.DeviceToDevice, peer=True
    )
    assert peer.end_ns - peer.start_ns == cost.copy_latency_ns + round((1 << 16) / 10.0)
    assert local.end_ns - local.start_ns == cost.copy_ns(1 << 16, ahg.CopyKind.DeviceToDevice)
    assert (d0.view(c, np.uint8, 1 << 16) == 7).all()
    destroy(a, b, c, stream)


# -- launching on another device's stream --------------------------------------------------------


@pytest.mark.asyncio
async def test_launch_on_a_peer_devices_stream_orders_both_sides() -> None:
    # HIP's DependencyGraphDeviceCtxtChg: a graph made for device 0 is launched on device 1's
    # stream; the work before the launch on that stream precedes it, the work after follows it.
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    baseline = snapshot()
    x = d0.malloc(4 * 16)
    log: list[str] = []
    graph = ahg.Graph()
    k = graph.add_kernel_node(add_one, 1, 16, (16, x))
    graph.add_host_node(log.append, ("graph",), deps=[k])
    graph_exec = graph.instantiate(device=d0)
    stream1 = d1.create_stream()
    gate = asyncio.Event()

    async def held() -> None:
        await gate.wait()
        log.append("before")

    await stream1.launch_host_func(held)
    handle = await graph_exec.launch(stream1)
    await stream1.launch_host_func(log.append, "after")
    await asyncio.sleep(0)  # the device loop turns: the graph must still wait for "before"
    assert log == []
    assert not handle.done()
    gate.set()
    await stream1.synchronize()  # covers the graph too
    assert log == ["before", "graph", "after"]
    assert handle.done()
    assert (d0.view(x, np.int32, 16) == 1).all()
    for _ in range(3):
        await graph_exec.launch(stream1)
    await stream1.synchronize()
    assert (d0.view(x, np.int32, 16) == 4).all()
    assert graph_exec.statistics().launches == 4
    # The user's stream and the executable's own stream on device 0.
    assert snapshot().handles["stream"] == baseline.handles["stream"] + 2
    graph_exec.destroy()  # also destroys its stream on device 0
    stream1.destroy()
    graph.destroy()
    d0.free(x)
    assert leak_report(baseline) is None


@pytest.mark.asyncio
async def test_a_failed_cross_device_launch_reports_to_the_users_stream() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)

    def boom() -> None:
        raise RuntimeError("host node failed")

    graph = ahg.Graph()
    graph.add_host_node(boom)
    graph_exec = graph.instantiate(device=d0)
    stream1 = d1.create_stream()
    handle = await graph_exec.launch(stream1)
    with pytest.raises(ahg.LaunchFailure):
        await handle
    with pytest.raises(ahg.LaunchFailure):
        await stream1.synchronize()
    await d0.synchronize()  # the executable's own stream kept nothing
    await stream1.synchronize()  # observed once
    destroyed = d1.create_stream()
    destroyed.destroy()
    with pytest.raises(ahg.ContextIsDestroyed):
        await graph_exec.launch(destroyed)
    assert graph_exec.statistics().launches == 1
    destroy(graph, graph_exec, stream1)


# -- per-task default streams ----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_each_task_has_its_own_default_stream_per_device() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    baseline = snapshot()
    mine = d0.per_thread_stream()
    assert d0.per_thread_stream() is mine
    assert d1.per_thread_stream() is not mine
    assert d1.per_thread_stream().device is d1

    async def other() -> ahg.Stream:
        return d0.per_thread_stream()

    theirs = await asyncio.create_task(other())
    assert theirs is not mine
    # A read of the counts settles a finished task's streams, before its done callback runs.
    streams = per_thread_statistics()["streams"]
    assert theirs.state.value == "destroyed"
    assert streams >= 2
    # STREAM_PER_THREAD stands for it wherever a launch takes a stream.
    x = d0.malloc(4 * 4)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (4, x))
    graph_exec = graph.instantiate(device=d0)
    await (await graph_exec.launch(ahg.STREAM_PER_THREAD))
    assert graph_exec.statistics().launches == 1
    assert mine.statistics().submitted >= 1
    assert (d0.view(x, np.int32, 4) == 1).all()
    graph_exec.destroy()
    graph.destroy()
    d0.free(x)
    mine.destroy()
    d1.per_thread_stream().destroy()
    assert leak_report(baseline) is None
    assert d0.per_thread_stream() is not mine  # a destroyed one is replaced
    d0.per_thread_stream().destroy()


@pytest.mark.asyncio
async def test_a_launch_without_a_stream_uses_the_current_devices_null_stream() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    x = d1.malloc(4 * 4)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (4, x))
    graph_exec = graph.instantiate(device=d1)
    before = d0.null_stream.statistics().submitted
    await (await graph_exec.launch())  # current device 0: a cross-device launch, as HIP
    assert d0.null_stream.statistics().submitted > before
    await d0.null_stream.synchronize()
    ahg.set_device(1)
    try:
        before1 = d1.null_stream.statistics().submitted
        await (await graph_exec.launch())
        assert d1.null_stream.statistics().submitted == before1 + 1
    finally:
        ahg.set_device(0)
    assert (d1.view(x, np.int32, 4) == 2).all()
    destroy(x, graph, graph_exec)


@pytest.mark.asyncio
async def test_destroying_an_exec_with_a_cross_device_launch_in_flight() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    baseline = snapshot()
    x = d0.malloc(4 * 4)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (4, x))
    graph_exec = graph.instantiate(device=d0)
    stream1 = d1.create_stream()
    gate = asyncio.Event()
    await stream1.launch_host_func(gate.wait)
    handle = await graph_exec.launch(stream1)
    graph_exec.destroy()  # retired now, freed when the launch completes
    graph.destroy()
    with pytest.raises(ahg.InvalidValue):
        await graph_exec.launch(stream1)
    gate.set()
    await handle
    await stream1.synchronize()
    assert (d0.view(x, np.int32, 4) == 1).all()
    stream1.destroy()
    d0.free(x)
    assert leak_report(baseline) is None


def test_peer_access_from_another_thread_is_seen_by_the_loop() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    remote = d1.malloc(16)
    errors: list[BaseException] = []

    def enable() -> None:
        try:
            d0.enable_peer_access(1)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=enable) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Exactly one thread enabled it; the others were told it already was.
    assert len(errors) == 3
    assert all(isinstance(e, ahg.PeerAccessAlreadyEnabled) for e in errors)

    async def main() -> None:
        with d0.create_stream() as stream:
            await (await stream.launch_kernel(add_one, 1, 4, (4, remote)))

    asyncio.run(main())
    assert (d1.view(remote, np.int32, 4) == 1).all()
    destroy(remote)


@pytest.mark.asyncio
async def test_memcpy_peer_checks_each_pointer_against_its_device() -> None:
    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    a, b = d0.malloc(64), d1.malloc(64)
    d1.view(b, np.uint8)[:] = 3
    stream = d0.create_stream()
    baseline = (snapshot(), stream.statistics())
    with pytest.raises(ahg.InvalidDevice):
        await stream.memcpy_peer(a, 0, b, 5, 64)
    with pytest.raises(ahg.InvalidValue, match="not on device"):
        await stream.memcpy_peer(a, 1, b, 1, 64)
    with pytest.raises(ahg.InvalidValue, match="null"):
        await stream.memcpy_peer(ahg.NULL, 0, b, 1, 64)
    with pytest.raises(ahg.InvalidValue):
        await stream.memcpy_peer(a, 0, b, 1, 65)
    with pytest.raises(ahg.InvalidValue, match="required"):
        await stream.memcpy_peer(a, 0, b, 1, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await stream.memcpy_peer(np.zeros(4), 0, b, 1, 4)  # type: ignore[arg-type]
    assert (snapshot(), stream.statistics()) == baseline
    await d0.memcpy_peer(a, d0, b, d1, 64)  # synchronous: done on return
    assert (d0.view(a, np.uint8, 64) == 3).all()
    destroy(a, b, stream)


@pytest.mark.asyncio
async def test_synchronous_pitched_and_symbol_copies(device: ahg.Device) -> None:
    symbol = ahg.device_symbol("test_multi_device.sync", 16)
    host = np.arange(16, dtype=np.uint8)
    out = np.zeros(16, np.uint8)
    await device.memcpy_to_symbol(symbol, host)
    await device.memcpy_from_symbol(out, symbol)
    np.testing.assert_array_equal(out, host)
    dev = device.malloc(64)
    await device.memcpy_2d(dev, 32, host, 8, 8, 2)
    await device.memcpy_3d(ahg.PitchedPtr(out, 8), ahg.PitchedPtr(dev, 32), (8, 2, 1))
    np.testing.assert_array_equal(out, host)
    # Synchronous copies during a capture are StreamCaptureImplicit, as HIP's.
    stream = device.create_stream()
    stream.begin_capture()
    with pytest.raises(ahg.StreamCaptureImplicit):
        await device.memcpy_to_symbol(symbol, host)
    with pytest.raises(ahg.StreamCaptureInvalidated):
        stream.end_capture()
    destroy(dev, stream)


@pytest.mark.asyncio
async def test_dependency_graph_device_context_change() -> None:
    # As HIP's test: build and instantiate on device 0, switch to device 1, launch the
    # executable on a device-1 stream, synchronize it, check the result; then switch back.
    ahg.configure_devices(2)
    d0 = ahg.get_device(0)
    n = 64
    a_host = np.arange(n, dtype=np.int32)
    a, b = d0.malloc(4 * n), d0.malloc(4 * n)
    out = np.zeros(n, np.int32)
    graph = ahg.Graph()
    up = graph.add_memcpy_node(a, a_host)
    k = graph.add_kernel_node(copy_in, 1, n, (n, b, a), deps=[up])
    inc = graph.add_kernel_node(add_one, 1, n, (n, b), deps=[k])
    graph.add_memcpy_node(out, b, deps=[inc])
    graph_exec = graph.instantiate()  # current device 0
    ahg.set_device(1)
    try:
        stream = ahg.current_device().create_stream()
        await graph_exec.launch(stream)
        await stream.synchronize()
        np.testing.assert_array_equal(out, a_host + 1)
        # A symbol node made now resolves on the current device, 1.
        sym = ahg.device_symbol("test_multi_device.ctxchg", 4)
        node = ahg.Graph().add_memcpy_node_to_symbol(sym, np.zeros(1, np.int32))
        assert node.params.dst.device == 1
        node.graph.destroy()
        stream.destroy()
    finally:
        ahg.set_device(0)
    graph_exec.destroy()
    graph.destroy()
    destroy(a, b)


@pytest.mark.asyncio
async def test_a_cross_device_launch_cancelled_while_parked_enqueues_nothing() -> None:
    from ahipgraph import testing

    ahg.configure_devices(2)
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    x = d0.malloc(16)
    graph = ahg.Graph()
    graph.add_kernel_node(add_one, 1, 4, (4, x))
    graph_exec = graph.instantiate(device=d0, wait_for_signal_sets=True)
    stream1 = d1.create_stream()
    with testing.exhaust_signal_sets(graph_exec):
        with pytest.raises(ahg.NotReady):
            graph_exec.launch_nowait(stream1)
        task = asyncio.create_task(graph_exec.launch(stream1))
        await asyncio.sleep(0)  # the launch parks on the empty pool
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert stream1.statistics().submitted == 0  # no marker on the user's side
    assert graph_exec.statistics().launches == 0
    await (await graph_exec.launch(stream1))  # the executable still works
    assert (d0.view(x, np.int32, 4) == 1).all()
    graph_exec.destroy()
    graph.destroy()
    stream1.destroy()
    destroy(x)


def test_outside_tasks_each_thread_has_its_own_default_stream() -> None:
    device = ahg.get_device(0)
    mine = device.per_thread_stream()
    assert device.per_thread_stream() is mine
    theirs: list[ahg.Stream] = []
    thread = threading.Thread(target=lambda: theirs.append(device.per_thread_stream()))
    thread.start()
    thread.join()
    assert theirs[0] is not mine
    assert not mine.non_blocking  # it orders with the legacy null stream, as HIP's
    for stream in (mine, theirs[0]):
        stream.destroy()
    assert device.per_thread_stream() is not mine  # a destroyed one is replaced
    device.per_thread_stream().destroy()
