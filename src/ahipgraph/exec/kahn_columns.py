"""Kahn's order of a wide graph, found on integer columns read in insertion order.

:func:`~ahipgraph.graph.topology.ordered_columns` walks the node objects in Kahn's order. For
a wide graph (the 1,000 branches of a fork-join, side by side) that order visits nodes far
apart in memory: each round touches one node of every branch. This module reads each node
once, in insertion order (the order the graph holds them, one pass per field), turns the edges
into positions, and runs the same FIFO, a round at a time, with array operations on those
positions: no node is touched in Kahn's order at all.

What comes out is exactly what ``ordered_columns`` gives, as positions: ``order[k]`` is the
insertion index of the node at Kahn position ``k``, and the dependency columns (``first``,
``multi``) are by Kahn position. A caller permutes the columns it read in insertion order by
``order``.

**The FIFO by rounds.** The FIFO holds one round at a time: the nodes made ready by the
previous round's nodes, in the order they were made ready (each node's successors in edge
order; a successor counted as a join is made ready by its last dependency). A node holding its
lone dependency as the node itself (see ``graph.node.Edges``) is made ready by that dependency;
the others (roots, joins, and a lone dependency left in a list by edits) are counted. While
every node of a round is linked to the node added after it (its lone successor, whose lone
dependency it is: a chain, or the branches of a fork-join, built in insertion order), the next
round is those next nodes: as many such rounds as every node of the round has links ahead are
laid out at once.

Each round costs a few array operations whatever its width, so a graph of many narrow rounds
(a chain whose nodes are not in insertion order) is left to the node walk: :func:`kahn_columns`
returns None once the rounds outnumber what the positions pay for.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import chain, compress, islice, repeat
from operator import attrgetter, is_, is_not, not_
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import InvalidValue
from ..core.int_array import IntArray
from ..graph.node import GraphNode

if TYPE_CHECKING:
    from ..graph.graph import Graph

__all__ = [
    "MIN_NODES",
    "NODES_PER_ROUND",
    "ODD_SHARE",
    "KahnColumns",
    "index_column",
    "index_typecode",
    "kahn_columns",
]

# When the node walk is the better way (read when called, so tests can take this way always).
# Below this many nodes the walk costs less than the array operations' fixed costs:
MIN_NODES = 256
# more than one node in ODD_SHARE with a dependency (or a successor) other than the node beside
# it in insertion order, and looking each up costs more than the walk:
ODD_SHARE = 4
# more than one round per NODES_PER_ROUND nodes (and 8), and the rounds' fixed costs do:
NODES_PER_ROUND = 256

_deps_of: Callable[[GraphNode], Any] = attrgetter("_deps")
_dependents_of: Callable[[GraphNode], Any] = attrgetter("_dependents")
_I64 = np.int64
_INT32_END = 1 << 31


def index_column(indices: np.ndarray[Any, np.dtype[Any]]) -> IntArray:
    """Node indices (-1 for none) as an array of C ints (``"i"``), or of 64-bit ints for a
    graph of 2**31 nodes or more.

    A copy keeps its dependency column for as long as its executable lives: 4 bytes a node,
    not 8. Readers that view it in numpy take the array's own typecode as the dtype (numpy
    reads ``"i"`` and ``"q"`` as the same C types the array does); the others read ints.
    """
    if len(indices) < _INT32_END:
        return array("i", indices.astype(np.intc).tobytes())
    return array("q", indices.astype(np.longlong).tobytes())


def index_typecode(count: int) -> str:
    """The typecode of :func:`index_column` for a graph of ``count`` nodes, for a column made
    from Python ints (``array(index_typecode(count), ints)``)."""
    return "i" if count < _INT32_END else "q"


@dataclass(slots=True, eq=False)
class KahnColumns:
    """A graph's Kahn order as positions (see the module notes).

    ``nodes`` are the graph's nodes in insertion order; ``order[k]`` is the insertion index of
    the node at Kahn position ``k``. ``first`` and ``multi`` are ``ordered_columns``'
    dependency columns.
    """

    nodes: list[GraphNode]
    order: np.ndarray[Any, np.dtype[np.int64]]
    first: IntArray
    multi: dict[int, tuple[int, ...]]


def _positions(
    nodes: list[GraphNode], odd_deps: list[int], odd_succs: list[int]
) -> dict[GraphNode, int]:
    """The insertion index of every node an edge of the odd nodes can reach, by node.

    An edge ``u -> v`` that is not a link (``v`` added right after ``u``, each the other's
    lone neighbour on that side) has ``u`` among ``odd_succs`` or ``v`` among ``odd_deps``. Its
    other end is then odd too, or is the node beside it: ``v`` held in ``u``'s list of
    successors is in ``odd_deps`` or is ``u + 1``; ``u`` held in ``v``'s list of
    dependencies, or as ``v``'s lone dependency, is in ``odd_succs`` or is ``v - 1``; a lone
    successor ``v`` of an odd ``u`` is in ``odd_deps``. So a map of these nodes, and of their
    neighbours in insertion order, finds every end the odd edges name.
    """
    last = len(nodes) - 1
    found = set(odd_deps)
    found.update(odd_succs)
    found.update([i - 1 for i in odd_deps if i])
    found.update([i + 1 for i in odd_succs if i < last])
    at = sorted(found)
    return dict(zip(map(nodes.__getitem__, at), at, strict=True))


def _indices(where: dict[GraphNode, int], nodes: Iterable[GraphNode]) -> list[int]:
    return list(map(where.__getitem__, nodes))


def kahn_columns(
    graph: Graph,
    *,
    min_nodes: int | None = None,
    max_odd: int | None = None,
    max_rounds: int | None = None,
) -> KahnColumns | None:
    """``ordered_columns(graph)`` as positions, or None where the node walk is the better way:
    fewer than ``min_nodes`` nodes (:data:`MIN_NODES`), more than ``max_odd`` nodes whose
    dependency, or whose successor, is other than the node beside them in insertion order
    (:data:`ODD_SHARE`), or more than ``max_rounds`` rounds (:data:`NODES_PER_ROUND`). The
    caller holds the graph's lock, with the graph alive.

    Raises:
        InvalidValue: the graph has a cycle (the message ``ordered_columns`` gives).
    """
    nodes = list(graph._nodes)
    count = len(nodes)
    if count < max(MIN_NODES if min_nodes is None else min_nodes, 1):
        return None
    if max_odd is None:
        max_odd = count // ODD_SHARE
    # Most nodes hold the node added before them as their lone dependency and the node added
    # after them as their lone successor (the links of a chain, or of a branch built in one
    # go): one pass in C per side finds the others, and only those are looked at.
    odd_deps = [0]  # the first node's dependency is never the node before it
    odd_deps += compress(range(1, count), map(is_not, map(_deps_of, islice(nodes, 1, None)), nodes))
    if len(odd_deps) > max_odd:
        return None
    odd_succs = list(
        compress(
            range(count - 1), map(is_not, map(_dependents_of, islice(nodes, count - 1)), nodes[1:])
        )
    )
    odd_succs.append(count - 1)
    if len(odd_succs) > max_odd:
        return None
    where = _positions(nodes, odd_deps, odd_succs)
    node_type = GraphNode
    index = np.arange(count, dtype=_I64)

    # Each node's lone dependency by insertion index (-1: counted, see the module notes).
    dep_lone = index - 1
    deps: list[Any] = list(map(_deps_of, map(nodes.__getitem__, odd_deps)))
    lone = list(map(is_, map(type, deps), repeat(node_type)))
    dep_lone[odd_deps] = -1
    lone_at = list(compress(odd_deps, lone))
    if lone_at:
        dep_lone[lone_at] = _indices(where, compress(deps, lone))
    counted = list(compress(odd_deps, map(not_, lone)))  # roots, joins, edited lone ones
    counted_deps: list[Any] = list(compress(deps, map(not_, lone)))

    # Successors, by insertion index, in edge order: each node's offset into one flat array.
    succs: list[Any] = list(map(_dependents_of, map(nodes.__getitem__, odd_succs)))
    one = list(map(is_, map(type, succs), repeat(node_type)))
    several = list(compress(odd_succs, map(not_, one)))  # lists, and () for none
    listed: list[Any] = list(compress(succs, map(not_, one)))
    succ_count = np.ones(count, dtype=_I64)
    succ_count[several] = list(map(len, listed))
    offsets = np.zeros(count + 1, dtype=_I64)
    np.cumsum(succ_count, out=offsets[1:])
    flat = np.empty(int(offsets[-1]), dtype=_I64)
    follows = np.ones(count, dtype=bool)
    follows[odd_succs] = False
    flat[offsets[:-1][follows]] = index[follows] + 1
    lone_succ_at = list(compress(odd_succs, one))
    if lone_succ_at:
        flat[offsets[lone_succ_at]] = _indices(where, compress(succs, one))
    listed_total = sum(map(len, listed))
    if listed_total:
        spans = [np.arange(offsets[i], offsets[i + 1], dtype=_I64) for i in several]
        flat[np.concatenate(spans)] = _indices(where, chain.from_iterable(listed))

    dep_counts = list(map(len, counted_deps))
    indegree = np.zeros(count, dtype=_I64)
    indegree[counted] = dep_counts
    roots = [i for i, n in zip(counted, dep_counts, strict=True) if not n]

    if max_rounds is None:
        max_rounds = count // NODES_PER_ROUND + 8
    order = _rounds(
        np.array(roots, dtype=_I64),
        count,
        dep_lone,
        succ_count,
        offsets,
        flat,
        indegree,
        max_rounds,
    )
    if order is None:
        return None
    if len(order) != count:
        raise InvalidValue(f"{graph!r} has a cycle")

    kahn = np.empty(count, dtype=_I64)  # insertion index -> Kahn position
    kahn[order] = index
    dep_of = dep_lone[order]
    first = np.where(dep_of >= 0, kahn[np.maximum(dep_of, 0)], -1)
    multi: dict[int, tuple[int, ...]] = {}
    if counted:
        dep_positions = (
            kahn[_indices(where, chain.from_iterable(counted_deps))].tolist()
            if sum(dep_counts)
            else []
        )
        start = 0
        for node, size in zip(kahn[counted].tolist(), dep_counts, strict=True):
            multi[node] = tuple(dep_positions[start : start + size])
            start += size
    return KahnColumns(nodes, order, index_column(first), multi)


def _rounds(
    current: np.ndarray[Any, np.dtype[np.int64]],
    count: int,
    dep_lone: np.ndarray[Any, np.dtype[np.int64]],
    succ_count: np.ndarray[Any, np.dtype[np.int64]],
    offsets: np.ndarray[Any, np.dtype[np.int64]],
    flat: np.ndarray[Any, np.dtype[np.int64]],
    indegree: np.ndarray[Any, np.dtype[np.int64]],
    max_rounds: int,
) -> np.ndarray[Any, np.dtype[np.int64]] | None:
    """The FIFO a round at a time (see the module notes): the insertion indices in Kahn's
    order, all of them unless a cycle stopped it, or None past the rounds allowed."""
    index = np.arange(count, dtype=_I64)
    # link[i]: node i + 1 is node i's lone successor and holds node i as its lone dependency;
    # run_end[i]: the last node of the run of links from i (a chain in insertion order).
    link = np.zeros(count, dtype=bool)
    if len(flat):
        lone_succ = np.where(succ_count == 1, flat[np.minimum(offsets[:-1], len(flat) - 1)], -1)
        link[:-1] = (lone_succ[:-1] == index[1:]) & (dep_lone[1:] == index[:-1])
    run_end = np.minimum.accumulate(np.where(link, count, index)[::-1])[::-1]
    rounds_left = max_rounds
    out: list[np.ndarray[Any, np.dtype[np.int64]]] = []
    while len(current):
        rounds_left -= 1
        if rounds_left < 0:
            return None
        # The walk along links: while every node of the round has a link to the next node,
        # the next round is those next nodes, each a lone dependent. ``steps`` rounds at once,
        # in the FIFO's order (round by round); then the round those steps end on.
        steps = int((run_end[current] - current).min())
        if steps:
            out.append((current[np.newaxis, :] + index[:steps, np.newaxis]).ravel())
            current = current + steps
        out.append(current)
        sizes = succ_count[current]
        if (sizes == 1).all():
            ready = flat[offsets[current]]
        else:
            total = int(sizes.sum())
            if not total:
                break
            # each node's successors, in order: its offset plus 0, 1, ... per successor
            shift = np.repeat(offsets[current] - (np.cumsum(sizes) - sizes), sizes)
            ready = flat[shift + np.arange(total, dtype=_I64)]
        joins = dep_lone[ready] < 0
        if not joins.any():
            current = ready
            continue
        at = np.flatnonzero(joins)
        targets = ready[at]
        # each target's count falls by its occurrences in this round; one reaching 0 is made
        # ready by its last dependency in the round, where that occurrence stands
        distinct, last_seen, times = np.unique(targets[::-1], return_index=True, return_counts=True)
        left = indegree[distinct] - times
        indegree[distinct] = left
        keep = ~joins
        keep[at[len(targets) - 1 - last_seen[left == 0]]] = True
        current = ready[keep]
    return np.concatenate(out) if out else np.empty(0, dtype=_I64)
