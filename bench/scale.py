"""Scale benchmark: per-node cost of every phase of a graph's life, from 10,000 to 1,000,000 nodes.

For a chain of no-op kernel nodes and for a wide fork-join (one root, ``BRANCHES`` parallel
chains, one join; every node a kernel) of each size it measures, in one run, per node:

* ``build_us``        — ``graph.add_kernel_node`` for every node;
* ``thread_build_us`` — the same build in a thread without a running event loop (a worker of
  ``asyncio.to_thread``; a script that builds before ``asyncio.run`` is the same case), whose
  collector pause the collector's own passes end (see ``ahipgraph.core.gcpause``);
* ``instantiate_us``  — ``graph.instantiate()``;
* ``first_yield_us``  — the task's first yield after building and instantiating
  (``await asyncio.sleep(0)``): a graph of 1,000 nodes or more pauses the collector while it is
  built, and a large build's deferred pass over what it made runs here (see
  ``ahipgraph.core.gcpause``): a full pass once the build is more than a quarter of the heap,
  the one CPython's accounting would otherwise make in the next phase that allocates (the first
  replay). Shown in the table, not in the ratios (at 10,000 nodes there is no pass to defer);
* ``replay_us``       — one replay, end to end (``await (await exec.launch(stream))``);
* ``update_us``       — ``exec.update(graph)`` with a graph of the same shape whose every node has
  new arguments;
* ``clone_us``, ``nodes_us``, ``edges_us``, ``dot_us`` — ``graph.clone()``, ``graph.nodes()``,
  ``graph.edges()`` and ``graph.to_dot()``;
* ``destroy_us``      — ``exec.destroy()`` plus ``graph.destroy()``;
* ``gc_pass_us``      — a full collection (``gc.collect()``) with the graph and its executable
  alive, after the replay, less one once both are destroyed (each the median of
  :data:`PHASE_REPEATS` passes): what each of the collector's full passes costs per node.
  CPython makes one whenever the long-lived tracked objects grow by a quarter, so building N
  nodes walks about 5N objects, and this figure times 5 is about what the collector adds to a
  node's build;
* ``bytes_per_node``  — what the graph plus its executable hold, measured with ``tracemalloc``
  in a separate pass (tracing slows everything down, so it never overlaps the timings);
* ``update_bytes_per_node`` — what the executable holds more once updated (the new graph
  alive, so its parameters, which the executable then shares, are not counted), same pass;
* ``gc_collections``  — the garbage collector's passes per generation during build and
  instantiate (the collector stays on, as in a user's program);
* ``floor_edges_us``  — the least ``edges()`` makes, in plain Python on the floor's chain
  (:func:`time_floor_edges`): the ratios of this column are the machine's alone;
* ``edges_floor``     — ``edges_us`` over ``floor_edges_us`` (a ratio, not microseconds): what
  ``edges()`` costs beyond the least any list of edge tuples costs on this machine at this size.
  A million new tuples take fresh pages and a walk over nodes that no longer fit the caches, so
  ``edges_us`` grows from 10,000 to 1,000,000 nodes with the floor's; this figure's ratio between
  sizes is the part of that growth that is the runtime's own;
* ``floor_build_us``  — the same chain built by :func:`floor_build`, a few lines of plain
  Python with none of the runtime's checks (the collector off): what this machine charges, at
  this moment, for the least any Python graph must do per node. ``build / floor`` divides the
  build by it, a figure the machine's drift moves far less than the build's own.

Every size is measured :data:`RUNS` times, and each timing is the median; in every run, the
phases that leave the graph as it was (the queries, the DOT text, a clone, an update) are also
timed :data:`PHASE_REPEATS` times, and their figure is the median.
The ratios of each figure to the same run's 10,000-node figure are reported too: flat per-node
cost means ratios near 1. A shared machine's speed drifts over a run (on a small cloud VM, by
up to about 1.8x for minutes at a time), and a large size takes long enough to fall in another
state than the smallest size measured at the start. So each ratio's denominator is the smallest
size measured again right around the larger one (``REFERENCE_RUNS`` runs just before it and as
many just after, their median: ``reference`` in the JSON), and the ratio compares figures taken
within a few seconds of each other.

Fresh memory is dearer than reused memory, and only large graphs take much of it: at 10,000
nodes the allocator reuses the pages earlier phases freed, at 1,000,000 every phase's objects
take new pages, whose first touch the kernel pays for (and, on a virtual machine whose balloon
hands freed memory back to the host a few seconds after it is freed, the host as well: a page
then costs about 4.5 us once the host has taken it back and 2 us when it is reused at once, on
the cloud VM this was written on, and up to 10 us for memory untouched since boot). The run
measures it (``fresh_page`` in the JSON, :func:`page_cost`), so a ratio can be read against what
a page costs the machine that ran it.

Run on its own with
``python bench/scale.py --sizes 10000,100000``; ``bench/launch.py`` includes it in ``make bench``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import resource
import statistics
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ahipgraph as ahg

SIZES = (10_000, 100_000, 1_000_000)
BRANCHES = 1_000
SHAPES = ("chain", "fork_join")


@ahg.kernel
def noop(t: ahg.Threads, x: ahg.Ptr[ahg.float32], n: ahg.int32) -> None:
    """Does nothing with its arguments: the cost measured is the runtime's, not the kernel's."""


def build(shape: str, size: int, x: ahg.DevicePtr, offset: int = 0) -> ahg.Graph:
    """A chain, or a fork-join of ``BRANCHES`` chains between a root and a join: ``size`` nodes."""
    graph = ahg.Graph()
    add = graph.add_kernel_node
    if shape == "chain":
        previous: tuple[Any, ...] = ()
        for i in range(size):
            previous = (add(noop, 1, 1, (x, i + offset), deps=previous),)
        return graph
    branches = min(BRANCHES, size - 2)
    root = (add(noop, 1, 1, (x, offset)),)
    inner = size - 2
    tails = []
    number = 1
    for branch in range(branches):
        length = inner // branches + (1 if branch < inner % branches else 0)
        previous = root
        for _ in range(length):
            previous = (add(noop, 1, 1, (x, number + offset), deps=previous),)
            number += 1
        tails.append(previous[0])
    add(noop, 1, 1, (x, number + offset), deps=tails)
    return graph


class _FloorNode:
    __slots__ = ("deps", "graph", "id", "params", "succ")


def floor_build(size: int, x: ahg.DevicePtr) -> dict[int, Any]:
    """A chain of ``size`` nodes in plain Python: the least a graph of kernel nodes does per node.

    One slotted object per node holding its graph, id, parameters (kernel, grid, block, the
    argument tuple and their packed bytes) and both sides of its edge, entered in a dict by id:
    no validation, no lock, no registry. Timed next to each build, it is the machine's speed
    at that moment for this kind of work, so ``build / floor`` is comparable across runs that
    a drifting machine (see the module notes) makes incomparable in microseconds.
    """
    pack = struct.Struct("<Qi").pack
    nodes: dict[int, Any] = {}
    previous = None
    address = x.address
    for i in range(size):
        node = _FloorNode()
        node.graph = nodes
        node.id = i
        node.params = (noop, 1, 1, (x, i), pack(address, i))
        node.deps = previous
        node.succ = None
        if previous is not None:
            previous.succ = node
        nodes[i] = node
        previous = node
    return nodes


def time_floor_build(size: int, x: ahg.DevicePtr) -> float:
    """:func:`floor_build` of ``size`` nodes, microseconds per node, the collector off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        nodes, seconds = _timed(lambda: floor_build(size, x))
    finally:
        if enabled:
            gc.enable()
    del nodes
    return seconds * 1e6 / size


def floor_edges(nodes: dict[int, Any]) -> list[tuple[Any, Any]]:
    """A tuple per edge, in a new list: the least ``graph.edges()`` makes."""
    return [(node, node.succ) for node in nodes.values() if node.succ is not None]


def time_floor_edges(size: int, x: ahg.DevicePtr) -> float:
    """The least ``graph.edges()`` makes, on :func:`floor_build`'s chain: a ``(node, successor)``
    tuple per node in a new list, the collector off (as ``edges()`` holds it back), microseconds
    per node, the median of :data:`PHASE_REPEATS` calls. Its ratio between sizes is what the
    machine's caches and fresh pages alone add to a phase that touches every node once and makes
    a small object per node."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        nodes = floor_build(size, x)
        seconds = _median_time(functools.partial(floor_edges, nodes))
    finally:
        if enabled:
            gc.enable()
    del nodes
    return seconds * 1e6 / size


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


# The phases that leave the graph as it was (its queries, its DOT text, a clone, an update) are
# timed this many times in every run, and each figure is their median: a single call of a phase
# that lasts a fraction of a second lands in whatever state the machine is in at that moment,
# which can halve or double it. Every call pays what a first call pays: its
# result is freed before the next one (a large result's memory goes back to the system, so each
# call takes fresh pages again).
PHASE_REPEATS = 3


# The collector's pass is timed more often: its per-node figure is the difference of two passes
# over the whole heap, and at 10,000 nodes the graph is a small part of that heap, so three passes
# each left the figure's ratio between sizes moving by a third from one run to the next.
GC_PASS_REPEATS = 7


def _median_time(
    fn: Callable[[], Any],
    then: Callable[[Any], Any] | None = None,
    repeats: int = PHASE_REPEATS,
) -> float:
    """The median of ``repeats`` timed calls of ``fn``; ``then`` undoes each call's result
    (untimed) before the next one."""
    times = []
    for _ in range(repeats):
        result, seconds = _timed(fn)
        if then is not None:
            then(result)
        del result
        times.append(seconds)
    return statistics.median(times)


def _update_in_turn(exec_: ahg.GraphExec, graphs: list[ahg.Graph]) -> None:
    """``exec_.update(graphs[0])``, then the graphs swap places: the next call applies the other."""
    exec_.update(graphs[0])
    graphs.reverse()


async def time_one(shape: str, size: int, device: ahg.Device, x: ahg.DevicePtr) -> dict[str, Any]:
    """Every phase of one graph's life, per node in microseconds."""
    # A program's tasks yield between unrelated builds: a bulk build's collector pause (see
    # ahipgraph.core.gcpause) ends there, and must not reach into this one's figures.
    await asyncio.sleep(0)
    stream = device.create_stream()
    floor_build_us = time_floor_build(size, x)
    floor_edges_us = time_floor_edges(size, x)
    graph, thread_build_s = await asyncio.to_thread(_timed, lambda: build(shape, size, x))
    graph.destroy()
    del graph
    gc.collect()
    before = [s["collections"] for s in gc.get_stats()]
    graph, build_s = _timed(lambda: build(shape, size, x))
    exec_, instantiate_s = _timed(graph.instantiate)
    after = [s["collections"] for s in gc.get_stats()]
    start = time.perf_counter()
    await asyncio.sleep(0)
    first_yield_s = time.perf_counter() - start
    start = time.perf_counter()
    await (await exec_.launch(stream))
    replay_s = time.perf_counter() - start
    gc.collect()  # the replay's garbage first: the passes timed next only walk what is alive
    # Medians, as for the queries: the figure is a difference of two passes, and at 10,000
    # nodes a single pass each made it swing from run to run by half its value.
    gc_pass_s = _median_time(gc.collect, repeats=GC_PASS_REPEATS)
    nodes_s = _median_time(graph.nodes)
    edges_s = _median_time(graph.edges)
    dot_s = _median_time(graph.to_dot)
    clone_s = _median_time(graph.clone, then=ahg.Graph.destroy)
    # Two graphs with new arguments for every node, applied in turn: every update changes them all.
    updates = [build(shape, size, x, offset=1), build(shape, size, x, offset=2)]
    update_s = _median_time(functools.partial(_update_in_turn, exec_, updates))
    await (await exec_.launch(stream))
    for new_args in updates:
        new_args.destroy()
    start = time.perf_counter()
    exec_.destroy()
    graph.destroy()
    destroy_s = time.perf_counter() - start
    await stream.synchronize()
    stream.destroy()
    del graph, exec_, updates, new_args  # a destroyed graph's objects live while it is referenced
    gc.collect()  # frees what the destroys left to the collector, then the same pass without them
    gc_base_s = _median_time(gc.collect, repeats=GC_PASS_REPEATS)
    per = 1e6 / size
    return {
        "build_us": build_s * per,
        "thread_build_us": thread_build_s * per,
        "instantiate_us": instantiate_s * per,
        "first_yield_us": first_yield_s * per,
        "replay_us": replay_s * per,
        "update_us": update_s * per,
        "clone_us": clone_s * per,
        "nodes_us": nodes_s * per,
        "edges_us": edges_s * per,
        "dot_us": dot_s * per,
        "destroy_us": destroy_s * per,
        "gc_pass_us": (gc_pass_s - gc_base_s) * per,
        "floor_build_us": floor_build_us,
        "floor_edges_us": floor_edges_us,
        "gc_collections": [b - a for a, b in zip(before, after, strict=True)],
    }


def bytes_per_node(shape: str, size: int, device: ahg.Device, x: ahg.DevicePtr) -> dict[str, float]:
    """Bytes the graph and its executable hold, per node; and what is left once both are gone."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        graph = build(shape, size, x)
        graph_bytes = tracemalloc.get_traced_memory()[0] - base
        exec_ = graph.instantiate()
        total = tracemalloc.get_traced_memory()[0] - base
        new_args = build(shape, size, x, offset=1)
        before_update = tracemalloc.get_traced_memory()[0]
        exec_.update(new_args)
        update_bytes = tracemalloc.get_traced_memory()[0] - before_update
        exec_.destroy()
        graph.destroy()
        new_args.destroy()
        del graph, exec_, new_args
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return {
        "graph_bytes_per_node": graph_bytes / size,
        "bytes_per_node": total / size,
        "update_bytes_per_node": update_bytes / size,
        "bytes_left_after_destroy": float(left),
    }


# Runs of each size; each figure is their median. A single run of a small graph is a few
# milliseconds per phase, which one burst of machine noise can double; the first run of the
# largest size is the first to take its memory from the system (on a virtual machine, memory
# untouched since boot costs several times a reused page; see the module notes), which lands
# in whichever phase first grows the heap that far.
RUNS = 3


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each timing's median over ``runs``, ``edges_floor`` from the medians, and the other
    figures from the first run."""
    figures = dict(runs[0])
    for key in figures:
        if key.endswith("_us"):
            figures[key] = statistics.median(run[key] for run in runs)
    figures["edges_floor"] = figures["edges_us"] / figures["floor_edges_us"]
    figures["runs"] = len(runs)
    return figures


# Fresh memory touched to time a page: enough pages that the figure is steady.
PAGE_COST_BYTES = 256 << 20


def page_cost(nbytes: int = PAGE_COST_BYTES) -> dict[str, float]:
    """Microseconds a page of fresh memory costs: ``nbytes`` touched, freed, and touched again
    at once (capped at half of what the system has available). The first touch takes memory
    the system may have handed back to the host; the second takes the pages just freed."""
    available = _available_memory()
    if available is not None:
        nbytes = min(nbytes, available // 2)
    page = resource.getpagesize()
    figures: dict[str, float] = {"bytes": float(nbytes)}
    for name in ("first_touch_us_per_page", "second_touch_us_per_page"):
        start = time.perf_counter()
        block = bytearray(nbytes)  # zero-filled: every page written
        figures[name] = (time.perf_counter() - start) * 1e6 / max(1, nbytes // page)
        del block
    return figures


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# Runs of the smallest size just before and just after each larger size: the ratio's reference.
REFERENCE_RUNS = 2


async def measure(sizes: tuple[int, ...], memory: bool = True) -> dict[str, Any]:
    device = ahg.get_device(0)
    x = device.malloc(4096)
    out: dict[str, Any] = {"sizes": list(sizes), "branches": BRANCHES}
    smallest = sizes[0]

    async def runs_of(shape: str, size: int, count: int) -> list[dict[str, Any]]:
        return [await time_one(shape, size, device, x) for _ in range(count)]

    out["fresh_page"] = page_cost()
    try:
        # A first run pays what only a first run does (the launch shapes' and packers' caches,
        # the heap's first growth): it is measured and left out.
        await time_one(SHAPES[0], smallest, device, x)
        for shape in SHAPES:
            figures: dict[str, Any] = {}
            references: dict[str, Any] = {}
            for size in sizes:
                before = await runs_of(shape, smallest, REFERENCE_RUNS) if size > smallest else []
                figures[str(size)] = median_figures(await runs_of(shape, size, RUNS))
                if before:
                    after = await runs_of(shape, smallest, REFERENCE_RUNS)
                    references[str(size)] = median_figures(before + after)
                if memory:
                    figures[str(size)].update(bytes_per_node(shape, size, device, x))
            out[shape] = figures
            out.setdefault("reference", {})[shape] = references
    finally:
        device.free(x)
    out["ratios_vs_smallest"] = ratios(out, sizes)
    return out


def ratios(out: dict[str, Any], sizes: tuple[int, ...]) -> dict[str, Any]:
    """Each per-node figure at each size over the same figure at the smallest size.

    Timings are divided by the smallest size measured around the larger one (``reference``),
    when the run has it; bytes per node by the smallest size's own figure (memory does not
    drift with the machine's speed).
    """
    result: dict[str, Any] = {}
    base = str(sizes[0])
    for shape in SHAPES:
        per_shape: dict[str, Any] = {}
        references = out.get("reference", {}).get(shape, {})
        for size in sizes[1:]:
            row = out[shape][str(size)]
            reference = references.get(str(size), out[shape][base])
            per_shape[str(size)] = {
                key: value / reference[key] for key, value in row.items() if key in PHASES
            }
            if "bytes_per_node" in row:
                per_shape[str(size)]["bytes_per_node"] = (
                    row["bytes_per_node"] / out[shape][base]["bytes_per_node"]
                )
        result[shape] = per_shape
    return result


PHASES = ("build_us", "thread_build_us", "instantiate_us", "replay_us", "destroy_us")
PHASES += ("update_us", "clone_us", "nodes_us", "edges_us", "dot_us", "gc_pass_us")
PHASES += ("floor_edges_us", "edges_floor")


def table(out: dict[str, Any]) -> str:
    header = f"{'shape':10} {'nodes':>9} " + " ".join(f"{_label(p):>8}" for p in PHASES)
    header += f" {'1st yield':>9} {'floor':>6} {'build/floor':>11} {'B/node':>7} {'B/upd':>6}"
    header += f" {'gc 0/1/2':>14}"
    lines = ["per node, microseconds (bytes: graph + executable, tracemalloc)", header]
    lines.append("-" * len(header))
    for shape in SHAPES:
        for size in out["sizes"]:
            row = out[shape][str(size)]
            cells = " ".join(f"{row[p]:>8.2f}" for p in PHASES)
            memory = f"{row['bytes_per_node']:>7.0f}" if "bytes_per_node" in row else f"{'-':>7}"
            updated = row.get("update_bytes_per_node")
            memory += f" {round(updated):>6d}" if updated is not None else f" {'-':>6}"
            collections = "/".join(str(c) for c in row["gc_collections"])
            first_yield = f"{row['first_yield_us']:>9.2f}"
            floor = _floor_cells(row)
            lines.append(
                f"{shape:10} {size:>9} {cells} {first_yield} {floor} {memory} {collections:>14}"
            )
    sizes = out["sizes"]
    references = [
        (shape, size, row)
        for shape in SHAPES
        for size, row in out.get("reference", {}).get(shape, {}).items()
    ]
    if references:
        lines.append(f"rows @N: {sizes[0]} nodes again, measured around N (the ratios' reference)")
    for shape, size, row in references:
        cells = " ".join(f"{row[p]:>8.2f}" for p in PHASES)
        lines.append(f"{shape:10} {'@' + size:>9} {cells}")
    for shape in SHAPES:
        for size in sizes[1:]:
            ratio_row = out["ratios_vs_smallest"][shape][str(size)]
            cells = " ".join(f"{ratio_row[p]:>7.2f}x" for p in PHASES)
            lines.append(f"{shape:10} {str(size) + '/' + str(sizes[0]):>9} {cells}")
    page = out.get("fresh_page")
    if page:
        lines.append(
            f"a page of fresh memory ({page['bytes'] / 2**20:.0f} MiB touched): "
            f"{page['first_touch_us_per_page']:.2f} us, "
            f"{page['second_touch_us_per_page']:.2f} us again once freed"
        )
    return "\n".join(lines)


def _label(phase: str) -> str:
    """A phase's column heading: its key less ``_us``, at most eight characters."""
    return _LABELS.get(phase, phase.removesuffix("_us"))


_LABELS = {"thread_build_us": "thr.bld", "floor_edges_us": "fl.edges", "edges_floor": "ed/floor"}


def _floor_cells(row: dict[str, Any]) -> str:
    """The floor and the build over it, or dashes for a row measured without it."""
    floor = row.get("floor_build_us")
    if not floor:
        return f"{'-':>6} {'-':>11}"
    return f"{floor:>6.2f} {row['build_us'] / floor:>10.2f}x"


def parse_sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(part) for part in text.split(",") if part.strip())
    if any(size < 3 for size in sizes):
        raise argparse.ArgumentTypeError("every size must be at least 3 nodes")
    return sizes


def run(sizes: tuple[int, ...], memory: bool = True) -> dict[str, Any]:
    ahg.configure_devices(1)
    return ahg.run(lambda: measure(sizes, memory))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=parse_sizes, default=SIZES, help="comma-separated")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    parser.add_argument("--json", type=Path, help="write results to this JSON file")
    args = parser.parse_args(argv)
    out = run(args.sizes, memory=not args.no_memory)
    print(table(out))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
