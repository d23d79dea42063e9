"""The shortcuts that keep building a graph cheap give exactly what the general paths give.

Each one skips work only where the skipped work cannot change the result: the same bytes, the
same errors with the same messages, and the general path still taken for every other shape.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.node import NODES


@ahg.kernel
def mixed(
    t: ahg.Threads,
    x: ahg.Ptr[ahg.float32],
    n: ahg.int32,
    f: ahg.float32,
    d: ahg.float64,
    u: ahg.uint8,
    y: ahg.ConstPtr[ahg.int64],
) -> None:
    """One parameter of each kind the generated packer distinguishes."""


@ahg.kernel
def nothing(t: ahg.Threads) -> None:
    """No parameters at all."""


@ahg.kernel
def one(t: ahg.Threads, n: ahg.int16) -> None:
    """A single parameter (the packer's one-element unpack)."""


def _outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except Exception as error:  # the comparison is of what each path raises
        return type(error).__name__, str(error)


def _pack_both(kernel: Any, args: Any) -> tuple[tuple[str, Any], tuple[str, Any]]:
    layout = kernel.layout
    return (
        _outcome(layout.packer, args, kernel.name),
        _outcome(layout._pack_checked, args, kernel.name),
    )


# -- the generated packer --------------------------------------------------------------------------


def test_the_generated_packer_equals_the_checked_path_for_every_shape(device: ahg.Device) -> None:
    x = device.malloc(64)
    y = device.malloc(64)
    odd = ahg.DevicePtr(0, 2**64)  # pointer arithmetic can leave the address range
    bool_address = ahg.DevicePtr(0, True)  # type: ignore[arg-type]
    numpy_address = ahg.DevicePtr(0, np.int64(x.address))  # type: ignore[arg-type]
    good = (x, 3, 1.5, 2.25, 7, y)
    shapes: list[Any] = [
        good,
        list(good),
        (x, -(2**31), -3.0e38, 1e308, 0, y),
        (x, 2**31, 1.0, 1.0, 1, y),  # int32 overflow
        (x, 1, 1e39, 1.0, 1, y),  # float32 overflow
        (x, 1, 1.0, 1.0, 256, y),  # uint8 overflow
        (x, 1, 1.0, 1.0, -1, y),
        (x, True, 1.0, 1.0, 1, y),  # a bool is refused
        (x, 1, 1, 1.0, 1, y),  # an int for a float: the checked path accepts it
        (x, np.int32(4), 1.0, np.float64(2), np.uint8(3), y),  # numpy scalars
        (None, 1, 1.0, 1.0, 1, None),  # null pointers
        (odd, 1, 1.0, 1.0, 1, y),
        (bool_address, 1, 1.0, 1.0, 1, y),
        (numpy_address, 1, 1.0, 1.0, 1, y),
        (1, 1, 1.0, 1.0, 1, y),  # an int for a pointer
        (x, 1, 1.0, 1.0, 1),  # too few
        (x, 1, 1.0, 1.0, 1, y, 9),  # too many
        None,
        "abcdef",
        b"abcdef",
        iter(good),
        np.array([1, 2, 3, 4, 5, 6]),
    ]
    for args in shapes:
        fast, checked = _pack_both(mixed, args)
        assert fast == checked, args
    assert _pack_both(mixed, good)[0][0] == "ok"
    for args in [(), [], None, (1,), "", (None,)]:
        fast, checked = _pack_both(nothing, args)
        assert fast == checked, args
    for args in [(5,), [5], (2**15,), (-(2**15) - 1,), (1.0,), (True,), (np.int16(3),), 5]:
        fast, checked = _pack_both(one, args)
        assert fast == checked, args
    device.free(x)
    device.free(y)


def test_pack_is_the_packer_and_a_node_holds_its_bytes(device: ahg.Device) -> None:
    x = device.malloc(64)
    args = (x, 3, 1.5, 2.25, 7, x + 8)
    assert mixed.pack(args) == mixed.layout.packer(args, mixed.name)
    graph = ahg.Graph()
    node = graph.add_kernel_node(mixed, 1, 1, args)
    assert node.params.arg_bytes == mixed.layout._pack_checked(args, mixed.name)
    with pytest.raises(ValueError, match=re.escape("parameter 'n' (int32) out of range")):
        graph.add_kernel_node(mixed, 1, 1, (x, 2**40, 1.5, 2.25, 7, x))
    assert graph.statistics().nodes == 1
    graph.destroy()
    device.free(x)


@ahg.kernel
def swapped(t: ahg.Threads, n: ahg.int32, x: ahg.Ptr[ahg.float32]) -> None:
    """mixed's first two parameters the other way round: another layout, another packer."""


def test_kernels_of_one_shape_each_pack_and_check_with_their_own_layout(
    device: ahg.Device,
) -> None:
    x = device.malloc(64)
    graph = ahg.Graph()
    try:
        for i in range(3):
            a = graph.add_kernel_node(mixed, 2, 64, (x, i, 1.5, 2.5, 7, x))
            b = graph.add_kernel_node(swapped, 2, 64, (i, x), deps=a)
            assert a.params.arg_bytes == mixed.layout._pack_checked(a.params.args, mixed.name)
            assert b.params.arg_bytes == swapped.layout._pack_checked((i, x), swapped.name)
            assert a.params.threads is b.params.threads  # the shape's validation is shared
        with pytest.raises(TypeError, match="parameter 'n' \\(int32\\) needs an int"):
            graph.add_kernel_node(swapped, 2, 64, (x, x))  # mixed's order is not swapped's
        with pytest.raises(TypeError, match="needs a DevicePtr"):
            graph.add_kernel_node(mixed, 2, 64, (1, 1, 1.5, 2.5, 7, x))
        assert graph.statistics().nodes == 6
    finally:
        graph.destroy()
        device.free(x)


# -- the current device's limits, read once per node -----------------------------------------------


@ahg.kernel
def count(t: ahg.Threads, n: ahg.int32) -> None:
    """Does nothing."""


def test_each_node_is_checked_against_the_current_device_of_its_caller() -> None:
    small = ahg.DeviceProperties(max_threads_per_block=256, max_shared_memory_per_block=1024)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    graph = ahg.Graph()
    graph.add_kernel_node(count, 4, 512, (1,), shared_mem=2048)  # fits device 0: remembered
    ahg.set_device(1)
    try:
        with pytest.raises(ahg.InvalidConfiguration):
            graph.add_kernel_node(count, 4, 512, (1,))
        with pytest.raises(ahg.InvalidValue):
            graph.add_kernel_node(count, 4, 128, (1,), shared_mem=2048)
        assert graph.statistics().nodes == 1
        graph.add_kernel_node(count, 4, 256, (1,), shared_mem=1024)
    finally:
        ahg.set_device(0)
    graph.add_kernel_node(count, 4, 512, (1,), shared_mem=2048)
    assert graph.statistics().nodes == 3
    graph.destroy()


def test_a_replaced_device_table_is_what_the_next_node_is_checked_against() -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(count, 2, 1024, (1,))
    ahg.configure_devices(1, ahg.DeviceProperties(max_threads_per_block=512))
    with pytest.raises(ahg.InvalidConfiguration):
        graph.add_kernel_node(count, 2, 1024, (1,))
    graph.add_kernel_node(count, 2, 512, (1,))
    assert graph.statistics().nodes == 2
    graph.destroy()


def test_a_current_ordinal_past_a_shrunk_table_checks_against_device_zero() -> None:
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=64)]
    )
    ahg.set_device(1)
    try:
        graph = ahg.Graph()
        with pytest.raises(ahg.InvalidConfiguration):
            graph.add_kernel_node(count, 1, 128, (1,))
        ahg.configure_devices(1)  # the task's choice now names no device: device 0 answers
        graph.add_kernel_node(count, 1, 128, (1,))
        assert graph.statistics().nodes == 1
        graph.destroy()
    finally:
        ahg.set_device(0)


def test_a_node_added_from_another_thread_uses_that_threads_device() -> None:
    import threading

    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=64)]
    )
    ahg.set_device(1)  # this thread's choice; a new thread starts on device 0, as in HIP
    graph = ahg.Graph()
    errors: list[BaseException] = []

    def add() -> None:
        try:
            graph.add_kernel_node(count, 1, 128, (1,))
        except BaseException as error:  # reported to the test below
            errors.append(error)

    try:
        thread = threading.Thread(target=add)
        thread.start()
        thread.join()
        assert not errors
        with pytest.raises(ahg.InvalidConfiguration):
            graph.add_kernel_node(count, 1, 128, (1,))
        assert graph.statistics().nodes == 1
    finally:
        ahg.set_device(0)
        graph.destroy()


# -- a destroyed graph, checked through a plain flag -----------------------------------------------


def test_a_destroyed_graph_refuses_adds_and_its_nodes_die_with_it() -> None:
    before = NODES.statistics().live
    graph = ahg.Graph()
    first = graph.add_kernel_node(count, 1, 1, (1,))
    assert NODES.statistics().live == before + 1
    graph.destroy()
    assert NODES.statistics().live == before
    assert not graph.alive
    assert graph.destroyed
    assert not first.alive
    with pytest.raises(ahg.InvalidValue, match="destroyed"):
        graph.add_kernel_node(count, 1, 1, (1,))
    with pytest.raises(ahg.InvalidValue):
        first.dependencies()
    with pytest.raises(ahg.InvalidValue):
        graph.add_empty_node()


# -- edges: none, one neighbour held as itself, or a list ------------------------------------------


def _model_order(
    order: list[Any], deps: dict[Any, list[Any]], succ: dict[Any, list[Any]]
) -> list[Any]:
    indegree = {node: len(deps[node]) for node in order}
    ready = [node for node in order if not indegree[node]]
    out = []
    while ready:
        node = ready.pop(0)
        out.append(node)
        for after in succ[node]:
            indegree[after] -= 1
            if not indegree[after]:
                ready.append(after)
    return out


def _check_against_model(
    graph: ahg.Graph, order: list[Any], deps: dict[Any, list[Any]], succ: dict[Any, list[Any]]
) -> None:
    for node in order:
        assert node.dependencies() == deps[node]
        assert node.dependents() == succ[node]
        assert f"deps={len(deps[node])} dependents={len(succ[node])}" in repr(node)
    assert graph.edges() == [(node, after) for node in order for after in succ[node]]
    assert graph.root_nodes() == [node for node in order if not deps[node]]
    assert graph.nodes() == _model_order(order, deps, succ)
    assert graph.statistics().edges == sum(len(succ[node]) for node in order)
    dot = graph.to_dot()
    assert dot.count(" -> ") == graph.statistics().edges
    copy = graph.clone()
    try:
        twin = {node: copy.find_in_clone(node) for node in order}
        assert copy.edges() == [(twin[a], twin[b]) for a, b in graph.edges()]
        assert [n.id for n in copy.nodes()] == [n.id for n in graph.nodes()]
    finally:
        copy.destroy()


def test_edges_in_every_form_follow_a_list_model_through_random_edits() -> None:
    import random

    rng = random.Random(7)
    graph = ahg.Graph()
    order: list[Any] = []
    deps: dict[Any, list[Any]] = {}
    succ: dict[Any, list[Any]] = {}
    try:
        for step in range(300):
            action = rng.random()
            if action < 0.4 or len(order) < 3:
                given = rng.sample(order, min(len(order), rng.choice([0, 1, 1, 1, 2, 3])))
                node = graph.add_empty_node(deps=given)
                order.append(node)
                deps[node] = list(given)
                succ[node] = []
                for dep in given:
                    succ[dep].append(node)
            elif action < 0.65:
                src, dst = sorted(rng.sample(order, 2), key=order.index)  # never a cycle
                if dst in succ[src]:
                    with pytest.raises(ahg.InvalidValue, match="already exists"):
                        graph.add_dependencies(src, dst)
                else:
                    graph.add_dependencies(src, dst)
                    succ[src].append(dst)
                    deps[dst].append(src)
            elif action < 0.85:
                src, dst = rng.sample(order, 2)
                if dst not in succ[src]:
                    with pytest.raises(ahg.InvalidValue, match="no edge"):
                        graph.remove_dependencies(src, dst)
                else:
                    graph.remove_dependencies(src, dst)
                    succ[src].remove(dst)
                    deps[dst].remove(src)
            else:
                node = rng.choice(order)
                node.destroy()
                order.remove(node)
                for dep in deps.pop(node):
                    succ[dep].remove(node)
                for after in succ.pop(node):
                    deps[after].remove(node)
            if step % 10 == 0:
                _check_against_model(graph, order, deps, succ)
        _check_against_model(graph, order, deps, succ)
        graph.instantiate().destroy()
    finally:
        graph.destroy()


def test_a_chain_node_holds_its_lone_neighbours_as_themselves() -> None:
    graph = ahg.Graph()
    first = graph.add_kernel_node(count, 1, 1, (1,))
    second = graph.add_kernel_node(count, 1, 1, (2,), deps=first)
    assert first._deps == ()
    assert first._dependents is second
    assert second._deps is first
    third = graph.add_kernel_node(count, 1, 1, (3,), deps=[first])
    assert first._dependents == [second, third]  # a second dependent makes a list
    graph.remove_dependencies(first, second)
    assert first._dependents is third  # and back to the lone node
    graph.remove_dependencies(first, third)
    assert first._dependents == ()
    assert second.dependencies() == []
    graph.destroy()


def test_a_nodes_edges_sit_right_after_its_header() -> None:
    """Kahn's walk over a wide graph reaches each node from far away in memory, reading its
    reference count and its edges: both in the object's first 32 bytes, one cache line."""
    graph = ahg.Graph()
    node = graph.add_kernel_node(count, 1, 1, (1,))
    words = (ctypes.c_void_p * 4).from_address(id(node))  # refcount, type, two slots
    assert words[2] == id(node._dependents)
    assert words[3] == id(node._deps)
    other = graph.add_kernel_node(count, 1, 1, (2,), deps=node)
    assert words[2] == id(other)  # the lone dependent, held as the node itself
    graph.destroy()


# -- a captured kernel launch, straight to its node ------------------------------------------------


@pytest.mark.asyncio
async def test_a_captured_launch_checks_status_then_launch_then_adds_one_node(
    device: ahg.Device,
) -> None:
    stream = device.create_stream(priority=-1)
    x = device.malloc(64)
    stream.begin_capture()
    try:
        first = await stream.launch_kernel(mixed, 2, 32, (x, 1, 1.0, 2.0, 3, x))
        assert first.node is not None
        from ahipgraph.runtime.capture_nodes import CapturedWork

        made = CapturedWork(first._session, first.node, device)  # what the constructor gives
        for name in ("_signal", "_device", "_program", "_session", "node"):
            assert getattr(first, name) is getattr(made, name), name
        assert type(first) is CapturedWork
        eager = ahg.KernelParams.make(
            mixed, 2, 32, (x, 1, 1.0, 2.0, 3, x), priority=-1, device=device
        )
        assert first.node.params == eager  # the stream's priority, the same bytes
        graph = stream.capture_info().graph
        before = (graph.statistics(), NODES.statistics())
        with pytest.raises(ahg.InvalidConfiguration):  # a bad launch adds nothing
            await stream.launch_kernel(mixed, 1, 4096, (x, 1, 1.0, 2.0, 3, x))
        with pytest.raises(ValueError, match="out of range"):
            await stream.launch_kernel(mixed, 1, 1, (x, 2**40, 1.0, 2.0, 3, x))
        assert (graph.statistics(), NODES.statistics()) == before
        assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
        second = await stream.launch_kernel(count, 1, 1, [5])
        assert second.node is not None
        assert second.node.dependencies() == [first.node]
        assert stream.capture_info().dependencies == (second.node,)
        with pytest.raises(ahg.StreamCaptureUnsupported):
            await stream.synchronize()  # invalidates the capture
        with pytest.raises(ahg.StreamCaptureInvalidated):  # before the launch's own error
            await stream.launch_kernel(mixed, 1, 4096, ())
    finally:
        with contextlib.suppress(ahg.StreamCaptureInvalidated):
            stream.end_capture()
        stream.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_a_kernel_on_the_guarded_null_stream_is_refused_before_its_checks(
    device: ahg.Device,
) -> None:
    blocking = device.create_stream()
    blocking.begin_capture()
    try:
        with pytest.raises(ahg.StreamCaptureImplicit):  # not the bad block's error
            await device.null_stream.launch_kernel(count, 1, 4096, (1,))
        with pytest.raises(ahg.StreamCaptureImplicit):
            device.null_stream.launch_kernel_nowait(count, 1, 1, (1,))
        assert blocking.is_capturing() is ahg.CaptureStatus.ACTIVE
    finally:
        blocking.end_capture().destroy()
        blocking.destroy()


# -- destroying a graph retires all its nodes' slots at once ---------------------------------------


def test_destroying_a_graph_retires_exactly_its_live_nodes() -> None:
    before = NODES.statistics()
    other = ahg.Graph()
    stranger = other.add_empty_node()
    graph = ahg.Graph()
    nodes = [graph.add_empty_node() for _ in range(5)]
    nodes[1].destroy()  # retired on its own; its slot may go to the next node
    reused = graph.add_empty_node()
    stolen = other.add_empty_node()  # another graph's node, perhaps in a freed slot
    handles = [node.hid for node in [*nodes, reused]]
    assert NODES.statistics().live == before.live + 7
    graph.destroy()
    after = NODES.statistics()
    assert after.live == before.live + 2  # the other graph's two nodes
    assert after.registered_total == before.registered_total + 8
    assert all(NODES.get(hid) is None for hid in handles)
    assert stranger.alive
    assert stolen.alive
    assert NODES.get(stolen.hid) is stolen
    again = ahg.Graph()
    fresh = [again.add_empty_node() for _ in range(6)]  # reuses the retired slots
    assert all(NODES.get(hid) is None for hid in handles)
    assert all(NODES.get(node.hid) is node for node in fresh)
    again.destroy()
    other.destroy()
    assert NODES.statistics().live == before.live
    ahg.Graph().destroy()  # a graph that never had a node
    assert NODES.statistics().live == before.live


# -- threads: edges of every form, edited from several threads at once -----------------------------


@pytest.mark.usefixtures("fast_switching")
def test_threads_adding_and_destroying_around_one_root_keep_the_edges_whole() -> None:
    import threading

    graph = ahg.Graph()
    root = graph.add_kernel_node(count, 1, 1, (0,))
    kept: list[list[Any]] = [[] for _ in range(4)]
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(index: int) -> None:
        try:
            start.wait()
            for i in range(150):
                node = graph.add_kernel_node(count, 1, 1, (i,), deps=root)
                if i % 3 == 0:
                    node.destroy()  # root's dependents go list -> fewer, concurrently
                else:
                    kept[index].append(node)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors
        survivors = {node for part in kept for node in part}
        assert set(root.dependents()) == survivors
        assert len(root.dependents()) == len(survivors)
        assert all(node.dependencies() == [root] for node in survivors)
        stats = graph.statistics()
        assert stats.nodes == len(survivors) + 1
        assert stats.edges == len(survivors)
        assert graph.nodes()[0] is root
    finally:
        graph.destroy()


@pytest.mark.usefixtures("fast_switching")
def test_a_graph_destroyed_while_a_thread_adds_leaves_no_node_registered() -> None:
    import threading

    before = NODES.statistics().live
    graph = ahg.Graph()
    root = graph.add_kernel_node(count, 1, 1, (0,))
    added: list[Any] = []
    refused: list[BaseException] = []
    other: list[BaseException] = []
    going = threading.Event()

    def add() -> None:
        previous = root
        for i in range(2000):
            try:
                previous = graph.add_kernel_node(count, 1, 1, (i,), deps=previous)
                added.append(previous)
            except ahg.InvalidValue as error:  # the graph (or the previous node) is gone
                refused.append(error)
                return
            except BaseException as error:  # anything else fails the test
                other.append(error)
                return
            if i == 20:
                going.set()

    thread = threading.Thread(target=add)
    thread.start()
    going.wait(timeout=10)
    graph.destroy()
    thread.join()
    assert not other
    assert len(refused) <= 1
    assert NODES.statistics().live == before
    assert not root.alive
    assert not any(node.alive for node in added)


# -- the CPU-time bench stays runnable -------------------------------------------------------------


def test_the_cpu_time_bench_runs_and_reports_every_figure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).parents[1] / "bench" / "build_cpu.py"
    spec = importlib.util.spec_from_file_location("build_cpu", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    before = NODES.statistics().live
    assert bench.main(["--sizes", "30", "--capture-sizes", "20", "--repeat", "1"]) == 0
    figures = json.loads(capsys.readouterr().out)
    expected = {"build_chain_30", "build_fork_join_30", "capture_20", "capture_instantiate_20"}
    assert expected <= set(figures)
    assert all(figures[key] > 0 for key in expected)
    assert NODES.statistics().live == before  # every graph it made is gone
