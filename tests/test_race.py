"""The race checker on the real missing-dependency patterns, each with its fix.

Every pattern is written twice: the buggy version must be reported with the right kind and
fix, and the fixed version (the fix applied) must be clean.
"""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.testing import HeldKernel
from cleanup import destroy

N = 64
NBYTES = N * 4


@ahg.kernel
def fill(t: ahg.Threads, n: ahg.int32, out: ahg.Ptr[ahg.float32]) -> None:
    out[:n] = 1.0


@ahg.kernel(extents={"out": "n", "src": "n"})
def double(
    t: ahg.Threads, n: ahg.int32, src: ahg.ConstPtr[ahg.float32], out: ahg.Ptr[ahg.float32]
) -> None:
    out[:] = src * 2


@ahg.kernel(extents={"src": "n"})
def read(t: ahg.Threads, n: ahg.int32, src: ahg.ConstPtr[ahg.float32]) -> None:
    float(src.sum())


@ahg.kernel(extents={"counter": 1})
def bump(t: ahg.Threads, counter: ahg.AtomicPtr[ahg.int32]) -> None:
    counter[0] += 1


def kinds(reports: list[ahg.RaceReport]) -> list[str]:
    return [r.kind for r in reports]


# -- streams and events -----------------------------------------------------------------------


@pytest.mark.asyncio
async def test_default_stream_reads_another_streams_copy(device: ahg.Device) -> None:
    buf = device.malloc(NBYTES)
    side = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="collect") as rc:
        await side.memcpy(buf, np.ones(N, np.float32))
        await device.null_stream.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "read-after-write"
    assert report.first.where.startswith("stream #")
    assert report.second.where == "null stream"
    assert report.first.precision == "exact"
    assert report.second.precision == "declared"
    assert "record_event" in report.fix
    assert "wait_event" in report.fix
    assert "test_race.py" in (report.first.source or "")

    with ahg.race_check(on_race="collect") as rc:  # the fix
        event = device.create_event()
        await side.memcpy(buf, np.ones(N, np.float32))
        await side.record_event(event)
        await device.null_stream.wait_event(event)
        await device.null_stream.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    assert rc.reports == []
    destroy(buf, side, event)


@pytest.mark.asyncio
async def test_blocking_stream_and_null_stream_are_ordered(device: ahg.Device) -> None:
    """Legacy default-stream rules are ordering the API promises: no report."""
    buf = device.malloc(NBYTES)
    blocking = device.create_stream()
    with ahg.race_check(on_race="raise") as rc:
        await blocking.memcpy(buf, np.ones(N, np.float32))
        await device.null_stream.launch_kernel(read, 1, N, (N, buf))
        await blocking.launch_kernel(fill, 1, N, (N, buf))
        await device.synchronize()
    assert rc.reports == []
    destroy(buf, blocking)


@pytest.mark.asyncio
async def test_new_stream_that_does_not_wait_for_its_caller(device: ahg.Device) -> None:
    main = device.create_stream(non_blocking=True)
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    with ahg.race_check(on_race="collect") as rc:
        await main.launch_kernel(fill, 1, N, (N, a))
        worker = device.create_stream(non_blocking=True)
        await worker.launch_kernel(double, 1, N, (N, a, b))
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "read-after-write"
    assert "has no ordering with" in report.why
    worker.destroy()  # the second ``worker`` below is another stream

    with ahg.race_check(on_race="raise") as rc:
        a2 = device.malloc(NBYTES)
        await main.launch_kernel(fill, 1, N, (N, a2))
        forked = device.create_event()
        await main.record_event(forked)
        worker = device.create_stream(non_blocking=True)
        await worker.wait_event(forked)
        await worker.launch_kernel(double, 1, N, (N, a2, b))
        await device.synchronize()
    assert rc.reports == []
    destroy(main, a, b, worker, a2, forked)


@pytest.mark.asyncio
async def test_free_async_with_no_stream_order_covering_it(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="collect") as rc:
        buf = await s1.malloc_async(NBYTES)
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s2.free_async(buf)  # s2 knows nothing of s1's kernel
        await device.synchronize()
    assert kinds(rc.reports) == ["write-after-write"]  # the kernel vs the free
    assert "free_async" in rc.reports[0].second.op
    assert "fill" in rc.reports[0].first.op
    assert "allocated at" in rc.reports[0].allocation
    assert "test_race.py" in rc.reports[0].allocation

    with ahg.race_check(on_race="raise") as rc:
        buf = await s1.malloc_async(NBYTES)
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s1.free_async(buf)  # the same stream: ordered
        await device.synchronize()
    assert rc.reports == []
    destroy(s1, s2)


@pytest.mark.asyncio
async def test_host_free_while_a_kernel_may_still_use_the_buffer(device: ahg.Device) -> None:
    stream = device.create_stream(non_blocking=True)
    held = HeldKernel()
    with ahg.race_check(on_race="collect") as rc:
        buf = device.malloc(NBYTES)
        await held.launch(stream)
        await stream.launch_kernel(fill, 1, N, (N, buf))
        device.free(buf)  # hipFree here does not wait: the kernel has not run
        held.release()
        with pytest.raises(ahg.HipError):
            await stream.synchronize()
    (report,) = rc.reports
    assert report.kind == "write-after-write"
    assert report.second.where == "host"
    assert "synchronize()" in report.fix

    with ahg.race_check(on_race="raise") as rc:
        buf = device.malloc(NBYTES)
        await stream.launch_kernel(fill, 1, N, (N, buf))
        await stream.synchronize()
        device.free(buf)
    assert rc.reports == []
    destroy(stream)


@pytest.mark.asyncio
async def test_event_snapshot_is_the_record_not_the_wait(device: ahg.Device) -> None:
    """Work enqueued after the record is not covered, even if the simulator finished it."""
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(NBYTES)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        await s1.record_event(event)
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s1.synchronize()  # the host knows; s2 does not
        await s2.wait_event(event)
        await s2.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    assert rc.reports == []  # the host sync ordered it: later enqueues follow host order

    with ahg.race_check(on_race="collect") as rc:
        scratch = device.malloc(16)
        await s1.memset(scratch, 0, 16)
        await s1.record_event(event)
        await s1.launch_kernel(fill, 1, N, (N, buf))
        await s2.wait_event(event)
        await s2.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    (report,) = rc.reports
    assert "knows stream #" in report.why
    assert "only up to op #" in report.why
    assert "recorded on" in report.why
    assert "waited at" in report.why
    destroy(s1, s2, buf, event, scratch)


@pytest.mark.asyncio
async def test_awaited_completion_orders_the_host(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(NBYTES)
    with ahg.race_check(on_race="raise") as rc:
        done = await s1.launch_kernel(fill, 1, N, (N, buf))
        await done
        await s2.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    assert rc.reports == []
    destroy(s1, s2, buf)


@pytest.mark.asyncio
async def test_atomic_updates_never_race_each_other(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    counter = device.malloc(4)
    with ahg.race_check(on_race="collect") as rc:
        await s1.launch_kernel(bump, 1, 1, (counter,))
        await s2.launch_kernel(bump, 1, 1, (counter,))
        await device.synchronize()
        await s1.memset(counter, 0, 1, element_size=4)
        await s2.launch_kernel(bump, 1, 1, (counter,))  # a plain write still races
        await device.synchronize()
    assert kinds(rc.reports) == ["write-after-write"]
    destroy(s1, s2, counter)


@pytest.mark.asyncio
async def test_disjoint_ranges_do_not_race(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(2 * NBYTES)
    with ahg.race_check(on_race="raise") as rc:
        await s1.memset(buf, 0, NBYTES)
        await s2.memset(buf + NBYTES, 0, NBYTES)
        await s1.launch_kernel(read, 1, N, (N, buf))
        await s2.launch_kernel(read, 1, N, (N, buf + NBYTES))
        await device.synchronize()
        await s1.launch_kernel(read, 1, N, (N, buf + NBYTES))  # two reads of one range
        await s2.launch_kernel(read, 1, N, (N, buf + NBYTES))
        await device.synchronize()
    assert rc.reports == []
    destroy(s1, s2, buf)


@pytest.mark.asyncio
async def test_raise_mode_raises_at_the_racing_call(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(NBYTES)
    with ahg.race_check() as rc:
        await s1.memset(buf, 0, NBYTES)
        with pytest.raises(ahg.RaceError) as caught:
            await s2.memset(buf, 1, NBYTES)
        await device.synchronize()
    assert caught.value.reports == rc.reports
    assert "write-after-write" in str(caught.value)
    destroy(s1, s2, buf)


@pytest.mark.asyncio
async def test_warn_mode_warns(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(NBYTES)
    with ahg.race_check(on_race="warn") as rc:
        await s1.memset(buf, 0, NBYTES)
        with pytest.warns(ahg.RaceWarning, match="race"):
            await s2.memset(buf, 1, NBYTES)
        await device.synchronize()
    assert len(rc.reports) == 1
    destroy(s1, s2, buf)


@pytest.mark.asyncio
async def test_host_source_changed_while_its_copy_is_in_flight(device: ahg.Device) -> None:
    stream = device.create_stream(non_blocking=True)
    buf = device.malloc(NBYTES)
    host = np.ones(N, np.float32)
    held = HeldKernel()
    with ahg.race_check(on_race="collect") as rc:
        await held.launch(stream)
        await stream.memcpy(buf, host)
        host[0] = 5.0  # the copy has not run yet
        held.release()
        await stream.synchronize()
    (report,) = rc.reports
    assert report.kind == "host-write-during-copy"
    assert float(device.view(buf, np.float32)[0]) == 5.0  # what the device really got

    with ahg.race_check(on_race="raise") as rc:
        done = await stream.memcpy(buf, host)
        await done
        host[0] = 7.0
    assert rc.reports == []
    destroy(stream, buf)


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="on_race"), ahg.race_check(on_race="loud"):
        pass


# -- graphs -----------------------------------------------------------------------------------


def test_graph_missing_edge_is_reported_with_the_edge_to_add(device: ahg.Device) -> None:
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    graph = ahg.Graph()
    with ahg.race_check(on_race="raise"):  # records the lines that add nodes
        produce = graph.add_kernel_node(fill, 1, N, (N, a))
        consume = graph.add_kernel_node(double, 1, N, (N, a, b))
    (report,) = graph.check_races()
    assert report.kind == "read-after-write"
    assert report.fix_edge == (produce, consume)
    assert report.fix.startswith("graph.add_dependencies(a, b)")
    assert "test_race.py" in (report.first.source or "")
    with pytest.raises(ahg.RaceError) as caught:
        graph.instantiate(check_races=True)
    assert caught.value.reports[0].fix_edge == (produce, consume)
    graph.add_dependencies(*report.fix_edge)
    assert graph.check_races() == []
    graph.instantiate(check_races=True).destroy()
    destroy(a, b, graph)


@pytest.mark.asyncio
async def test_side_stream_not_joined_before_the_read_in_a_capture(device: ahg.Device) -> None:
    main = device.create_stream(non_blocking=True)
    side = device.create_stream(non_blocking=True)
    buf = device.malloc(NBYTES)
    out = device.malloc(NBYTES)
    fork, join = device.create_event(), device.create_event()
    main.begin_capture()
    await main.record_event(fork)
    await side.wait_event(fork)
    await side.launch_kernel(fill, 1, N, (N, buf))
    await main.launch_kernel(double, 1, N, (N, buf, out))  # reads before the join
    await side.record_event(join)
    await main.wait_event(join)
    graph = main.end_capture()
    (report,) = graph.check_races()
    assert report.kind == "read-after-write"
    assert report.fix_edge is not None
    graph.add_dependencies(*report.fix_edge)
    assert graph.check_races() == []
    destroy(main, side, buf, out, fork, join, graph)


@pytest.mark.asyncio
async def test_disabled_node_keeps_ordering_through_its_edges(device: ahg.Device) -> None:
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    c = device.malloc(NBYTES)
    graph = ahg.Graph()
    first = graph.add_kernel_node(fill, 1, N, (N, a))
    middle = graph.add_memset_node(b, 0, NBYTES, deps=[first])
    graph.add_kernel_node(double, 1, N, (N, a, b), deps=[middle])
    solo = graph.add_memset_node(c, 3, NBYTES)  # touches nothing else: no edges needed
    exe = graph.instantiate(check_races=True)
    exe.set_node_enabled(middle, False)  # still orders first before the last node
    with ahg.race_check(on_race="raise") as rc:
        await (await exe.launch())
    assert rc.reports == []
    # a setter that makes the changed node race is refused, and changes nothing
    with pytest.raises(ahg.RaceError) as caught:
        exe.set_memset_node_params(solo, a, 7, NBYTES)
    assert {r.second.node for r in caught.value.reports} | {
        r.first.node for r in caught.value.reports
    } >= {solo}
    device.view(c, np.uint8)[:] = 0
    await (await exe.launch())
    assert int(device.view(c, np.uint8)[0]) == 3  # the memset still fills c
    exe.destroy()
    destroy(a, b, c, graph)


def test_child_graph_race_names_the_child_node(device: ahg.Device) -> None:
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    child = ahg.Graph()
    child.add_kernel_node(fill, 1, N, (N, a))
    graph = ahg.Graph()
    holder = graph.add_child_graph_node(child)
    reader = graph.add_kernel_node(double, 1, N, (N, a, b))
    (report,) = graph.check_races()
    assert report.kind == "read-after-write"
    assert report.fix_edge == (holder, reader)
    assert report.first.where.startswith("child graph of node")
    graph.add_dependencies(holder, reader)
    assert graph.check_races() == []
    destroy(a, b, child, graph)


@pytest.mark.asyncio
async def test_events_across_two_graphs(device: ahg.Device) -> None:
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    event = device.create_event()
    producer = ahg.Graph()
    write = producer.add_kernel_node(fill, 1, N, (N, a))
    producer.add_event_record_node(event, deps=[write])
    consumer = ahg.Graph()
    wait = consumer.add_event_wait_node(event)
    consumer.add_kernel_node(double, 1, N, (N, a, b), deps=[wait])
    unsynced = ahg.Graph()
    unsynced.add_kernel_node(double, 1, N, (N, a, b))
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    exes = [g.instantiate(check_races=True) for g in (producer, consumer, unsynced)]
    with ahg.race_check(on_race="collect") as rc:
        await exes[0].launch(s1)
        await exes[1].launch(s2)
        await device.synchronize()
    assert rc.reports == []
    with ahg.race_check(on_race="collect") as rc:
        await exes[0].launch(s1)
        await exes[2].launch(s2)  # no wait node: unordered
        await device.synchronize()
    (report,) = rc.reports
    assert report.kind == "read-after-write"
    assert "launch of graph exec" in report.first.op
    assert "(node " in report.first.op
    assert "'fill'" in report.first.op
    assert "'double'" in report.second.op
    for exe in exes:
        exe.destroy()
    destroy(a, b, event, producer, consumer, unsynced, s1, s2)


def test_to_dot_draws_the_race_and_the_suggested_edge(device: ahg.Device) -> None:
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    graph = ahg.Graph()
    produce = graph.add_kernel_node(fill, 1, N, (N, a))
    consume = graph.add_kernel_node(double, 1, N, (N, a, b))
    reports = graph.check_races()
    text = graph.to_dot(races=reports)
    gid = graph.id
    first, second = f'"graph_{gid}_node_{produce.id}"', f'"graph_{gid}_node_{consume.id}"'
    assert f'{first}[color="red"penwidth="2"];' in text
    assert f'{first} -> {second}[color="red"' in text
    assert 'label="read-after-write"' in text
    assert 'label="add this edge"' in text
    assert graph.to_dot(races=[]) == graph.to_dot()
    with pytest.raises(TypeError):
        graph.to_dot(races=["not a report"])
    with pytest.raises(TypeError):
        graph.to_dot(races="x")
    destroy(a, b, graph)


@pytest.mark.asyncio
async def test_an_event_recorded_mid_graph_covers_only_the_nodes_before_it(
    device: ahg.Device,
) -> None:
    a = device.malloc(NBYTES)
    b = device.malloc(NBYTES)
    c = device.malloc(NBYTES)
    event = device.create_event()
    producer = ahg.Graph()
    early = producer.add_memset_node(c, 0, NBYTES)
    producer.add_event_record_node(event, deps=[early])  # before the write of a
    producer.add_kernel_node(fill, 1, N, (N, a), deps=[early])
    consumer = ahg.Graph()
    wait = consumer.add_event_wait_node(event)
    consumer.add_kernel_node(double, 1, N, (N, c, b), deps=[wait])  # covered: fine
    consumer.add_kernel_node(read, 1, N, (N, a))  # not after the wait either
    late_reader = ahg.Graph()
    wait2 = late_reader.add_event_wait_node(event)
    late_reader.add_kernel_node(read, 1, N, (N, a), deps=[wait2])  # a is written after
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    exes = [g.instantiate() for g in (producer, consumer, late_reader)]
    with ahg.race_check(on_race="collect") as rc:
        await exes[0].launch(s1)
        await exes[1].launch(s2)
        await device.synchronize()
    (report,) = rc.reports  # only the read of a that no wait covers
    assert report.kind == "read-after-write"
    assert report.first.start == a.address
    with ahg.race_check(on_race="collect") as rc:
        await exes[0].launch(s1)
        await exes[2].launch(s2)
        await device.synchronize()
    (report,) = rc.reports  # the wait orders it after the record, not after the write
    assert report.first.start == a.address
    assert "only up to" in report.why or "no ordering" in report.why
    for exe in exes:
        exe.destroy()
    destroy(a, b, c, event, producer, consumer, late_reader, s1, s2)


@pytest.mark.asyncio
async def test_launches_of_one_executable_are_ordered(device: ahg.Device) -> None:
    buf = device.malloc(NBYTES)
    graph = ahg.Graph()
    graph.add_kernel_node(fill, 1, N, (N, buf))
    exe = graph.instantiate()
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="raise") as rc:
        await exe.launch(s1)
        await exe.launch(s2)  # starts after the previous launch, as the runtime promises
        await s2.launch_kernel(read, 1, N, (N, buf))
        await device.synchronize()
    assert rc.reports == []
    exe.destroy()
    destroy(buf, graph, s1, s2)
