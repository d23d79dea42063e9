"""Large graphs: a chain and a wide fork-join replay exactly as eager launches, update, and
give everything back when destroyed.

The 100,000-node versions are soaks (``-m slow``); the default run has the same tests at a few
thousand nodes. Timing and memory targets for large graphs live in ``bench/scale.py``. The
fast paths that make large graphs cheap (launch shapes validated once, direct argument packing,
the collector paused in bulk builds) are checked here against the full paths they shortcut.
"""

from __future__ import annotations

import gc
import os
import threading
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.core import gcpause
from ahipgraph.exec import updater as updater_module
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.node import NODES
from ahipgraph.runtime.params import KernelParams

MODULUS = 1_000_003
BRANCHES = 100


@ahg.kernel
def start(t: ahg.Threads, acc: ahg.Ptr[ahg.int64], n: ahg.int32) -> None:
    acc[:n] = 1


@ahg.kernel
def step(t: ahg.Threads, acc: ahg.Ptr[ahg.int64], slot: ahg.int32, value: ahg.int64) -> None:
    # Order-sensitive: a node run out of order, twice or not at all changes the result.
    acc[slot] = (int(acc[slot]) * 31 + value) % MODULUS


@ahg.kernel
def join(t: ahg.Threads, acc: ahg.Ptr[ahg.int64], n: ahg.int32, out: ahg.int32) -> None:
    acc[out] = int(acc[:n].sum()) % MODULUS


Op = tuple[ahg.Kernel, tuple[Any, ...]]


def chain_ops(acc: ahg.DevicePtr, size: int, salt: int) -> list[Op]:
    ops: list[Op] = [(start, (acc, 1))]
    ops += [(step, (acc, 0, i * 7 + salt)) for i in range(size - 1)]
    return ops


def fork_join_ops(acc: ahg.DevicePtr, size: int, salt: int) -> tuple[list[Op], list[int]]:
    """Root, BRANCHES chains (branch b works on slot b), join: ops in a topological order, and
    the branch of each op (-1: root, -2: join)."""
    ops: list[Op] = [(start, (acc, BRANCHES + 1))]
    branch_of = [-1]
    inner = size - 2
    for branch in range(BRANCHES):
        length = inner // BRANCHES + (1 if branch < inner % BRANCHES else 0)
        for i in range(length):
            ops.append((step, (acc, branch, i * 13 + branch + salt)))
            branch_of.append(branch)
    ops.append((join, (acc, BRANCHES, BRANCHES)))
    branch_of.append(-2)
    return ops, branch_of


def build(shape: str, acc: ahg.DevicePtr, size: int, salt: int) -> ahg.Graph:
    graph = ahg.Graph()
    if shape == "chain":
        previous: tuple[Any, ...] = ()
        for kernel, args in chain_ops(acc, size, salt):
            previous = (graph.add_kernel_node(kernel, 1, 1, args, deps=previous),)
        return graph
    ops, branch_of = fork_join_ops(acc, size, salt)
    root = graph.add_kernel_node(ops[0][0], 1, 1, ops[0][1])
    tails = [root] * BRANCHES
    for (kernel, args), branch in zip(ops[1:-1], branch_of[1:-1], strict=True):
        tails[branch] = graph.add_kernel_node(kernel, 1, 1, args, deps=[tails[branch]])
    graph.add_kernel_node(ops[-1][0], 1, 1, ops[-1][1], deps=tails)
    return graph


async def eager(device: ahg.Device, shape: str, acc: ahg.DevicePtr, size: int, salt: int) -> Any:
    ops = chain_ops(acc, size, salt) if shape == "chain" else fork_join_ops(acc, size, salt)[0]
    stream = device.create_stream()
    for kernel, args in ops:
        await stream.launch_kernel(kernel, 1, 1, args)
    await stream.synchronize()
    stream.destroy()
    return read(device, acc)


def read(device: ahg.Device, acc: ahg.DevicePtr) -> Any:
    return device.view(acc, np.int64, BRANCHES + 2).copy()


def counts() -> tuple[int, int, int]:
    return len(GRAPHS), len(NODES), len(EXECS)


async def replay_update_destroy(device: ahg.Device, shape: str, size: int) -> None:
    acc = device.malloc(8 * (BRANCHES + 2))
    before_counts, before_bytes = counts(), device.memory.bytes_in_use
    expected = await eager(device, shape, acc, size, salt=0)
    expected_after_update = await eager(device, shape, acc, size, salt=5)
    assert not np.array_equal(expected, expected_after_update)

    graph = build(shape, acc, size, salt=0)
    assert graph.statistics().nodes == size
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert np.array_equal(read(device, acc), expected)

    new = build(shape, acc, size, salt=5)
    assert graph_exec.update(new).ok
    new.destroy()
    await (await graph_exec.launch(stream))
    assert np.array_equal(read(device, acc), expected_after_update)

    held = await graph_exec.launch(stream)  # updated again while a launch is in flight
    assert graph_exec.update(graph).ok
    await held
    assert np.array_equal(read(device, acc), expected_after_update)
    await (await graph_exec.launch(stream))
    assert np.array_equal(read(device, acc), expected)

    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    await device.synchronize()
    assert counts() == before_counts
    assert device.memory.bytes_in_use == before_bytes
    device.free(acc)


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain", "fork_join"])
async def test_a_large_graph_replays_updates_and_gives_everything_back(
    device: ahg.Device, shape: str
) -> None:
    await replay_update_destroy(device, shape, 3_000)


@pytest.mark.asyncio
@pytest.mark.skipif(
    bool(os.environ.get("AHIPGRAPH_RACE_CHECK")),
    reason="the environment's race check makes every executable check its updates, which "
    "then keep the executable's order for their reports",
)
@pytest.mark.parametrize("shape", ["chain", "fork_join"])
async def test_an_update_applied_in_memory_order_gives_the_same_results(
    device: ahg.Device, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large update applies its changes in the order their records sit in memory; the
    results, an update while a launch is in flight included, are those of any order."""
    monkeypatch.setattr(updater_module, "MEMORY_ORDER_FROM", 1)
    sorted_sizes: list[int] = []
    in_memory_order = updater_module.in_memory_order

    def counted(changes: list[Any]) -> list[Any]:
        ordered = in_memory_order(changes)
        assert sorted(map(id, ordered)) == sorted(map(id, changes))  # a permutation
        sorted_sizes.append(len(ordered))
        return ordered

    monkeypatch.setattr(updater_module, "in_memory_order", counted)
    await replay_update_destroy(device, shape, 3_000)
    # The update with a launch in flight went through it; the first, with none, rewrote the
    # slots from the columns (Updater.update_columns), which are in memory order already.
    assert sorted_sizes == [3_000]


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("shape", ["chain", "fork_join"])
async def test_a_100000_node_graph_replays_updates_and_gives_everything_back(
    device: ahg.Device, shape: str
) -> None:
    await replay_update_destroy(device, shape, 100_000)


# -- the fast paths give what the full paths give --------------------------------------------------


@ahg.kernel
def mixed(
    t: ahg.Threads,
    x: ahg.Ptr[ahg.float32],
    a: ahg.int8,
    b: ahg.uint64,
    c: ahg.float32,
    d: ahg.float64,
) -> None:
    """Every kind of parameter the direct packing handles."""


P = ahg.DevicePtr(0, 0x1000)  # packing never resolves a pointer: any address in range will do


def full_path_bytes(args: tuple[Any, ...]) -> bytes:
    layout = mixed.layout
    return layout._struct.pack(*layout.check(args, mixed.name))


def test_direct_packing_gives_the_bytes_the_checked_packing_gives(device: ahg.Device) -> None:
    x = device.malloc(64)
    for args in [
        (x, -128, 2**64 - 1, 1.5, -2.25),
        (x, 127, 0, float("inf"), float("nan")),
        (None, 0, 5, 3.4e38, 1e308),
    ]:
        assert mixed.pack(args) == full_path_bytes(args)
        assert mixed.pack(list(args)) == full_path_bytes(args)
    device.free(x)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((P, 128, 0, 0.0, 0.0), ValueError, "'a' (int8) out of range"),
        ((P, -129, 0, 0.0, 0.0), ValueError, "'a' (int8) out of range"),
        ((P, 0, -1, 0.0, 0.0), ValueError, "'b' (uint64) out of range"),
        ((P, 0, 2**64, 0.0, 0.0), ValueError, "'b' (uint64) out of range"),
        ((P, 0, 0, 1e39, 0.0), ValueError, "'c' (float32) out of range"),
        ((P, True, 0, 0.0, 0.0), TypeError, "'a' (int8) got a bool"),
        ((P, 0, 0, "1", 0.0), TypeError, "'c' (float32) needs a number"),
        ((ahg.DevicePtr(0, -8), 0, 0, 0.0, 0.0), ValueError, "address out of range"),
        ((ahg.DevicePtr(0, 2**64), 0, 0, 0.0, 0.0), ValueError, "address out of range"),
        ((P, 0, 0, 0.0), TypeError, "takes 5 arguments"),
    ],
)
def test_direct_packing_refuses_what_the_checks_refuse(
    args: tuple[Any, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        mixed.pack(args)


def test_numpy_scalars_take_the_checked_path_and_pack_alike() -> None:
    args = (None, np.int8(-3), np.uint64(7), np.float32(0.5), np.float64(2.0))
    assert mixed.pack(args) == mixed.pack((None, -3, 7, 0.5, 2.0))


def test_a_remembered_launch_shape_still_refuses_bools_and_bad_limits() -> None:
    good = KernelParams.make(start, 2, 64, (None, 1))
    again = KernelParams.make(start, 2, 64, (None, 1))
    assert again.threads is good.threads  # one shape, one validated Threads
    assert (again.grid, again.block) == (ahg.Dim3(2), ahg.Dim3(64))
    with pytest.raises(TypeError, match="grid must be an int"):
        KernelParams.make(start, True, 64, (None, 1))
    with pytest.raises(TypeError, match="block must be an int"):
        KernelParams.make(start, 2, ahg.Dim3(True), (None, 1))  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(start, 2, 4096, (None, 1))
    with pytest.raises(ahg.InvalidConfiguration):  # a failure is never remembered
        KernelParams.make(start, 2, 4096, (None, 1))
    with pytest.raises(TypeError, match="shared_mem must be an int"):
        KernelParams.make(start, 2, 64, (None, 1), shared_mem=False)


def test_each_device_checks_its_own_limits_for_a_remembered_shape() -> None:
    small = ahg.DeviceProperties(max_threads_per_block=32)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    KernelParams.make(start, 1, 64, (None, 1), device=ahg.get_device(0))
    with pytest.raises(ahg.InvalidConfiguration, match="limit 32"):
        KernelParams.make(start, 1, 64, (None, 1), device=ahg.get_device(1))
    graph = ahg.Graph()
    graph.add_kernel_node(start, 1, 64, (None, 1))
    with pytest.raises(ahg.InvalidConfiguration, match="limit 32"):
        graph.instantiate(device=ahg.get_device(1))
    graph.instantiate(device=ahg.get_device(0)).destroy()
    graph.destroy()


def test_more_launch_shapes_than_are_remembered_are_all_validated_alike() -> None:
    from ahipgraph.runtime import params

    for grid in range(1, params._SHAPES_LIMIT + 50):
        made = KernelParams.make(start, grid, 2, (None, 1))
        assert (made.grid, made.block, made.threads.count) == (
            ahg.Dim3(grid),
            ahg.Dim3(2),
            2 * grid,
        )
    assert len(params._SHAPES) <= params._SHAPES_LIMIT
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(start, 1, 4096, (None, 1))


# -- the collector pause ---------------------------------------------------------------------------


def test_instantiate_and_clone_leave_the_collector_as_they_found_it() -> None:
    graph = ahg.Graph()
    graph.add_kernel_node(start, 1, 1, (None, 1))
    thresholds = gc.get_threshold()
    assert gc.isenabled()
    graph.instantiate().destroy()
    graph.clone().destroy()
    graph.nodes()
    graph.edges()
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    assert not gcpause.is_paused()
    gc.disable()
    try:
        graph.instantiate().destroy()
        assert not gc.isenabled()  # a program that keeps it off keeps it off
    finally:
        gc.enable()
    graph.destroy()


def test_a_failed_instantiate_turns_the_collector_back_on() -> None:
    graph = ahg.Graph()
    first = graph.add_empty_node()
    second = graph.add_empty_node(deps=[first])
    graph.add_dependencies(second, first)  # a cycle: instantiate fails
    with pytest.raises(ahg.InvalidValue, match="cycle"):
        graph.instantiate()
    assert gc.isenabled()
    assert not gcpause.is_paused()
    graph.destroy()


def test_overlapping_pauses_from_threads_end_with_the_collector_on() -> None:
    inside = threading.Barrier(2)
    leave = threading.Event()

    def pause() -> None:
        with gcpause.paused():
            inside.wait(timeout=10)
            leave.wait(timeout=10)

    thread = threading.Thread(target=pause)
    thread.start()
    with gcpause.paused():
        inside.wait(timeout=10)
        assert gcpause.is_paused()
        leave.set()
        thread.join(timeout=10)
        assert gcpause.is_paused()  # the other pause ended first: still inside ours
    assert not gcpause.is_paused()
    assert gc.isenabled()


def test_a_pause_interrupted_by_a_base_exception_restores_the_collector() -> None:
    with pytest.raises(KeyboardInterrupt), gcpause.paused():
        raise KeyboardInterrupt
    assert gc.isenabled()
    assert not gcpause.is_paused()


# -- decoded arguments kept between replays --------------------------------------------------------


@ahg.kernel
def bump(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] += value


@pytest.mark.asyncio
async def test_replays_see_every_argument_write(device: ahg.Device) -> None:
    x, y = device.malloc(8), device.malloc(8)
    graph = ahg.Graph()
    node = graph.add_kernel_node(bump, 1, 1, (x, 1))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    await (await graph_exec.launch(stream))
    graph_exec.set_kernel_node_params(node, bump, 1, 1, (x, 10))  # in place: nothing in flight
    await (await graph_exec.launch(stream))
    graph_exec.set_kernel_node_params(node, bump, 1, 1, (y, 100))  # another pointer
    await (await graph_exec.launch(stream))
    held = await graph_exec.launch(stream)  # enqueued with (y, 100) ...
    graph_exec.set_kernel_node_params(node, bump, 1, 1, (y, 1000))  # ... rewritten after
    await held
    await (await graph_exec.launch(stream))
    assert int(device.view(x, np.int64, 1)[0]) == 1 + 1 + 10
    assert int(device.view(y, np.int64, 1)[0]) == 100 + 100 + 1000
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
async def test_a_replay_after_its_memory_was_freed_fails_as_before(device: ahg.Device) -> None:
    x = device.malloc(8)
    graph = ahg.Graph()
    graph.add_kernel_node(bump, 1, 1, (x, 1))
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    device.free(x)
    with pytest.raises(ahg.LaunchFailure, match="InvalidDevicePointer"):
        await (await graph_exec.launch(stream))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()


@pytest.mark.asyncio
async def test_graph_allocated_memory_is_fresh_on_every_replay(device: ahg.Device) -> None:
    """Each launch commits new memory behind the same address: no kept view may outlive it."""
    graph = ahg.Graph()
    alloc = graph.add_mem_alloc_node(8)
    ptr = alloc.params.ptr
    first = graph.add_kernel_node(bump, 1, 1, (ptr, 5), deps=[alloc])
    out = np.zeros(1, dtype=np.int64)
    copy = graph.add_memcpy_node(out, ptr, 8, deps=[first])
    graph.add_mem_free_node(ptr, deps=[copy])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    for _ in range(3):
        out[0] = -1
        await (await graph_exec.launch(stream))
        assert out[0] == 5
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
