"""A sweep of bad input over every public entry point.

Each argument of each entry point in turn gets ``None``, a value of the wrong type, a bool, a
negative number, a huge number (2**64) and, for handles, a destroyed handle, while every other
argument stays valid. Each call must raise a :class:`HipError` (or ``TypeError`` /
``ValueError``, where Python convention wins) and leave everything as it was: the statistics of
the device, the graphs, the executable, the user object and every registry are compared before
and after. Some values are valid for some arguments (``None`` for an optional stream means the
null stream, ``True`` for a flag, ``-1`` for a fill value, ...); they are listed, with the
reason, in ``ACCEPTED``, and must then succeed. Calls run inside an event loop, as users make
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.graph_exec import EXECS
from ahipgraph.graph.graph import GRAPHS
from ahipgraph.graph.memnodes import RESERVATIONS
from ahipgraph.graph.node import NODES
from ahipgraph.lifetime.user_object import USER_OBJECTS
from ahipgraph.runtime.event import EVENTS
from ahipgraph.runtime.stream import STREAMS

SWEEP_SYMBOL = ahg.device_symbol("test_bad_input.symbol", 64)


@ahg.kernel
def put(t: ahg.Threads, value: ahg.int64, index: ahg.int32, out: ahg.Ptr[ahg.int64]) -> None:
    out[index] = value


def noop(*args: Any) -> None:
    return None


class World:
    """One of everything, valid, plus a destroyed twin of every handle."""

    def __init__(self) -> None:
        self.device = ahg.get_device(0)
        device = self.device
        # HIP's null stream exists from the start; here it is made on first use, which a
        # failed first call (device.memcpy) may be: make it now, as part of the world.
        device.null_stream  # noqa: B018
        self.stream = device.create_stream()
        self.event = device.create_event()

        async def record() -> None:
            await self.stream.record_event(self.event)
            await self.stream.synchronize()

        asyncio.run(record())  # a completed record, so elapsed_time(event, event) is valid
        self.src = device.malloc(64)
        self.dst = device.malloc(64)
        self.host = np.zeros(64, dtype=np.uint8)
        self.child = ahg.Graph()
        self.child.add_empty_node()
        self.graph = ahg.Graph()
        graph = self.graph
        self.kernel_node = graph.add_kernel_node(put, 1, 1, (1, 0, self.dst))
        self.memcpy_node = graph.add_memcpy_node(self.dst, self.src, 64, deps=[self.kernel_node])
        self.memset_node = graph.add_memset_node(self.dst, 0, 16)
        self.host_node = graph.add_host_node(noop)
        self.child_node = graph.add_child_graph_node(self.child)
        self.record_node = graph.add_event_record_node(self.event)
        self.wait_node = graph.add_event_wait_node(self.event)
        self.empty_node = graph.add_empty_node()
        self.exec = graph.instantiate()
        self.clone = graph.clone()
        self.obj = ahg.UserObject(noop)
        self.mem_graph = ahg.Graph()
        self.alloc = self.mem_graph.add_mem_alloc_node(64).params.ptr
        self.freeable = device.malloc(64)  # what a valid free_async frees
        self.capture_stream = device.create_stream()
        self.capture_graph = ahg.Graph()
        self.capture_graph.add_empty_node()
        # Destroyed twins.
        gone_stream = device.create_stream()
        gone_stream.destroy()
        gone_event = device.create_event()
        gone_event.destroy()
        gone_graph = ahg.Graph()
        gone_graph.destroy()
        gone_node = graph.add_empty_node()
        gone_node.destroy()
        gone_exec = graph.instantiate()
        gone_exec.destroy()
        gone_obj = ahg.UserObject(noop)
        gone_obj.release()
        gone_ptr = device.malloc(64)
        device.free(gone_ptr)
        self.destroyed: dict[str, Any] = {
            "stream": gone_stream,
            "event": gone_event,
            "graph": gone_graph,
            "node": gone_node,
            "exec": gone_exec,
            "obj": gone_obj,
            "ptr": gone_ptr,
        }

    def capturing(self) -> ahg.Stream:
        """The world's capture stream, capturing one kernel node (RELAXED: any task may end
        it). Made on demand: a capture in progress makes other calls unsafe."""
        stream = self.capture_stream
        if stream.is_capturing() is ahg.CaptureStatus.NONE:
            stream.begin_capture(ahg.CaptureMode.RELAXED)
            stream.launch_kernel_nowait(put, 1, 1, (1, 0, self.dst))
        return stream

    def captured_node(self) -> ahg.GraphNode:
        return self.capturing().capture_info().dependencies[0]

    def close(self) -> None:
        """Destroy and free everything the world made (the sweep's calls may have freed some)."""
        if self.capture_stream.is_capturing() is not ahg.CaptureStatus.NONE:
            with contextlib.suppress(ahg.HipError):
                captured = self.capture_stream.end_capture()
                if captured is not self.capture_graph:
                    captured.destroy()
        asyncio.run(self.device.synchronize())
        for handle in (self.capture_graph, self.capture_stream):
            if handle.alive:
                handle.destroy()
        with contextlib.suppress(ahg.HipError):
            self.device.free(self.freeable)
        for handle in (self.exec, self.graph, self.clone, self.child, self.mem_graph):
            if handle.alive:
                handle.destroy()
        for handle in (self.stream, self.event):
            if handle.alive:
                handle.destroy()
        if self.obj.statistics().refcount > 0:
            self.obj.release(self.obj.statistics().refcount)
        for ptr in (self.src, self.dst):
            with contextlib.suppress(ahg.HipError):
                self.device.free(ptr)

    def state(self) -> tuple[Any, ...]:
        registries = tuple(r.statistics() for r in (GRAPHS, NODES, EXECS, STREAMS, EVENTS))
        return (
            ahg.device_count(),
            self.device.statistics(),
            self.stream.statistics(),
            self.graph.statistics(),
            self.clone.statistics(),
            self.mem_graph.statistics(),
            self.exec.statistics(),
            self.obj.statistics(),
            registries,
            USER_OBJECTS.statistics(),
            len(RESERVATIONS),
            self.host.tobytes(),
            self.event.signal,
            self.capture_stream.statistics(),
            self.capture_stream.is_capturing(),
            self.capture_graph.statistics(),
        )


@dataclass(frozen=True)
class Entry:
    """An entry point: how to get it from a world, its valid arguments, and their kinds.

    ``kinds`` names, per argument, which destroyed handle stands in for it ("" for none).
    """

    call: Callable[[World], Callable[..., Any]]
    args: Callable[[World], dict[str, Any]]
    kinds: dict[str, str]


def entry(
    call: Callable[[World], Callable[..., Any]],
    valid: Callable[[World], dict[str, Any]],
    /,
    **kinds: str,
) -> Entry:
    return Entry(call, valid, kinds)


ENTRIES: dict[str, Entry] = {
    # module functions
    "get_device": entry(lambda w: ahg.get_device, lambda w: {"ordinal": 0}, ordinal=""),
    "configure_devices": entry(
        lambda w: ahg.configure_devices,
        lambda w: {"count": 1, "properties": ahg.DeviceProperties()},
        count="",
        properties="",
    ),
    "elapsed_time": entry(
        lambda w: ahg.elapsed_time,
        lambda w: {"start": w.event, "end": w.event},
        start="event",
        end="event",
    ),
    # devices
    "device.malloc": entry(lambda w: w.device.malloc, lambda w: {"nbytes": 8}, nbytes=""),
    "device.free": entry(lambda w: w.device.free, lambda w: {"ptr": w.src}, ptr="ptr"),
    "device.view": entry(
        lambda w: w.device.view,
        lambda w: {"ptr": w.src, "dtype": np.uint8, "count": 8},
        ptr="ptr",
        dtype="",
        count="",
    ),
    "device.create_stream": entry(
        lambda w: w.device.create_stream,
        lambda w: {"priority": 0, "non_blocking": False},
        priority="",
        non_blocking="",
    ),
    "device.create_event": entry(
        lambda w: w.device.create_event,
        lambda w: {"disable_timing": False, "blocking_sync": False},
        disable_timing="",
        blocking_sync="",
    ),
    # streams
    "stream.launch_kernel": entry(
        lambda w: w.stream.launch_kernel,
        lambda w: {"kernel": put, "grid": 1, "block": 1, "args": (1, 0, w.dst), "shared_mem": 0},
        kernel="",
        grid="",
        block="",
        args="",
        shared_mem="",
    ),
    "stream.memcpy": entry(
        lambda w: w.stream.memcpy,
        lambda w: {"dst": w.dst, "src": w.src, "nbytes": 8, "kind": ahg.CopyKind.DeviceToDevice},
        dst="ptr",
        src="ptr",
        nbytes="",
        kind="",
    ),
    "stream.memset": entry(
        lambda w: w.stream.memset,
        lambda w: {"dst": w.dst, "value": 1, "count": 4, "element_size": 4},
        dst="ptr",
        value="",
        count="",
        element_size="",
    ),
    "stream.launch_host_func": entry(
        lambda w: w.stream.launch_host_func, lambda w: {"fn": noop}, fn=""
    ),
    "stream.record_event": entry(
        lambda w: w.stream.record_event, lambda w: {"event": w.event}, event="event"
    ),
    "stream.wait_event": entry(
        lambda w: w.stream.wait_event, lambda w: {"event": w.event}, event="event"
    ),
    # graphs
    "graph.add_kernel_node": entry(
        lambda w: w.graph.add_kernel_node,
        lambda w: {
            "kernel": put,
            "grid": 1,
            "block": 1,
            "args": (1, 0, w.dst),
            "shared_mem": 0,
            "priority": 0,
            "deps": [w.empty_node],
        },
        kernel="",
        grid="",
        block="",
        args="",
        shared_mem="",
        priority="",
        deps="node",
    ),
    "graph.add_memcpy_node": entry(
        lambda w: w.graph.add_memcpy_node,
        lambda w: {"dst": w.host, "src": w.src, "nbytes": 8, "kind": ahg.CopyKind.DeviceToHost},
        dst="ptr",
        src="ptr",
        nbytes="",
        kind="",
    ),
    "graph.add_memset_node": entry(
        lambda w: w.graph.add_memset_node,
        lambda w: {
            "dst": w.dst,
            "value": 1,
            "width": 4,
            "element_size": 2,
            "height": 2,
            "pitch": 16,
        },
        dst="ptr",
        value="",
        width="",
        element_size="",
        height="",
        pitch="",
    ),
    "graph.add_host_node": entry(
        lambda w: w.graph.add_host_node, lambda w: {"fn": noop, "args": (1,)}, fn="", args=""
    ),
    "graph.add_child_graph_node": entry(
        lambda w: w.graph.add_child_graph_node, lambda w: {"child": w.child}, child="graph"
    ),
    "graph.add_empty_node": entry(
        lambda w: w.graph.add_empty_node, lambda w: {"deps": [w.empty_node]}, deps="node"
    ),
    "graph.add_event_record_node": entry(
        lambda w: w.graph.add_event_record_node, lambda w: {"event": w.event}, event="event"
    ),
    "graph.add_event_wait_node": entry(
        lambda w: w.graph.add_event_wait_node, lambda w: {"event": w.event}, event="event"
    ),
    "graph.add_mem_alloc_node": entry(
        lambda w: w.mem_graph.add_mem_alloc_node,
        lambda w: {"nbytes": 64, "device": 0},
        nbytes="",
        device="",
    ),
    "graph.add_mem_free_node": entry(
        lambda w: w.mem_graph.add_mem_free_node, lambda w: {"ptr": w.alloc}, ptr="ptr"
    ),
    "graph.add_dependencies": entry(
        lambda w: w.graph.add_dependencies,
        lambda w: {"from_nodes": [w.empty_node], "to_nodes": [w.host_node]},
        from_nodes="node",
        to_nodes="node",
    ),
    "graph.remove_dependencies": entry(
        lambda w: w.graph.remove_dependencies,
        lambda w: {"from_nodes": [w.kernel_node], "to_nodes": [w.memcpy_node]},
        from_nodes="node",
        to_nodes="node",
    ),
    "graph.find_in_clone": entry(
        lambda w: w.clone.find_in_clone, lambda w: {"node": w.kernel_node}, node="node"
    ),
    "graph.retain_user_object": entry(
        lambda w: w.graph.retain_user_object,
        lambda w: {"obj": w.obj, "count": 1, "move": False},
        obj="obj",
        count="",
        move="",
    ),
    "graph.release_user_object": entry(
        lambda w: w.graph.release_user_object,
        lambda w: {"obj": w.obj, "count": 1},
        obj="obj",
        count="",
    ),
    "graph.instantiate": entry(
        lambda w: w.graph.instantiate,
        lambda w: {"flags": 0, "device": w.device, "signal_sets": 2, "arena_headroom": 64},
        flags="",
        device="",
        signal_sets="",
        arena_headroom="",
    ),
    "graph.to_dot": entry(lambda w: w.graph.to_dot, lambda w: {"flags": 0}, flags=""),
    "graph.debug_dot_print": entry(
        lambda w: w.graph.debug_dot_print,
        lambda w: {"path": "/dev/null", "flags": 0},
        path="",
        flags="",
    ),
    # nodes
    "node.set_kernel_params": entry(
        lambda w: w.kernel_node.set_kernel_params,
        lambda w: {"kernel": put, "grid": 1, "block": 1, "args": (2, 0, w.dst), "priority": 0},
        kernel="",
        grid="",
        block="",
        args="",
        priority="",
    ),
    "node.set_memcpy_params": entry(
        lambda w: w.memcpy_node.set_memcpy_params,
        lambda w: {"dst": w.dst, "src": w.src, "nbytes": 8, "kind": ahg.CopyKind.DeviceToDevice},
        dst="ptr",
        src="ptr",
        nbytes="",
        kind="",
    ),
    "node.set_memset_params": entry(
        lambda w: w.memset_node.set_memset_params,
        lambda w: {"dst": w.dst, "value": 1, "width": 4, "element_size": 1},
        dst="ptr",
        value="",
        width="",
        element_size="",
    ),
    "node.set_host_params": entry(
        lambda w: w.host_node.set_host_params, lambda w: {"fn": noop, "args": ()}, fn="", args=""
    ),
    "node.set_event": entry(
        lambda w: w.record_node.set_event, lambda w: {"event": w.event}, event="event"
    ),
    "node.set_child_graph": entry(
        lambda w: w.child_node.set_child_graph, lambda w: {"graph": w.child}, graph="graph"
    ),
    "node.set_params": entry(
        lambda w: w.memset_node.set_params,
        lambda w: {"params": w.memset_node.params},
        params="",
    ),
    # executables
    "exec.launch": entry(lambda w: w.exec.launch, lambda w: {"stream": w.stream}, stream="stream"),
    "exec.launch_nowait": entry(
        lambda w: w.exec.launch_nowait, lambda w: {"stream": w.stream}, stream="stream"
    ),
    "exec.upload": entry(lambda w: w.exec.upload, lambda w: {"stream": w.stream}, stream="stream"),
    "exec.update": entry(lambda w: w.exec.update, lambda w: {"graph": w.clone}, graph="graph"),
    "exec.set_kernel_node_params": entry(
        lambda w: w.exec.set_kernel_node_params,
        lambda w: {
            "node": w.kernel_node,
            "kernel": put,
            "grid": 1,
            "block": 1,
            "args": (3, 0, w.dst),
            "shared_mem": 0,
        },
        node="node",
        kernel="",
        grid="",
        block="",
        args="",
        shared_mem="",
    ),
    # the stream and device surface
    "set_device": entry(lambda w: ahg.set_device, lambda w: {"device": 0}, device=""),
    "stream.memcpy_2d": entry(
        lambda w: w.stream.memcpy_2d,
        lambda w: {
            "dst": w.dst,
            "dst_pitch": 16,
            "src": w.src,
            "src_pitch": 16,
            "width": 8,
            "height": 2,
            "kind": None,
        },
        dst="ptr",
        dst_pitch="",
        src="ptr",
        src_pitch="",
        width="",
        height="",
        kind="",
    ),
    "stream.memcpy_3d": entry(
        lambda w: w.stream.memcpy_3d,
        lambda w: {
            "dst": ahg.PitchedPtr(w.dst, 16),
            "src": ahg.PitchedPtr(w.src, 16),
            "extent": (8, 2, 1),
            "dst_pos": (0, 0, 0),
            "src_pos": (0, 0, 0),
        },
        dst="",
        src="",
        extent="",
        dst_pos="",
        src_pos="",
    ),
    "stream.memcpy_to_symbol": entry(
        lambda w: w.stream.memcpy_to_symbol,
        lambda w: {"symbol": SWEEP_SYMBOL, "src": w.src, "nbytes": 8, "offset": 0},
        symbol="",
        src="ptr",
        nbytes="",
        offset="",
    ),
    "stream.memcpy_from_symbol": entry(
        lambda w: w.stream.memcpy_from_symbol,
        lambda w: {"dst": w.host, "symbol": SWEEP_SYMBOL, "nbytes": 8, "offset": 0},
        dst="",
        symbol="",
        nbytes="",
        offset="",
    ),
    "stream.wait_value_32": entry(
        lambda w: w.stream.wait_value_32,
        lambda w: {"ptr": w.dst, "value": 0, "flags": ahg.StreamWaitFlag.GEQ, "mask": 1},
        ptr="ptr",
        value="",
        flags="",
        mask="",
    ),
    "stream.write_value_64": entry(
        lambda w: w.stream.write_value_64,
        lambda w: {"ptr": w.dst, "value": 0, "flags": 0},
        ptr="ptr",
        value="",
        flags="",
    ),
    "graph.add_memcpy_3d_node": entry(
        lambda w: w.graph.add_memcpy_3d_node,
        lambda w: {
            "dst": ahg.PitchedPtr(w.dst, 16),
            "src": ahg.PitchedPtr(w.src, 16),
            "extent": (8, 2, 1),
            "kind": None,
        },
        dst="",
        src="",
        extent="",
        kind="",
    ),
    "graph.add_memcpy_node_to_symbol": entry(
        lambda w: w.graph.add_memcpy_node_to_symbol,
        lambda w: {"symbol": SWEEP_SYMBOL, "src": w.host, "nbytes": 8, "offset": 0},
        symbol="",
        src="",
        nbytes="",
        offset="",
    ),
    "exec.set_memcpy_3d_node_params": entry(
        lambda w: w.exec.set_memcpy_3d_node_params,
        lambda w: {
            "node": w.memcpy_node,
            "dst": ahg.PitchedPtr(w.dst, 16),
            "src": ahg.PitchedPtr(w.src, 16),
            "extent": (8, 2, 1),
        },
        node="node",
        dst="",
        src="",
        extent="",
    ),
    "device.per_thread_stream": entry(lambda w: w.device.per_thread_stream, lambda w: {}),
    "exec.set_memcpy_node_params": entry(
        lambda w: w.exec.set_memcpy_node_params,
        lambda w: {
            "node": w.memcpy_node,
            "dst": w.dst,
            "src": w.src,
            "nbytes": 8,
            "kind": ahg.CopyKind.DeviceToDevice,
        },
        node="node",
        dst="ptr",
        src="ptr",
        nbytes="",
        kind="",
    ),
    "exec.set_memset_node_params": entry(
        lambda w: w.exec.set_memset_node_params,
        lambda w: {"node": w.memset_node, "dst": w.dst, "value": 2, "width": 16},
        node="node",
        dst="ptr",
        value="",
        width="",
    ),
    "exec.set_host_node_params": entry(
        lambda w: w.exec.set_host_node_params,
        lambda w: {"node": w.host_node, "fn": noop, "args": ()},
        node="node",
        fn="",
        args="",
    ),
    "exec.set_event_record_node_event": entry(
        lambda w: w.exec.set_event_record_node_event,
        lambda w: {"node": w.record_node, "event": w.event},
        node="node",
        event="event",
    ),
    "exec.set_event_wait_node_event": entry(
        lambda w: w.exec.set_event_wait_node_event,
        lambda w: {"node": w.wait_node, "event": w.event},
        node="node",
        event="event",
    ),
    "exec.set_child_graph_node_params": entry(
        lambda w: w.exec.set_child_graph_node_params,
        lambda w: {"node": w.child_node, "child": w.child},
        node="node",
        child="graph",
    ),
    "exec.set_node_enabled": entry(
        lambda w: w.exec.set_node_enabled,
        lambda w: {"node": w.kernel_node, "enabled": True},
        node="node",
        enabled="",
    ),
    "exec.node_enabled": entry(
        lambda w: w.exec.node_enabled, lambda w: {"node": w.kernel_node}, node="node"
    ),
    # user objects
    "UserObject": entry(
        lambda w: ahg.UserObject,
        lambda w: {"destructor": noop, "initial_refcount": 1},
        destructor="",
        initial_refcount="",
    ),
    "user_object.retain": entry(lambda w: w.obj.retain, lambda w: {"count": 1}, count=""),
    "user_object.release": entry(lambda w: w.obj.release, lambda w: {"count": 1}, count=""),
}


async def _captured(scope: ahg.CaptureScope) -> ahg.Graph | None:
    """Run ``async with scope:`` with an empty body: how ``stream.capture(mode)`` is used."""
    async with scope:
        pass
    return scope.graph


# The ``*_nowait`` twins take the arguments of their waiting enqueue.
NOWAIT = (
    "stream.launch_kernel",
    "stream.memcpy",
    "stream.memset",
    "stream.launch_host_func",
    "stream.record_event",
    "stream.wait_event",
)
for _name in NOWAIT:
    _spec = ENTRIES[_name]
    _method = _name.split(".")[1] + "_nowait"
    ENTRIES[_name + "_nowait"] = Entry(
        (lambda method: lambda w: getattr(w.stream, method))(_method), _spec.args, _spec.kinds
    )

ENTRIES.update(
    {
        # stream-ordered memory
        "stream.malloc_async": entry(
            lambda w: w.stream.malloc_async, lambda w: {"nbytes": 8}, nbytes=""
        ),
        "stream.free_async": entry(
            lambda w: w.stream.free_async, lambda w: {"ptr": w.freeable}, ptr="ptr"
        ),
        "stream.free_async_nowait": entry(
            lambda w: w.stream.free_async_nowait, lambda w: {"ptr": w.freeable}, ptr="ptr"
        ),
        # capture
        "stream.begin_capture": entry(
            lambda w: w.capture_stream.begin_capture,
            lambda w: {"mode": ahg.CaptureMode.RELAXED},
            mode="",
        ),
        "stream.begin_capture_to_graph": entry(
            lambda w: w.capture_stream.begin_capture_to_graph,
            lambda w: {
                "graph": w.capture_graph,
                "deps": [w.capture_graph.nodes()[0]],
                "mode": ahg.CaptureMode.RELAXED,
            },
            graph="graph",
            deps="node",
            mode="",
        ),
        "stream.update_capture_dependencies": entry(
            lambda w: w.capturing().update_capture_dependencies,
            lambda w: {"nodes": [w.captured_node()], "flags": ahg.CaptureDependencies.SET},
            nodes="node",
            flags="",
        ),
        "stream.capture": entry(
            lambda w: lambda mode: _captured(w.capture_stream.capture(mode)),
            lambda w: {"mode": ahg.CaptureMode.RELAXED},
            mode="",
        ),
        "exchange_capture_mode": entry(
            lambda w: ahg.exchange_capture_mode,
            lambda w: {"mode": ahg.CaptureMode.GLOBAL},
            mode="",
        ),
        # devices
        "device.memcpy": entry(
            lambda w: w.device.memcpy,
            lambda w: {"dst": w.dst, "src": w.src, "nbytes": 8, "kind": None},
            dst="ptr",
            src="ptr",
            nbytes="",
            kind="",
        ),
        "device.memset": entry(
            lambda w: w.device.memset,
            lambda w: {"dst": w.dst, "value": 1, "nbytes": 8},
            dst="ptr",
            value="",
            nbytes="",
        ),
        "device.graph_mem_attribute": entry(
            lambda w: w.device.graph_mem_attribute,
            lambda w: {"attr": ahg.GraphMemAttribute.UsedMemCurrent},
            attr="",
        ),
        "device.set_graph_mem_attribute": entry(
            lambda w: w.device.set_graph_mem_attribute,
            lambda w: {"attr": ahg.GraphMemAttribute.UsedMemHigh, "value": 0},
            attr="",
            value="",
        ),
        "device.can_access_peer": entry(
            lambda w: w.device.can_access_peer, lambda w: {"peer": 0}, peer=""
        ),
        # host functions that declare the memory they touch
        "host_function": entry(
            lambda w: ahg.host_function,
            lambda w: {"fn": noop, "reads": [w.src], "writes": [(w.dst, 8)]},
            fn="",
            reads="",
            writes="",
        ),
    }
)

BAD: dict[str, Any] = {
    "none": None,
    "wrong_type": "bad",
    "bool": True,
    "negative": -1,
    "huge": 2**64,
}

# Values that are valid for an argument, and why.
ACCEPTED: dict[tuple[str, str, str], str] = {
    ("configure_devices", "properties", "none"): "default properties",
    ("device.free", "ptr", "none"): "hipFree(nullptr) is a no-op",
    ("stream.free_async", "ptr", "none"): "hipFreeAsync(nullptr) is a no-op",
    ("stream.free_async_nowait", "ptr", "none"): "hipFreeAsync(nullptr) is a no-op",
    ("device.view", "count", "none"): "no count: the view runs to the allocation's end",
    ("device.create_stream", "priority", "negative"): "-1 is the greatest priority",
    ("device.create_stream", "priority", "huge"): "HIP clamps a stream priority into range",
    ("device.create_stream", "non_blocking", "bool"): "a flag",
    ("device.create_event", "disable_timing", "bool"): "a flag",
    ("device.create_event", "blocking_sync", "bool"): "a flag",
    ("stream.memcpy", "kind", "none"): "the direction is inferred",
    ("stream.memset", "value", "negative"): "-1 fills with 0xFF",
    ("graph.add_kernel_node", "priority", "negative"): "lower is more urgent",
    ("node.set_kernel_params", "priority", "negative"): "lower is more urgent",
    ("graph.add_memcpy_node", "nbytes", "none"): "the host array's size",
    ("graph.add_memcpy_node", "kind", "none"): "the direction is inferred",
    ("node.set_memcpy_params", "kind", "none"): "the direction is inferred",
    ("exec.set_memcpy_node_params", "kind", "none"): "the node's own direction",
    ("graph.add_memset_node", "value", "negative"): "-1 fills with 0xFFFF",
    ("node.set_memset_params", "value", "negative"): "-1 fills with 0xFF",
    ("exec.set_memset_node_params", "value", "negative"): "-1 fills with 0xFF",
    ("graph.add_memset_node", "pitch", "none"): "rows packed back to back",
    ("graph.retain_user_object", "obj", "destroyed"): "HIP: an unknown object is a no-op",
    ("graph.retain_user_object", "move", "bool"): "a flag",
    ("graph.release_user_object", "obj", "destroyed"): "HIP: an unknown object is a no-op",
    ("graph.instantiate", "device", "none"): "the default device",
    ("get_device", "ordinal", "none"): "the calling task's current device",
    ("stream.memcpy_2d", "kind", "none"): "the direction is inferred",
    ("stream.memcpy_from_symbol", "nbytes", "none"): "the host array's size",
    ("graph.add_memcpy_node_to_symbol", "nbytes", "none"): "the host array's size",
    ("graph.add_memcpy_3d_node", "kind", "none"): "the direction is inferred",
    ("graph.add_mem_alloc_node", "device", "none"): "the calling task's current device",
    ("graph.to_dot", "flags", "negative"): "any flag value is accepted, as in HIP",
    ("graph.to_dot", "flags", "huge"): "any flag value is accepted, as in HIP",
    ("graph.debug_dot_print", "flags", "negative"): "any flag value is accepted, as in HIP",
    ("graph.debug_dot_print", "flags", "huge"): "any flag value is accepted, as in HIP",
    ("exec.launch", "stream", "none"): "the null stream",
    ("exec.launch_nowait", "stream", "none"): "the null stream",
    ("exec.upload", "stream", "none"): "the null stream",
    ("exec.set_node_enabled", "enabled", "bool"): "a flag",
    ("exec.set_node_enabled", "enabled", "negative"): "HIP: any non-zero value enables",
    ("exec.set_node_enabled", "enabled", "huge"): "HIP: any non-zero value enables",
}

ACCEPTED.update(
    {
        (name + "_nowait", arg, label): why
        for (name, arg, label), why in list(ACCEPTED.items())
        if name in NOWAIT
    }
)
ACCEPTED.update(
    {
        ("device.memcpy", "kind", "none"): "the direction is inferred",
        ("device.memset", "value", "negative"): "-1 fills with 0xFF",
    }
)

# Bad input another part of the suite covers (device address-space bounds).
ELSEWHERE: dict[tuple[str, str, str], str] = {}

# A string is a valid path: give path arguments another wrong type.
WRONG_TYPE: dict[str, Any] = {"path": object(), "fn": 42}


def cases() -> list[Any]:
    out = []
    for name, spec in ENTRIES.items():
        for arg, kind in spec.kinds.items():
            labels = list(BAD) + (["destroyed"] if kind else [])
            for label in labels:
                out.append(pytest.param(name, arg, label, id=f"{name}-{arg}-{label}"))
    return out


def release(result: Any) -> None:
    """Destroy or free what a valid call made (a stream, a graph, a node, an allocation...)."""
    if isinstance(result, ahg.DevicePtr):
        device = ahg.get_device(result.device)
        # ``malloc_async``'s pointer: the host frees it after the allocation is ordered before
        # it (the race checker of ``make race`` holds the suite to that).
        asyncio.run(device.synchronize())
        device.free(result)
    elif isinstance(result, ahg.UserObject):
        result.release(result.statistics().refcount)
    elif (
        isinstance(result, (ahg.Stream, ahg.Event, ahg.Graph, ahg.GraphExec))
        and result.alive
        and not (isinstance(result, ahg.Stream) and result.is_null)
    ):
        result.destroy()


def call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call ``fn`` from inside a running event loop, awaiting it if it is a coroutine."""

    async def inside_a_loop() -> Any:
        result = fn(**kwargs)
        if inspect.iscoroutine(result):
            result = await result
        return result

    return asyncio.run(inside_a_loop())


@pytest.mark.parametrize(("name", "arg", "label"), cases())
def test_bad_argument_is_refused_and_changes_nothing(name: str, arg: str, label: str) -> None:
    if (name, arg, label) in ELSEWHERE:
        pytest.xfail(ELSEWHERE[name, arg, label])
    world = World()
    spec = ENTRIES[name]
    fn = spec.call(world)
    kwargs = spec.args(world)
    if label == "destroyed":
        kwargs[arg] = world.destroyed[spec.kinds[arg]]
    elif label == "wrong_type":
        kwargs[arg] = WRONG_TYPE.get(arg, BAD[label])
    else:
        kwargs[arg] = BAD[label]
    if (name, arg, label) in ACCEPTED:
        release(call(fn, kwargs))  # valid on purpose (see ACCEPTED)
        world.close()
        return
    before = world.state()
    with pytest.raises((ahg.HipError, TypeError, ValueError)):
        call(fn, kwargs)
    assert world.state() == before
    world.close()


@pytest.mark.parametrize("name", list(ENTRIES))
def test_the_valid_call_of_each_swept_entry_point_succeeds(name: str) -> None:
    """Guards the sweep itself: every failure above comes from the one bad argument."""
    world = World()
    spec = ENTRIES[name]
    release(call(spec.call(world), spec.args(world)))
    world.close()


def test_every_accepted_value_names_a_swept_case() -> None:
    swept = {tuple(p.values) for p in cases()}
    assert set(ACCEPTED) <= swept
    assert set(ELSEWHERE) <= swept
