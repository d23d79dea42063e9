"""Every public name, called the way API.md and the README show it, with the types users get.

``make lint`` type-checks this file under ``mypy --strict`` and ``tests/test_typing.py`` runs
it, so a documented call that the annotations refuse, or a result whose static type is wider
than what the call gives (``Any`` where the docs name a type), fails the lint. Each
``assert_type`` pins a return type a user relies on; each ``# type: ignore[code]`` marks a
call that is wrong, that the runtime refuses, and that the annotations must go on refusing
(``warn_unused_ignores``, part of ``--strict``, fails the lint when one is no longer needed).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, assert_type

import numpy as np
import numpy.typing as npt

import ahipgraph as ahg
from ahipgraph import testing

# Every name of ``ahg.__all__``, read as users read it: mypy fails on one the package does not
# re-export, and tests/test_typing.py checks that the table names all of them.
PUBLIC_NAMES: dict[str, object] = {
    "AccessPolicyWindow": ahg.AccessPolicyWindow,
    "AccessProperty": ahg.AccessProperty,
    "ArenaStatistics": ahg.ArenaStatistics,
    "AtomicPtr": ahg.AtomicPtr,
    "CaptureDependencies": ahg.CaptureDependencies,
    "CaptureInfo": ahg.CaptureInfo,
    "CaptureMode": ahg.CaptureMode,
    "CaptureScope": ahg.CaptureScope,
    "CaptureStatistics": ahg.CaptureStatistics,
    "CaptureStatus": ahg.CaptureStatus,
    "CapturedEvent": ahg.CapturedEvent,
    "ChildGraphParams": ahg.ChildGraphParams,
    "Completion": ahg.Completion,
    "CondHandle": ahg.CondHandle,
    "ConditionalHandle": ahg.ConditionalHandle,
    "ConditionalKind": ahg.ConditionalKind,
    "ConditionalNodeParams": ahg.ConditionalNodeParams,
    "ConstPtr": ahg.ConstPtr,
    "ContextIsDestroyed": ahg.ContextIsDestroyed,
    "CopyKind": ahg.CopyKind,
    "CostModel": ahg.CostModel,
    "Destroyed": ahg.Destroyed,
    "Device": ahg.Device,
    "DeviceProperties": ahg.DeviceProperties,
    "DevicePtr": ahg.DevicePtr,
    "DeviceStatistics": ahg.DeviceStatistics,
    "DeviceSymbol": ahg.DeviceSymbol,
    "Dim3": ahg.Dim3,
    "DotFlags": ahg.DotFlags,
    "ErrorCode": ahg.ErrorCode,
    "Event": ahg.Event,
    "EventParams": ahg.EventParams,
    "EventState": ahg.EventState,
    "ExecState": ahg.ExecState,
    "ExecStatistics": ahg.ExecStatistics,
    "ForgottenHandleWarning": ahg.ForgottenHandleWarning,
    "Graph": ahg.Graph,
    "GraphExec": ahg.GraphExec,
    "GraphExecUpdateFailure": ahg.GraphExecUpdateFailure,
    "GraphMemAttribute": ahg.GraphMemAttribute,
    "GraphNode": ahg.GraphNode,
    "GraphNodeParams": ahg.GraphNodeParams,
    "GraphPoolStatistics": ahg.GraphPoolStatistics,
    "GraphStatistics": ahg.GraphStatistics,
    "HandleId": ahg.HandleId,
    "HandleState": ahg.HandleState,
    "HipError": ahg.HipError,
    "HostFunction": ahg.HostFunction,
    "HostParams": ahg.HostParams,
    "IllegalAddress": ahg.IllegalAddress,
    "IllegalState": ahg.IllegalState,
    "InstantiateFlags": ahg.InstantiateFlags,
    "InstantiateOptions": ahg.InstantiateOptions,
    "InvalidConfiguration": ahg.InvalidConfiguration,
    "InvalidDevice": ahg.InvalidDevice,
    "InvalidDeviceFunction": ahg.InvalidDeviceFunction,
    "InvalidDevicePointer": ahg.InvalidDevicePointer,
    "InvalidHandle": ahg.InvalidHandle,
    "InvalidMemcpyDirection": ahg.InvalidMemcpyDirection,
    "InvalidPitchValue": ahg.InvalidPitchValue,
    "InvalidSymbol": ahg.InvalidSymbol,
    "InvalidValue": ahg.InvalidValue,
    "Kernel": ahg.Kernel,
    "KernelAttributes": ahg.KernelAttributes,
    "KernelNodeAttribute": ahg.KernelNodeAttribute,
    "KernelParams": ahg.KernelParams,
    "LaunchFailure": ahg.LaunchFailure,
    "MemAllocParams": ahg.MemAllocParams,
    "MemFreeParams": ahg.MemFreeParams,
    "MemcpyParams": ahg.MemcpyParams,
    "MemoryInfo": ahg.MemoryInfo,
    "MemoryStatistics": ahg.MemoryStatistics,
    "MemsetParams": ahg.MemsetParams,
    "NULL": ahg.NULL,
    "NodeType": ahg.NodeType,
    "NotFound": ahg.NotFound,
    "NotInitialized": ahg.NotInitialized,
    "NotReady": ahg.NotReady,
    "NotSupported": ahg.NotSupported,
    "OperatingSystem": ahg.OperatingSystem,
    "OutOfMemory": ahg.OutOfMemory,
    "PeerAccessAlreadyEnabled": ahg.PeerAccessAlreadyEnabled,
    "PeerAccessNotEnabled": ahg.PeerAccessNotEnabled,
    "PitchedCopyParams": ahg.PitchedCopyParams,
    "PitchedPtr": ahg.PitchedPtr,
    "PerThreadStream": ahg.PerThreadStream,
    "Ptr": ahg.Ptr,
    "QueueStatistics": ahg.QueueStatistics,
    "RaceCheck": ahg.RaceCheck,
    "RaceCheckStatistics": ahg.RaceCheckStatistics,
    "RaceError": ahg.RaceError,
    "RaceReport": ahg.RaceReport,
    "RaceSite": ahg.RaceSite,
    "RaceWarning": ahg.RaceWarning,
    "RegistryStatistics": ahg.RegistryStatistics,
    "STREAM_PER_THREAD": ahg.STREAM_PER_THREAD,
    "SignalPoolStatistics": ahg.SignalPoolStatistics,
    "Stream": ahg.Stream,
    "StreamCaptureImplicit": ahg.StreamCaptureImplicit,
    "StreamCaptureInvalidated": ahg.StreamCaptureInvalidated,
    "StreamCaptureIsolation": ahg.StreamCaptureIsolation,
    "StreamCaptureMerge": ahg.StreamCaptureMerge,
    "StreamCaptureUnjoined": ahg.StreamCaptureUnjoined,
    "StreamCaptureUnmatched": ahg.StreamCaptureUnmatched,
    "StreamCaptureUnsupported": ahg.StreamCaptureUnsupported,
    "StreamCaptureWrongThread": ahg.StreamCaptureWrongThread,
    "StreamState": ahg.StreamState,
    "StreamStatistics": ahg.StreamStatistics,
    "StreamWaitFlag": ahg.StreamWaitFlag,
    "ThreadIdsStatistics": ahg.ThreadIdsStatistics,
    "Threads": ahg.Threads,
    "Trace": ahg.Trace,
    "Unknown": ahg.Unknown,
    "UpdateResult": ahg.UpdateResult,
    "UpdateResultKind": ahg.UpdateResultKind,
    "UserObject": ahg.UserObject,
    "UserObjectStatistics": ahg.UserObjectStatistics,
    "WaitQueueStatistics": ahg.WaitQueueStatistics,
    "capture_statistics": ahg.capture_statistics,
    "collect_forgotten": ahg.collect_forgotten,
    "configure_devices": ahg.configure_devices,
    "current_device": ahg.current_device,
    "device_count": ahg.device_count,
    "device_symbol": ahg.device_symbol,
    "elapsed_time": ahg.elapsed_time,
    "exchange_capture_mode": ahg.exchange_capture_mode,
    "float32": ahg.float32,
    "float64": ahg.float64,
    "get_device": ahg.get_device,
    "host_function": ahg.host_function,
    "int16": ahg.int16,
    "int32": ahg.int32,
    "int64": ahg.int64,
    "int8": ahg.int8,
    "kernel": ahg.kernel,
    "race_check": ahg.race_check,
    "run": ahg.run,
    "set_conditional": ahg.set_conditional,
    "set_device": ahg.set_device,
    "stream_priority_range": ahg.stream_priority_range,
    "tracing": ahg.tracing,
    "uint16": ahg.uint16,
    "uint32": ahg.uint32,
    "uint64": ahg.uint64,
    "uint8": ahg.uint8,
}

# The same for ``ahipgraph.testing``.
TESTING_NAMES: dict[str, object] = {
    "AllocationFault": testing.AllocationFault,
    "Builder": testing.Builder,
    "DeviceFactory": testing.DeviceFactory,
    "CELLS": testing.CELLS,
    "GatedHost": testing.GatedHost,
    "HeldKernel": testing.HeldKernel,
    "InjectedFault": testing.InjectedFault,
    "Interleave": testing.Interleave,
    "KernelFault": testing.KernelFault,
    "KernelHang": testing.KernelHang,
    "LeakError": testing.LeakError,
    "MAX_TASKS": testing.MAX_TASKS,
    "MAX_THREADS": testing.MAX_THREADS,
    "STALL_TIMEOUT_S": testing.STALL_TIMEOUT_S,
    "SignalSetsHeld": testing.SignalSetsHeld,
    "Snapshot": testing.Snapshot,
    "StressReport": testing.StressReport,
    "StressViolation": testing.StressViolation,
    "exhaust_signal_sets": testing.exhaust_signal_sets,
    "fail_allocations": testing.fail_allocations,
    "fail_kernels": testing.fail_kernels,
    "fresh_devices": testing.fresh_devices,
    "hang_kernels": testing.hang_kernels,
    "leak_report": testing.leak_report,
    "loop_turns": testing.loop_turns,
    "random_graph": testing.random_graph,
    "registry_statistics": testing.registry_statistics,
    "run_together": testing.run_together,
    "snapshot": testing.snapshot,
    "stress": testing.stress,
    "thread_ids_statistics": testing.thread_ids_statistics,
}


@ahg.kernel
def fill(t: ahg.Threads, n: ahg.int32, value: ahg.float32, x: ahg.Ptr[ahg.float32]) -> None:
    x[: min(n, t.count)] = value


@ahg.kernel(name="bump", duration_ns=500)
def bump(t: ahg.Threads, cell: ahg.Ptr[ahg.int32]) -> None:
    cell[0] += 1


@ahg.kernel
def halve_until_small(
    t: ahg.Threads, x: ahg.Ptr[ahg.float64], again: ahg.CondHandle
) -> None:  # the README's conditional-node kernel
    x[:] = x / 2
    ahg.set_conditional(again, 1 if x.max() >= 1 else 0)


def raises(error: type[BaseException], call: Any) -> bool:
    """Whether ``call()`` raises ``error``: for the calls mypy must refuse, run anyway."""
    try:
        call()
    except error:
        return True
    return False


class PathName:
    """A path-like object that is not a ``Path`` (as ``os.DirEntry`` is)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


@contextmanager
def scratch_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def devices_and_memory() -> None:
    """``ahg.device_count``, ``get_device``, ``configure_devices`` and the device's memory."""
    assert_type(ahg.device_count(), int)
    properties = ahg.DeviceProperties(
        compute_units=8, hardware_queues=2, cost=ahg.CostModel(kernel_launch_ns=1_000)
    )
    devices = ahg.configure_devices(2, properties)
    assert_type(devices, list[ahg.Device])
    assert_type(ahg.configure_devices(1, [properties]), list[ahg.Device])
    device = ahg.get_device(0)
    assert_type(device, ahg.Device)
    assert_type(ahg.get_device(), ahg.Device)
    assert_type(device.ordinal, int)
    assert_type(device.properties, ahg.DeviceProperties)
    ptr = device.malloc(256)
    assert_type(ptr, ahg.DevicePtr)
    info = device.memory_info()
    assert_type(info, ahg.MemoryInfo)
    free, total = info
    assert_type(free, int)
    assert_type(info.total, int)
    assert free < total
    view = device.view(ptr, np.float32)
    assert_type(view, npt.NDArray[Any])
    view[:] = 1
    assert_type(device.view(ptr, "uint8", 16, readonly=True), npt.NDArray[Any])
    assert raises(TypeError, lambda: device.view(ptr, None))  # type: ignore[arg-type]
    assert_type(device.statistics(), ahg.DeviceStatistics)
    assert_type(device.statistics().memory, ahg.MemoryStatistics)
    assert_type(device.statistics().queues[0], ahg.QueueStatistics)
    assert_type(device.statistics().graph_pool, ahg.GraphPoolStatistics)
    device.free(ptr)
    assert_type(ahg.NULL, ahg.DevicePtr)
    assert raises(TypeError, lambda: device.malloc("256"))  # type: ignore[arg-type]
    assert raises(TypeError, lambda: device.malloc(ahg.STREAM_PER_THREAD))  # type: ignore[arg-type]
    assert raises(TypeError, lambda: ahg.Device())


async def streams_and_events(device: ahg.Device) -> None:
    """Every enqueue of a stream is awaitable and gives a ``Completion``."""
    n = 64
    x, y = device.malloc(4 * n), device.malloc(4 * n)
    host = np.arange(n, dtype=np.float32)
    with device.create_stream(priority=0, non_blocking=True) as stream:
        assert_type(stream, ahg.Stream)
        start = device.create_event()
        stop = device.create_event(disable_timing=False, blocking_sync=False)
        assert_type(start, ahg.Event)
        await stream.record_event(start)
        done = await stream.memcpy(x, host)  # host to device; the size is the array's
        assert_type(done, ahg.Completion)
        assert_type(await stream.memcpy(y, x, 4 * n), ahg.Completion)
        assert_type(await stream.memcpy(y, x, 4 * n, ahg.CopyKind.DeviceToDevice), ahg.Completion)
        assert_type(await stream.memset(y, 0, 4 * n), ahg.Completion)
        assert_type(await stream.memset(y, 0, nbytes=4 * n, element_size=4), ahg.Completion)
        assert_type(
            await stream.launch_kernel(fill, (1, 1, 1), ahg.Dim3(n), (n, 2.5, y)), ahg.Completion
        )
        assert_type(await stream.launch_kernel(fill, 1, n, [n, 2.5, y]), ahg.Completion)
        assert_type(stream.launch_kernel_nowait(fill, 1, n, (n, 2.5, y)), ahg.Completion)
        seen: list[str] = []
        assert_type(await stream.launch_host_func(seen.append, "host"), ahg.Completion)
        traced = ahg.host_function(seen.append, reads=[y], writes=[(x, 4)])
        assert_type(traced, ahg.HostFunction)
        assert raises(TypeError, lambda: ahg.host_function(print, reads=["y"]))  # type: ignore[list-item]
        await stream.launch_host_func(traced, "declared")
        out = np.empty(n, np.float32)
        last = await stream.memcpy(out, y)
        assert_type(await stream.record_event(stop), None)
        assert_type(await stream.wait_event(stop), None)
        assert_type(stream.record_event_nowait(stop), None)
        assert_type(await stream.synchronize(), None)
        assert_type(await last, None)  # a Completion is awaitable: it resolves once run
        assert_type(last.done(), bool)
        assert_type(last.exception(), ahg.HipError | None)
        assert_type(last.start_ns, int | None)
        assert_type(await last.wait(), None)
        assert_type(stream.query(), bool)
        assert_type(await stop.synchronize(), None)
        assert_type(stop.query(), bool)
        elapsed = ahg.elapsed_time(start, stop)
        assert_type(elapsed, float)
        assert_type(start.elapsed_time(stop), float)
        assert_type(stream.statistics(), ahg.StreamStatistics)
        assert_type(stream.state, ahg.StreamState)
        assert_type(stop.state, ahg.EventState)
        assert seen == ["host", "declared"]
        assert (out == 2.5).all()
        assert_type(await device.synchronize(), None)
        assert_type(await stream.wait_value_32(x, 0, ahg.StreamWaitFlag.GEQ), ahg.Completion)
        assert_type(await stream.write_value_32(x, 1), ahg.Completion)
        assert_type(await stream.write_value_64(x, 1), ahg.Completion)
        assert_type(await stream.wait_value_64(x, 1, ahg.StreamWaitFlag.EQ), ahg.Completion)
        assert_type(ahg.stream_priority_range(), tuple[int, int])
        await stream.synchronize()
        start.destroy()
        stop.destroy()
    assert_type(stream.alive, bool)
    assert not stream.alive
    device.free(x)
    device.free(y)
    assert raises(TypeError, lambda: ahg.Stream())


async def capture(device: ahg.Device) -> None:
    """``async with stream.capture(...)`` and the begin / end spelling; stream-ordered memory."""
    with device.create_stream() as stream, device.create_stream() as side:
        async with stream.capture(mode=ahg.CaptureMode.GLOBAL) as scope:
            assert_type(scope, ahg.CaptureScope)
            assert_type(stream.is_capturing(), ahg.CaptureStatus)
            info = stream.capture_info()
            assert_type(info, ahg.CaptureInfo)
            status, capture_id, graph, deps = info
            assert_type(status, ahg.CaptureStatus)
            assert_type(capture_id, int | None)
            assert_type(graph, ahg.Graph | None)
            assert_type(deps, tuple[ahg.GraphNode, ...])
            ptr = await stream.malloc_async(64)
            assert_type(ptr, ahg.DevicePtr)
            await stream.memset(ptr, 0, 64)
            assert_type(await stream.free_async(ptr), ahg.Completion)
            (last,) = stream.capture_info().dependencies
            stream.update_capture_dependencies([last], flags=ahg.CaptureDependencies.SET)
            stream.update_capture_dependencies((last,), ahg.CaptureDependencies.ADD)
        captured = scope.graph
        assert_type(captured, ahg.Graph | None)
        assert captured is not None
        stream.begin_capture(ahg.CaptureMode.RELAXED)
        previous = ahg.exchange_capture_mode(ahg.CaptureMode.RELAXED)
        assert_type(previous, ahg.CaptureMode)
        ahg.exchange_capture_mode(previous)
        fork = device.create_event()
        await stream.record_event(fork)
        await side.wait_event(fork)  # the side stream joins the capture (fork)
        await side.launch_host_func(list[str]().append, "on the side")
        join = device.create_event()
        await side.record_event(join)
        await stream.wait_event(join)
        again = stream.end_capture()
        assert_type(again, ahg.Graph)
        stream.begin_capture_to_graph(again, again.nodes()[-1:], ahg.CaptureMode.THREAD_LOCAL)
        assert_type(stream.end_capture(), ahg.Graph)
        assert_type(ahg.capture_statistics(), ahg.CaptureStatistics)
        for handle in (fork, join, captured, again):
            handle.destroy()


def graphs(device: ahg.Device) -> None:
    """Every node kind, each with ``deps=`` as a list, a tuple or one node."""
    x = device.malloc(256)
    host = np.zeros(64, np.float32)
    with ahg.Graph() as graph, ahg.Graph() as child, device.create_event() as event:
        assert_type(graph, ahg.Graph)
        child.add_empty_node()
        copy = graph.add_memcpy_node(x, host)
        assert_type(copy, ahg.GraphNode)
        memset = graph.add_memset_node(x, 0, 256, deps=[copy])
        run = graph.add_kernel_node(fill, 1, 64, (64, 1.0, x), deps=(memset,))
        host_node = graph.add_host_node(print, ("graph",), deps=run)
        nested = graph.add_child_graph_node(child, deps=[host_node])
        empty = graph.add_empty_node(deps=[nested])
        record = graph.add_event_record_node(event, deps=[empty])
        graph.add_event_wait_node(event, deps=[record])
        graph.add_dependencies(copy, empty)  # one node, or a list or tuple of them
        graph.remove_dependencies([copy], (empty,))
        with ahg.Graph() as memory:  # a graph with memory nodes is neither cloned nor edited
            alloc = memory.add_mem_alloc_node(64)
            free = memory.add_mem_free_node(alloc.get_mem_alloc_params().ptr, deps=[alloc])
            assert_type(alloc.get_mem_alloc_params(), ahg.MemAllocParams)
            assert_type(free.get_mem_free_params(), ahg.MemFreeParams)
        assert_type(graph.nodes(), list[ahg.GraphNode])
        assert_type(graph.root_nodes(), list[ahg.GraphNode])
        assert_type(graph.edges(), list[tuple[ahg.GraphNode, ahg.GraphNode]])
        assert_type(run.type, ahg.NodeType)
        assert run.type is ahg.NodeType.Kernel
        assert_type(run.dependencies(), list[ahg.GraphNode])
        assert_type(run.dependents(), list[ahg.GraphNode])
        assert_type(run.graph, ahg.Graph)
        assert_type(run.get_kernel_params(), ahg.KernelParams)
        assert_type(run.get_kernel_params().grid, ahg.Dim3)
        assert_type(copy.get_memcpy_params(), ahg.MemcpyParams | ahg.PitchedCopyParams)
        assert_type(memset.get_memset_params(), ahg.MemsetParams)
        assert_type(host_node.get_host_params(), ahg.HostParams)
        assert_type(nested.get_child_graph(), ahg.Graph)
        assert_type(record.get_event(), ahg.Event)
        run.set_kernel_params(fill, 1, 64, (64, 3.0, x))
        memset.set_memset_params(x, 1, 256)
        host_node.set_host_params(print, ["set"])
        run.set_attribute(ahg.KernelNodeAttribute.Priority, -1)
        run.set_attribute(ahg.KernelNodeAttribute.Cooperative, True)
        run.set_attribute(ahg.KernelNodeAttribute.Cooperative, False)
        prio = ahg.KernelNodeAttribute.Priority
        assert raises(TypeError, lambda: run.set_attribute(prio, "high"))  # type: ignore[call-overload]
        priority = run.get_attribute(ahg.KernelNodeAttribute.Priority)
        assert_type(priority, int)
        cooperative = run.get_attribute(ahg.KernelNodeAttribute.Cooperative)
        assert_type(cooperative, bool)
        window = run.get_attribute(ahg.KernelNodeAttribute.AccessPolicyWindow)
        assert_type(window, ahg.AccessPolicyWindow)
        run.set_attribute(
            ahg.KernelNodeAttribute.AccessPolicyWindow,
            ahg.AccessPolicyWindow(x, 256, 0.5, ahg.AccessProperty.Persisting),
        )
        clone = graph.clone()
        assert_type(clone, ahg.Graph)
        assert_type(clone.find_in_clone(run), ahg.GraphNode)
        clone.destroy()
        dot = graph.to_dot(ahg.DotFlags.Verbose | ahg.DotFlags.KernelNodeParams)
        assert_type(dot, str)
        reports = graph.check_races()
        assert_type(reports, list[ahg.RaceReport])
        assert_type(graph.to_dot(races=reports), str)
        assert raises(TypeError, lambda: graph.to_dot(races=[run]))  # type: ignore[list-item]
        with scratch_dir() as where:
            graph.debug_dot_print(where / "graph.dot", ahg.DotFlags.Verbose)
            graph.debug_dot_print(str(where / "graph.dot"))
        owned = ahg.UserObject(lambda data: None, data="payload", initial_refcount=2)
        graph.retain_user_object(owned, 2, move=True)
        graph.release_user_object(owned)
        assert_type(graph.user_objects(), dict[ahg.UserObject, int])
        assert_type(graph.statistics(), ahg.GraphStatistics)
        generic = graph.add_node(ahg.GraphNodeParams(ahg.NodeType.Empty), deps=[copy])
        assert_type(generic, ahg.GraphNode)
        handle = graph.conditional_handle(default=1)
        assert_type(handle, ahg.ConditionalHandle)
        loop, bodies = graph.add_conditional_node(handle, ahg.ConditionalKind.While)
        assert_type(loop, ahg.GraphNode)
        assert_type(bodies, list[ahg.Graph])
        graph.destroy()
    assert raises(TypeError, lambda: ahg.GraphNode())
    device.free(x)


async def executables(device: ahg.Device) -> None:
    """``instantiate`` with flags and options, launch, upload, the setters and ``update``."""
    x = device.malloc(256)
    with ahg.Graph() as graph, device.create_stream() as stream:
        run = graph.add_kernel_node(fill, 1, 64, (64, 1.0, x))
        copy = graph.add_memcpy_node(x, np.zeros(64, np.float32), deps=[run])
        with graph.instantiate() as graph_exec:
            assert_type(graph_exec, ahg.GraphExec)
            handle = await graph_exec.launch(stream)
            assert_type(handle, ahg.Completion)
            assert_type(await handle, None)
            assert_type(await graph_exec.upload(stream), None)
            assert_type(await graph_exec.launch(), ahg.Completion)  # the null stream
            assert_type(await graph_exec.launch(ahg.STREAM_PER_THREAD), ahg.Completion)
            assert_type(ahg.STREAM_PER_THREAD, ahg.PerThreadStream)
            assert_type(graph_exec.launch_nowait(stream), ahg.Completion)
            graph_exec.set_kernel_node_params(run, fill, 1, 64, (64, 2.0, x))
            graph_exec.set_memcpy_node_params(copy, x, np.ones(64, np.float32))
            graph_exec.set_node_enabled(copy, False)
            assert_type(graph_exec.node_enabled(copy), bool)
            priority = graph_exec.kernel_node_attribute(run, ahg.KernelNodeAttribute.Priority)
            assert_type(priority, int)
            result = graph_exec.update(graph)
            assert_type(result, ahg.UpdateResult)
            assert_type(result.kind, ahg.UpdateResultKind)
            assert_type(result.node, ahg.GraphNode | None)
            stats = graph_exec.statistics()
            assert_type(stats, ahg.ExecStatistics)
            assert_type(stats.signal_pool, ahg.SignalPoolStatistics)
            assert_type(stats.arena, ahg.ArenaStatistics)
            assert_type(graph_exec.state, ahg.ExecState)
            assert_type(graph_exec.plan_dot(), str)
            await stream.synchronize()
        with graph.instantiate(
            ahg.InstantiateFlags.UPLOAD, upload_stream=stream, signal_sets=4, check_races=True
        ) as uploaded:
            await (await uploaded.launch(stream))
        with graph.instantiate(
            flags=ahg.InstantiateFlags.AUTO_FREE_ON_LAUNCH,
            device=device,
            signal_set_policy="grow",
            arena_headroom=0,
            strict_flush=True,
        ) as other:
            await (await other.launch(ahg.STREAM_PER_THREAD))
        assert raises(TypeError, lambda: graph.instantiate(signal_set=4))  # type: ignore[call-arg]
        assert raises(TypeError, lambda: graph.instantiate(check_races=1))  # type: ignore[arg-type]
        await stream.synchronize()
    assert raises(TypeError, lambda: ahg.GraphExec())
    device.free(x)


async def setters(device: ahg.Device) -> None:
    """The node and executable setters of every kind, and a conditional loop on the device."""
    x = device.malloc(256)
    host = np.zeros(64, np.float32)
    table = ahg.device_symbol("user_surface.table", 256)
    with (
        ahg.Graph() as graph,
        ahg.Graph() as child,
        device.create_event() as event,
        device.create_event() as other_event,
        device.create_stream() as stream,
    ):
        child.add_empty_node()
        run = graph.add_kernel_node(fill, 1, 64, (64, 1.0, x))
        twin = graph.add_kernel_node(fill, 1, 64, (64, 1.0, x), deps=[run])
        twin.copy_attributes_from(run)
        memset = graph.add_memset_node(x, 0, nbytes=256, deps=[twin])
        pitched = graph.add_memcpy_3d_node(
            ahg.PitchedPtr(x, 256), ahg.PitchedPtr(host, 256), (256, 1, 1), deps=[memset]
        )
        to_symbol = graph.add_memcpy_node_to_symbol(table, host, deps=[pitched])
        host_node = graph.add_host_node(list[int]().append, (1,), deps=[to_symbol])
        nested = graph.add_child_graph_node(child, deps=[host_node])
        record = graph.add_event_record_node(event, deps=[nested])
        wait = graph.add_event_wait_node(event, deps=[record])
        spare = graph.add_empty_node(deps=[wait])
        record.set_event(other_event)
        assert_type(record.params, Any)  # any node's record, read as its kind
        nested.set_child_graph(child)
        pitched.set_memcpy_3d_params(ahg.PitchedPtr(x, 256), ahg.PitchedPtr(host, 256), (256, 1, 1))
        to_symbol.set_memcpy_to_symbol_params(table, host, 256, 0)
        with graph.instantiate() as graph_exec:
            graph_exec.set_node_params(run, ahg.GraphNodeParams(ahg.NodeType.Kernel, run.params))
            graph_exec.set_memset_node_params(memset, x, 1, nbytes=256)
            graph_exec.set_memcpy_3d_node_params(
                pitched, ahg.PitchedPtr(x, 256), ahg.PitchedPtr(host, 256), (256, 1, 1)
            )
            graph_exec.set_memcpy_node_to_symbol(to_symbol, "user_surface.table", host)
            graph_exec.set_host_node_params(host_node, list[int]().append, [2])
            graph_exec.set_child_graph_node_params(nested, child)
            graph_exec.set_event_record_node_event(record, event)
            graph_exec.set_event_wait_node_event(wait, event)
            graph_exec.set_kernel_node_attribute(run, ahg.KernelNodeAttribute.Priority, 1)
            window = ahg.KernelNodeAttribute.AccessPolicyWindow
            assert raises(
                TypeError,
                lambda: graph_exec.set_kernel_node_attribute(run, window, "wide"),  # type: ignore[call-overload]
            )
            await (await graph_exec.launch(stream))
        spare.destroy()
    values = device.malloc(8 * 4)
    with ahg.Graph() as loop_graph, device.create_stream() as stream:
        handle = loop_graph.conditional_handle(default=1)
        _, (body,) = loop_graph.add_conditional_node(handle, ahg.ConditionalKind.While)
        body.add_kernel_node(halve_until_small, 1, 1, (values, handle))
        with loop_graph.instantiate() as graph_exec:
            await stream.memcpy(values, np.full(4, 100.0))
            await (await graph_exec.launch(stream))
            out = np.empty(4)
            await stream.memcpy(out, values)
            await stream.synchronize()
    assert (out < 1).all()
    device.free(values)
    device.free(x)


def user_objects_and_errors() -> None:
    """``ahg.UserObject`` and the error hierarchy keyed by ``ahg.ErrorCode``."""
    ran: list[str] = []
    owned = ahg.UserObject(ran.append, data="freed", initial_refcount=1)
    assert_type(owned.retain(2), None)
    assert_type(owned.release(2), bool)
    assert_type(owned.refcount, int)
    assert_type(owned.statistics(), ahg.UserObjectStatistics)
    owned.release()
    assert ran == ["freed"]
    error = ahg.HipError(ahg.ErrorCode.NotReady, "not yet")
    assert_type(error.code, ahg.ErrorCode)
    assert isinstance(error, ahg.NotReady)
    assert_type(ahg.HipError.from_code(ahg.ErrorCode.InvalidValue), ahg.HipError)
    assert_type(ahg.ErrorCode.StreamCaptureInvalidated.hip_name, str)
    caught: ahg.HipError | None = None
    try:
        raise ahg.StreamCaptureInvalidated("the capture was invalidated")
    except ahg.HipError as error:
        caught = error
    assert caught is not None
    assert caught.code is ahg.ErrorCode.StreamCaptureInvalidated


async def multi_device() -> None:
    """``set_device`` / ``current_device`` per task, peer access, the graph memory pool, and
    the README's pitched, symbol and peer copies."""
    first, second = ahg.configure_devices(2)
    ahg.set_device(1)
    assert_type(ahg.current_device(), ahg.Device)
    assert ahg.current_device() is second
    ahg.set_device(first)
    first.enable_peer_access(1)
    assert_type(first.can_access_peer(second), bool)
    first.disable_peer_access(second)
    used = first.graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemCurrent)
    assert_type(used, int)
    first.set_graph_mem_attribute(ahg.GraphMemAttribute.ReservedMemHigh, 0)
    assert_type(first.graph_mem_trim(), int)
    coeffs = ahg.device_symbol("user_surface.coeffs", dtype=np.float32, shape=(16,))
    assert_type(coeffs, ahg.DeviceSymbol)
    grid = ahg.device_symbol("user_surface.grid", dtype="int32", shape=[np.int64(4), 4])
    assert_type(grid.shape, tuple[int, ...])
    assert raises(TypeError, lambda: ahg.device_symbol("s", dtype=np.int8, shape="4"))  # type: ignore[arg-type]
    host = np.arange(16, dtype=np.float32)
    dev = first.malloc(256 * 4)
    with first.create_stream() as stream:
        await stream.memcpy_to_symbol(coeffs, host)
        await stream.memcpy_to_symbol("user_surface.coeffs", host, 64, 0)
        await stream.memcpy_from_symbol(host, coeffs)
        await stream.memcpy_2d(dev, 256, host, 16, 16, 4)
        await stream.memcpy_3d(ahg.PitchedPtr(dev, 256), ahg.PitchedPtr(host, 16), (16, 4, 1))
        await stream.synchronize()
        view = coeffs.view(first)
        assert_type(view, npt.NDArray[Any])
        assert (view == host).all()
        with ahg.Graph() as graph:
            node = graph.add_memcpy_3d_node(
                ahg.PitchedPtr(dev, 256), ahg.PitchedPtr(host, 16), (16, 4, 1)
            )
            assert_type(node.get_memcpy_params(), ahg.MemcpyParams | ahg.PitchedCopyParams)
            graph.add_memcpy_node_to_symbol(coeffs, host, deps=[node])
        other = second.malloc(64)
        await first.memcpy_peer(other, second, dev, first, 64)
        await first.memcpy_peer(other, 1, dev, 0, 64)
        assert raises(TypeError, lambda: stream.memcpy_peer_nowait(other, None, dev, 0, 64))  # type: ignore[arg-type]
        assert raises(ahg.InvalidSymbol, lambda: stream.memcpy_to_symbol_nowait(dev, host))  # type: ignore[arg-type]
        second.free(other)
    first.free(dev)


async def tracing(device: ahg.Device) -> None:
    """``with ahg.tracing() as trace`` and ``trace.save(path)``; a block also decorates."""
    x = device.malloc(4)
    with device.create_stream() as stream, ahg.tracing() as trace:
        assert_type(trace, ahg.Trace)
        await stream.launch_kernel(fill, 1, 1, (1, 0.0, x))
        await stream.synchronize()
    device.free(x)
    with scratch_dir() as where:
        assert_type(trace.save(where / "replay.trace.json"), Path)
        assert_type(trace.save(str(where / "again.trace.json")), Path)
        assert_type(trace.save(PathName(where / "named.trace.json")), Path)
    assert_type(trace.dumps(), str)
    assert_type(trace.to_chrome(), dict[str, Any])

    @ahg.tracing()
    async def traced() -> int:
        return 1

    assert_type(await traced(), int)


async def race_checks(device: ahg.Device) -> None:
    """``with ahg.race_check(on_race=...) as rc``, in the three modes the README names."""
    x = device.malloc(4)
    with device.create_stream() as stream:
        for mode in ("raise", "warn", "collect"):
            with ahg.race_check(on_race=mode) as check:
                assert_type(check, ahg.RaceCheck)
                await stream.memset(x, 0, 4)
                await stream.synchronize()
            assert_type(check.reports, list[ahg.RaceReport])
            assert_type(check.statistics(), ahg.RaceCheckStatistics)
            assert check.reports == []
    device.free(x)
    assert raises(ValueError, lambda: ahg.race_check(on_race="log"))  # type: ignore[arg-type]


def builder(rng: random.Random, buffer: ahg.DevicePtr) -> ahg.Graph:
    """A stress builder of one's own: bump a random cell of ``buffer``."""
    graph = ahg.Graph()
    graph.add_kernel_node(bump, 1, 1, (buffer + 4 * rng.randrange(testing.CELLS),))
    return graph


async def testing_kit() -> None:
    """``ahipgraph.testing``: fresh devices, fakes, faults, leak reports and the stress run."""
    with testing.fresh_devices(1) as devices:
        assert_type(devices, list[ahg.Device])
        (device,) = devices
        baseline = testing.snapshot()
        assert_type(baseline, testing.Snapshot)
        assert_type(testing.registry_statistics(), dict[str, ahg.RegistryStatistics])
        assert_type(testing.thread_ids_statistics(), ahg.ThreadIdsStatistics)
        with device.create_stream() as stream:
            held = testing.HeldKernel("held")
            assert_type(held.kernel, ahg.Kernel)
            assert_type(held.name, str)
            assert_type(held.runs, int)
            running = await held.launch(stream)
            assert_type(running, ahg.Completion)
            await held.started.wait()
            held.release()
            await running
            gate = testing.GatedHost("gate")
            await stream.launch_host_func(gate)
            await gate.started(0)
            assert_type(gate.runs, int)
            assert_type(gate.log, list[str] | None)
            gate.open(0)
            await stream.synchronize()
            with testing.fail_kernels(1, name="bump") as fault, device.create_stream() as other:
                assert_type(fault, testing.KernelFault)
                failed = await other.launch_kernel(bump, 1, 1, (ahg.NULL,))
                try:
                    await failed
                except ahg.LaunchFailure as error:
                    assert_type(error.code, ahg.ErrorCode)
            assert_type(fault.hits, int)
            assert fault.hits == 1
            assert_type(fault.remaining, int | None)
            assert_type(fault.name, str | None)
            with testing.fail_allocations(1, device=0) as allocation:
                assert_type(allocation, testing.AllocationFault)
                assert_type(allocation.device, int | None)
                assert_type(allocation.nbytes, int | None)
                assert raises(ahg.OutOfMemory, lambda: device.malloc(64))
            with testing.hang_kernels(0) as hang:
                assert_type(hang, testing.KernelHang)
            with ahg.Graph() as graph:
                graph.add_empty_node()
                graph_exec = graph.instantiate()
                with graph_exec, testing.exhaust_signal_sets(graph_exec) as held_sets:
                    assert_type(held_sets, testing.SignalSetsHeld)
                    assert_type(held_sets.held, int)
                    assert_type(held_sets.graph_exec, ahg.GraphExec)
            await stream.synchronize()
        turns = testing.Interleave("a", "b", ["a"])
        order: list[str] = []

        async def step(name: str, times: int) -> None:
            for _ in range(times):
                await turns.turn(name)
                order.append(name)
            turns.done(name)

        await asyncio.gather(step("a", 2), step("b", 1))
        assert order == ["a", "b", "a"]
        assert_type(turns.order, list[str])
        assert_type(turns.position, int)
        await testing.loop_turns()
        errors = testing.run_together(lambda: None, lambda: None)
        assert_type(errors, list[BaseException])
        report = testing.leak_report(baseline)
        assert_type(report, str | None)
        assert report is None, report

    @testing.fail_kernels(1, name="never")
    async def decorated() -> str:
        return "ran"

    assert_type(await decorated(), str)


def stress_run() -> None:
    report = testing.stress([builder, testing.random_graph], seed=1, ops=40, tasks=2, threads=1)
    assert_type(report, testing.StressReport)
    assert_type(report.summary(), str)
    assert report.launches > 0


def fixture_user(
    ahg_device: ahg.Device, ahg_devices: testing.DeviceFactory, ahg_race_check: ahg.RaceCheck
) -> None:
    """How a test written against the pytest plugin annotates its fixtures."""
    ptr = ahg_device.malloc(8)
    assert_type(ptr, ahg.DevicePtr)
    ahg_device.free(ptr)
    assert_type(ahg_race_check.reports, list[ahg.RaceReport])
    devices = ahg_devices(2, properties=ahg.DeviceProperties(hardware_queues=2))
    assert_type(devices, list[ahg.Device])
    assert_type(ahg_devices(), list[ahg.Device])
    assert raises(TypeError, lambda: ahg_devices(counts=2))  # type: ignore[call-arg]


def fresh_device_factory(
    count: int = 1, properties: ahg.DeviceProperties | Sequence[ahg.DeviceProperties] | None = None
) -> list[ahg.Device]:
    """A factory of one's own, as the ``ahg_devices`` fixture is one."""
    return ahg.configure_devices(count, properties)


async def main() -> None:
    with testing.fresh_devices(1) as (device,):
        devices_and_memory()
    with testing.fresh_devices(1) as (device,):
        await streams_and_events(device)
        await capture(device)
        graphs(device)
        await executables(device)
        await setters(device)
        user_objects_and_errors()
        await tracing(device)
        await race_checks(device)
    with testing.fresh_devices(2):
        await multi_device()
    await testing_kit()
    with testing.fresh_devices(1) as (device,), ahg.race_check(on_race="collect") as check:
        fixture_user(device, fresh_device_factory, check)


def run() -> None:
    assert_type(ahg.run(main), None)
    assert_type(ahg.run(main(), use_uvloop=False), None)
    with testing.fresh_devices(1):
        stress_run()  # it runs event loops of its own


if __name__ == "__main__":
    run()
