"""How plain Python's own per-node cost grows from 10,000 to 1,000,000 nodes on this machine.

``bench/scale.py`` holds each per-node figure at 1,000,000 nodes against its figure at 10,000.
The phases that cost a fraction of a microsecond per node (``edges()``, ``nodes()``, ``clone()``)
mostly touch memory: at 10,000 nodes a graph's objects sit in the CPU's caches, at 1,000,000
(several hundred MB) every node is a cache miss and new objects take fresh pages. This bench
measures the least Python does for three of those phases, on the plain slotted objects of
``scale.floor_build`` (no runtime at all), the collector off:

* ``edges`` — one ``(node, successor)`` tuple per node, in a new list (what ``graph.edges()``
  makes);
* ``clone`` — one new slotted object per node copying five fields, entered in a new dict (what a
  clone makes per node, without its edges or parameters);
* ``wide_order`` — the nodes listed in the order ``graph.nodes()`` gives a wide fork-join (Kahn's
  order: the first node of each of 1,000 branches, then the second of each, ...), each read once;
* ``pairs`` and ``wide_pairs`` — what ``exec.update(graph)`` walks: two graphs of one shape
  (both built in insertion order, as an executable's graph and the new graph are), node by node,
  each pair's packed arguments compared and the pair listed as a change. ``pairs`` walks a chain
  (its topological order is its insertion order: both sides in memory order); ``wide_pairs``
  walks the wide fork-join in Kahn's order, so both sides are read a branch apart in memory.
  The two differ only in the order of the walk: their ratios show what the strided walk alone
  adds as the graph outgrows the caches.

Each size is measured ``--rounds`` times (the least counts), and the smallest size again after
the largest; the ratio divides by the smallest of all the small runs. A ratio well above 1 is the
machine, not the runtime: no Python graph can have flatter per-node costs than these.

    python bench/scale_floor.py --sizes 10000,1000000
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ahipgraph as ahg

sys.path.insert(0, str(Path(__file__).parent))
import scale  # bench/scale.py, next to this file: the same floor nodes
from results_file import write_results  # bench/results_file.py

DEFAULT_SIZES = (10_000, 1_000_000)


floor_edges = scale.floor_edges  # a tuple per edge, in a new list: the least edges() makes


def floor_clone(nodes: dict[int, Any]) -> dict[int, Any]:
    """A new node per node with its fields copied, in a new dict: the least a clone makes."""
    copies: dict[int, Any] = {}
    for key, node in nodes.items():
        copy = scale._FloorNode()
        copy.graph = node.graph
        copy.id = node.id
        copy.params = node.params
        copy.deps = node.deps
        copy.succ = None
        copies[key] = copy
    return copies


def floor_wide_order(nodes: dict[int, Any]) -> list[Any]:
    """The nodes as the fork-join's 1,000 branches side by side, listed round by round.

    What ``graph.nodes()`` of the wide graph must return: Kahn's order visits the first node
    of every branch, then the second of every branch, and so on, so consecutive entries lie a
    branch apart in memory. Each node is read once, for its successor (the next round's entry).
    """
    every = list(nodes.values())
    branches = min(scale.BRANCHES, len(every))  # as scale.build, which needs two more nodes
    length = len(every) // branches
    current = every[: length * branches : length]
    order: list[Any] = []
    for _ in range(length - 1):
        order += current
        current = [node.succ for node in current]
    order += current
    return order


def wide_positions(size: int) -> list[int]:
    """Insertion index of each node of ``size`` in the wide fork-join's Kahn order (as
    :func:`floor_wide_order` lists them): each branch's first node, then each one's second..."""
    branches = min(scale.BRANCHES, size)
    length = size // branches
    return [branch * length + step for step in range(length) for branch in range(branches)]


def floor_pairs(
    nodes: dict[int, Any], again: dict[int, Any], order: range | list[int]
) -> list[tuple[Any, Any]]:
    """Two graphs' nodes paired in ``order`` (insertion indices), each pair's packed arguments
    compared, the pair listed as a change: the least ``exec.update`` does per node (the
    executable's node against the new graph's, in topological order)."""
    old = list(nodes.values())
    new = list(again.values())
    changes: list[tuple[Any, Any]] = []
    append = changes.append
    for index in order:
        node = old[index]
        params = new[index].params
        if node.params[4] != params[4] or node.params[3] is not params[3]:
            append((node, params))
    return changes


PHASES: dict[str, Callable[[dict[int, Any]], Any]] = {
    "edges": floor_edges,
    "clone": floor_clone,
    "wide_order": floor_wide_order,
}
# Phases over two graphs of one size: (the second graph, the insertion indices in walk order).
PAIR_PHASES: dict[str, Callable[[int], range | list[int]]] = {
    "pairs": range,
    "wide_pairs": wide_positions,
}


def _timed(phase: Callable[[dict[int, Any]], Any], nodes: dict[int, Any]) -> float:
    enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        made = phase(nodes)
        seconds = time.perf_counter() - start
    finally:
        if enabled:
            gc.enable()
    del made
    return seconds


def measure_size(size: int, x: ahg.DevicePtr, rounds: int) -> dict[str, float]:
    """Each phase's least time over ``rounds`` at ``size`` nodes, microseconds per node."""
    nodes = scale.floor_build(size, x)
    again = scale.floor_build(size, x)  # the new graph an update compares node by node
    phases = dict(PHASES)
    for name, walk in PAIR_PHASES.items():
        phases[name] = functools.partial(floor_pairs, again=again, order=walk(size))
    try:
        return {
            f"{name}_us": min(_timed(phase, nodes) for _ in range(rounds)) / size * 1e6
            for name, phase in phases.items()
        }
    finally:
        del nodes, again, phases
        gc.collect()


def measure(sizes: tuple[int, ...], rounds: int) -> dict[str, Any]:
    """Every size, then the smallest again; each larger size's ratio to the smallest."""
    device = ahg.get_device(0)
    x = device.malloc(4096)
    try:
        smallest = sizes[0]
        runs = {str(size): measure_size(size, x, rounds) for size in sizes}
        again = measure_size(smallest, x, rounds)
    finally:
        device.free(x)
    reference = {key: min(runs[str(smallest)][key], again[key]) for key in again}
    ratios = {
        str(size): {key: runs[str(size)][key] / reference[key] for key in reference}
        for size in sizes[1:]
    }
    return {"sizes": list(sizes), "figures": runs, "reference": reference, "ratios": ratios}


def table(out: dict[str, Any]) -> str:
    keys = list(out["reference"])
    smallest = out["sizes"][0]
    lines = [f"{'nodes':>13} " + " ".join(f"{key:>10}" for key in keys) + "   (us per node)"]
    for size in out["sizes"]:
        row = out["figures"][str(size)]
        lines.append(f"{size:>13} " + " ".join(f"{row[key]:>10.3f}" for key in keys))
    reference = out["reference"]
    lines.append(
        f"{'least ' + str(smallest):>13} " + " ".join(f"{reference[k]:>10.3f}" for k in keys)
    )
    for size, row in out["ratios"].items():
        label = f"{size}/{smallest}"
        lines.append(f"{label:>13} " + " ".join(f"{row[key]:>9.2f}x" for key in keys))
    return "\n".join(lines)


def _sizes(text: str) -> tuple[int, ...]:
    sizes = tuple(int(part) for part in text.split(",") if part)
    # The first is the reference every ratio divides by, and figures are keyed by size.
    if len(sizes) < 2 or sizes[0] < 1 or any(a >= b for a, b in itertools.pairwise(sizes)):
        raise argparse.ArgumentTypeError(
            "two or more positive sizes, the smallest first, each larger than the last"
        )
    return sizes


def _rounds(text: str) -> int:
    rounds = int(text)
    if rounds < 1:
        raise argparse.ArgumentTypeError(f"rounds must be at least 1, got {rounds}")
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=DEFAULT_SIZES, help="node counts")
    parser.add_argument(
        "--rounds", type=_rounds, default=3, help="runs per figure; the least counts"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args(argv)
    out = measure(args.sizes, args.rounds)
    print(table(out))
    if args.json is not None:
        write_results(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
