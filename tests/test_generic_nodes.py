"""Generic nodes: ``graph.add_node``, ``node.set_params`` and ``exec.set_node_params`` with HIP's
tagged parameter records, for every kind — same nodes, same checks, same results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.graph.params import EventParams, MemAllocParams, MemFreeParams
from ahipgraph.runtime.params import HostParams, KernelParams, MemcpyParams, MemsetParams
from cleanup import run_once

P = ahg.GraphNodeParams
T = ahg.NodeType
N = 8


@ahg.kernel
def scale(t: ahg.Threads, n: ahg.int32, k: ahg.int64, x: ahg.Ptr[ahg.int64]) -> None:
    i = t.ids[t.ids < n]
    x[i] = x[i] * k


def test_add_node_makes_the_node_the_specific_add_makes(device: ahg.Device) -> None:
    x = device.malloc(N * 8)
    host = np.arange(N, dtype=np.int64)
    event = device.create_event()
    child = ahg.Graph()
    child.add_empty_node()
    graph = ahg.Graph()
    kernel = KernelParams.make(scale, 1, N, (N, 2, x), priority=-1)
    made = {
        T.Kernel: graph.add_node(P(T.Kernel, kernel)),
        T.Memcpy: graph.add_node(P(T.Memcpy, MemcpyParams.make(x, host))),
        T.Memset: graph.add_node(P(T.Memset, MemsetParams.make(x, 0, N * 8))),
        T.Host: graph.add_node(P(T.Host, HostParams.make(print, ("hi",)))),
        T.Graph: graph.add_node(P(T.Graph, child)),
        T.Empty: graph.add_node(P(T.Empty)),
        T.EventRecord: graph.add_node(P(T.EventRecord, event)),
        T.WaitEvent: graph.add_node(P(T.WaitEvent, EventParams(event))),
    }
    for kind, node in made.items():
        assert node.type is kind
    assert made[T.Kernel].params == kernel
    assert made[T.Kernel].get_attribute(ahg.KernelNodeAttribute.Priority) == -1
    assert made[T.Memcpy].params.kind is ahg.CopyKind.HostToDevice
    assert made[T.Graph].params.graph is not child  # a copy, as add_child_graph_node
    assert made[T.EventRecord].params.event is event
    deps = graph.add_node(P(T.Empty), deps=[made[T.Kernel], made[T.Empty]])
    assert deps.dependencies() == [made[T.Kernel], made[T.Empty]]
    graph.destroy()
    child.destroy()
    event.destroy()
    device.free(x)


def test_add_node_memory_nodes(device: ahg.Device) -> None:
    graph = ahg.Graph()
    alloc = graph.add_node(P(T.MemAlloc, 256))
    ptr = alloc.params.ptr  # written back, as HIP writes dptr
    assert alloc.params.nbytes == 256
    alloc2 = graph.add_node(P(T.MemAlloc, MemAllocParams(ahg.NULL, 512, 0)))
    assert alloc2.params.nbytes == 512
    assert alloc2.params.ptr != ptr
    graph.add_node(P(T.MemFree, ptr), deps=[alloc])
    graph.add_node(P(T.MemFree, MemFreeParams(alloc2.params.ptr)), deps=[alloc2])
    with pytest.raises(ahg.InvalidValue, match="already has a memory-free node"):
        graph.add_node(P(T.MemFree, ptr))
    graph.destroy()
    assert device.memory.statistics().reservations == 0


BAD_KINDS: list[tuple[Any, type[Exception]]] = [
    (P(T.ExtSemasSignal), ahg.NotSupported),  # hipGraphAddNode's answer for these two
    (P(T.ExtSemasWait), ahg.NotSupported),
    (P(T.MemcpyFromSymbol), ahg.InvalidValue),
    (P(T.MemcpyToSymbol), ahg.InvalidValue),
    (P(14), ahg.InvalidValue),  # type: ignore[arg-type]
    (P(99), ahg.InvalidValue),  # type: ignore[arg-type]
    (P(-1), ahg.InvalidValue),  # type: ignore[arg-type]
    (P("Kernel"), ahg.InvalidValue),  # type: ignore[arg-type]
    (P(True), ahg.InvalidValue),  # type: ignore[arg-type]
    (P(T.Kernel, None), ahg.InvalidValue),  # a record of the wrong kind
    (P(T.Memcpy, 5), ahg.InvalidValue),
    (P(T.Empty, 5), ahg.InvalidValue),
    (P(T.Host, print), ahg.InvalidValue),
    (P(T.MemAlloc, 0), ahg.InvalidValue),  # the kind's own checks
    (P(T.MemAlloc, True), TypeError),
    (P(T.MemFree, None), ahg.InvalidValue),
    (P(T.Conditional, None), ahg.InvalidValue),
    (None, ahg.InvalidValue),
    (T.Empty, TypeError),
]


@pytest.mark.parametrize(("params", "error"), BAD_KINDS)
def test_bad_kind_or_record_is_refused_and_changes_nothing(
    device: ahg.Device, params: Any, error: type[Exception]
) -> None:
    graph = ahg.Graph()
    graph.add_empty_node()
    before = (graph.statistics(), device.memory.statistics())
    with pytest.raises(error):
        graph.add_node(params)
    assert (graph.statistics(), device.memory.statistics()) == before
    graph.destroy()


def test_node_set_params_takes_tagged_records(device: ahg.Device) -> None:
    x = device.malloc(N * 8)
    graph = ahg.Graph()
    node = graph.add_node(P(T.Memset, MemsetParams.make(x, 1, N * 8)))
    node.set_params(P(T.Memset, MemsetParams.make(x, 2, N)))
    assert (node.params.value, node.params.width) == (2, N)
    before = node.params
    with pytest.raises(ahg.InvalidValue, match="not a Kernel node"):
        node.set_params(P(T.Kernel, KernelParams.make(scale, 1, 1, (1, 1, x))))
    with pytest.raises(ahg.InvalidValue):
        node.set_params(P(T.ExtSemasWait))
    with pytest.raises(ahg.InvalidValue):
        node.set_params(P(T.Memset, 3))
    assert node.params == before
    empty = graph.add_node(P(T.Empty))
    with pytest.raises(ahg.InvalidValue):
        empty.set_params(P(T.Empty))
    graph.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_graph_from_add_node_equals_eager_and_numpy(device: ahg.Device) -> None:
    values = np.arange(N, dtype=np.int64) + 1
    host_in = values.copy()
    host_out = np.zeros(N, dtype=np.int64)
    eager_out = np.zeros(N, dtype=np.int64)
    x = device.malloc(N * 8)
    stream = device.create_stream()
    # eager
    await stream.memcpy(x, host_in)
    await stream.launch_kernel(scale, 1, N, (N, 3, x))
    await stream.memcpy(eager_out, x)
    await stream.synchronize()
    # graph of generic nodes
    graph = ahg.Graph()
    up = graph.add_node(P(T.Memcpy, MemcpyParams.make(x, host_in)))
    k = graph.add_node(P(T.Kernel, KernelParams.make(scale, 1, N, (N, 3, x))), deps=[up])
    down = graph.add_node(P(T.Memcpy, MemcpyParams.make(host_out, x)), deps=[k])
    graph_exec = graph.instantiate()
    await (await graph_exec.launch(stream))
    assert host_out.tolist() == eager_out.tolist() == (values * 3).tolist()
    # exec.set_node_params: a new kernel record, same kind
    graph_exec.set_node_params(k, P(T.Kernel, KernelParams.make(scale, 1, N, (N, 5, x))))
    await (await graph_exec.launch(stream))
    assert host_out.tolist() == (values * 5).tolist()
    assert down.type is T.Memcpy
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_exec_set_node_params_every_kind(device: ahg.Device) -> None:
    x = device.malloc(N * 8)
    host = np.zeros(N, dtype=np.int64)
    calls: list[str] = []
    e1, e2 = device.create_event(), device.create_event()
    child = ahg.Graph()
    child.add_memset_node(x, 1, N * 8)
    graph = ahg.Graph()
    fill = graph.add_memset_node(x, 0, N * 8)
    sub = graph.add_child_graph_node(child, deps=[fill])
    copy = graph.add_memcpy_node(host, x, deps=[sub])
    host_node = graph.add_host_node(calls.append, ("a",), deps=[copy])
    record = graph.add_event_record_node(e1, deps=[host_node])
    wait = graph.add_event_wait_node(e1, deps=[record])
    empty = graph.add_empty_node(deps=[wait])
    alloc = graph.add_mem_alloc_node(64, deps=[empty])
    free = graph.add_mem_free_node(alloc.params.ptr, deps=[alloc])
    graph_exec = graph.instantiate()

    new_child = ahg.Graph()
    new_child.add_memset_node(x, 7, N * 8)
    graph_exec.set_node_params(sub, P(T.Graph, new_child))
    graph_exec.set_node_params(host_node, P(T.Host, HostParams.make(calls.append, ("b",))))
    graph_exec.set_node_params(fill, P(T.Memset, MemsetParams.make(x, 0, N * 8)))
    graph_exec.set_node_params(copy, P(T.Memcpy, MemcpyParams.make(host, x)))
    graph_exec.set_node_params(record, P(T.EventRecord, e2))
    graph_exec.set_node_params(wait, P(T.WaitEvent, EventParams(e2)))
    await run_once(graph_exec, device)
    assert calls == ["b"]
    assert set(host.view(np.uint8).tolist()) == {7}
    assert e2.query()

    cases: list[tuple[ahg.GraphNode, Any, type[Exception]]] = [
        (fill, P(T.Memcpy, MemcpyParams.make(host, x)), ahg.InvalidValue),  # other kind
        (empty, P(T.Empty), ahg.InvalidValue),
        (alloc, P(T.MemAlloc, 64), ahg.NotSupported),
        (free, P(T.MemFree, alloc.params.ptr), ahg.NotSupported),
        (fill, P(99), ahg.InvalidValue),  # type: ignore[arg-type]
        (fill, P(T.Memset, "x"), ahg.InvalidValue),
        (fill, None, ahg.InvalidValue),
        (copy, P(T.Memcpy, MemcpyParams.make(x, host)), ahg.InvalidValue),  # direction
    ]
    stats = graph_exec.statistics()
    for node, params, error in cases:
        with pytest.raises(error):
            graph_exec.set_node_params(node, params)
    assert graph_exec.statistics() == stats
    graph_exec.destroy()
    with pytest.raises(ahg.InvalidValue):
        graph_exec.set_node_params(fill, P(T.Memset, MemsetParams.make(x, 0, 8)))
    for g in (graph, child, new_child):
        g.destroy()
    e1.destroy()
    e2.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_add_node_into_a_captured_graph_and_clone(device: ahg.Device) -> None:
    x = device.malloc(N * 8)
    host = np.zeros(N, dtype=np.int64)
    stream = device.create_stream()
    async with stream.capture() as capture:
        await stream.memset(x, 0, N * 8)
    graph = capture.graph
    (first,) = graph.nodes()
    graph.add_node(P(T.Memset, MemsetParams.make(x, 3, N * 8)), deps=[first])
    clone = graph.clone()
    clone_exec = clone.instantiate()
    await (await clone_exec.launch(stream))
    await stream.memcpy(host, x)
    await stream.synchronize()
    assert set(host.view(np.uint8).tolist()) == {3}
    clone_exec.destroy()
    clone.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
