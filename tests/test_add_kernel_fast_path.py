"""``add_kernel_node`` and captured launches on their fast path give what the general path gives.

Both take :func:`ahipgraph.runtime.params.common_kernel_params`, which remembers the last launch
shape of its graph (or of its stream's capture) and matches it by identity. These tests pin down
that the remembered shape never changes a result: for every kind of bad input, before and after
a shape was remembered, the fast path raises the general path's error with its message, in HIP's
order (graph, then dependencies, then parameters), makes the same parameters when it succeeds,
and leaves every count as it was when it fails; the shape is per device properties (a task's
``set_device``, a reconfigured table), and a kernel changed since is read afresh.

The general path is the one every other node type takes: ``Graph._add_node`` with
``kernel_params`` (for captured launches, ``KernelParams.make`` on the stream's device).
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.node import NODES
from ahipgraph.graph.node_type import NodeType
from ahipgraph.graph.params import kernel_params
from ahipgraph.runtime.params import KernelParams


@ahg.kernel
def store(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
    x[0] = n


@ahg.kernel
def wide(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int64, m: ahg.int8) -> None:
    x[0] = n + m


def _general(
    graph: ahg.Graph, kernel: Any, grid: Any, block: Any, args: Any = (), **kw: Any
) -> Any:
    """What ``add_kernel_node`` did before its fast path: the general add of every node type."""
    shared_mem = kw.get("shared_mem", 0)
    priority = kw.get("priority", 0)
    deps = kw.get("deps", ())
    return graph._add_node(
        NodeType.Kernel,
        deps,
        lambda: kernel_params(kernel, grid, block, args, shared_mem=shared_mem, priority=priority),
    )


def _ids_out(message: str) -> str:
    """A message without node and graph ids: the two graphs compared number theirs apart."""
    return re.sub(r"(id=|graph=|#)\d+", r"\1?", message)


def _outcome(call: Callable[..., Any], *args: Any, **kw: Any) -> tuple[Any, ...]:
    """``call(*args, **kw)`` in comparable form: the error's type and message, or the node's
    (or the parameters') parameters and the number of its dependencies."""
    try:
        node = call(*args, **kw)
    except Exception as error:  # every error is compared, whatever its type
        return ("raised", type(error), _ids_out(str(error)))
    if isinstance(node, KernelParams):
        return ("added", node, 1)
    return ("added", node.params, len(node.dependencies()))


def _counts(graph: ahg.Graph) -> tuple[Any, ...]:
    stats = graph.statistics()
    return (stats.nodes, stats.edges, stats.roots, NODES.statistics().live, len(graph.nodes()))


class _Pair:
    """Two graphs built alike: one through ``add_kernel_node``, one through the general path.

    Each starts with a root added the common way, so the fast graph has a shape remembered.
    """

    def __init__(self, x: ahg.DevicePtr) -> None:
        self.x = x
        self.fast = ahg.Graph()
        self.general = ahg.Graph()
        # twice: the first add of a shape on a device validates it, the second remembers it
        first = self.fast.add_kernel_node(store, 1, 1, (x, 0))
        self.fast_root = self.fast.add_kernel_node(store, 1, 1, (x, 0), deps=first)
        first = _general(self.general, store, 1, 1, (x, 0))
        self.general_root = _general(self.general, store, 1, 1, (x, 0), deps=first)
        assert self.fast._last_launch is not None  # the shape is remembered

    def compare(self, deps_of: Callable[[ahg.Graph, ahg.GraphNode], Any], *launch: Any,
                **kw: Any) -> tuple[Any, ...]:  # fmt: skip
        before = (_counts(self.fast), _counts(self.general))
        memo = self.fast._last_launch
        fast = _outcome(
            self.fast.add_kernel_node, *launch, deps=deps_of(self.fast, self.fast_root), **kw
        )
        general = _outcome(
            _general, self.general, *launch, deps=deps_of(self.general, self.general_root), **kw
        )
        assert fast == general
        if fast[0] == "raised":  # a failed add changed nothing, its remembered shape included
            assert (_counts(self.fast), _counts(self.general)) == before
            assert self.fast._last_launch is memo
        return fast

    def destroy(self) -> None:
        for graph in (self.fast, self.general):
            if graph.alive:
                graph.destroy()


def _after_root(graph: ahg.Graph, root: ahg.GraphNode) -> Any:
    return (root,)


# Launches: (kernel, grid, block, args, keywords). Good ones first, then every kind of bad one.
def _launches(x: ahg.DevicePtr) -> list[tuple[Any, Any, Any, Any, dict[str, Any]]]:
    big = int("1000")  # equal to a constant, but another int object: the identity match misses
    return [
        (store, 1, 1, (x, 5), {}),
        (store, 1, 1, [x, 6], {}),
        (store, big, 1, (x, 7), {}),
        (store, 1000, 1, (x, 7), {}),
        (store, (2, 1, 1), 4, (x, 8), {}),
        (store, ahg.Dim3(2), ahg.Dim3(4), (x, 8), {}),
        (store, np.int64(2), 4, (x, 9), {}),
        (store, 1, 1, (x, 1), {"shared_mem": 128}),
        (store, 1, 1, (x, 1), {"shared_mem": np.int32(16)}),
        (store, 1, 1, (x, 1), {"priority": -1}),
        (store, 1, 1, (x, 1), {"priority": 0}),
        (store, 1, 1, (x, 1), {"priority": np.int64(0)}),
        (wide, 1, 1, (x, 2**40, -3), {}),
        # bad kernels
        (None, 1, 1, (x, 1), {}),
        (store.body, 1, 1, (x, 1), {}),
        ("store", 1, 1, (x, 1), {}),
        # bad grids and blocks
        (store, True, 1, (x, 1), {}),
        (store, 1, False, (x, 1), {}),
        (store, None, 1, (x, 1), {}),
        (store, 1, None, (x, 1), {}),
        (store, -1, 1, (x, 1), {}),
        (store, 1, -1, (x, 1), {}),
        (store, 0, 1, (x, 1), {}),
        (store, 1, 0, (x, 1), {}),
        (store, 1 << 40, 1, (x, 1), {}),
        (store, 1, 1 << 20, (x, 1), {}),
        (store, 1, 2048, (x, 1), {}),
        (store, 1.0, 1, (x, 1), {}),
        (store, 1, "1", (x, 1), {}),
        (store, (1, 1), (1, 1, 1, 1), (x, 1), {}),
        # bad shared memory
        (store, 1, 1, (x, 1), {"shared_mem": 1 << 20}),
        (store, 1, 1, (x, 1), {"shared_mem": -1}),
        (store, 1, 1, (x, 1), {"shared_mem": True}),
        (store, 1, 1, (x, 1), {"shared_mem": 1.0}),
        (store, 1, 1, (x, 1), {"shared_mem": None}),
        # bad priorities
        (store, 1, 1, (x, 1), {"priority": 1}),
        (store, 1, 1, (x, 1), {"priority": -2}),
        (store, 1, 1, (x, 1), {"priority": True}),
        (store, 1, 1, (x, 1), {"priority": False}),
        (store, 1, 1, (x, 1), {"priority": 2**31}),
        (store, 1, 1, (x, 1), {"priority": "0"}),
        (store, 1, 1, (x, 1), {"priority": None}),
        # bad arguments
        (store, 1, 1, (x,), {}),
        (store, 1, 1, (x, 1, 2), {}),
        (store, 1, 1, None, {}),
        (store, 1, 1, (), {}),
        (store, 1, 1, "ab", {}),
        (store, 1, 1, (1, x), {}),
        (store, 1, 1, (x, 2**31), {}),
        (store, 1, 1, (x, True), {}),
        (store, 1, 1, (x, 1.5), {}),
        (store, 1, 1, (None, 1), {}),
        (store, 1, 1, (x, np.int32(3)), {}),
        (wide, 1, 1, (x, 2**63, 0), {}),
        (wide, 1, 1, (x, 0, 128), {}),
        # several things wrong at once: the first in HIP's order is reported
        (None, -1, 1, (x,), {"shared_mem": -1}),
        (store, -1, 1, (x,), {"priority": 5}),
        (store, 1, 1, (x,), {"priority": 5}),
        (store, 1, 1, (x,), {"shared_mem": 1 << 20}),
    ]


def test_every_launch_gives_the_general_paths_result(device: ahg.Device) -> None:
    x = device.malloc(64)
    pair = _Pair(x)
    try:
        outcomes = [pair.compare(_after_root, *launch[:4], **launch[4]) for launch in _launches(x)]
        # each case ran after the remembered one and after every earlier case: now each again,
        # every one right after a common add (a shape remembered just before it)
        for launch in _launches(x):
            pair.compare(_after_root, store, 1, 1, (x, 3))
            pair.compare(_after_root, *launch[:4], **launch[4])
        assert outcomes[0][:1] == ("added",)
        assert sum(outcome[0] == "raised" for outcome in outcomes) >= 40
    finally:
        pair.destroy()
        device.free(x)


@pytest.mark.parametrize(
    "deps",
    ["one", "list", "bare", "none", "two", "foreign", "destroyed", "duplicate", "null",
     "not_a_node", "not_a_sequence", "other_graph_destroyed"],
)  # fmt: skip
def test_dependencies_are_checked_before_the_launch_as_the_general_path(
    device: ahg.Device, deps: str
) -> None:
    x = device.malloc(64)
    pair = _Pair(x)
    other = ahg.Graph()
    foreign = other.add_kernel_node(store, 1, 1, (x, 0))
    extra = {
        graph: graph.add_kernel_node(store, 1, 1, (x, 0)) for graph in (pair.fast, pair.general)
    }
    dead = {graph: graph.add_empty_node() for graph in (pair.fast, pair.general)}
    for node in dead.values():
        node.destroy()

    def deps_of(graph: ahg.Graph, root: ahg.GraphNode) -> Any:
        return {
            "one": (root,),
            "list": [root],
            "bare": root,
            "none": (),
            "two": (root, extra[graph]),
            "foreign": (foreign,),
            "destroyed": (dead[graph],),
            "duplicate": (root, root),
            "null": (None,),
            "not_a_node": ("node",),
            "not_a_sequence": 3,
            "other_graph_destroyed": (foreign,),
        }[deps]

    if deps == "other_graph_destroyed":
        other.destroy()
    try:
        for launch in _launches(x)[:3] + _launches(x)[12:16]:
            pair.compare(deps_of, *launch[:4], **launch[4])
    finally:
        pair.destroy()
        if other.alive:
            other.destroy()
        device.free(x)


def test_a_destroyed_graph_is_reported_first(device: ahg.Device) -> None:
    x = device.malloc(64)
    pair = _Pair(x)
    fast_root, general_root = pair.fast_root, pair.general_root
    pair.fast.destroy()
    pair.general.destroy()
    try:
        for kernel, grid, block, args, kw in _launches(x):
            fast = _outcome(
                pair.fast.add_kernel_node, kernel, grid, block, args, deps=(fast_root,), **kw
            )
            general = _outcome(
                _general, pair.general, kernel, grid, block, args, deps=(general_root,), **kw
            )
            assert fast == general
            assert fast[0] == "raised"
            assert issubclass(fast[1], ahg.InvalidValue)
    finally:
        device.free(x)


def test_the_remembered_shape_is_the_current_devices() -> None:
    # Two devices of different limits: 512 threads is a valid block on device 0 only.
    small = ahg.DeviceProperties(max_threads_per_block=256, max_shared_memory_per_block=1024)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    d0, d1 = ahg.get_device(0), ahg.get_device(1)
    x = d0.malloc(64)
    pair = _Pair(x)
    try:
        for ordinal in (0, 1, 0, 1, 1, 0):
            ahg.set_device(ordinal)
            for block in (512, 128, 512):
                for shared_mem in (0, 2048):
                    outcome = pair.compare(
                        _after_root, store, 2, block, (x, 1), shared_mem=shared_mem
                    )
                    if ordinal == 0:
                        assert outcome[0] == "added"
                    elif shared_mem:  # HIP checks the shared memory before the block
                        assert outcome[:2] == ("raised", ahg.InvalidValue)
                    elif block == 512:
                        assert outcome[:2] == ("raised", ahg.InvalidConfiguration)
        ahg.set_device(1)
        with pytest.raises(ahg.InvalidConfiguration):
            pair.fast.add_kernel_node(store, 2, 512, (x, 1))
    finally:
        ahg.set_device(0)
        pair.destroy()
        d0.free(x)
    assert d1.properties is small


def test_a_reconfigured_or_shrunk_devices_table_is_seen() -> None:
    ahg.configure_devices(2)
    # Made by hand: an allocated pointer of a replaced device is refused as a kernel argument,
    # and this one is used across the replacements below.
    x = ahg.DevicePtr(0, ahg.get_device(0).malloc(64).address)
    pair = _Pair(x)
    try:
        pair.compare(_after_root, store, 1, 512, (x, 1))
        # the device replaced by one of smaller limits: the remembered shape no longer applies
        ahg.configure_devices(2, ahg.DeviceProperties(max_threads_per_block=256))
        outcome = pair.compare(_after_root, store, 1, 512, (x, 1))
        assert outcome[:2] == ("raised", ahg.InvalidConfiguration)
        pair.compare(_after_root, store, 1, 256, (x, 1))
        # the same properties object again: the shapes validated on it still hold
        same = ahg.get_device(0).properties
        ahg.configure_devices(2, same)
        pair.compare(_after_root, store, 1, 256, (x, 1))
        # the task's device 1 goes away: device 0 again, as get_device() says
        ahg.set_device(1)
        ahg.configure_devices(1, ahg.DeviceProperties(max_threads_per_block=64))
        assert pair.compare(_after_root, store, 1, 128, (x, 1))[0] == "raised"
        assert pair.compare(_after_root, store, 1, 64, (x, 1))[0] == "added"
    finally:
        ahg.set_device(0)
        pair.destroy()


def test_a_kernel_changed_since_is_read_afresh(device: ahg.Device) -> None:
    @ahg.kernel
    def mutable(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
        x[0] = n

    x = device.malloc(64)
    pair = _Pair(x)
    try:
        assert pair.compare(_after_root, mutable, 1, 1, (x, 1))[0] == "added"
        mutable.name = "renamed"
        outcome = pair.compare(_after_root, mutable, 1, 1, (x,))
        assert "renamed" in outcome[2]
        mutable.layout = wide.layout  # another parameter list: three arguments now
        assert pair.compare(_after_root, mutable, 1, 1, (x, 1))[0] == "raised"
        added = pair.compare(_after_root, mutable, 1, 1, (x, 1, 2))
        assert added[0] == "added"
        assert added[1].arg_bytes == wide.pack((x, 1, 2))
        # a kernel dropped and another declared: the new one is the node's
        del mutable

        @ahg.kernel
        def fresh(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
            x[0] = n

        assert pair.compare(_after_root, fresh, 1, 1, (x, 4))[1].kernel is fresh
    finally:
        pair.destroy()
        device.free(x)


def test_two_threads_on_two_devices_add_to_one_graph_at_once(fast_switching: None) -> None:
    small = ahg.DeviceProperties(max_threads_per_block=256)
    ahg.configure_devices(2, [ahg.DeviceProperties(), small])
    x = ahg.get_device(0).malloc(64)
    graph = ahg.Graph()
    per_thread = 2000
    start = threading.Barrier(2)
    seen: dict[int, list[tuple[Any, ...]]] = {0: [], 1: []}
    failures: list[BaseException] = []

    def build(ordinal: int) -> None:
        try:
            ahg.set_device(ordinal)  # this thread's own current device
            start.wait()
            for i in range(per_thread):
                block = (512, 512, 128)[i % 3]
                seen[ordinal].append(_outcome(graph.add_kernel_node, store, 1, block, (x, i)))
        except BaseException as error:  # reported below, on the test's thread
            failures.append(error)

    threads = [threading.Thread(target=build, args=(ordinal,)) for ordinal in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not failures
        for ordinal in (0, 1):
            device = ahg.get_device(ordinal)
            for i, outcome in enumerate(seen[ordinal]):
                block = (512, 512, 128)[i % 3]
                expected = _outcome(KernelParams.make, store, 1, block, (x, i), device=device)
                if expected[0] == "raised":
                    assert outcome == expected
                else:
                    assert outcome[:2] == ("added", expected[1])
        added = sum(outcome[0] == "added" for outcomes in seen.values() for outcome in outcomes)
        refused = sum(1 for i in range(per_thread) if i % 3 != 2)  # device 1 refuses its 512s
        assert added == per_thread * 2 - refused
        assert graph.statistics().nodes == added
        assert len({node.hid for node in graph.nodes()}) == added
    finally:
        graph.destroy()
        ahg.get_device(0).free(x)


@pytest.mark.asyncio
async def test_tasks_on_two_devices_keep_their_own_limits() -> None:
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=64)]
    )
    x = ahg.get_device(0).malloc(64)
    graph = ahg.Graph()
    general = ahg.Graph()
    results: dict[int, list[tuple[Any, ...]]] = {}

    async def build(ordinal: int) -> None:
        ahg.set_device(ordinal)  # this task's own
        out = results.setdefault(ordinal, [])
        for i in range(20):
            block = (128, 64)[i % 2]
            fast = _outcome(graph.add_kernel_node, store, 1, block, (x, i))
            slow = _outcome(_general, general, store, 1, block, (x, i))
            assert fast == slow
            out.append(fast)
            await asyncio.sleep(0)  # the other task adds between this task's adds

    await asyncio.gather(build(0), build(1))
    assert [outcome[0] for outcome in results[0]] == ["added"] * 20
    assert [outcome[0] for outcome in results[1]] == ["raised", "added"] * 10
    graph.destroy()
    general.destroy()
    ahg.get_device(0).free(x)


# -- captured launches ---------------------------------------------------------------------------


async def _capture_outcome(stream: ahg.Stream, kernel: Any, grid: Any, block: Any, args: Any,
                           kw: dict[str, Any]) -> tuple[Any, ...]:  # fmt: skip
    try:
        work = await stream.launch_kernel(kernel, grid, block, args, **kw)
    except Exception as error:  # every error is compared, whatever its type
        return ("raised", type(error), str(error))
    return ("added", work.node.params)


def _made_outcome(stream: ahg.Stream, kernel: Any, grid: Any, block: Any, args: Any,
                  kw: dict[str, Any]) -> tuple[Any, ...]:  # fmt: skip
    """What the general path makes of a captured launch: ``make`` on the stream's device."""
    if "priority" in kw:
        return ("skipped",)
    try:
        params = KernelParams.make(
            kernel, grid, block, args, device=stream.device, priority=stream.priority, **kw
        )
    except Exception as error:  # every error is compared, whatever its type
        return ("raised", type(error), str(error))
    return ("added", params)


@pytest.mark.asyncio
async def test_captured_launches_give_the_general_paths_result() -> None:
    # The stream's device, not the task's current one, sets the limits of a captured launch.
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=256)]
    )
    d1 = ahg.get_device(1)
    x = ahg.get_device(0).malloc(64)
    for device, priority in ((ahg.get_device(0), 0), (d1, 0), (d1, -1)):
        stream = device.create_stream(priority=priority)
        stream.begin_capture()
        try:
            await stream.launch_kernel(store, 1, 1, (x, 0))  # a shape remembered
            for kernel, grid, block, args, kw in [*_launches(x), (store, 1, 512, (x, 1), {})]:
                for _ in range(2):  # as the first launch of its shape, then remembered
                    graph = stream.capture_info().graph
                    before = (graph.statistics().nodes, NODES.statistics().live)
                    memo = stream._capture._last_launch
                    captured = await _capture_outcome(stream, kernel, grid, block, args, kw)
                    expected = _made_outcome(stream, kernel, grid, block, args, kw)
                    if expected[0] == "skipped":  # a launch on a stream takes no priority
                        assert captured[:2] == ("raised", TypeError)
                    else:
                        assert captured == expected
                    if captured[0] == "raised":
                        assert (graph.statistics().nodes, NODES.statistics().live) == before
                        assert stream._capture._last_launch is memo
                        assert stream.is_capturing() is ahg.CaptureStatus.ACTIVE
            graph = stream.end_capture()
            assert all(len(node.dependencies()) <= 1 for node in graph.nodes())
            graph.destroy()
        finally:
            stream.destroy()
    ahg.get_device(0).free(x)


@pytest.mark.asyncio
async def test_streams_of_two_devices_capture_into_one_task_without_mixing_limits() -> None:
    ahg.configure_devices(
        2, [ahg.DeviceProperties(), ahg.DeviceProperties(max_threads_per_block=256)]
    )
    x = ahg.get_device(0).malloc(64)
    streams = [ahg.get_device(ordinal).create_stream() for ordinal in (0, 1)]
    for stream in streams:
        stream.begin_capture()
    try:
        for i in range(10):
            for stream in streams:  # alternating: each stream's own remembered shape
                captured = await _capture_outcome(stream, store, 1, 512, (x, i), {})
                assert captured == _made_outcome(stream, store, 1, 512, (x, i), {})
                ahg.set_device(1 - stream.device.ordinal)  # the current device never counts
        graphs = [stream.end_capture() for stream in streams]
        # device 1 refused every launch: its stream captured nothing
        assert [len(graph.nodes()) for graph in graphs] == [10, 0]
        for graph in graphs:
            graph.destroy()
    finally:
        ahg.set_device(0)
        for stream in streams:
            stream.destroy()
        ahg.get_device(0).free(x)


@pytest.mark.asyncio
async def test_a_failed_launch_leaves_the_remembered_shape_as_it_was(device: ahg.Device) -> None:
    # A shape validated before (in the shapes' table) but not the remembered one, with arguments
    # that fail: the call raises, and the graph's (or the stream's) memo is the one before it.
    x = device.malloc(64)
    graph = ahg.Graph()
    stream = device.create_stream()
    stream.begin_capture()
    try:
        for grid in (2, 2, 1, 1):
            graph.add_kernel_node(store, grid, 1, (x, 0))
            await stream.launch_kernel(store, grid, 1, (x, 0))
        graph_memo = graph._last_launch
        capture_memo = stream._capture._last_launch
        assert graph_memo is not None
        assert capture_memo is not None
        assert graph_memo[1] == capture_memo[1] == 1  # grid 1 remembered, grid 2 validated
        with pytest.raises(TypeError, match="store"):
            graph.add_kernel_node(store, 2, 1, (x,))
        with pytest.raises(TypeError, match="'n'"):
            graph.add_kernel_node(store, 2, 1, (x, "1"))
        with pytest.raises(TypeError, match="store"):
            await stream.launch_kernel(store, 2, 1, (x,))
        assert graph._last_launch is graph_memo
        assert stream._capture._last_launch is capture_memo
        assert graph.statistics().nodes == 4
    finally:
        stream.end_capture().destroy()
        stream.destroy()
        graph.destroy()
        device.free(x)
