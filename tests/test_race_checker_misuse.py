"""Misuse of the race checker and the pointer annotations, each kept as a regression test."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device import hooks
from ahipgraph.runtime import observe
from cleanup import destroy

N = 16
# Under AHIPGRAPH_RACE_CHECK the whole run is one outer check: its observer stays installed.
WHOLE_RUN = bool(os.environ.get("AHIPGRAPH_RACE_CHECK", "").strip("0 "))


def nothing_installed() -> bool:
    return WHOLE_RUN or (observe.observer is None and hooks.observers is None)


@ahg.kernel(extents={"x": "n"})
def scale(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
    x[:] *= 2


@ahg.kernel
def write_const(t: ahg.Threads, x: ahg.ConstPtr[ahg.float32]) -> None:
    x[0] = 1.0


@ahg.kernel(extents={"x": 8})
def fixed(t: ahg.Threads, x: ahg.Ptr[ahg.float32]) -> None:
    assert len(x) == 8


# -- annotations are enforced at dispatch ------------------------------------------------------


@pytest.mark.asyncio
async def test_writing_through_a_const_pointer_fails_the_dispatch(device: ahg.Device) -> None:
    x = device.malloc(64)
    stream = device.create_stream()
    with pytest.raises(ahg.LaunchFailure, match="read-only"):
        await (await stream.launch_kernel(write_const, 1, 1, (x,)))
    assert float(device.view(x, np.float32)[0]) == 0.0
    destroy(x, stream)


@pytest.mark.asyncio
async def test_a_declared_extent_is_the_view_the_body_gets(device: ahg.Device) -> None:
    x = device.malloc(64 * 4)
    device.view(x, np.float32)[:] = 1
    stream = device.create_stream()
    await (await stream.launch_kernel(scale, 1, 1, (10, x)))
    values = device.view(x, np.float32)
    assert values[:10].tolist() == [2.0] * 10
    assert values[10:].tolist() == [1.0] * 54  # past the extent: untouched
    await (await stream.launch_kernel(fixed, 1, 1, (x,)))
    with pytest.raises(ahg.LaunchFailure, match="declares 100 elements"):
        await (await stream.launch_kernel(scale, 1, 1, (100, x)))  # past the allocation
    with pytest.raises(ahg.LaunchFailure, match="negative"):
        await (await stream.launch_kernel(scale, 1, 1, (-5, x + 4)))
    destroy(x, stream)


@pytest.mark.parametrize(
    ("extents", "error"),
    [
        ({"n": 4}, ValueError),  # not a pointer
        ({"nope": 4}, ValueError),
        ({"x": -1}, ValueError),
        ({"x": True}, TypeError),
        ({"x": 2.5}, TypeError),
        ({"x": "f"}, TypeError),  # a float parameter
        ({"x": "missing"}, TypeError),
        ([("x", 4)], TypeError),
    ],
)
def test_bad_extents_are_refused(extents: object, error: type[Exception]) -> None:
    def body(t: ahg.Threads, n: ahg.int32, f: ahg.float32, x: ahg.Ptr[ahg.float32]) -> None:
        pass

    with pytest.raises(error):
        ahg.kernel(extents=extents)(body)  # type: ignore[arg-type]


def test_pointer_kinds_are_distinct_types() -> None:
    def body(
        t: ahg.Threads,
        a: ahg.Ptr[ahg.int32],
        b: ahg.ConstPtr[ahg.int32],
        c: ahg.AtomicPtr[ahg.int32],
    ) -> None:
        pass

    kernel = ahg.kernel(body)
    assert [t.name for t in kernel.layout.types] == [
        "Ptr[int32]",
        "ConstPtr[int32]",
        "AtomicPtr[int32]",
    ]
    assert len(set(kernel.layout.types)) == 3
    with pytest.raises(TypeError):
        ahg.ConstPtr[int]


# -- the checker's own lifecycle ---------------------------------------------------------------


@pytest.mark.parametrize("mode", [None, 1, "", "RAISE"])
def test_bad_modes_are_refused(mode: object) -> None:
    with pytest.raises(ValueError, match="on_race"):
        ahg.race_check(on_race=mode).__enter__()  # type: ignore[arg-type]
    assert nothing_installed()


def test_an_exception_in_the_block_leaves_nothing_installed() -> None:
    for error in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(error)), ahg.race_check():
            raise error
        assert nothing_installed()


@pytest.mark.asyncio
async def test_nested_checks_share_clocks_and_report_to_the_innermost(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(64)
    with ahg.race_check(on_race="collect") as outer:
        await s1.memset(buf, 0, 64)
        with ahg.race_check(on_race="collect") as inner:
            await s2.memset(buf, 1, 64)  # races the outer block's memset
        await device.synchronize()
        await s1.memset(buf, 2, 64)  # ordered by the device sync
        assert observe.observer is not None  # the outer check is still on
        await s1.synchronize()  # before the free below
    assert len(inner.reports) == 1
    assert outer.reports == []
    assert nothing_installed()
    destroy(s1, s2, buf)


@pytest.mark.asyncio
async def test_work_from_an_os_thread_is_checked(device: ahg.Device) -> None:
    """Allocations and frees from another thread go through the checker's lock."""
    buf = device.malloc(64)
    stream = device.create_stream(non_blocking=True)
    with ahg.race_check(on_race="collect") as rc:
        await stream.memset(buf, 0, 64)
        freed: list[BaseException] = []

        def free_elsewhere() -> None:
            try:
                device.free(buf)  # not synchronised with the stream: a race
            except BaseException as error:  # pragma: no cover - reported below
                freed.append(error)

        thread = threading.Thread(target=free_elsewhere)
        thread.start()
        thread.join()
        assert freed == []
        with pytest.raises(ahg.HipError):  # the memset had not run: its memory is gone
            await device.synchronize()
    assert [r.second.where for r in rc.reports] == ["host"]
    destroy(stream)


@pytest.mark.asyncio
async def test_an_unrecorded_event_orders_nothing(device: ahg.Device) -> None:
    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(64)
    event = device.create_event()
    with ahg.race_check(on_race="collect") as rc:
        await s1.memset(buf, 0, 64)
        await s2.wait_event(event)  # never recorded: a no-op, as in HIP
        await s2.memset(buf, 1, 64)
        await device.synchronize()
    assert len(rc.reports) == 1
    destroy(s1, s2, buf, event)


@pytest.mark.asyncio
async def test_cancelled_synchronize_does_not_order_the_host(device: ahg.Device) -> None:
    import asyncio

    from ahipgraph.testing import HeldKernel

    s1 = device.create_stream(non_blocking=True)
    s2 = device.create_stream(non_blocking=True)
    buf = device.malloc(64)
    held = HeldKernel()
    with ahg.race_check(on_race="collect") as rc:
        await held.launch(s1)
        await s1.memset(buf, 0, 64)
        waiter = asyncio.ensure_future(s1.synchronize())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await s2.memset(buf, 1, 64)  # the host never saw s1 finish
        held.release()
        await device.synchronize()
    assert len(rc.reports) == 1
    destroy(s1, s2, buf)


# -- instantiate(check_races=...) ---------------------------------------------------------------


@pytest.mark.parametrize("value", [None, 1, "yes"])
def test_check_races_must_be_a_bool(value: object) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    with pytest.raises(TypeError, match="check_races"):
        graph.instantiate(check_races=value)
    destroy(graph)


def test_a_refused_instantiate_leaves_a_memory_graph_instantiable(device: ahg.Device) -> None:
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(64)
    ptr = alloc.params.ptr
    user = graph.add_memset_node(ptr, 0, 64)  # no edge from the allocation
    graph.add_mem_free_node(ptr, deps=[user])
    with pytest.raises(ahg.RaceError) as caught:
        graph.instantiate(check_races=True)
    free = graph.nodes()[-1]
    assert {r.fix_edge for r in caught.value.reports} == {(alloc, user), (alloc, free)}
    graph.add_dependencies(alloc, user)
    exe = graph.instantiate(check_races=True)  # not NotSupported: the refusal changed nothing
    exe.destroy()
    destroy(graph)


def test_race_error_lists_every_report() -> None:
    device = ahg.get_device(0)
    buf = device.malloc(64)
    graph = ahg.Graph()
    for value in range(3):
        graph.add_memset_node(buf, value, 64)
    with pytest.raises(ahg.RaceError, match="3 races found") as caught:
        graph.instantiate(check_races=True)
    assert len(caught.value.reports) == 3
    graph.destroy()
    device.free(buf)


def test_update_rechecks_and_a_racing_update_changes_nothing(device: ahg.Device) -> None:
    a, b = device.malloc(64), device.malloc(64)

    def build(second: ahg.DevicePtr) -> ahg.Graph:
        graph = ahg.Graph()
        graph.add_memset_node(a, 1, 64)
        graph.add_memset_node(second, 2, 64)  # no edge: fine while the two differ
        return graph

    graph = build(b)
    exe = graph.instantiate(check_races=True)
    racy = build(a)
    with pytest.raises(ahg.RaceError) as caught:
        exe.update(racy)
    assert [r.kind for r in caught.value.reports] == ["write-after-write"]
    fine = build(b)
    assert exe.update(fine).kind is ahg.UpdateResultKind.Success
    exe.destroy()
    destroy(a, b, graph, racy, fine)


def test_a_replay_is_checked_against_a_merged_summary(device: ahg.Device) -> None:
    from ahipgraph.exec.races import ExecRaces
    from ahipgraph.exec.snapshot import snapshot

    buf = device.malloc(1024)
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(100):
        previous = [graph.add_memset_node(buf + 8 * (i % 64), i, 8, deps=previous)]
    races = ExecRaces(snapshot(graph)[0], None, None, check=False)
    assert races.statistics() == {"nodes": 100, "accesses": 100, "summary_ranges": 1}
    assert (races.summary[0].start, races.summary[0].end) == (buf.address, buf.address + 512)
    destroy(buf, graph)
