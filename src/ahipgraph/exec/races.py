"""Missing-dependency races in graphs: the static check.

Two operations race when nothing orders them and both touch the same bytes, at least one
writing (two :class:`~ahipgraph.AtomicPtr` accesses never race with each other). In a graph
the only ordering a user may rely on is the declared edges (transitively, through child graphs
and disabled nodes, which keep their edges); the planner's strands and signals are an
implementation detail. :func:`check_exec_graph` finds every unordered conflicting pair over
the flattened graph, with no device work at all: only nodes sharing an allocation are compared,
a bucket whose nodes form a chain of edges (or only read) is cleared at once, and the rest is
searched with ancestor bitsets (:func:`unordered_pairs`). A conditional node counts at its
place as touching what its bodies touch, and each body is also checked as a graph of its own
(:meth:`ExecRaces._body_races`), since a body's nodes are ordered only by the body's edges.

What each node touches is its footprint (:mod:`.footprints`); what a race found says is a
:class:`~.race_reports.RaceReport` (:mod:`.race_reports`). Both serve the dynamic checker
(:mod:`ahipgraph.tools.race`) too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TypeAlias

from ..core.errors import InvalidValue
from ..device.pointer import DevicePtr
from ..graph.node_type import NodeType
from ..runtime.params import KernelParams
from .footprints import (
    ALLOCATIONS,
    CONSERVATIVE,
    LOOKUP_MEMO,
    Access,
    footprint,
    kernel_footprint,
    merge,
    node_footprint,
)
from .race_reports import (
    SITES,
    RaceError,
    RaceReport,
    RaceSite,
    describe_allocation,
    kind_of,
)

if TYPE_CHECKING:
    from ..graph.graph import Graph
    from ..graph.node import GraphNode
    from .conditional import BodyCopies
    from .snapshot import ExecGraph, ExecNode

    # What ExecRaces keeps to flatten its graph later: the copy, and the user's nodes (in the
    # copy's order) and graph it is named after, held weakly.
    _FlatFrom: TypeAlias = tuple[
        ExecGraph, Sequence[Callable[[], GraphNode | None]] | None, Callable[[], Graph | None]
    ]

__all__ = [
    "ExecRaces",
    "FlatNode",
    "bucket",
    "check_exec_graph",
    "check_graph",
    "conflicting_pairs",
    "flatten",
    "flatten_nodes",
    "unordered_pairs",
]

_new_access = tuple.__new__  # an Access from its six fields, skipping the generated __new__


# -- the static check -------------------------------------------------------------------------


def _nothing() -> None:
    """What a flat node holds for a user's node or graph it never had."""


@dataclass(slots=True, eq=False)
class FlatNode:
    """A node of the flattened graph: child graphs inlined, edges through them kept.

    The user's node and graph it is named after are held weakly: an executable made with
    ``check_races=True`` keeps its flat nodes to word later setter and update reports, and
    must not keep the graph it was made from (HIP lets the user drop it once instantiated;
    a forgotten graph is freed, with its nodes and user objects, by its finalizer). Once
    they are gone, :attr:`original`, :attr:`top` and :attr:`owner` are None: a report still
    names both sides by the executable's own nodes (their ids and kinds, as always), and its
    fix is worded from those, with no ``fix_edge`` or user's node to hand back.
    """

    index: int
    exec_node: ExecNode
    deps: list[int]
    original_ref: Callable[[], GraphNode | None]
    top_ref: Callable[[], GraphNode | None]  # the top-level node holding it (itself at the top)
    owner_ref: Callable[[], Graph | None]  # the graph ``original`` belongs to
    level: str  # "graph 5" or "child graph of node 3"

    @property
    def original(self) -> GraphNode | None:
        """The user's node this one was copied from (None: none, or gone since)."""
        return self.original_ref()

    @property
    def top(self) -> GraphNode | None:
        """The user's top-level node holding it (None: none, or gone since)."""
        return self.top_ref()

    @property
    def owner(self) -> Graph | None:
        """The user's graph :attr:`original` belongs to (None: none, or gone since)."""
        return self.owner_ref()


def _weak(thing: Any) -> Callable[[], Any]:
    """A weak reference to ``thing``, or what stands for none."""
    return _nothing if thing is None else weakref.ref(thing)


def flatten(
    exec_graph: ExecGraph, originals: Sequence[GraphNode | None] | None, graph: Graph | None
) -> list[FlatNode]:
    """Inline child graphs: a child's roots take its node's dependencies, the child node
    depends on the child's sinks, so every path of declared edges is kept. The flat nodes
    hold ``originals`` and ``graph`` (and child graphs' nodes) weakly (see :class:`FlatNode`).

    Child graphs may nest deeper than Python's stack: each graph is a generator that yields
    its child graphs to a driver loop instead of recursing.
    """
    nodes = exec_graph.nodes
    if all(node.child is None for node in nodes):  # nothing to inline: one node each
        level = f"graph {exec_graph.graph_id}"
        owner_ref = _weak(graph)
        if originals is None:
            return [
                FlatNode(n.index, n, list(n.deps), _nothing, _nothing, owner_ref, level)
                for n in nodes
            ]
        return [
            FlatNode(n.index, n, list(n.deps), ref, ref, owner_ref, level)
            for n, ref in zip(nodes, map(_weak, originals), strict=True)
        ]
    flat: list[FlatNode] = []
    Visit = Generator[tuple[Any, ...], list[int], list[int]]

    def visit(
        eg: ExecGraph,
        origs: Sequence[GraphNode | None] | None,
        owner: Graph | None,
        entry: list[int],
        top: GraphNode | None,
        level: str,
    ) -> Visit:
        exits: list[int] = []
        owner_ref = _weak(owner)
        for node in eg.nodes:
            original = origs[node.index] if origs is not None else None
            node_top = top if top is not None else original
            deps = [exits[d] for d in node.deps] if node.deps else list(entry)
            if node.child is not None:
                child_origs: list[GraphNode] | None = None
                child_graph = None
                if original is not None:
                    child_origs, child_graph = _child_originals(original, node.child)
                sinks = yield (
                    node.child,
                    child_origs,
                    child_graph,
                    deps,
                    node_top,
                    f"child graph of node {node.id}",
                )
                deps = sinks or deps
            flat.append(
                FlatNode(len(flat), node, deps, _weak(original), _weak(node_top), owner_ref, level)
            )
            exits.append(len(flat) - 1)
        dependents = eg.dependents
        return [exits[n.index] for n in eg.nodes if not dependents[n.index]]

    stack = [visit(exec_graph, originals, graph, [], None, f"graph {exec_graph.graph_id}")]
    result: list[int] = []
    first = True
    while stack:
        try:
            request = next(stack[-1]) if first else stack[-1].send(result)
        except StopIteration as finished:
            stack.pop()
            result = finished.value  # the finished graph's sinks, sent to its parent
            first = False
            continue
        stack.append(visit(*request))
        first = True
    return flat


def _child_originals(
    node: GraphNode, copy: ExecGraph
) -> tuple[list[GraphNode] | None, Graph | None]:
    """The user's nodes of child-graph node ``node``'s embedded graph, one per node of its
    ``copy`` to name them after, and that graph; (None, None) when they no longer match.

    The copy was made under the graph's lock, and this runs after it: another thread may have
    destroyed the node meanwhile (its embedded graph with it) or edited the embedded graph,
    so that its nodes now are others than the copy's. The copy is checked all the same; only
    the user's names for its nodes are lost.
    """
    child_graph = getattr(node._params, "graph", None)  # read once; an edit may replace it
    if child_graph is None:
        return None, None
    return _originals_of(child_graph, copy)


def _originals_of(graph: Graph, copy: ExecGraph) -> tuple[list[GraphNode] | None, Graph | None]:
    """``graph``'s nodes, one per node of ``copy`` (made from it earlier), and ``graph``; (None,
    None) when ``graph`` was destroyed or edited since, so that they no longer match."""
    try:
        originals: list[GraphNode] = graph.nodes()
    except InvalidValue:  # destroyed meanwhile, or edited into a cycle
        return None, None
    copies = copy.nodes
    if len(originals) != len(copies) or any(
        original._type is not copied.type
        for original, copied in zip(originals, copies, strict=True)
    ):
        return None, None
    return originals, graph


def flatten_nodes(exec_graph: ExecGraph) -> list[FlatNode]:
    """:func:`flatten` without the user's node handles (for replays)."""
    return flatten(exec_graph, None, None)


def ancestors(flat: list[FlatNode]) -> list[int]:
    """Per flat node, the bitset of every node a path of edges leads from."""
    return _ancestors_of([node.deps for node in flat])


def _ancestors_of(deps: list[Any]) -> list[int]:
    anc: list[int] = []
    for node_deps in deps:
        bits = 0
        for dep in node_deps:
            bits |= anc[dep] | (1 << dep)
        anc.append(bits)
    return anc


def _label(node: ExecNode) -> str:
    name = node.type.name
    if node.type is NodeType.Kernel:
        name += f" {node.params.kernel.name!r}"
    state = "" if node.enabled else ", disabled"
    return f"node {node.id} ({name}{state})"


def _static_report(
    a: FlatNode, access_a: Access, b: FlatNode, access_b: Access, flat: list[FlatNode]
) -> RaceReport:
    # The user's nodes and graphs, each read once: held weakly, one may go at any moment.
    a_original, b_original = a.original, b.original

    def site(f: FlatNode, original: GraphNode | None, acc: Access) -> RaceSite:
        source = SITES.nodes.get(original.hid) if original is not None else None
        return RaceSite(
            _label(f.exec_node),
            f.level,
            source,
            acc.start,
            acc.end,
            acc.precision,
            acc.write,
            original,
        )

    first, second = site(a, a_original, access_a), site(b, b_original, access_b)
    fix_from, fix_to = a_original, b_original
    holder = "graph"
    a_owner = a.owner
    if a_owner is not b.owner or a_owner is None:
        fix_from, fix_to = a.top, b.top
        if a.level != b.level and (a.level.startswith("child") or b.level.startswith("child")):
            holder = "graph (the top level, through the child-graph nodes)"
    fix_edge: tuple[GraphNode, GraphNode] | None = None
    if fix_from is not None and fix_to is not None and fix_from is not fix_to:
        fix_edge = (fix_from, fix_to)
        fix = (
            f"{holder}.add_dependencies(a, b)  # a = {_describe(fix_from)}, b = {_describe(fix_to)}"
        )
    else:
        fix_edge = None
        fix = f"add an edge from {first.op} to {second.op} in their graph"
    disabled = [f for f in flat if not f.exec_node.enabled]
    why = (
        f"no path of declared edges leads from {first.op} to {second.op} (or back), so the "
        "graph may run them in either order or at once"
    )
    if disabled:
        why += "; disabled nodes still order through their edges, and none lies between them"
    return RaceReport(
        kind_of(access_a.write, access_b.write),
        first,
        second,
        describe_allocation(access_a.device, max(access_a.start, access_b.start)),
        why,
        fix,
        fix_edge,
    )


def _describe(node: GraphNode) -> str:
    name = node._type.name
    if node._type is NodeType.Kernel:
        name += f" {node._params.kernel.name!r}"  # type: ignore[union-attr]
    site = SITES.nodes.get(node.hid)
    return f"node {node.id} ({name}{', added at ' + site if site else ''})"


def _mask(indices: list[int]) -> int:
    """The bitset of ``indices`` (ascending), built in one pass rather than one OR per bit
    (each of which would copy the growing int)."""
    bits = bytearray((indices[-1] >> 3) + 1)
    for index in indices:
        bits[index >> 3] |= 1 << (index & 7)
    return int.from_bytes(bits, "little")


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def bucket(access: Access) -> tuple[int, int]:
    """The allocation an access lies in (its start when it lies in none): accesses of
    different buckets never overlap, so only nodes sharing a bucket are compared."""
    found = ALLOCATIONS.lookup(access.device, access.start)
    return (access.device, access.start if found is None else found[1])


def conflicting_pairs(
    footprints: list[list[Access]],
    buckets: list[list[tuple[int, int]]],
    anc: list[int],
    only: set[int] | None = None,
) -> list[tuple[int, Access, int, Access]]:
    """Unordered conflicting pairs (earlier node first), one per node pair.

    For each node, the candidates are the nodes sharing one of its allocations minus its
    ancestors (a bitset expression), so a well-ordered graph costs O(nodes), and only the
    unordered pairs that share memory are compared range by range. ``only`` restricts the
    search to pairs involving those nodes (setters and updates).
    """
    members: dict[tuple[int, int], list[int]] = {}
    for index, keys in enumerate(buckets):
        for key in keys:
            members.setdefault(key, []).append(index)
    masks = {key: _mask(indices) for key, indices in members.items()}
    out: list[tuple[int, Access, int, Access]] = []
    seen: set[tuple[int, int]] = set()

    def compare(j: int, i: int) -> None:  # j earlier than i
        if (j, i) in seen:
            return
        for aj in footprints[j]:
            for ai in footprints[i]:
                if aj.conflicts(ai):
                    seen.add((j, i))
                    out.append((j, aj, i, ai))
                    return

    for i in range(len(footprints)) if only is None else sorted(only):
        keys = buckets[i]
        if not keys:
            continue
        if len(keys) == 1:
            touch = masks[keys[0]]
        else:
            touch = 0
            for key in keys:
                touch |= masks[key]
        earlier = touch & ((1 << i) - 1)
        if earlier:
            earlier &= ~anc[i]
            if earlier:
                for j in _bits(earlier):
                    compare(j, i)
        if only is not None:
            for k in _bits(touch >> (i + 1) << (i + 1)):
                if not (anc[k] >> i) & 1:
                    compare(i, k)
    out.sort(key=lambda p: (p[0], p[2]))
    return out


def _dep_form(deps: list[Any]) -> tuple[list[int], dict[int, tuple[int, ...]]]:
    """Per node, its only dependency (-1 where ``multi`` holds its 0 or several): the shape
    of :meth:`ExecGraph.first_deps`, from per-node dependency lists."""
    first: list[int] = []
    multi: dict[int, tuple[int, ...]] = {}
    for index, node_deps in enumerate(deps):
        if len(node_deps) == 1:
            first.append(node_deps[0])
        else:
            first.append(-1)
            multi[index] = tuple(node_deps)
    return first, multi


def _ancestors_from(first: Any, multi: dict[int, tuple[int, ...]]) -> list[int]:
    """:func:`_ancestors_of` of dependencies in :func:`_dep_form`'s shape."""
    anc: list[int] = []
    append = anc.append
    for index, dep in enumerate(first):
        if dep >= 0:
            append(anc[dep] | (1 << dep))
        else:
            bits = 0
            for source in multi[index]:
                bits |= anc[source] | (1 << source)
            append(bits)
    return anc


def _may_conflict(
    footprints: list[list[Access]],
    buckets: list[list[tuple[int, int]]],
    indices: list[int],
    key: tuple[int, int],
) -> bool:
    """Whether two of these nodes could conflict in bucket ``key``: one of their accesses
    there writes, and not every one is atomic (readers never race, nor do atomic updates
    with each other). Accesses of different buckets never overlap (see :func:`bucket`), so
    a node's accesses to its other allocations are left out."""
    writes = False
    plain = False
    for index in indices:
        several = len(buckets[index]) > 1
        for access in footprints[index]:
            if several and bucket(access) != key:
                continue
            writes = writes or access.write
            plain = plain or not access.atomic
            if writes and plain:
                return True
    return False


def unordered_pairs(
    footprints: list[list[Access]],
    buckets: list[list[tuple[int, int]]],
    members: Iterable[tuple[tuple[int, int], list[int]]],
    first: Any,
    multi: dict[int, tuple[int, ...]],
    ancestors_of: Callable[[], list[int]],
) -> list[tuple[int, Access, int, Access]]:
    """:func:`conflicting_pairs` of a whole graph, bucket by bucket.

    ``members``: each bucket and its nodes (indices in topological order); ``first``/``multi``:
    the dependencies in :func:`_dep_form`'s shape; ``ancestors_of``: the ancestor bitsets,
    asked for only when needed. Only nodes sharing an allocation can conflict, and the
    nodes of a bucket are all ordered when each is ordered before the next one (paths
    compose), so a bucket whose members form a chain of edges is cleared by comparing each
    member's dependency with its predecessor (one C-level tuple comparison); a bucket of
    readers (or of atomic updates) only is cleared by its footprints. Only what is left is
    searched pair by pair with the ancestor bitsets. Same pairs as
    :func:`conflicting_pairs`, in the same order.
    """
    out: list[tuple[int, Access, int, Access]] = []
    seen: set[tuple[int, int]] = set()
    anc: list[int] | None = None
    for key, indices in members:
        count = len(indices)
        if count < 2:
            continue
        if count == 2:
            if first[indices[1]] == indices[0]:
                continue
        elif itemgetter(*indices[1:])(first) == tuple(indices[:-1]):
            continue  # each member depends directly on the one before: a chain
        if not _may_conflict(footprints, buckets, indices, key):
            continue
        if anc is None:
            anc = ancestors_of()
        for earlier, later in pairwise(indices):
            if first[later] != earlier and not (anc[later] >> earlier) & 1:
                break
        else:
            continue  # ordered through longer paths
        mask = _mask(indices)
        for i in indices[1:]:
            unordered = mask & ((1 << i) - 1) & ~anc[i]
            for j in _bits(unordered):
                if (j, i) in seen:
                    continue
                for aj in footprints[j]:
                    found = False
                    for ai in footprints[i]:
                        if aj.conflicts(ai):
                            seen.add((j, i))
                            out.append((j, aj, i, ai))
                            found = True
                            break
                    if found:
                        break
    out.sort(key=lambda p: (p[0], p[2]))
    return out


def _names_held_weakly(
    exec_graph: ExecGraph, originals: list[GraphNode] | None, graph: Graph | None
) -> _FlatFrom:
    """What :attr:`ExecRaces.flat` is made from later, without keeping the user's graph or
    its nodes alive (see :class:`FlatNode`)."""
    refs = None if originals is None else list(map(weakref.ref, originals))
    return (exec_graph, refs, _weak(graph))


class ExecRaces:
    """An executable's race facts: flattened nodes, ancestors, footprints and the summary.

    Kept by a :class:`GraphExec` made with ``check_races=True`` (setters and updates then
    recheck only the nodes they change) or when the dynamic checker first launches it (it
    then only needs :attr:`summary`). The user's graph and nodes its reports are named after
    are held weakly (see :class:`FlatNode`): the executable never keeps them alive.
    """

    __slots__ = (
        "_anc",
        "_bodies",
        "_deps",
        "_events",
        "_flat",
        "_flat_from",
        "_groups",
        "_index_of",
        "_members",
        "_nodes",
        "_nodes_graph",
        "_summary",
        "buckets",
        "check",
        "footprints",
    )

    def __init__(
        self,
        exec_graph: ExecGraph,
        originals: list[GraphNode] | None,
        graph: Graph | None,
        *,
        check: bool,
        bodies: BodyCopies | None = None,
    ) -> None:
        self.check = check
        # the copies of conditional nodes' bodies, by id(exec node) (see exec/conditional.py)
        self._bodies = bodies or None
        LOOKUP_MEMO.memo = {}  # the graph's pointers repeat: look each allocation up once
        try:
            self._build(exec_graph, originals, graph, check)
            if self._bodies is not None:
                self._add_bodies()
        finally:
            LOOKUP_MEMO.memo = None

    def _build(
        self,
        exec_graph: ExecGraph,
        originals: list[GraphNode] | None,
        graph: Graph | None,
        check: bool,
    ) -> None:
        # (the copy, weak references to the user's nodes, to the user's graph) to flatten
        # when a report first needs the flat nodes
        self._flat_from: _FlatFrom | None = None
        self._index_of: dict[int, int] | None = None
        self._anc: list[int] | None = None
        self._members: dict[tuple[int, int], list[int]] | None = None
        # the dependencies in _dep_form's shape, for the order between nodes
        self._deps: tuple[Any, dict[int, tuple[int, ...]]] | None = None
        nodes: list[ExecNode] | None
        if not check:  # a replay summary needs footprints only, not the order between nodes
            self._flat: list[FlatNode] | None = []
            nodes = exec_graph.walk()
            self._anc = []
            self.footprints = [node_footprint(node) for node in nodes]
            self.buckets: list[list[tuple[int, int]]] = []
        elif not exec_graph.made:
            # A copy still in columns (no child graph, every node enabled): read the columns,
            # so checking makes no node record either. The records, and the flat nodes that
            # word a report, are made when first needed (see ``flat`` and ``nodes``).
            nodes = None
            self._flat = None
            self._flat_from = _names_held_weakly(exec_graph, originals, graph)
            self._deps = exec_graph.first_deps()
            self.footprints, self.buckets, self._members = _footprints_and_buckets(
                exec_graph.types(), exec_graph.params_column(), None
            )
        else:
            if all(node.child is None for node in exec_graph.nodes):
                # Nothing to inline: the flat nodes are the graph's own, in order (made when
                # a report needs them).
                nodes = list(exec_graph.nodes)
                self._flat = None
                self._flat_from = _names_held_weakly(exec_graph, originals, graph)
                self._deps = _dep_form([node.deps for node in nodes])
            else:
                self._flat = flatten(exec_graph, originals, graph)
                nodes = [f.exec_node for f in self._flat]
                self._deps = _dep_form([f.deps for f in self._flat])
            self.footprints, self.buckets, self._members = _footprints_and_buckets(
                [node.type for node in nodes],
                [node.params for node in nodes],
                [node.enabled for node in nodes],
            )
        self._nodes = nodes
        self._events: tuple[list[Any], list[Any]] | None = None
        self._groups: (
            tuple[
                list[tuple[tuple[Any, ...], list[Access]]],
                list[tuple[Any, list[int], tuple[Any, ...]]],
            ]
            | None
        ) = None
        self._nodes_graph = exec_graph
        self._summary: list[Access] | None = None

    def _add_bodies(self) -> None:
        """A conditional node touches what its bodies' nodes touch: whether a body runs is
        decided on the device, so each one may, between the node's dependencies and its
        dependents (where the bodies run)."""
        for index, node in enumerate(self.nodes):
            if node.type is NodeType.Conditional and node.enabled:
                accesses = self._footprint_of(node)
                self.footprints[index] = accesses
                if self.check:
                    self.buckets[index] = _buckets(accesses) if accesses else []
                    self._members = None  # made again from the buckets

    def _footprint_of(self, node: ExecNode) -> list[Access]:
        """:func:`node_footprint`, a conditional node's bodies included."""
        bodies = self._bodies
        if bodies is None or node.type is not NodeType.Conditional or not node.enabled:
            return node_footprint(node)
        out: list[Access] = []
        pending = list(bodies.get(id(node), ()))
        while pending:
            for inner in pending.pop().walk():
                out += node_footprint(inner)
                pending.extend(bodies.get(id(inner), ()))
        return merge(out) if out else []

    @property
    def anc(self) -> list[int]:
        """Per flat node, the bitset of its ancestors (empty for a replay summary), made on
        first use: a check whose buckets are chains of edges never needs it."""
        anc = self._anc
        if anc is None:
            assert self._deps is not None
            anc = self._anc = _ancestors_from(*self._deps)
        return anc

    @property
    def nodes(self) -> list[ExecNode]:
        """The (flat) nodes' records, by flat index (made on first use for a copy in columns)."""
        nodes = self._nodes
        if nodes is None:
            nodes = self._nodes = list(self._nodes_graph.nodes)
        return nodes

    @property
    def flat(self) -> list[FlatNode]:
        """The flattened nodes (empty for a replay summary), made on first use."""
        flat = self._flat
        if flat is None:
            assert self._flat_from is not None
            exec_graph, refs, graph_ref = self._flat_from
            originals = None if refs is None else [ref() for ref in refs]
            flat = self._flat = flatten(exec_graph, originals, graph_ref())
            self._flat_from = None
        return flat

    @property
    def index_of(self) -> dict[int, int]:
        """``id(exec node)`` -> its flat index, for setters and updates (made on first use)."""
        index_of = self._index_of
        if index_of is None:
            index_of = self._index_of = {id(node): i for i, node in enumerate(self.nodes)}
        return index_of

    def races(self) -> list[RaceReport]:
        """Every race of the whole graph: between its own (flattened) nodes, then inside each
        conditional node's bodies (see :meth:`_body_races`)."""
        reports = self._own_races()
        if self._bodies is not None:
            reports += self._body_races()
        return reports

    def _own_races(self) -> list[RaceReport]:
        """The races between this graph's flattened nodes (a conditional node counted as one,
        at its place, touching what its bodies touch)."""
        members = self._members
        if members is None:  # changed by a setter since: from the buckets
            members = self._members = {}
            for index, keys in enumerate(self.buckets):
                for key in keys:
                    members.setdefault(key, []).append(index)
        assert self._deps is not None
        pairs = unordered_pairs(
            self.footprints, self.buckets, members.items(), *self._deps, lambda: self.anc
        )
        return [
            _static_report(self.flat[i], ai, self.flat[j], aj, self.flat) for i, ai, j, aj in pairs
        ]

    def _body_races(self) -> list[RaceReport]:
        """The races inside each body of an enabled conditional node, however deep.

        A body is a graph: within one run of it (one IF or SWITCH choice, one WHILE
        iteration) only its own edges order its nodes, so two of its nodes that no path of
        its edges links may run at once. Counting the body at its node's place (see
        :meth:`_add_bodies`) never compares them with each other: each body is checked as a
        graph of its own here, its child graphs inlined and a nested conditional node counted
        at its place, and then that nested node's bodies in turn. Iterations of a WHILE body
        run one after another (the op runs the body to its end before it reads the handle
        again), so a node of one iteration is ordered after every node of the one before, and
        only pairs within one iteration can race. Bodies are visited breadth first, in the
        order of their graphs' nodes, so reports come out in the same order every time.
        Setters cannot reach a body's node and an update that changes a body is refused, so
        what is found here holds for the executable's life (:meth:`check_changes` need not
        look inside bodies).
        """
        bodies = self._bodies
        assert bodies is not None
        out: list[RaceReport] = []
        pending = [self._nodes_graph]
        while pending:
            later: list[ExecGraph] = []
            for graph in pending:
                for node in graph.walk():
                    if node.type is not NodeType.Conditional or not node.enabled:
                        continue
                    owners = bodies.sources(node)  # alive: instantiate, or check_races()
                    for number, body in enumerate(bodies.get(id(node), ())):
                        owner: Graph | None = owners[number] if number < len(owners) else None
                        originals: list[GraphNode] | None = None
                        if owner is not None:  # changed since the copy: no handles
                            originals, owner = _originals_of(owner, body)
                        inner = ExecRaces(body, originals, owner, check=True, bodies=bodies)
                        out += inner._own_races()
                        later.append(body)
            pending = later
        return out

    def check_changes(self, changes: list[tuple[ExecNode, Any]]) -> None:
        """Before a setter or update commits: RaceError if a changed node would race.

        Only pairs that involve a changed node are examined.
        """
        if not self.check:
            return
        new = self._changed_footprints(changes)
        if not new:
            return
        footprints = list(self.footprints)
        buckets = list(self.buckets)
        for index, accs in new.items():
            footprints[index] = accs
            buckets[index] = _buckets(accs)
        pairs = conflicting_pairs(footprints, buckets, self.anc, set(new))
        reports = [
            _static_report(self.flat[i], ai, self.flat[j], aj, self.flat) for i, ai, j, aj in pairs
        ]
        if reports:
            raise RaceError(reports)

    def _changed_footprints(self, changes: list[tuple[ExecNode, Any]]) -> dict[int, list[Access]]:
        out: dict[int, list[Access]] = {}
        for node, params in changes:
            index = self.index_of.get(id(node))
            if index is None:
                continue
            out[index] = [] if not node.enabled else footprint(params)
        return out

    def commit(self, changes: list[tuple[ExecNode, Any]]) -> None:
        """After the changes are applied: new footprints, and the summary is made again."""
        for index, accs in self._changed_footprints(changes).items():
            self.footprints[index] = accs
            if self.check:
                self.buckets[index] = _buckets(accs)
                self._members = None
        self._summary = None
        self._events = None
        self._groups = None

    @property
    def summary(self) -> list[Access]:
        """Merged ranges of every enabled node: a replay is checked against these, O(ranges)."""
        summary = self._summary
        if summary is None:
            # Nodes of a kernel over one pointer share one footprint list (see
            # _footprints_and_buckets): each list, and each range, is merged once. Dropping
            # repeats keeps the first of each, so the merged ranges come out as without.
            unique = {id(accs): accs for accs in self.footprints}.values()
            accesses = dict.fromkeys(a for accs in unique for a in accs)
            summary = self._summary = merge(list(accesses))
        return summary

    def events(self) -> tuple[list[Any], list[Any]]:
        """(events recorded, events waited) by the executable's event nodes."""
        if self._events is not None:
            return self._events
        recorded, waited = [], []
        for node in self.nodes:
            if node.type is NodeType.EventRecord:
                recorded.append(node.params.event)
            elif node.type is NodeType.WaitEvent:
                waited.append(node.params.event)
        self._events = (recorded, waited)
        return self._events

    def groups(
        self,
    ) -> tuple[
        list[tuple[tuple[Any, ...], list[Access]]], list[tuple[Any, list[int], tuple[Any, ...]]]
    ]:
        """How a replay with event nodes is checked: nodes grouped by (the event-record nodes
        after them, the event-wait nodes before them).

        Returns (groups, records): each group is (events its nodes wait for, merged
        footprint); each record node, in topological order, is (its event, the indices of
        the groups whose nodes all run before it, the events of the wait nodes before it).
        """
        if self._groups is not None:
            return self._groups
        flat = self.flat or flatten_nodes(self._nodes_graph)
        anc = self.anc or ancestors(flat)
        record_at = [f.index for f in flat if f.exec_node.type is NodeType.EventRecord]
        wait_at = [f.index for f in flat if f.exec_node.type is NodeType.WaitEvent]
        members: dict[tuple[tuple[int, ...], tuple[int, ...]], list[Access]] = {}
        for f in flat:
            accs = self._footprint_of(f.exec_node)
            if not accs:
                continue
            covered = tuple(r for r, at in enumerate(record_at) if (anc[at] >> f.index) & 1)
            waits = tuple(w for w, at in enumerate(wait_at) if (anc[f.index] >> at) & 1)
            members.setdefault((covered, waits), []).extend(accs)
        groups: list[tuple[tuple[Any, ...], list[Access]]] = []
        covering: list[list[int]] = [[] for _ in record_at]
        for (covered, waits), accs in members.items():
            for r in covered:
                covering[r].append(len(groups))
            events = tuple(flat[wait_at[w]].exec_node.params.event for w in waits)
            groups.append((events, merge(accs)))
        # A record also follows the waits before it with no footprint node between them (a
        # graph that relays one event to another): its clock joins theirs as well.
        records = [
            (
                flat[at].exec_node.params.event,
                covering[r],
                tuple(
                    flat[w_at].exec_node.params.event for w_at in wait_at if (anc[at] >> w_at) & 1
                ),
            )
            for r, at in enumerate(record_at)
        ]
        self._groups = (groups, records)
        return self._groups

    def nodes_touching(self, access: Access) -> list[str]:
        """The nodes behind a summary range that overlap ``access`` (for reports)."""
        out = []
        for node, accs in zip(self.nodes, self.footprints, strict=True):
            if any(
                a.device == access.device
                and a.start < access.end
                and access.start < a.end
                and a.write == access.write
                for a in accs
            ):
                out.append(_label(node))
        return out

    def statistics(self) -> dict[str, int]:
        return {
            "nodes": len(self.footprints),
            "accesses": sum(len(a) for a in self.footprints),
            "summary_ranges": len(self.summary),
        }

    def __repr__(self) -> str:
        return f"<ExecRaces nodes={len(self.footprints)} check={self.check}>"


def _all_buckets(footprints: list[list[Access]]) -> list[list[tuple[int, int]]]:
    """:func:`_buckets` of every footprint, during one graph check (``LOOKUP_MEMO.memo`` set):
    the allocation lookups its footprints made are read straight from the memo."""
    memo: dict[Any, Any] = LOOKUP_MEMO.memo
    out: list[list[tuple[int, int]]] = []
    # Nodes in one allocation share one bucket list (never changed in place: a setter
    # replaces a node's list), so a graph's check makes a few lists, not one per node.
    shared: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for accesses in footprints:
        if len(accesses) == 1:  # most nodes: one range
            access = accesses[0]
            key = (access.device, access.start)
            found = memo[key] if key in memo else ALLOCATIONS.lookup(*key)
            bucket = (access.device, access.start if found is None else found[1])
            keys = shared.get(bucket)
            if keys is None:
                keys = shared[bucket] = [bucket]
            out.append(keys)
        else:
            out.append(_buckets(accesses))
    return out


def _footprints_and_buckets(
    kinds: list[NodeType], params_column: list[Any], enabled: list[bool] | None
) -> tuple[list[list[Access]], list[list[tuple[int, int]]], dict[tuple[int, int], list[int]]]:
    """Every node's footprint and :func:`_buckets`, during one graph check (``LOOKUP_MEMO.memo``
    set), from the graph's columns (``enabled`` None: every node enabled), in one pass; and
    each bucket's members (node indices, ascending).

    A kernel node with one pointer parameter that reaches the end of its allocation (the
    commonest node) is looked up by its kernel's pointer fields, then its pointer: the nodes
    of a kernel over one pointer share one footprint list and one bucket list (neither is
    changed in place: a setter replaces a node's lists), so each range is made and each
    allocation found once per graph, not once per node."""
    memo: dict[Any, Any] = LOOKUP_MEMO.memo
    footprints: list[list[Access]] = []
    buckets: list[list[tuple[int, int]]] = []
    members: dict[tuple[int, int], list[int]] = {}
    # (id of the kernel's pointer fields, device, address) -> (footprint, buckets, members)
    # the bucket -> (its one-bucket list, shared by the nodes in it; its members)
    shared: dict[tuple[int, int], tuple[list[tuple[int, int]], list[int]]] = {}
    graph_type = NodeType.Graph
    kernel_params = KernelParams
    device_ptr = DevicePtr
    # kernel -> (index, write, atomic, {address: (footprint, buckets, members, device)}) of
    # its one pointer field, or None; kernels of one layout share the entry
    single_of: dict[Any, Any] = {}
    by_reaches: dict[int, Any] = {}
    append_footprint, append_buckets = footprints.append, buckets.append
    for index, params in enumerate(params_column):
        if type(params) is kernel_params and (enabled is None or enabled[index]):
            kernel = params.kernel
            single = single_of.get(kernel, single_of)
            if single is single_of:  # a kernel first met: its one pointer field, if so
                reaches = kernel.layout.pointer_reaches
                single = None
                if reaches is not None and len(reaches) == 1:
                    single = by_reaches.get(id(reaches))
                    if single is None:
                        single = by_reaches[id(reaches)] = (*reaches[0], {})
                single_of[kernel] = single
            if single is not None:
                ptr = params.args[single[0]]
                if type(ptr) is device_ptr:
                    known = single[3].get(ptr.address)
                    if known is None or known[3] != ptr.device:
                        ordinal, address = ptr.device, ptr.address
                        if not address or known is not None:  # null, or another device's
                            known = None
                        else:
                            where = (ordinal, address)
                            found = memo[where] if where in memo else ALLOCATIONS.lookup(*where)
                            end = address + 1 if found is None else found[1] + found[2]
                            access = _new_access(
                                Access, (ordinal, address, end, single[1], single[2], CONSERVATIVE)
                            )
                            bucket = (ordinal, address if found is None else found[1])
                            entry = shared.get(bucket)
                            if entry is None:
                                entry = shared[bucket] = ([bucket], members.setdefault(bucket, []))
                            known = single[3][address] = ([access], entry[0], entry[1], ordinal)
                    if known is not None:
                        append_footprint(known[0])
                        append_buckets(known[1])
                        known[2].append(index)
                        continue
        if (enabled is not None and not enabled[index]) or kinds[index] is graph_type:
            accesses: list[Access] = []
        elif type(params) is kernel_params:
            accesses = kernel_footprint(params)
        else:
            accesses = footprint(params)
        append_footprint(accesses)
        if len(accesses) == 1:
            access = accesses[0]
            where = (access.device, access.start)
            found = memo[where] if where in memo else ALLOCATIONS.lookup(*where)
            bucket = (access.device, access.start if found is None else found[1])
            entry = shared.get(bucket)
            if entry is None:
                entry = shared[bucket] = ([bucket], members.setdefault(bucket, []))
            append_buckets(entry[0])
            entry[1].append(index)
        else:
            node_buckets = _buckets(accesses)
            append_buckets(node_buckets)
            for one in node_buckets:
                members.setdefault(one, []).append(index)
    return footprints, buckets, members


def _buckets(accesses: list[Access]) -> list[tuple[int, int]]:
    if len(accesses) == 1:  # most nodes: one range
        return [bucket(accesses[0])]
    return list(dict.fromkeys(bucket(a) for a in accesses))


def check_exec_graph(
    exec_graph: ExecGraph,
    originals: list[GraphNode] | None,
    graph: Graph | None,
    bodies: BodyCopies | None = None,
) -> tuple[ExecRaces, list[RaceReport]]:
    """Every race of ``exec_graph`` (``bodies``: its conditional nodes' body copies)."""
    races = ExecRaces(exec_graph, originals, graph, check=True, bodies=bodies)
    return races, races.races()


def check_graph(graph: Graph) -> list[RaceReport]:
    """``graph.check_races()``: every race the declared edges allow, no device work needed.

    Conditional nodes' bodies (however deep) are copied with the graph, under its lock, as
    instantiate copies them, so a conditional node touches what its bodies touch here too.
    """
    from .conditional import copy_bodies
    from .snapshot import snapshot

    with graph.lock:
        exec_graph, originals = snapshot(graph)
        bodies = copy_bodies(exec_graph)
    return check_exec_graph(exec_graph, originals, graph, bodies)[1]
