"""Graph results equal eager results (DESIGN.md §5, invariant 5).

A graph is described by a small spec: nodes in topological order, each with its dependencies and
a kind (kernel, memcpy, memset, host, empty, child graph). Every writing node owns one buffer of
int64s. A node reads the outputs of its dependencies (an empty node forwards its dependencies'
outputs; a child graph's output is its last inner node's) and updates its own buffer with
``out = out * 3 + mul * sum(sources) + add``. The update is not idempotent and does not commute
with a late write to a source, so running a node twice, not at all, or before one of its
dependencies finished changes the result.

The same spec is then run three ways — as a graph replayed with ``exec.launch``, eagerly in index
order on one stream, and as a plain numpy reference — and all three must agree, on fixed shapes
(chains, diamonds, fork-joins, nested child graphs) and on random DAGs drawn by hypothesis.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ahipgraph as ahg

N = 8  # int64 elements per buffer
NBYTES = N * 8
MAX_KERNEL_SOURCES = 4


@ahg.kernel
def mix(t: ahg.Threads, n: ahg.int32, mul: ahg.int64, add: ahg.int64, a: ahg.Ptr[ahg.int64],
        b: ahg.Ptr[ahg.int64], c: ahg.Ptr[ahg.int64], d: ahg.Ptr[ahg.int64],
        out: ahg.Ptr[ahg.int64]) -> None:  # fmt: skip
    i = t.ids[t.ids < n]
    out[i] = out[i] * 3 + mul * (a[i] + b[i] + c[i] + d[i]) + add


def host_mix(device: ahg.Device, sources: tuple[ahg.DevicePtr, ...], out: ahg.DevicePtr,
             mul: int, add: int) -> None:  # fmt: skip
    """A host node's work: the same update as ``mix``, over any number of sources."""
    total = np.zeros(N, dtype=np.int64)
    for src in sources:
        total += device.view(src, np.int64, N)
    view = device.view(out, np.int64, N)
    view[:] = view * 3 + mul * total + add


@dataclass(frozen=True)
class Spec:
    """One node: its kind, dependencies (indices of earlier nodes), and its constants."""

    kind: str
    deps: tuple[int, ...] = ()
    mul: int = 1
    add: int = 0
    inner: tuple[Spec, ...] = ()  # a child graph's nodes


@dataclass
class Plan:
    """Buffers and constants for one spec: who writes where and what each node reads."""

    device: ahg.Device
    zero: ahg.DevicePtr
    buffers: list[ahg.DevicePtr] = field(default_factory=list)
    initial: list[np.ndarray] = field(default_factory=list)
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # host sources of H2D copies


@dataclass
class Resolved:
    """A spec node with its buffer and sources resolved."""

    spec: Spec
    out: int  # buffer index written (unused by empty and child nodes)
    sources: list[int]
    outputs: list[int]  # what dependents read
    inner: list[Resolved]


def resolve(plan: Plan, specs: tuple[Spec, ...], outer: list[int], rng: np.random.Generator,
            ) -> list[Resolved]:  # fmt: skip
    """Give every node a buffer and work out the buffers it reads."""
    nodes: list[Resolved] = []
    for spec in specs:
        sources: list[int] = []
        for dep in spec.deps:
            for buf in nodes[dep].outputs:
                if buf not in sources:
                    sources.append(buf)
        if not spec.deps:
            sources = list(outer)
        out = len(plan.buffers)
        plan.buffers.append(plan.device.malloc(NBYTES))
        plan.initial.append(rng.integers(-50, 50, N, dtype=np.int64))
        inner: list[Resolved] = []
        if spec.kind == "empty":
            outputs = sources
        elif spec.kind == "child":
            inner = resolve(plan, spec.inner, sources, rng)
            outputs = inner[-1].outputs
        else:
            outputs = [out]
        if spec.kind == "memcpy" and not sources:
            plan.constants[out] = rng.integers(-50, 50, N, dtype=np.int64)
        nodes.append(Resolved(spec, out, sources, outputs, inner))
    return nodes


def kernel_args(plan: Plan, node: Resolved) -> tuple[Any, ...]:
    reads = [plan.buffers[s] for s in node.sources[:MAX_KERNEL_SOURCES]]
    reads += [plan.zero] * (MAX_KERNEL_SOURCES - len(reads))
    return (N, node.spec.mul, node.spec.add, *reads, plan.buffers[node.out])


def host_args(plan: Plan, node: Resolved) -> tuple[Any, ...]:
    sources = tuple(plan.buffers[s] for s in node.sources)
    return (plan.device, sources, plan.buffers[node.out], node.spec.mul, node.spec.add)


def memset_value(node: Resolved) -> int:
    return node.spec.add & 0xFF


def build_graph(plan: Plan, nodes: list[Resolved]) -> ahg.Graph:
    graph = ahg.Graph()
    handles: list[ahg.GraphNode] = []
    for node in nodes:
        deps = [handles[d] for d in node.spec.deps]
        kind, out = node.spec.kind, plan.buffers[node.out]
        if kind == "kernel":
            handle = graph.add_kernel_node(mix, 1, N, kernel_args(plan, node), deps=deps)
        elif kind == "host":
            handle = graph.add_host_node(host_mix, host_args(plan, node), deps=deps)
        elif kind == "memcpy" and node.sources:
            src = plan.buffers[node.sources[0]]
            handle = graph.add_memcpy_node(out, src, NBYTES, deps=deps)
        elif kind == "memcpy":
            handle = graph.add_memcpy_node(out, plan.constants[node.out], deps=deps)
        elif kind == "memset":
            handle = graph.add_memset_node(out, memset_value(node), NBYTES, deps=deps)
        elif kind == "empty":
            handle = graph.add_empty_node(deps=deps)
        else:
            child = build_graph(plan, node.inner)
            handle = graph.add_child_graph_node(child, deps=deps)
            child.destroy()  # the node embeds its own copy
        handles.append(handle)
    return graph


async def run_eager(stream: ahg.Stream, plan: Plan, nodes: list[Resolved]) -> None:
    """The same work as the graph, node by node in index order, on one stream."""
    for node in nodes:
        kind, out = node.spec.kind, plan.buffers[node.out]
        if kind == "kernel":
            await stream.launch_kernel(mix, 1, N, kernel_args(plan, node))
        elif kind == "host":
            await stream.launch_host_func(host_mix, *host_args(plan, node))
        elif kind == "memcpy" and node.sources:
            await stream.memcpy(out, plan.buffers[node.sources[0]], NBYTES)
        elif kind == "memcpy":
            await stream.memcpy(out, plan.constants[node.out])
        elif kind == "memset":
            await stream.memset(out, memset_value(node), NBYTES)
        elif kind == "child":
            await run_eager(stream, plan, node.inner)


def run_reference(plan: Plan, nodes: list[Resolved], data: list[np.ndarray]) -> None:
    """The expected result in numpy, node by node."""
    for node in nodes:
        kind, out = node.spec.kind, node.out
        if kind in ("kernel", "host"):
            read = node.sources[:MAX_KERNEL_SOURCES] if kind == "kernel" else node.sources
            total = np.zeros(N, dtype=np.int64)
            for src in read:
                total += data[src]
            data[out] = data[out] * 3 + node.spec.mul * total + node.spec.add
        elif kind == "memcpy" and node.sources:
            data[out] = data[node.sources[0]].copy()
        elif kind == "memcpy":
            data[out] = plan.constants[out].copy()
        elif kind == "memset":
            data[out] = np.full(NBYTES, memset_value(node), dtype=np.uint8).view(np.int64)
        elif kind == "child":
            run_reference(plan, node.inner, data)


async def reset(stream: ahg.Stream, plan: Plan) -> None:
    for buf, init in zip(plan.buffers, plan.initial, strict=True):
        await stream.memcpy(buf, init)


def snapshot(plan: Plan) -> list[np.ndarray]:
    return [plan.device.view(buf, np.int64, N).copy() for buf in plan.buffers]


async def check_graph_equals_eager(specs: tuple[Spec, ...], seed: int = 0, queues: int = 4) -> None:
    """Run ``specs`` as a graph (twice), eagerly and in numpy; all must agree; nothing leaks.

    The device is fresh, with ``queues`` hardware queues (the planner uses at most that many
    parallel streams).
    """
    ahg.configure_devices(1, ahg.DeviceProperties(hardware_queues=queues))
    device = ahg.get_device(0)
    baseline = device.memory.bytes_in_use
    stream = device.create_stream()
    plan = Plan(device, device.malloc(NBYTES))
    nodes = resolve(plan, specs, [], np.random.default_rng(seed))

    expected = [init.copy() for init in plan.initial]
    run_reference(plan, nodes, expected)

    await reset(stream, plan)
    await run_eager(stream, plan, nodes)
    await stream.synchronize()
    eager = snapshot(plan)

    graph = build_graph(plan, nodes)
    graph_exec = graph.instantiate()
    replays = []
    for _ in range(2):  # a replay starts from the same state and must give the same result
        await reset(stream, plan)  # stream order: the reset runs before the launch
        await graph_exec.launch(stream)
        await stream.synchronize()
        replays.append(snapshot(plan))

    try:
        for index, want in enumerate(expected):
            np.testing.assert_array_equal(eager[index], want, err_msg=f"eager, buffer {index}")
            for replay in replays:
                np.testing.assert_array_equal(replay[index], want, err_msg=f"graph, buffer {index}")
    finally:  # a disagreement fails the caller, and still gives everything back
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
        for buf in [plan.zero, *plan.buffers]:
            device.free(buf)
    assert device.memory.bytes_in_use == baseline


# -- fixed shapes ----------------------------------------------------------------------------


def chain(length: int, kind: str = "kernel") -> tuple[Spec, ...]:
    return tuple(Spec(kind, (i - 1,) if i else (), 2, i) for i in range(length))


SHAPES: dict[str, tuple[Spec, ...]] = {
    "single kernel": (Spec("kernel", (), 1, 5),),
    "chain of kernels": chain(6),
    "chain of every kind": (
        Spec("memcpy"),
        Spec("kernel", (0,), 2, 1),
        Spec("host", (1,), -1, 3),
        Spec("memcpy", (2,)),
        Spec("empty", (3,)),
        Spec("kernel", (4,), 3, -7),
        Spec("memset", (5,), add=9),
        Spec("kernel", (6,), 1, 1),
    ),
    "diamond": (
        Spec("kernel", (), 1, 1),
        Spec("kernel", (0,), 2, 0),
        Spec("kernel", (0,), 3, 0),
        Spec("kernel", (1, 2), 1, -1),
    ),
    "diamond with long uneven arms": (
        Spec("kernel"),
        Spec("kernel", (0,), 1, 1),
        Spec("kernel", (1,), 2, 2),
        Spec("kernel", (2,), 2, 3),
        Spec("kernel", (0,), -1, 4),
        Spec("kernel", (3, 4), 1, 5),
    ),
    "fork-join, six branches joined by a host node": (
        Spec("memcpy"),
        *[Spec("kernel", (0,), k + 1, k) for k in range(6)],
        Spec("host", tuple(range(1, 7)), 1, 0),
        Spec("kernel", (7,), 2, 2),
    ),
    "fork-join through empty nodes": (
        Spec("kernel", (), 1, 1),
        Spec("empty", (0,)),
        Spec("kernel", (1,), 2, 0),
        Spec("kernel", (1,), 3, 0),
        Spec("kernel", (1,), 5, 0),
        Spec("empty", (2, 3, 4)),
        Spec("kernel", (5,), 1, -3),
    ),
    "two independent roots and two leaves": (
        Spec("kernel", (), 1, 1),
        Spec("kernel", (), 2, 2),
        Spec("kernel", (0, 1), 1, 0),
        Spec("kernel", (0,), 3, 3),
        Spec("kernel", (1,), 5, 5),
    ),
    "child graph in a diamond": (
        Spec("kernel", (), 1, 1),
        Spec("child", (0,), inner=chain(3)),
        Spec("kernel", (0,), 2, 2),
        Spec("kernel", (1, 2), 1, 0),
    ),
    "nested child graphs": (
        Spec("memcpy"),
        Spec(
            "child",
            (0,),
            inner=(
                Spec("kernel", (), 2, 1),
                Spec("child", (0,), inner=(Spec("kernel", (), 3, 1), Spec("host", (0,), 1, 2))),
                Spec("kernel", (0,), 5, 0),
                Spec("kernel", (1, 2), 1, 1),
            ),
        ),
        Spec("child", (0,), inner=(Spec("memset", add=3), Spec("kernel", (0,), 1, 1))),
        Spec("kernel", (1, 2), 1, 0),
    ),
    "wide level over more parallel branches than streams": (
        Spec("kernel", (), 1, 1),
        *[Spec("kernel", (0,), k, k) for k in range(1, 10)],
        Spec("host", tuple(range(1, 10)), 1, 0),
    ),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("queues", [1, 2, 4])
@pytest.mark.parametrize("name", list(SHAPES))
async def test_fixed_shapes_give_eager_results(name: str, queues: int) -> None:
    await check_graph_equals_eager(SHAPES[name], queues=queues)


# -- random DAGs -----------------------------------------------------------------------------

LEAF_KINDS = ("kernel", "kernel", "memcpy", "memset", "host", "empty")


@st.composite
def dags(draw: st.DrawFn, max_nodes: int = 14, depth: int = 0) -> tuple[Spec, ...]:
    size = draw(st.integers(min_value=1, max_value=max_nodes))
    kinds = (*LEAF_KINDS, "child") if depth < 2 else LEAF_KINDS
    specs: list[Spec] = []
    for i in range(size):
        kind = draw(st.sampled_from(kinds))
        deps: tuple[int, ...] = ()
        if i:
            chosen = draw(st.sets(st.integers(0, i - 1), max_size=min(MAX_KERNEL_SOURCES, i)))
            deps = tuple(sorted(chosen))
        mul = draw(st.integers(-3, 3))
        add = draw(st.integers(-100, 100))
        inner = draw(dags(max_nodes=4, depth=depth + 1)) if kind == "child" else ()
        specs.append(Spec(kind, deps, mul, add, inner))
    return tuple(specs)


@pytest.mark.asyncio
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(specs=dags(), seed=st.integers(0, 2**16), queues=st.sampled_from([2, 4]))
async def test_random_dags_give_eager_results(
    specs: tuple[Spec, ...], seed: int, queues: int
) -> None:
    await check_graph_equals_eager(specs, seed, queues)


@pytest.mark.asyncio
async def test_the_check_notices_a_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness itself can fail: a reference that disagrees with the device is caught."""
    original = run_reference

    def off_by_one(plan: Plan, nodes: list[Resolved], data: list[np.ndarray]) -> None:
        original(plan, nodes, data)
        data[nodes[-1].out] += 1

    monkeypatch.setattr(sys.modules[__name__], "run_reference", off_by_one)
    with pytest.raises(AssertionError, match="eager, buffer 1"):
        await check_graph_equals_eager(chain(2))
