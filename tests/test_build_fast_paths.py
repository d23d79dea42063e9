"""The per-node fast paths of capture, building and instantiate give what the general paths give.

Each fast path skips work only where the skipped work cannot change the result; these tests pin
that down: the same objects, the same errors, the same counts, and the fallbacks still taken.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

import ahipgraph as ahg
from ahipgraph.exec.arena import KernelArgArena
from ahipgraph.runtime.params import KernelParams


@ahg.kernel
def scale(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    for i in range(min(n, x.size)):
        x[i] *= 2


@ahg.kernel
def store(t: ahg.Threads, x: ahg.Ptr[ahg.int32], n: ahg.int32) -> None:
    x[0] = n


# -- KernelParams.make fills the frozen slots directly ---------------------------------------------


def test_kernel_params_made_fast_equal_the_dataclass_constructor(device: ahg.Device) -> None:
    x = device.malloc(64)
    try:
        made = KernelParams.make(scale, 2, 32, (x, 7), priority=-1, device=device)
        built = KernelParams(
            made.kernel, made.grid, made.block, made.args, 0, made.arg_bytes, made.threads, -1
        )
        assert made == built
        assert hash(made) == hash(built)
        assert made.args == (x, 7)
        assert made.shared_mem == 0
        assert made.priority == -1
        assert made.attributes == built.attributes
        assert dataclasses.replace(made, priority=0).priority == 0
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.priority = 0  # type: ignore[misc]
    finally:
        device.free(x)


def test_kernel_params_subclass_still_uses_its_own_constructor(device: ahg.Device) -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Tagged(KernelParams):
        tag: str = "t"

    made = Tagged.make(scale, 1, 1, (None, 1), device=device)
    assert type(made) is Tagged
    assert made.tag == "t"


# -- the arena's place(): allocate and write in one step ---------------------------------------


def test_place_bumps_and_writes_like_allocate_then_write(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 64)
    try:
        first = arena.place(b"\x01" * 12, 12)
        second = arena.place(b"\x02" * 12, 12)
        assert [(s.chunk, s.offset, s.size) for s in (first, second)] == [(0, 0, 12), (0, 16, 12)]
        assert bytes(second.buffer[16:28]) == b"\x02" * 12
        assert arena.writes == 2
        stats = arena.statistics()
        assert (stats.allocations, stats.live_slots, stats.chunks) == (2, 2, 1)
    finally:
        arena.close()


def test_place_falls_back_for_reuse_new_chunks_and_strict_mode(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 32)
    try:
        slot = arena.place(b"a" * 16, 16)
        arena.free(slot)
        again = arena.place(b"b" * 16, 16)  # a reclaimed slot of this size is reused
        assert again is slot
        assert bytes(slot.buffer[0:16]) == b"b" * 16
        grown = arena.place(b"c" * 24, 24)  # no room left: a new chunk
        assert grown.chunk == 1
        assert arena.statistics().reuses == 1
    finally:
        arena.close()
    strict = KernelArgArena(device, 64, strict=True)
    try:
        slot = strict.place(b"s" * 8, 8)
        assert not strict.is_flushed(slot)  # strict mode still tracks the write
        strict.flush()
        assert strict.is_flushed(slot)
    finally:
        strict.close()


def test_place_refuses_data_longer_than_the_slot_and_changes_nothing(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 64)
    try:
        arena.place(b"x" * 4, 4)
        before = arena.statistics()
        with pytest.raises(ahg.InvalidValue):
            arena.place(b"x" * 9, 8)
        assert arena.statistics() == before
        assert arena.writes == 1
    finally:
        arena.close()
    arena.close()
    with pytest.raises(ahg.InvalidValue):
        arena.place(b"x", 1)  # closed


# -- capture: one status check, a cached node type, a light CapturedWork -----------------------


@pytest.mark.asyncio
async def test_captured_kernel_work_is_reachable_and_still_refuses_waiting(
    device: ahg.Device,
) -> None:
    stream = device.create_stream()
    x = device.malloc(16)
    try:
        stream.begin_capture()
        work = await stream.launch_kernel(scale, 1, 1, (x, 4))
        copy = await stream.memcpy(x, x, 0)  # zero-sized: no node, and still succeeds
        assert copy.node is None
        assert work.node is not None
        assert work.node.type is ahg.NodeType.Kernel
        assert work.exception() is None
        assert work.start_ns is None
        assert work.end_ns is None
        with pytest.raises(ahg.StreamCaptureUnsupported):
            work.done()
        with pytest.raises(ahg.StreamCaptureInvalidated):
            await stream.launch_kernel(scale, 1, 1, (x, 4))  # the mistake invalidated it
        with pytest.raises(ahg.StreamCaptureInvalidated):
            stream.end_capture()
        assert stream.is_capturing() is ahg.CaptureStatus.NONE
    finally:
        device.free(x)
        stream.destroy()


@pytest.mark.asyncio
async def test_capture_of_a_chain_equals_the_eager_result(device: ahg.Device) -> None:
    import numpy as np

    stream = device.create_stream()
    x = device.malloc(16)
    try:
        await stream.memcpy(x, np.ones(4, np.float32))
        stream.begin_capture()
        for _ in range(3):
            await stream.launch_kernel(scale, 1, 1, (x, 4))
        graph = stream.end_capture()
        kinds = [node.type for node in graph.nodes()]
        assert kinds == [ahg.NodeType.Kernel] * 3
        assert [len(n.dependencies()) for n in graph.nodes()] == [0, 1, 1]
        with graph.instantiate() as exec_:
            await (await exec_.launch(stream))
        out = np.zeros(4, np.float32)
        await (await stream.memcpy(out, x))
        assert out.tolist() == [8.0] * 4
        graph.destroy()
    finally:
        device.free(x)
        stream.destroy()


# -- instantiate: the cached-pointer op sets its fields itself ------------------------------------


def test_cached_pointer_op_has_the_fields_a_plain_pointer_op_has(device: ahg.Device) -> None:
    from ahipgraph.device.ops import KernelOp

    x = device.malloc(16)
    arena = KernelArgArena(device, 64)
    try:
        params = KernelParams.make(scale, 1, 1, (x, 4), device=device)
        slot = arena.place(params.arg_bytes, scale.layout.size)
        plain = KernelOp.make(scale, params.threads, slot.buffer, slot.offset, 5)
        cached = KernelOp.make(scale, params.threads, slot.buffer, slot.offset, 5, arena)
        assert type(cached) is not type(plain)
        for name in ("cost_ns", "kernel", "body", "threads", "buffer", "offset", "is_async"):
            assert getattr(cached, name) == getattr(plain, name), name
        assert cached.decode == plain.decode
        assert cached.unpack == plain.unpack
    finally:
        arena.close()
        device.free(x)


def test_snapshot_keeps_dependency_order_for_joins_and_chains() -> None:
    from ahipgraph.exec.snapshot import snapshot

    graph = ahg.Graph()
    a = graph.add_empty_node()
    b = graph.add_empty_node()
    join = graph.add_empty_node(deps=[b, a])
    tail = graph.add_empty_node(deps=[join])
    copy, order = snapshot(graph)
    position = {node: i for i, node in enumerate(order)}
    by_id = {node.id: node for node in copy.nodes}
    assert by_id[join.id].deps == (position[b], position[a])
    assert by_id[tail.id].deps == (position[join],)
    assert by_id[a.id].deps == ()
    graph.destroy()


def test_snapshot_dependents_are_every_dependent_in_order() -> None:
    from ahipgraph.exec.snapshot import snapshot

    graph = ahg.Graph()
    root = graph.add_empty_node()
    left = graph.add_empty_node(deps=[root])
    right = graph.add_empty_node(deps=[root])
    join = graph.add_empty_node(deps=[left, right])
    copy, order = snapshot(graph)
    index = {node: i for i, node in enumerate(order)}
    assert copy.dependents[index[root]] == [index[left], index[right]]
    assert copy.dependents[index[left]] == [index[join]]
    assert copy.dependents[index[join]] == []
    assert all(type(d) is list for d in copy.dependents)
    graph.destroy()


def test_edges_keep_insertion_order_as_dependents_are_added() -> None:
    graph = ahg.Graph()
    root = graph.add_empty_node()
    seen_before = root.dependents()
    first = graph.add_empty_node(deps=[root])
    second = graph.add_empty_node(deps=(root,))
    join = graph.add_empty_node(deps=[second, first])
    graph.add_dependencies([root], [join])
    assert seen_before == []  # a query's result is a copy, never the node's own list
    assert root.dependents() == [first, second, join]
    assert join.dependencies() == [second, first, root]
    assert graph.edges() == [
        (root, first),
        (root, second),
        (root, join),
        (first, join),
        (second, join),
    ]
    assert graph.statistics().edges == 5
    graph.remove_dependencies([root], [first])
    assert root.dependents() == [second, join]
    assert first.dependencies() == []
    graph.destroy()


# -- Graph._attach fills a bare node's slots -------------------------------------------------------


def test_created_node_has_what_the_constructor_gives(device: ahg.Device) -> None:
    from ahipgraph.graph.node import NODES, GraphNode

    graph = ahg.Graph()
    try:
        first = graph.add_empty_node()
        made = graph.add_kernel_node(scale, 1, 1, (None, 0), deps=[first])
        assert type(made) is GraphNode
        assert made.id == first.id + 1  # ids still come from the one process-wide counter
        assert NODES.get(made.hid) is made
        assert made.alive
        assert made.graph is graph
        assert made.type is ahg.NodeType.Kernel
        assert made.dependencies() == [first]
        assert first.dependents() == [made]
        assert made.dependents() == []
        assert made.params.args == (None, 0)
        copy = graph.clone()  # a clone creates with the original's id
        assert [n.id for n in copy.nodes()] == [first.id, made.id]
        copy.destroy()
        with pytest.raises(TypeError, match="add_"):
            GraphNode(graph, ahg.NodeType.Empty, None)  # the public constructor still refuses
    finally:
        graph.destroy()
    assert not made.alive
    assert NODES.get(made.hid) is None


# -- KernelParams.make: the shape looked up inline, the result made from a draft -------------------


def test_made_params_are_plain_frozen_kernel_params_whatever_the_shape_path(
    device: ahg.Device,
) -> None:
    import numpy as np

    from ahipgraph.runtime.params import _KernelParamsDraft, _launch_shape

    assert _KernelParamsDraft.__slots__ == KernelParams.__slots__  # the layouts agree
    cached = KernelParams.make(scale, 3, 64, (None, 1), device=device)
    again = KernelParams.make(scale, 3, 64, (None, 2), device=device)
    general = KernelParams.make(scale, np.int64(3), 64, (None, 1), device=device)
    assert type(cached) is type(general) is KernelParams
    assert cached.threads is again.threads  # one shape, one Threads: the remembered entry
    assert cached == general  # a numpy grid takes the general path to the same value
    grid3, block3, threads = _launch_shape(device.properties, 3, 64, 0)
    assert (cached.grid, cached.block, cached.threads) == (grid3, block3, threads)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cached.args = ()  # type: ignore[misc]


def test_make_still_refuses_what_it_refused(device: ahg.Device) -> None:
    with pytest.raises(TypeError, match="priority must be an int"):
        KernelParams.make(scale, 1, 1, (None, 1), priority=True, device=device)
    with pytest.raises(TypeError, match="priority must be an int"):
        KernelParams.make(scale, 1, 1, (None, 1), priority=1.0, device=device)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not fit"):
        KernelParams.make(scale, 1, 1, (None, 1), priority=2**31, device=device)
    with pytest.raises(TypeError, match=r"@ahg\.kernel"):
        KernelParams.make(print, 1, 1, (), device=device)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidValue, match="null"):
        KernelParams.make(None, 1, 1, (), device=device)  # type: ignore[arg-type]
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(scale, 1, 10**9, (None, 1), device=device)  # never remembered
    with pytest.raises(ahg.InvalidConfiguration):
        KernelParams.make(scale, 1, 10**9, (None, 1), device=device)


# -- instantiate: a run of kernel nodes placed and compiled in one pass ----------------------------


def test_place_many_gives_what_place_gives_one_by_one(device: ahg.Device) -> None:
    datas = [b"a" * 12, b"", b"b" * 40, b"c" * 16, b"d" * 12]
    sizes = [12, 0, 40, 16, 12]
    one, many = KernelArgArena(device, 64), KernelArgArena(device, 64)
    try:
        for arena in (one, many):  # a reclaimed 16-byte slot: the fourth item reuses it
            arena.free(arena.place(b"z" * 16, 16))
        singly = [one.place(d, s) for d, s in zip(datas, sizes, strict=True)]
        together = many.place_many(datas, sizes)  # the 40 bytes need a new chunk too
        assert [(s.chunk, s.offset, s.size) for s in together] == [
            (s.chunk, s.offset, s.size) for s in singly
        ]
        assert (together[3].chunk, together[3].offset) == (0, 0)  # the reused slot
        assert many.statistics() == one.statistics()
        assert many.writes == one.writes
        for slot, data in zip(together, datas, strict=True):
            assert bytes(slot.buffer[slot.offset : slot.offset + len(data)]) == data
        before = many.statistics()
        with pytest.raises(ahg.InvalidValue, match="do not fit"):
            many.place_many([b"x" * 8, b"y" * 9], [8, 8])
        assert many.statistics().allocations == before.allocations + 1  # the first one only
    finally:
        one.close()
        many.close()


def test_place_many_in_strict_mode_takes_the_general_path(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 64, strict=True)
    try:
        slots = arena.place_many([b"a" * 4, b"b" * 4], [4, 4])
        assert [s.offset for s in slots] == [0, 16]
        assert not arena.is_flushed(slots[0])  # the strict bookkeeping was kept
        arena.flush()
        assert arena.is_flushed(slots[1])
    finally:
        arena.close()


@pytest.mark.parametrize("chunk", [4096, 48])  # a run in one chunk, or across three
@pytest.mark.parametrize("grids", [[1, 2, 2, 1], [1, 1, 1, 1]])  # shapes mixed, or one
def test_a_kernel_run_compiles_as_node_by_node(
    device: ahg.Device, grids: list[int], chunk: int
) -> None:
    from ahipgraph.exec.compile import _Builder
    from ahipgraph.exec.snapshot import snapshot

    x = device.malloc(64)
    graph = ahg.Graph()
    try:
        previous = graph.add_kernel_node(scale, 1, 32, (x, 1))
        for n, grid in enumerate(grids):
            previous = graph.add_kernel_node(scale, grid, 32, (x, n), deps=[previous])
        with graph.lock:
            copy, _ = snapshot(graph)
        results = []
        for bulk in (True, False):
            arena = KernelArgArena(device, chunk)
            builder = _Builder(device, arena, 1)
            ops: list = []
            if bulk:
                builder.emit_kernels(copy.nodes, 0, ops)
            else:
                for node in copy.nodes:
                    builder._emit_one(node, 0, ops)
            compiled = builder.compiled
            results.append(
                (
                    # a run of one shape shares a class (KernelOp.make_shared): compare the fields
                    [(op.kernel, op.threads, op.buffer, op.offset, op.cost_ns) for op in ops],
                    dict(compiled.locations),
                    {n: (s.chunk, s.offset, s.size) for n, s in compiled.arg_slots.items()},
                    arena.statistics(),
                )
            )
            arena.close()
        assert results[0] == results[1]
    finally:
        graph.destroy()
        device.free(x)


def test_dependent_counts_and_lazy_dependents_agree() -> None:
    from ahipgraph.exec.snapshot import snapshot

    graph = ahg.Graph()
    try:
        root = graph.add_empty_node()
        left = graph.add_empty_node(deps=[root])
        right = graph.add_empty_node(deps=[root])
        graph.add_empty_node(deps=[left, right])
        with graph.lock:
            copy, _ = snapshot(graph)
        assert copy._dependents is None  # instantiate never needs the lists
        counts = copy.dependent_counts()
        assert copy._dependents is None
        assert counts == [len(d) for d in copy.dependents] == [2, 1, 1, 0]
        assert copy.dependents is copy.dependents  # made once, kept
    finally:
        graph.destroy()


def instantiate_unverified(graph: ahg.Graph) -> ahg.GraphExec:
    """``graph.instantiate()`` without the suite's plan verifier (see ``tests/conftest.py``),
    which reads what a test of lazily built state wants to see unbuilt."""
    instantiate = ahg.Graph.instantiate
    if hasattr(instantiate, "verifies_plans"):
        instantiate = instantiate.__wrapped__  # type: ignore[attr-defined]
    return instantiate(graph)


def test_a_kernel_runs_locations_are_entered_on_first_use(device: ahg.Device) -> None:
    x = device.malloc(64)
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for n in range(5):
        previous = (graph.add_kernel_node(scale, 1, 1, (x, n), deps=previous),)
    exec_ = instantiate_unverified(graph)  # the suite's plan verifier reads the locations
    try:
        compiled = exec_._compiled
        assert compiled._runs  # nothing entered yet
        assert not compiled._locations
        located = compiled.locations
        assert compiled._runs == []
        assert len(located) == 5
        for node in exec_._graph.nodes:  # each location holds the op reading the node's slot
            strand, position = located[node]
            op = compiled.strand_ops[strand][position]
            assert op.offset == compiled.arg_slots[node].offset
            assert op.kernel is scale
        assert compiled.locations is located
        exec_.set_kernel_node_params(previous[0], scale, 1, 1, (x, 9))  # setters find their op
    finally:
        exec_.destroy()
        graph.destroy()
        device.free(x)


def test_snapshot_shares_each_index_between_a_copy_and_its_dependents() -> None:
    from ahipgraph.exec.snapshot import ExecNode, snapshot, source_map

    graph = ahg.Graph()
    try:
        previous: tuple[ahg.GraphNode, ...] = ()
        for _ in range(300):  # indices above 256 are not the interpreter's cached small ints
            previous = (graph.add_empty_node(deps=previous),)
        with graph.lock:
            copy, order = snapshot(graph)
        assert [n.index for n in copy.nodes] == list(range(300))
        assert [n.id for n in copy.nodes] == [n.id for n in order]
        assert all(n.deps[0] is copy.nodes[n.index - 1].index for n in copy.nodes[1:])
        made = ExecNode(0, order[0].id, ahg.NodeType.Empty, None, ())
        assert [getattr(copy.nodes[0], f) for f in ExecNode.__slots__] == [
            getattr(made, f) for f in ExecNode.__slots__
        ]  # every field, defaults included, as the constructor sets it
        assert source_map(order, copy) == {n.hid: c for n, c in zip(order, copy.nodes, strict=True)}
        with pytest.raises(ValueError, match="zip"):
            source_map(order[:-1], copy)
    finally:
        graph.destroy()


@pytest.mark.parametrize(
    ("datas", "sizes", "chunk", "prefill"),
    [
        ([b"a" * 12, b"b" * 12, b"c" * 12], [12, 12, 12], 256, False),  # first chunk made
        ([b"a" * 12, b"b" * 12, b"c" * 12], [12, 12, 12], 256, True),  # after other slots
        ([b"a" * 12] * 5, [12] * 5, 64, True),  # runs out of room: a new chunk
        ([b"", b""], [0, 0], 64, True),  # empty arguments take one byte each
        ([b"a" * 16, b"b" * 16], [16, 16], 64, True),  # no padding between slots
        ([b"a" * 4, b"b" * 12], [12, 12], 256, True),  # two data lengths: one by one
        ([b"a" * 12, b"b" * 20], [12, 20], 256, True),  # two sizes: one by one
        ([b"z" * 16, b"y" * 16], [16, 16], 256, True),  # a reclaimed slot of the size
    ],
)
def test_place_many_uniform_runs_equal_place_one_by_one(
    device: ahg.Device, datas: list[bytes], sizes: list[int], chunk: int, prefill: bool
) -> None:
    one, many = KernelArgArena(device, chunk), KernelArgArena(device, chunk)
    try:
        for arena in (one, many) if prefill else ():
            arena.place(b"p" * 8, 8)
            arena.free(arena.place(b"q" * 16, 16))  # a reclaimed 16-byte slot
        singly = [one.place(d, s) for d, s in zip(datas, sizes, strict=True)]
        together = many.place_many(datas, sizes)
        assert [(s.chunk, s.offset, s.size) for s in together] == [
            (s.chunk, s.offset, s.size) for s in singly
        ]
        assert many.statistics() == one.statistics()
        assert (many.writes, many._top) == (one.writes, one._top)
        for slot, data in zip(together, datas, strict=True):
            assert bytes(slot.buffer[slot.offset : slot.offset + len(data)]) == data
    finally:
        one.close()
        many.close()


@pytest.mark.parametrize(
    ("datas", "sizes", "chunk", "prefill"),
    [
        ([b"a" * 12] * 4, [12] * 4, 256, False),  # the first item makes the first chunk
        ([b"a" * 12] * 4, [12] * 4, 256, True),  # one range
        ([b"a" * 12] * 5, [12] * 5, 64, True),  # across chunks
        ([b"a" * 4, b"b" * 12, b"c"], [12, 12, 4], 256, True),  # one by one
        ([b"z" * 16, b"y" * 16, b"x" * 16], [16, 16, 16], 256, True),  # a reclaimed slot first
        ([b"a" * 8, b"z" * 16, b"y" * 8], [8, 16, 8], 256, True),  # a reclaimed slot between
        ([b"a" * 12], [12], 256, True),
        ([], [], 256, True),
        ([b"a" * 12, b"b" * 8, b"c" * 12], [12, 12, 12], 256, True),  # one size, two lengths
        ([b"a" * 300, b"b" * 300], [int("300"), int("300")], 1024, True),  # equal, not one int
    ],
)
def test_place_spans_give_the_slots_place_gives_one_by_one(
    device: ahg.Device, datas: list[bytes], sizes: list[int], chunk: int, prefill: bool
) -> None:
    one, spans = KernelArgArena(device, chunk), KernelArgArena(device, chunk)
    try:
        for arena in (one, spans) if prefill else ():
            arena.place(b"p" * 8, 8)
            arena.free(arena.place(b"q" * 16, 16))  # a reclaimed 16-byte slot
        singly = [one.place(d, s) for d, s in zip(datas, sizes, strict=True)]
        placed = spans.place_spans(datas, sizes)
        flat = [
            (chunk_, buffer, offset, size)
            for chunk_, buffer, offsets, sizes_of in placed
            for offset, size in zip(offsets, sizes_of, strict=True)
        ]
        assert [(c, o, s) for c, _, o, s in flat] == [(s.chunk, s.offset, s.size) for s in singly]
        assert all(len(span[2]) == len(span[3]) > 0 for span in placed)
        assert spans.statistics() == one.statistics()
        assert (spans.writes, spans._top) == (one.writes, one._top)
        for (_, buffer, offset, _), data in zip(flat, datas, strict=True):
            assert bytes(buffer[offset : offset + len(data)]) == data
        if (
            chunk >= 256
            and prefill
            and len(set(sizes)) == len(set(map(len, datas))) == 1
            and len(datas) > 1
            and sizes[0] != 16
        ):
            assert len(placed) == 1
            assert isinstance(placed[0][2], range)  # no list per node
    finally:
        one.close()
        spans.close()


def test_place_spans_fail_as_place_does(device: ahg.Device) -> None:
    arena = KernelArgArena(device, 64)
    try:
        arena.place(b"p", 1)
        before = arena.statistics()
        with pytest.raises(ahg.InvalidValue, match="do not fit"):
            arena.place_spans([b"x" * 8, b"y" * 9], [8, 8])
        assert arena.statistics().allocations == before.allocations + 1  # the first one only
        with pytest.raises(ahg.InvalidValue, match="exceed"):
            arena.place_spans([b"x", b"y" * 80], [1, 80])
        arena.close()
        with pytest.raises(ahg.InvalidValue, match="closed"):
            arena.place_spans([b"x", b"y"], [1, 1])
    finally:
        arena.close()


def test_a_kernel_runs_slots_are_made_on_first_use(device: ahg.Device) -> None:
    x = device.malloc(64)
    graph = ahg.Graph()
    previous: tuple[ahg.GraphNode, ...] = ()
    for n in range(5):
        previous = (graph.add_kernel_node(scale, 1 + n % 2, 1, (x, n), deps=previous),)
    exec_ = instantiate_unverified(graph)
    try:
        compiled = exec_._compiled
        assert compiled._arg_spans
        assert not compiled._arg_places  # no ArgSlot object yet
        slots = compiled.arg_slots
        assert compiled._arg_spans == []
        assert compiled.arg_slots is slots
        assert len(slots) == 5
        for node in exec_._graph.nodes:  # each slot is where the node's op reads from
            strand, position = compiled.locations[node]
            op = compiled.strand_ops[strand][position]
            assert (op.buffer, op.offset) == (slots[node].buffer, slots[node].offset)
            assert slots[node].size == scale.layout.size
        exec_.set_kernel_node_params(previous[0], scale, 1, 1, (x, 9))  # setters find the slot
    finally:
        exec_.destroy()
        graph.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_an_update_before_any_slot_is_made_rewrites_the_right_slots(
    device: ahg.Device,
) -> None:
    out = device.malloc(4 * 8)
    stream = device.create_stream()

    def build(base: int) -> ahg.Graph:
        graph = ahg.Graph()
        previous: tuple[ahg.GraphNode, ...] = ()
        for n in range(8):
            previous = (graph.add_kernel_node(store, 1, 1, (out + 4 * n, base + n), deps=previous),)
        return graph

    first, second = build(10), build(20)
    exec_ = instantiate_unverified(first)
    try:
        assert exec_._compiled._arg_spans  # the update makes the slots
        exec_.update(second)
        await (await exec_.launch(stream))
        assert [int(v) for v in device.view(out, np.int32, 8)] == [20 + n for n in range(8)]
    finally:
        exec_.destroy()
        first.destroy()
        second.destroy()
        stream.destroy()
        device.free(out)


# -- add_kernel_node: the common launch shape in one frame -----------------------------------------


def test_common_kernel_params_equal_make_and_decline_every_other_shape(device: ahg.Device) -> None:
    import numpy as np

    from ahipgraph.runtime.params import common_kernel_params

    x = device.malloc(64)
    try:
        KernelParams.make(scale, 2, 32, (x, 1))  # the shape is validated, so remembered
        common = common_kernel_params(scale, 2, 32, [x, 7], 0, 0)
        made = KernelParams.make(scale, 2, 32, [x, 7])
        assert type(common) is KernelParams
        assert common == made
        assert common.args == (x, 7)
        assert type(common.args) is tuple
        assert common.threads is made.threads
        assert common.attributes == made.attributes
        with pytest.raises(dataclasses.FrozenInstanceError):
            common.priority = 1  # type: ignore[misc]
        # Every shape the common path does not know goes back to make (None).
        for shape in (
            (scale, 2, 32, (x, 7), 0, -1),  # a priority to check against the device's range
            (scale, 2, 32, (x, 7), 0, False),
            (scale, 2, 32, (x, 7), 0, 0.0),
            (scale, np.int64(2), 32, (x, 7), 0, 0),
            (scale, 2, True, (x, 7), 0, 0),
            (scale, 2, 32, (x, 7), np.int64(0), 0),
            (scale, 3, 31, (x, 7), 0, 0),  # never validated: not remembered
            (scale, 1, 10**9, (x, 7), 0, 0),
            (None, 2, 32, (x, 7), 0, 0),
            (print, 2, 32, (x, 7), 0, 0),
        ):
            assert common_kernel_params(*shape) is None
        # Bad arguments of a known shape raise exactly what make raises.
        for args in ((x,), (x, "7"), (x, 2**40), (1.5, 7), None, "ab"):
            with pytest.raises((TypeError, ValueError, ahg.InvalidValue)) as slow:
                KernelParams.make(scale, 2, 32, args)  # type: ignore[arg-type]
            with pytest.raises(slow.type, match=re.escape(str(slow.value))):
                common_kernel_params(scale, 2, 32, args, 0, 0)
    finally:
        device.free(x)


def test_add_kernel_node_checks_graph_then_deps_then_params_as_before(device: ahg.Device) -> None:
    x = device.malloc(64)
    graph, other = ahg.Graph(), ahg.Graph()
    try:
        first = graph.add_kernel_node(scale, 2, 32, (x, 1))
        second = graph.add_kernel_node(scale, 2, 32, (x, 2), deps=first)
        assert second.dependencies() == [first]
        assert first.dependents() == [second]
        assert second.params == KernelParams.make(scale, 2, 32, (x, 2))
        foreign = other.add_kernel_node(scale, 2, 32, (x, 1))
        before = graph.statistics()
        with pytest.raises(ahg.InvalidValue, match="another graph"):  # deps before params
            graph.add_kernel_node(scale, 2, 32, (x,), deps=foreign)
        with pytest.raises(TypeError, match="takes 2 arguments"):
            graph.add_kernel_node(scale, 2, 32, (x,), deps=second)
        with pytest.raises(ValueError, match="out of range"):
            graph.add_kernel_node(scale, 2, 32, (x, 2**40), deps=second)
        assert graph.statistics() == before  # a failed add changes nothing
        assert second.dependents() == []
        graph.destroy()
        with pytest.raises(ahg.InvalidValue):  # the graph before anything else
            graph.add_kernel_node(None, 0, 0, "bad", deps=foreign)  # type: ignore[arg-type]
        with pytest.raises(ahg.InvalidValue):
            first.type  # noqa: B018
    finally:
        other.destroy()
        device.free(x)


@pytest.mark.asyncio
async def test_captured_and_eager_kernels_take_the_common_path_to_the_same_params(
    device: ahg.Device,
) -> None:
    from ahipgraph.runtime.params import common_kernel_params

    x = device.malloc(64)
    stream = device.create_stream()
    urgent = device.create_stream(priority=ahg.stream_priority_range()[1])
    try:
        await stream.launch_kernel(scale, 2, 32, (x, 3))  # eager: runs as before
        for s, priority in ((stream, 0), (urgent, urgent.priority)):
            s.begin_capture()
            s.launch_kernel_nowait(scale, 2, 32, (x, 3))
            graph = s.end_capture()
            (node,) = graph.nodes()
            expected = KernelParams.make(scale, 2, 32, (x, 3), priority=priority, device=device)
            assert node.params == expected
            assert node.params.priority == priority  # a prioritised stream: the general path
            graph.destroy()
        assert common_kernel_params(scale, 2, 32, (x, 3), 0, 0, device) == KernelParams.make(
            scale, 2, 32, (x, 3), device=device
        )
    finally:
        await stream.synchronize()
        stream.destroy()
        urgent.destroy()
        device.free(x)


def test_a_new_node_owns_its_dependency_list_not_the_callers(device: ahg.Device) -> None:
    graph = ahg.Graph()
    try:
        first, second = graph.add_empty_node(), graph.add_empty_node()
        for given in ([first], [first, second]):
            node = graph.add_kernel_node(scale, 1, 1, (None, 0), deps=given)
            expected = list(given)
            given.clear()  # the caller's list is not the node's
            assert node.dependencies() == expected
            assert node._deps is not given
        lone = graph.add_empty_node()
        assert lone.dependencies() == []
        lone_deps = lone._deps
        assert graph.add_empty_node(deps=[lone])._deps is not lone_deps
    finally:
        graph.destroy()


# -- instantiate: whole-graph scans that most graphs need nothing from -----------------------------


def test_unfreed_allocations_are_found_with_and_without_mem_nodes(device: ahg.Device) -> None:
    from ahipgraph.exec.compile import _unfreed
    from ahipgraph.exec.snapshot import snapshot

    x = device.malloc(64)
    plain, mem = ahg.Graph(), ahg.Graph()
    try:
        plain.add_kernel_node(scale, 1, 1, (x, 1))
        kept = mem.add_mem_alloc_node(64)
        freed = mem.add_mem_alloc_node(64, deps=[kept])
        mem.add_mem_free_node(freed.params.ptr, deps=[freed])
        mem.add_kernel_node(scale, 1, 1, (x, 1), deps=[kept])
        with plain.lock, mem.lock:
            plain_copy, _ = snapshot(plain)
            mem_copy, _ = snapshot(mem)
        assert _unfreed(plain_copy) == []
        assert _unfreed(mem_copy) == [kept.params.ptr]
    finally:
        plain.destroy()
        mem.destroy()
        device.free(x)


def test_prepare_finds_handles_in_kernel_arguments_and_conditional_nodes() -> None:
    from ahipgraph.exec.conditional import prepare
    from ahipgraph.exec.snapshot import snapshot

    @ahg.kernel
    def decide(t: ahg.Threads, h: ahg.CondHandle, n: ahg.int32) -> None:
        ahg.set_conditional(h, n)

    plain, graph = ahg.Graph(), ahg.Graph()
    try:
        plain.add_empty_node()
        handle = graph.conditional_handle()
        unused = graph.conditional_handle()
        first = graph.add_kernel_node(decide, 1, 1, (handle, 1))
        graph.add_kernel_node(decide, 1, 1, (unused, 0), deps=[first])
        _, bodies = graph.add_conditional_node(handle, ahg.ConditionalKind.If, deps=[first])
        bodies[0].add_empty_node()
        with plain.lock, graph.lock:
            assert prepare(snapshot(plain)[0]) is None
            found = prepare(snapshot(graph)[0])
        assert found is not None
        assert found.handles == {handle.token: handle, unused.token: unused}
        assert len(found.bodies) == 1
    finally:
        plain.destroy()
        graph.destroy()


def test_the_source_map_is_made_on_first_lookup_and_equals_the_eager_map(
    device: ahg.Device,
) -> None:
    from ahipgraph.exec.snapshot import SourceMap, snapshot, source_map

    x = device.malloc(64)
    graph, other = ahg.Graph(), ahg.Graph()
    try:
        previous: tuple[ahg.GraphNode, ...] = ()
        for n in range(300):
            previous = (graph.add_kernel_node(scale, 1, 1, (x, n), deps=previous),)
        stranger = other.add_kernel_node(scale, 1, 1, (x, 1))
        with graph.lock:
            copy, order = snapshot(graph)
        lazy = SourceMap(order, copy)
        assert len(lazy) == 300
        assert "not made yet" in repr(lazy)
        assert dict(lazy) == source_map(order, copy)
        assert repr(lazy).endswith(", made>")
        assert lazy[order[7].hid] is copy.nodes[7]
        assert lazy.get(stranger.hid) is None
        with pytest.raises(KeyError):
            lazy[stranger.hid]
        with pytest.raises(ValueError, match="zip"):
            SourceMap(order[:-1], copy)
        exec_ = instantiate_unverified(graph)
        try:
            assert "not made yet" in repr(exec_._updater.sources)  # no setter called yet
            with pytest.raises(ahg.InvalidValue, match="is not a node of the graph"):
                exec_.set_kernel_node_params(stranger, scale, 1, 1, (x, 9))
            exec_.set_kernel_node_params(previous[0], scale, 1, 1, (x, 9))
            assert exec_._updater.sources[previous[0].hid].params.args[1] == 9
        finally:
            exec_.destroy()
    finally:
        graph.destroy()
        other.destroy()
        device.free(x)
