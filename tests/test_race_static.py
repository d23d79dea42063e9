"""The static check's remaining promises: atomics in graphs, setters and updates that
recheck only what they change (and refuse a race while changing nothing), and replays
checked against a summary of O(ranges), whatever the number of nodes."""

from __future__ import annotations

import pytest

import ahipgraph as ahg
from ahipgraph.exec import races
from cleanup import destroy


@ahg.kernel(extents={"counter": 1})
def bump(t: ahg.Threads, counter: ahg.AtomicPtr[ahg.int32]) -> None:
    counter[0] += 1


@ahg.kernel(extents={"counter": 1})
def reset(t: ahg.Threads, counter: ahg.Ptr[ahg.int32]) -> None:
    counter[0] = 0


def test_atomic_nodes_never_race_each_other_in_a_graph(device: ahg.Device) -> None:
    counter = device.malloc(4)
    graph = ahg.Graph()
    for _ in range(4):
        graph.add_kernel_node(bump, 1, 1, (counter,))  # no edges: meant to overlap
    assert graph.check_races() == []
    plain = graph.add_kernel_node(reset, 1, 1, (counter,))  # a plain write among them
    reports = graph.check_races()
    assert len(reports) == 4
    assert all(r.kind == "write-after-write" for r in reports)
    assert all(r.fix_edge is not None and plain in r.fix_edge for r in reports)
    destroy(counter, graph)


def chain_of_fills(device: ahg.Device, count: int) -> tuple[ahg.Graph, list[ahg.GraphNode], list]:
    """``count`` independent fills, each of its own buffer: nothing to order."""
    buffers = [device.malloc(64) for _ in range(count)]
    graph = ahg.Graph()
    nodes = [graph.add_memset_node(buf, i, 64) for i, buf in enumerate(buffers)]
    return graph, nodes, buffers


def test_a_setter_rechecks_only_the_node_it_changes(
    device: ahg.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, nodes, buffers = chain_of_fills(device, 50)
    exe = graph.instantiate(check_races=True)
    asked: list[set[int] | None] = []
    real = races.conflicting_pairs

    def spy(*args: object, **kwargs: object) -> object:
        asked.append(args[3] if len(args) > 3 else kwargs.get("only"))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(races, "conflicting_pairs", spy)
    exe.set_memset_node_params(nodes[7], buffers[7], 9, 64)
    assert asked == [{7}]
    with pytest.raises(ahg.RaceError) as caught:  # aimed at node 3's buffer: unordered
        exe.set_memset_node_params(nodes[7], buffers[3], 9, 64)
    assert asked[-1] == {7}
    (report,) = caught.value.reports
    assert set(report.fix_edge or ()) == {nodes[3], nodes[7]}
    assert exe.statistics().launches == 0
    exe.destroy()
    destroy(graph, *buffers)


@pytest.mark.asyncio
async def test_enabling_a_racing_node_is_refused_and_it_stays_disabled(
    device: ahg.Device,
) -> None:
    buf, other = device.malloc(64), device.malloc(64)
    graph = ahg.Graph()
    graph.add_memset_node(buf, 1, 64)
    second = graph.add_memset_node(other, 2, 64)  # no edge: fine while the buffers differ
    exe = graph.instantiate(check_races=True)
    exe.set_node_enabled(second, False)
    exe.set_memset_node_params(second, buf, 2, 64)  # disabled: it touches nothing yet
    with pytest.raises(ahg.RaceError):
        exe.set_node_enabled(second, True)
    assert exe.node_enabled(second) is False  # a refused call changes nothing
    stream = device.create_stream()
    await (await exe.launch(stream))
    assert int(device.view(buf, "uint8", 1, readonly=True)[0]) == 1  # only first ran
    exe.destroy()
    destroy(graph, stream, buf, other)


@pytest.mark.asyncio
async def test_a_replay_costs_its_summary_not_its_nodes(device: ahg.Device) -> None:
    """A 400-node chain writing 8-byte pieces of one buffer is one merged range: the check
    of a launch against the world keeps one shadow range, not one per node."""
    buf = device.malloc(4096)
    graph = ahg.Graph()
    previous: list[ahg.GraphNode] = []
    for i in range(400):
        previous = [graph.add_memset_node(buf + 8 * i, i % 256, 8, deps=previous)]
    exe = graph.instantiate()
    stream = device.create_stream()
    with ahg.race_check(on_race="raise") as rc:
        before = rc.statistics().shadow_ranges
        for _ in range(3):
            await exe.launch(stream)
        assert rc.statistics().shadow_ranges - before == 1
        await stream.synchronize()
    assert rc.reports == []
    exe.destroy()
    destroy(graph, stream, buf)
