"""What an executable holds per node: kernel ops of a run share what they have in common."""

from __future__ import annotations

import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.device.ops import KernelOp
from ahipgraph.exec.arena import KernelArgArena
from ahipgraph.exec.compile import _SHARED_RUN_MIN
from ahipgraph.exec.snapshot import ExecGraph, ExecNode
from ahipgraph.runtime.params import KernelParams


@ahg.kernel
def add_to(t: ahg.Threads, x: ahg.Ptr[ahg.int64], value: ahg.int64) -> None:
    x[0] += value


@ahg.kernel
def scalar_only(t: ahg.Threads, value: ahg.int64) -> None:
    """No pointers: the op unpacks its scalars on every dispatch."""


def _kernel_ops(graph_exec: ahg.GraphExec) -> list[KernelOp]:
    return [
        op
        for ops in graph_exec._launcher.compiled.strand_ops
        for op in ops
        if isinstance(op, KernelOp)
    ]


@pytest.mark.asyncio
async def test_a_run_of_one_shape_shares_one_class_and_gives_eager_results(
    device: ahg.Device,
) -> None:
    x = device.malloc(8)
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(50):
        previous = [graph.add_kernel_node(add_to, 1, 1, (x, i), deps=previous)]
    graph_exec = graph.instantiate()
    ops = _kernel_ops(graph_exec)
    assert len(ops) == 50
    assert len({type(op) for op in ops}) == 1
    assert [op.offset for op in ops] == sorted({op.offset for op in ops})
    alone = KernelOp(add_to, ops[0].threads, ops[0].buffer, ops[0].offset, ops[0].cost_ns)
    assert sys.getsizeof(ops[0]) < sys.getsizeof(alone)
    assert repr(ops[0]) == repr(alone)
    assert ops[0].kernel is add_to
    assert ops[0].is_async is False
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    await (await graph_exec.launch(stream))
    assert int(device.view(x, np.int64, 1)[0]) == 2 * sum(range(50))
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)


@pytest.mark.asyncio
async def test_shared_ops_see_argument_writes_and_scalar_kernels_run(device: ahg.Device) -> None:
    x, y = device.malloc(8), device.malloc(8)
    graph = ahg.Graph()
    first = graph.add_kernel_node(add_to, 1, 1, (x, 1))
    graph.add_kernel_node(scalar_only, 1, 1, (7,), deps=[first])
    second = graph.add_kernel_node(add_to, 1, 1, (x, 2), deps=[first])
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    graph_exec.set_kernel_node_params(second, add_to, 1, 1, (y, 5))
    held = await graph_exec.launch(stream)  # enqueued with (y, 5) ...
    graph_exec.set_kernel_node_params(second, add_to, 1, 1, (y, 50))  # ... rewritten after
    await held
    await (await graph_exec.launch(stream))
    assert int(device.view(x, np.int64, 1)[0]) == 1 + 2 + 1 + 1
    assert int(device.view(y, np.int64, 1)[0]) == 5 + 50
    graph_exec.destroy()
    graph.destroy()
    stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
async def test_setters_from_two_threads_on_a_fresh_executable_both_take_effect(
    device: ahg.Device,
) -> None:
    """The copy's node records are made by the first setter: two threads making them at once
    must agree on one set of records, or one setter's change would be lost."""
    x, y = device.malloc(8), device.malloc(8)
    for _ in range(5):
        device.view(x, np.int64, 1)[0] = 0
        device.view(y, np.int64, 1)[0] = 0
        graph = ahg.Graph()
        nodes = [graph.add_kernel_node(add_to, 1, 1, (x, 1))]
        for _ in range(300):
            nodes.append(graph.add_kernel_node(add_to, 1, 1, (x, 1), deps=[nodes[-1]]))
        graph_exec = graph.instantiate()
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def set_one(
            node: ahg.GraphNode,
            value: int,
            start: threading.Barrier = start,
            graph_exec: ahg.GraphExec = graph_exec,
            errors: list[BaseException] = errors,
        ) -> None:
            try:
                start.wait()
                graph_exec.set_kernel_node_params(node, add_to, 1, 1, (y, value))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [
            threading.Thread(target=set_one, args=(nodes[10], 100)),
            threading.Thread(target=set_one, args=(nodes[200], 1000)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        stream = device.create_stream()
        await (await graph_exec.launch(stream))
        assert int(device.view(x, np.int64, 1)[0]) == 301 - 2
        assert int(device.view(y, np.int64, 1)[0]) == 1100
        graph_exec.destroy()
        graph.destroy()
        stream.destroy()
    device.free(x)
    device.free(y)


@pytest.mark.asyncio
async def test_a_graph_mixing_kernel_runs_and_other_nodes_replays_and_updates(
    device: ahg.Device,
) -> None:
    """Segments of plain kernels compile by index; a memcpy or host node among them makes the
    copy's records at instantiate: both kinds in one executable, then an update of every node."""
    x = device.malloc(8)
    out = np.zeros(1, dtype=np.int64)
    seen: list[int] = []

    def build(step: int) -> ahg.Graph:
        graph = ahg.Graph()
        root = graph.add_kernel_node(add_to, 1, 1, (x, step))
        branches = []
        for _ in range(3):
            previous = root
            for _ in range(5):
                previous = graph.add_kernel_node(add_to, 1, 1, (x, step), deps=[previous])
            branches.append(previous)
        copy = graph.add_memcpy_node(out, x, 8, deps=branches)
        graph.add_host_node(seen.append, (step,), deps=[copy])
        return graph

    graph = build(1)
    graph_exec = graph.instantiate()
    stream = device.create_stream()
    await (await graph_exec.launch(stream))
    assert int(out[0]) == 16
    new = build(2)
    graph_exec.update(new)
    await (await graph_exec.launch(stream))
    assert int(out[0]) == 16 + 32
    assert seen == [1, 2]
    graph_exec.destroy()
    graph.destroy()
    new.destroy()
    stream.destroy()
    device.free(x)


def test_the_copys_records_are_made_once_whoever_asks_first() -> None:
    """Readers on several threads (a setter, DOT output, a trace) asking for the records of a
    fresh copy at once all get the same records."""
    from ahipgraph.exec.snapshot import snapshot

    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(2000):
        previous = [graph.add_kernel_node(scalar_only, 1, 1, (i,), deps=previous)]
    for _ in range(3):
        with graph.lock:
            copy, order = snapshot(graph)
        assert not copy.made
        start = threading.Barrier(4)
        got: list[list[ExecNode]] = []

        def read(
            start: threading.Barrier = start,
            got: list[list[ExecNode]] = got,
            copy: ExecGraph = copy,
        ) -> None:
            start.wait()
            got.append(copy.nodes)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(got) == 4
        assert all(nodes is got[0] for nodes in got)
        assert copy.made
        assert [node.id for node in copy.nodes] == [node.id for node in order]
        assert copy.nodes[5].deps == (4,)
        assert copy.nodes[0].deps == ()
    graph.destroy()


def test_a_run_op_is_an_object_not_a_number(device: ahg.Device) -> None:
    """A run's op is an int underneath (its offset): it must not behave as one."""
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(_SHARED_RUN_MIN):  # a run long enough to share a class (shorter: objects)
        previous = [graph.add_kernel_node(scalar_only, 1, 1, (i,), deps=previous)]
    graph_exec = graph.instantiate()
    ops = _kernel_ops(graph_exec)
    first = ops[0]
    assert isinstance(first, int)  # a run op, not an op object
    assert isinstance(first, KernelOp)
    assert issubclass(type(first), KernelOp)
    assert not isinstance(first, ahg.Graph)
    assert first.offset == 0
    assert bool(first)  # offset 0, still true
    assert first != 0
    assert first == first  # identity is what is compared
    assert len(set(ops)) == len(ops)
    assert ops.index(ops[2]) == 2
    assert str(first) == repr(first) == f"<KernelOp scalar_only {first.threads!r}>"
    assert f"{first}" == repr(first)
    graph_exec.destroy()
    graph.destroy()


def test_a_run_op_on_other_memory_decodes_every_time_and_keeps_nothing(
    device: ahg.Device,
) -> None:
    """Decoded arguments are kept only for the memory the ops were made for."""
    x = device.malloc(8)
    arena = KernelArgArena(device, 4096)
    params = KernelParams.make(add_to, 1, 1, (x, 3))
    slot = arena.place(params.arg_bytes, add_to.layout.size)
    arena.flush()
    cost = params.cost_ns(device)
    home, other = object(), device.memory
    (on_other,) = KernelOp.make_shared(
        add_to, params.threads, slot.buffer, [slot.offset], cost, arena, home, {}
    )
    (at_home,) = KernelOp.make_shared(
        add_to, params.threads, slot.buffer, [slot.offset], cost, arena, other, {}
    )
    program = SimpleNamespace(memory=other, time=0)
    for _ in range(2):
        on_other.run(program)  # type: ignore[arg-type]
        at_home.run(program)  # type: ignore[arg-type]
    assert int(device.view(x, np.int64, 1)[0]) == 4 * 3
    assert program.time == 4 * cost
    kept_other = _kept(on_other)
    assert kept_other == {}
    assert list(_kept(at_home)) == [at_home]
    device.free(x)
    with pytest.raises(ahg.InvalidDevicePointer):
        at_home.run(program)  # type: ignore[arg-type]  # freed: decoded again, and refused
    assert _kept(at_home) == {}
    arena.close()


def _kept(op: KernelOp) -> dict[object, object]:
    """A run op's class's map of kept decoded arguments (a closure cell of its run)."""
    run = type(op).run
    cells = dict(zip(run.__code__.co_freevars, run.__closure__ or (), strict=True))
    kept: dict[object, object] = cells["kept"].cell_contents
    return kept


def test_a_uniform_runs_sizes_are_one_value_repeated(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 4096)
    try:
        arena.place(b"p" * 8, 8)  # the first chunk exists: one span for the run
        ((_, _, offsets, sizes),) = arena.place_spans([b"a" * 12] * 5, [12] * 5)
        assert isinstance(offsets, range)
        assert len(sizes) == 5
        assert list(sizes) == [12] * 5
        assert sizes[0] == sizes[-1] == 12
        assert sizes[1:3] == (12, 12)
        with pytest.raises(IndexError):
            sizes[5]
        assert 12 in sizes
        assert sys.getsizeof(sizes) < sys.getsizeof((12,) * 5)
    finally:
        arena.close()


@pytest.mark.parametrize("shape", ["chain", "roots", "diamonds", "joins"])
def test_the_copys_dependencies_are_the_graphs(shape: str) -> None:
    """A copy's dependency columns (runs of single dependencies between roots and joins, or
    node by node when joins are many) give every node the graph's dependencies."""
    from ahipgraph.exec.snapshot import snapshot

    graph = ahg.Graph()
    nodes: list[ahg.GraphNode] = []
    for i in range(40):
        if shape == "chain" or i == 0:
            deps = nodes[-1:]
        elif shape == "roots":
            deps = [] if i % 7 == 0 else nodes[-1:]
        elif shape == "diamonds":
            deps = nodes[-2:] if i % 5 == 0 else nodes[-1:]
        else:
            deps = nodes[-3:]
        nodes.append(graph.add_kernel_node(scalar_only, 1, 1, (i,), deps=deps))
    with graph.lock:
        copy, order = snapshot(graph)
    index = {node: i for i, node in enumerate(order)}
    expected = [tuple(index[dep] for dep in node.dependencies()) for node in order]
    assert [copy.deps_of(i) for i in range(len(copy))] == expected
    assert [node.deps for node in copy.nodes] == expected
    graph.destroy()
