"""Hostile use of forgotten streams' failures and ``nodes()``.

A failure that the program awaited carries a traceback, and that traceback holds the frames
that held the stream: what keeps the failure for the device must not keep the stream alive
through it, or the stream (and its device, replaced or not) is never freed and its failure
never reaches the device.

``nodes()`` is Kahn's order with an insertion-order FIFO (HIP's), whatever edits made the
graph: checked against a plain Kahn walk written from the public accessors.
"""

from __future__ import annotations

import gc
import random
import warnings
import weakref
from collections import deque
from collections.abc import Iterator

import pytest

import ahipgraph as ahg
from ahipgraph.core.registry import HandleRegistry
from ahipgraph.runtime.stream import STREAMS


@ahg.kernel
def fails(t: ahg.Threads) -> None:
    raise ValueError("kernel body failed")


def registered(registry: HandleRegistry[ahg.Stream]) -> int:
    return registry.statistics().live


async def drop_a_failed_stream(device: ahg.Device) -> weakref.ref[ahg.Stream]:
    """Make a stream whose kernel fails, await the failure here (so its traceback holds this
    frame, and this frame the stream), and drop the stream without ``destroy()``."""
    stream = device.create_stream()
    failed = await stream.launch_kernel(fails, 1, 1, ())
    with pytest.raises(ahg.LaunchFailure):
        await failed
    return weakref.ref(stream)


def collect_with_warning() -> None:
    """Collect what was dropped, with the one warning a forgotten stream gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ahg.ForgottenHandleWarning)
        ahg.collect_forgotten()
    assert [str(w.message).split(" #")[0] for w in caught] == ["unclosed stream"]


# -- a forgotten stream whose failure's traceback holds it ----------------------------------------


@pytest.mark.asyncio
async def test_a_forgotten_stream_whose_awaited_failure_holds_it_is_freed_and_reported(
    device: ahg.Device,
) -> None:
    before = registered(STREAMS)
    stream = await drop_a_failed_stream(device)
    collect_with_warning()
    assert stream() is None  # the failure's traceback does not keep it alive
    assert registered(STREAMS) == before
    with pytest.raises(ahg.LaunchFailure, match="kernel body failed") as reported:
        await device.synchronize()
    assert reported.value.__traceback__ is not None  # raised here, with this frame only
    await device.synchronize()  # reported once


@pytest.mark.asyncio
async def test_a_replaced_device_with_a_forgotten_failed_stream_is_freed() -> None:
    ahg.configure_devices(1)
    old = ahg.get_device(0)
    stream = await drop_a_failed_stream(old)
    replaced = weakref.ref(old)
    del old
    ahg.configure_devices(1)
    collect_with_warning()
    gc.collect()
    assert stream() is None
    assert replaced() is None  # nothing left to report to, and nothing kept for it
    await ahg.get_device(0).synchronize()  # the new device has nothing of the old one's


# -- nodes() on graphs edited every way ------------------------------------------------------------


def kahn(live: list[ahg.GraphNode]) -> list[ahg.GraphNode] | None:
    """Kahn's order of ``live`` (the graph's nodes in insertion order) from the public
    accessors, the FIFO seeded in insertion order; None for a cycle."""
    left = {node: len(node.dependencies()) for node in live}
    ready = deque(node for node in live if not left[node])
    order = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for succ in node.dependents():
            left[succ] -= 1
            if not left[succ]:
                ready.append(succ)
    return order if len(order) == len(live) else None


def random_graph(rng: random.Random) -> tuple[ahg.Graph, list[ahg.GraphNode]]:
    """A graph of 0 to 30 nodes, mostly chains, edited by added and removed edges (cycles
    included) and destroyed nodes; with its live nodes in insertion order."""
    graph = ahg.Graph()
    live: list[ahg.GraphNode] = []

    def add() -> None:
        count = min(rng.choice([0, 1, 1, 1, 2, 3]), len(live))
        live.append(graph.add_empty_node(deps=rng.sample(live, count)))

    for _ in range(rng.randint(0, 20)):
        add()
    for _ in range(rng.randint(0, 12)):
        roll = rng.random()
        if roll < 0.35 and len(live) >= 2:
            src, dst = rng.sample(live, 2)
            if dst not in src.dependents():
                graph.add_dependencies(src, dst)
        elif roll < 0.6 and graph.edges():
            src, dst = rng.choice(graph.edges())
            graph.remove_dependencies(src, dst)
        elif roll < 0.75 and live:
            live.pop(rng.randrange(len(live))).destroy()
        else:
            add()
    return graph, live


def test_nodes_is_kahn_s_fifo_order_on_edited_graphs() -> None:
    rng = random.Random(20261203)
    cycles = 0
    for _ in range(300):
        graph, live = random_graph(rng)
        expected = kahn(live)
        if expected is None:
            cycles += 1
            with pytest.raises(ahg.InvalidValue, match="cycle"):
                graph.nodes()
        else:
            assert graph.nodes() == expected
        graph.destroy()
    assert 0 < cycles < 300  # both kinds were tried


class _AppendedWhileCopied(deque[ahg.HipError]):
    """A failure queue that a finalizer appends to while the first copy of it is made, as a
    collection started by that copy would."""

    copies = 0

    def __iter__(self) -> Iterator[ahg.HipError]:
        type(self).copies += 1
        if type(self).copies == 1:
            self.append(ahg.HipError.from_code(719))
            raise RuntimeError("deque mutated during iteration")
        return super().__iter__()


def test_device_statistics_copy_the_failure_queue_again_when_it_grows_meanwhile() -> None:
    device = ahg.get_device(0)
    queue = _AppendedWhileCopied()
    kept = device._forgotten_failures
    device._forgotten_failures = queue
    try:
        device.statistics()  # no RuntimeError
        assert queue.copies == 2
    finally:
        device._forgotten_failures = kept
